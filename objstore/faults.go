package objstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/flightlog/flightlog/internal/keyed"
)

// Errors that only a FaultStore returns. To a caller both are transient
// failures; only tests, which know the truth, tell them apart.
var (
	// ErrInjected: a FaultStore failed the call on purpose, without passing
	// it to the inner store. Nothing was applied, but a caller must treat it
	// like any transient failure (for PutIfAbsent: outcome unknown), since
	// that is what it stands for.
	ErrInjected = errors.New("objstore: injected failure")
	// ErrInjectedAmbiguous: a FaultStore passed the call to the inner store
	// (so a PutIfAbsent may well have created the object) and then reported
	// failure: the lost response of an applied write.
	ErrInjectedAmbiguous = errors.New("objstore: injected failure after the call was applied")
)

// Op names a Store method, for per-operation fault settings.
type Op int

// The operations of Store.
const (
	OpPut Op = iota // PutIfAbsent
	OpGet
	OpDelete
	OpList
	numOps
)

// String returns the method's short name.
func (o Op) String() string {
	switch o {
	case OpPut:
		return "put"
	case OpGet:
		return "get"
	case OpDelete:
		return "delete"
	case OpList:
		return "list"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// LatencyDist is a distribution of request latencies. Sample draws one from
// r; it is called with the FaultStore's lock held, so it must not block.
type LatencyDist interface {
	Sample(r *rand.Rand) time.Duration
}

type fixed time.Duration

func (d fixed) Sample(*rand.Rand) time.Duration { return time.Duration(d) }

// Fixed returns a distribution that is always d.
func Fixed(d time.Duration) LatencyDist { return fixed(d) }

type uniform struct{ lo, hi time.Duration }

func (u uniform) Sample(r *rand.Rand) time.Duration {
	if u.hi <= u.lo {
		return u.lo
	}
	return u.lo + time.Duration(r.Int64N(int64(u.hi-u.lo)+1))
}

// Uniform returns a distribution uniform over [lo, hi].
func Uniform(lo, hi time.Duration) LatencyDist { return uniform{lo, hi} }

// z99 is the standard normal quantile of 0.99.
const z99 = 2.3263478740408408

type logNormal struct{ mu, sigma float64 }

func (l logNormal) Sample(r *rand.Rand) time.Duration {
	v := math.Exp(l.mu + l.sigma*r.NormFloat64())
	if v >= math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(v)
}

// LogNormal returns a heavy-tailed distribution with the given median and
// 99th percentile, the usual shape of object-store request latency. Its
// tail makes concurrent requests complete out of the order they were sent.
// A p99 at or below the median gives a fixed median.
func LogNormal(median, p99 time.Duration) LatencyDist {
	if median <= 0 {
		return fixed(0)
	}
	if p99 <= median {
		return fixed(median)
	}
	return logNormal{
		mu:    math.Log(float64(median)),
		sigma: math.Log(float64(p99)/float64(median)) / z99,
	}
}

type mixture struct {
	p    float64
	a, b LatencyDist
}

func (m mixture) Sample(r *rand.Rand) time.Duration {
	if r.Float64() < m.p {
		return m.b.Sample(r)
	}
	return m.a.Sample(r)
}

// Mixture returns a distribution that samples b with probability p and a
// otherwise: a healthy bucket with an occasional stall, or a zone that is
// slow for a fraction of requests.
func Mixture(p float64, a, b LatencyDist) LatencyDist { return mixture{p: p, a: a, b: b} }

// Fault is what a FaultStore does to one call, as scripted by a hook.
// The zero Fault passes the call through untouched.
type Fault struct {
	// Delay is waited before the call is applied (honouring the context).
	Delay time.Duration
	// Err, without ApplyThenFail, fails the call without applying it; the
	// returned error wraps Err.
	Err error
	// ApplyThenFail passes the call to the inner store, discards its result
	// and fails: the returned error wraps Err, or ErrInjectedAmbiguous if
	// Err is nil.
	ApplyThenFail bool
}

func (ft Fault) isZero() bool { return ft.Delay == 0 && ft.Err == nil && !ft.ApplyThenFail }

// FaultCounters counts what a FaultStore injected.
type FaultCounters struct {
	Unavailable int64 // calls failed because the store was down
	Errors      int64 // calls failed without being applied (error rate or hook)
	Ambiguous   int64 // calls applied and then failed (ambiguous rate or hook)
	Delayed     int64 // calls given a non-zero delay
	Cancelled   int64 // calls whose context ended during their delay
	Hooked      int64 // calls for which the hook returned a non-zero Fault
}

// FaultStore wraps a Store and injects latency and failures into its calls,
// from a seeded random source or from a scripted hook. Each call draws from
// a generator seeded by the seed, the call's Op and key, and how many calls
// of that Op on that key came before it, so what a call draws does not
// depend on how concurrent calls interleave: a failing run replays from its
// seed however goroutines are scheduled. (The per-key call counts are kept
// for the FaultStore's life: a test helper, not a production wrapper.)
//
// For each call, in order: if the store is down the call fails with
// ErrUnavailable; the hook is consulted, and a non-zero Fault it returns is
// used as is; otherwise the random settings for the call's Op give the
// Fault (the error rate, then, for PutIfAbsent, the ambiguous rate, and a
// latency sample). The delay is waited on a timer that also watches the
// context, so it works under testing/synctest's fake clock; a context that
// ends during the delay fails the call unapplied. After the delay the store
// is checked for down once more, then the Fault is applied.
//
// With nothing configured a FaultStore is a transparent wrapper. It is safe
// for concurrent use, and its settings may be changed while calls are in
// flight.
type FaultStore struct {
	inner Store

	mu        sync.Mutex
	draws     *keyed.Source
	down      bool
	latency   [numOps]LatencyDist
	errRate   [numOps]float64
	ambiguous float64
	hook      func(op Op, key string) Fault
	injected  FaultCounters
}

var _ Store = (*FaultStore)(nil)

// WithFaults returns a FaultStore over inner that injects nothing until it
// is told to. seed fixes the random source.
func WithFaults(inner Store, seed uint64) *FaultStore {
	return &FaultStore{
		inner: inner,
		draws: keyed.New(seed),
	}
}

// Inner returns the wrapped store.
func (f *FaultStore) Inner() Store { return f.inner }

// SetDown makes every later call fail with an error wrapping ErrUnavailable,
// without reaching the inner store (down = true), or lets calls through
// again (down = false). Calls already waiting out a delay fail too.
func (f *FaultStore) SetDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

// SetLatency sets the latency distribution of op's calls; nil removes it.
func (f *FaultStore) SetLatency(op Op, d LatencyDist) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latency[op] = d
}

// SetErrorRate makes a fraction p of op's calls fail, unapplied, with an
// error wrapping ErrInjected.
func (f *FaultStore) SetErrorRate(op Op, p float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errRate[op] = p
}

// SetAmbiguousRate makes a fraction p of PutIfAbsent calls (among those the
// error rate spared) reach the inner store and then fail with an error
// wrapping ErrInjectedAmbiguous: the write applied, the caller was told it
// failed.
func (f *FaultStore) SetAmbiguousRate(p float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ambiguous = p
}

// SetHook installs a function that scripts faults call by call (nil removes
// it). It runs with the FaultStore's lock held, so it must be quick, must
// not block and must not call the FaultStore. It is not consulted for calls
// that fail before anything is sent (an ended context, an invalid key).
func (f *FaultStore) SetHook(hook func(op Op, key string) Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hook = hook
}

// Injected returns the counts of faults injected so far.
func (f *FaultStore) Injected() FaultCounters {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.injected
}

// plan decides the fault of one call. It returns an error if the store is
// down.
func (f *FaultStore) plan(op Op, key string) (Fault, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		f.injected.Unavailable++
		return Fault{}, fmt.Errorf("objstore: faults: %s %q: %w", op, key, ErrUnavailable)
	}
	var fault Fault
	if f.hook != nil {
		fault = f.hook(op, key)
		if !fault.isZero() {
			f.injected.Hooked++
		}
	}
	if fault.isZero() {
		rng := f.draws.Rand(op.String(), key)
		// The fate is drawn first, whatever the rates, so that changing a
		// rate or the latency does not shift the other draws.
		e, a := rng.Float64(), rng.Float64()
		if d := f.latency[op]; d != nil {
			fault.Delay = d.Sample(rng)
		}
		if p := f.errRate[op]; p > 0 && e < p {
			fault.Err = ErrInjected
		} else if op == OpPut && f.ambiguous > 0 && a < f.ambiguous {
			fault.ApplyThenFail = true
		}
	}
	if fault.Delay > 0 {
		f.injected.Delayed++
	}
	return fault, nil
}

// do runs one call under its fault. apply calls the inner store.
func (f *FaultStore) do(ctx context.Context, op Op, key string, apply func() error) error {
	// A call that a real client would refuse before sending anything gets
	// the inner store's own answer, with no fault: faults model the bucket
	// and the network, not argument checking.
	if ctx.Err() != nil || (op != OpList && ValidateKey(key) != nil) {
		return apply()
	}
	fault, err := f.plan(op, key)
	if err != nil {
		return err
	}
	if fault.Delay > 0 {
		t := time.NewTimer(fault.Delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			f.mu.Lock()
			f.injected.Cancelled++
			f.mu.Unlock()
			return fmt.Errorf("objstore: faults: %s %q: %w", op, key, ctx.Err())
		}
		f.mu.Lock()
		down := f.down
		if down {
			f.injected.Unavailable++
		}
		f.mu.Unlock()
		if down {
			return fmt.Errorf("objstore: faults: %s %q: %w", op, key, ErrUnavailable)
		}
	}
	switch {
	case fault.ApplyThenFail:
		_ = apply()
		f.mu.Lock()
		f.injected.Ambiguous++
		f.mu.Unlock()
		cause := fault.Err
		if cause == nil {
			cause = ErrInjectedAmbiguous
		}
		return fmt.Errorf("objstore: faults: %s %q: %w", op, key, cause)
	case fault.Err != nil:
		f.mu.Lock()
		f.injected.Errors++
		f.mu.Unlock()
		return fmt.Errorf("objstore: faults: %s %q: %w", op, key, fault.Err)
	}
	return apply()
}

// PutIfAbsent implements Store.
func (f *FaultStore) PutIfAbsent(ctx context.Context, key string, body []byte) error {
	return f.do(ctx, OpPut, key, func() error { return f.inner.PutIfAbsent(ctx, key, body) })
}

// Get implements Store.
func (f *FaultStore) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	var out []byte
	err := f.do(ctx, OpGet, key, func() error {
		var err error
		out, err = f.inner.Get(ctx, key, off, n)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Delete implements Store.
func (f *FaultStore) Delete(ctx context.Context, key string) error {
	return f.do(ctx, OpDelete, key, func() error { return f.inner.Delete(ctx, key) })
}

// List implements Store. Faults are decided with prefix as the key.
func (f *FaultStore) List(ctx context.Context, prefix, startAfter string, limit int) ([]string, error) {
	var out []string
	err := f.do(ctx, OpList, prefix, func() error {
		var err error
		out, err = f.inner.List(ctx, prefix, startAfter, limit)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
