package metastore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/flightlog/flightlog/internal/keyed"
)

// Injected-fault errors. FaultStore wraps them with %w (together with
// ErrUnavailable for a down store), so tests tell injected failures from
// real ones with errors.Is.
var (
	// ErrInjected: FaultStore failed the call without passing it on to the
	// inner store; nothing was applied. To the caller it looks like any
	// other transient failure: for a write it is ambiguous.
	ErrInjected = errors.New("metastore: injected failure")
	// ErrInjectedAmbiguous: FaultStore passed the call on to the inner
	// store, which applied it, and then reported a failure, as when a
	// response is lost.
	ErrInjectedAmbiguous = errors.New("metastore: injected failure after the call applied")
)

// FaultKind is what a FaultStore does to one call besides delaying it.
type FaultKind uint8

const (
	// NoFault passes the call on.
	NoFault FaultKind = iota
	// FaultFail fails the call with ErrInjected without passing it on.
	FaultFail
	// FaultAmbiguous passes the call on, then fails it with
	// ErrInjectedAmbiguous whatever the inner store returned (a read's
	// result is dropped).
	FaultAmbiguous
	// FaultUnavailable fails the call with ErrUnavailable (and ErrInjected)
	// without passing it on, as a down store would.
	FaultUnavailable
)

// Fault is a hook's verdict on one call.
type Fault struct {
	// Kind is what happens to the call.
	Kind FaultKind
	// Delay is waited before the call, on top of the configured latency,
	// honouring the caller's context.
	Delay time.Duration
}

// FaultCounters counts what a FaultStore injected.
type FaultCounters struct {
	Down      uint64 // calls refused because the store was down (SetDown or FaultUnavailable)
	Failed    uint64 // calls failed with ErrInjected without applying
	Ambiguous uint64 // calls applied and then failed with ErrInjectedAmbiguous
	Delayed   uint64 // calls that waited a non-zero latency or delay
	Cancelled uint64 // calls whose context ended while they waited
}

// FaultStore wraps a Store and injects failures and latency into the calls
// that pass through it. It is safe for concurrent use. Each call's random
// choices come from a generator seeded by the FaultStore's seed, the call's
// op and keys, and how many calls with the same op and keys came before it:
// what a call draws does not depend on how concurrent calls interleave, so
// a seed replays the same faults however goroutines are scheduled. (The
// per-key call counts are kept for the FaultStore's life: a test helper,
// not a production wrapper.)
//
// For each call, in order: the context is checked; a down store fails the
// call at once (ErrUnavailable); the hook, if set, gives a Fault; the call
// waits the latency plus the Fault's Delay (a timer raced against ctx, so it
// works under testing/synctest); then the hook's Kind, or else the error
// and ambiguous rates, decide its fate. With no fault configured a
// FaultStore behaves exactly like the store it wraps.
type FaultStore struct {
	inner Store

	mu        sync.Mutex
	draws     *keyed.Source
	down      bool
	latency   func(r *rand.Rand) time.Duration
	errRate   float64
	ambigRate float64
	hook      func(op string, keys []string) Fault
	counts    FaultCounters
}

var (
	_ Store         = (*FaultStore)(nil)
	_ CommitLimiter = (*FaultStore)(nil)
)

// WithFaults wraps inner. seed drives every random choice the FaultStore
// makes; print it on failure to reproduce a run.
func WithFaults(inner Store, seed uint64) *FaultStore {
	return &FaultStore{inner: inner, draws: keyed.New(seed)}
}

// Inner returns the wrapped store.
func (f *FaultStore) Inner() Store { return f.inner }

// SetDown makes every call fail at once with an error wrapping
// ErrUnavailable and ErrInjected (down == true), passing nothing on, or
// brings the store back (down == false).
func (f *FaultStore) SetDown(down bool) {
	f.mu.Lock()
	f.down = down
	f.mu.Unlock()
}

// SetLatency makes every call wait d before it is passed on (0: no wait).
func (f *FaultStore) SetLatency(d time.Duration) {
	if d <= 0 {
		f.SetLatencyDistribution(nil)
		return
	}
	f.SetLatencyDistribution(func(*rand.Rand) time.Duration { return d })
}

// SetLatencyDistribution makes every call wait dist(r) before it is passed
// on, where r is the FaultStore's seeded generator; dist is called with the
// FaultStore's mutex held and must not call back into it. nil: no wait.
func (f *FaultStore) SetLatencyDistribution(dist func(r *rand.Rand) time.Duration) {
	f.mu.Lock()
	f.latency = dist
	f.mu.Unlock()
}

// SetErrorRate makes each call fail with probability p with an error
// wrapping ErrInjected, without passing it on.
func (f *FaultStore) SetErrorRate(p float64) {
	f.mu.Lock()
	f.errRate = p
	f.mu.Unlock()
}

// SetAmbiguousRate makes each write (Put, Delete, Commit) that is not failed
// by the error rate go through to the inner store with probability p and
// then fail with an error wrapping ErrInjectedAmbiguous, whatever the inner
// store returned. Reads are not affected.
func (f *FaultStore) SetAmbiguousRate(p float64) {
	f.mu.Lock()
	f.ambigRate = p
	f.mu.Unlock()
}

// SetHook installs a script: hook is called for every call that reaches it
// with the call's name ("Get", "Put", "Delete", "Scan", "Commit") and keys
// (the key; for Scan the prefix; for Commit every op's key, in op order),
// and its Fault overrides the error and ambiguous rates when its Kind is
// not NoFault. hook runs with the FaultStore's mutex held: it must not call
// back into the FaultStore, and should be quick. nil removes the hook.
func (f *FaultStore) SetHook(hook func(op string, keys []string) Fault) {
	f.mu.Lock()
	f.hook = hook
	f.mu.Unlock()
}

// Injected returns what the FaultStore has injected so far.
func (f *FaultStore) Injected() FaultCounters {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts
}

// MaxCommitOps implements CommitLimiter with the inner store's limit.
func (f *FaultStore) MaxCommitOps() int { return MaxCommitOps(f.inner) }

// MaxCommitBytes implements CommitByteLimiter with the inner store's limit.
func (f *FaultStore) MaxCommitBytes() int { return MaxCommitBytes(f.inner) }

// OpBytes implements CommitByteLimiter with the inner store's count.
func (f *FaultStore) OpBytes(op Op) int { return OpBytes(f.inner, op) }

// Get implements Store.
func (f *FaultStore) Get(ctx context.Context, key string) (Item, error) {
	var it Item
	err := f.do(ctx, "Get", []string{key}, false, func() error {
		var err error
		it, err = f.inner.Get(ctx, key)
		return err
	})
	if err != nil {
		return Item{}, err
	}
	return it, nil
}

// Put implements Store.
func (f *FaultStore) Put(ctx context.Context, key string, value []byte, expect Version) (Version, error) {
	var v Version
	err := f.do(ctx, "Put", []string{key}, true, func() error {
		var err error
		v, err = f.inner.Put(ctx, key, value, expect)
		return err
	})
	if err != nil {
		return NoVersion, err
	}
	return v, nil
}

// Delete implements Store.
func (f *FaultStore) Delete(ctx context.Context, key string, expect Version) error {
	return f.do(ctx, "Delete", []string{key}, true, func() error {
		return f.inner.Delete(ctx, key, expect)
	})
}

// Scan implements Store.
func (f *FaultStore) Scan(ctx context.Context, prefix, startAfter string, limit int) ([]Item, error) {
	var items []Item
	err := f.do(ctx, "Scan", []string{prefix}, false, func() error {
		var err error
		items, err = f.inner.Scan(ctx, prefix, startAfter, limit)
		return err
	})
	if err != nil {
		return nil, err
	}
	return items, nil
}

// Commit implements Store.
func (f *FaultStore) Commit(ctx context.Context, ops []Op) ([]Version, error) {
	keys := make([]string, len(ops))
	for i, op := range ops {
		keys[i] = op.Key
	}
	var vs []Version
	err := f.do(ctx, "Commit", keys, true, func() error {
		var err error
		vs, err = f.inner.Commit(ctx, ops)
		return err
	})
	if err != nil {
		return nil, err
	}
	return vs, nil
}

// do runs one call through the fault pipeline described on FaultStore.
func (f *FaultStore) do(ctx context.Context, op string, keys []string, write bool, call func() error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("metastore: %s: %w", op, err)
	}
	f.mu.Lock()
	if f.down {
		f.counts.Down++
		f.mu.Unlock()
		return fmt.Errorf("metastore: %s %q: store down (%w): %w", op, keys, ErrInjected, ErrUnavailable)
	}
	var fault Fault
	if f.hook != nil {
		fault = f.hook(op, keys)
	}
	rng := f.draws.Rand(append([]string{op}, keys...)...)
	// Draw the fate first, whatever the rates, so that changing a rate or
	// the latency does not shift the other draws.
	e, a := rng.Float64(), rng.Float64()
	wait := fault.Delay
	if f.latency != nil {
		wait += f.latency(rng)
	}
	kind := fault.Kind
	if kind == NoFault {
		switch {
		case e < f.errRate:
			kind = FaultFail
		case write && a < f.ambigRate:
			kind = FaultAmbiguous
		}
	}
	if wait > 0 {
		f.counts.Delayed++
	}
	f.mu.Unlock()

	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			f.count(func(c *FaultCounters) { c.Cancelled++ })
			return fmt.Errorf("metastore: %s %q: waiting injected latency: %w", op, keys, ctx.Err())
		}
	}

	switch kind {
	case FaultFail:
		f.count(func(c *FaultCounters) { c.Failed++ })
		return fmt.Errorf("metastore: %s %q: %w", op, keys, ErrInjected)
	case FaultUnavailable:
		f.count(func(c *FaultCounters) { c.Down++ })
		return fmt.Errorf("metastore: %s %q: store down (%w): %w", op, keys, ErrInjected, ErrUnavailable)
	case FaultAmbiguous:
		err := call()
		f.count(func(c *FaultCounters) { c.Ambiguous++ })
		if err != nil {
			return fmt.Errorf("metastore: %s %q: %w (inner: %v)", op, keys, ErrInjectedAmbiguous, err)
		}
		return fmt.Errorf("metastore: %s %q: %w", op, keys, ErrInjectedAmbiguous)
	}
	return call()
}

func (f *FaultStore) count(inc func(*FaultCounters)) {
	f.mu.Lock()
	inc(&f.counts)
	f.mu.Unlock()
}
