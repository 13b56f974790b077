package metastore

import (
	"context"
	"errors"
	"fmt"

	"github.com/flightlog/flightlog/fault"
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

// The operations a FaultStore over a Store knows, for per-operation
// settings and hooks: fault.Get, fault.Put, fault.Delete, fault.Scan and
// fault.Commit. Put, Delete and Commit are its writes.
var (
	faultOps    = []fault.Op{fault.Get, fault.Put, fault.Delete, fault.Scan, fault.Commit}
	faultWrites = []fault.Op{fault.Put, fault.Delete, fault.Commit}
)

// faultDraws names each operation in the keys of a call's draws (the
// names these draws have always had, so a seed replays as before).
var faultDraws = map[fault.Op]string{fault.Get: "Get", fault.Put: "Put", fault.Delete: "Delete", fault.Scan: "Scan", fault.Commit: "Commit"}

// FaultStore wraps a Store and injects failures and latency into the calls
// that pass through it: the settings, draws and counters of its
// fault.Injector (SetDown, SetLatency, SetErrorRate, SetAmbiguousRate,
// SetHook, Injected), the same as objstore.FaultStore's. A call's draws are
// keyed by its operation and keys (a Scan's: its prefix; a Commit's: every
// op's key), so a seed replays the same faults however goroutines are
// scheduled. It is safe for concurrent use.
//
// A call whose context has ended fails at once, with no fault. A down
// store (SetDown, or a hook's fault.Unavailable) fails calls with an error
// wrapping ErrUnavailable and ErrInjected; a Fail with one wrapping
// ErrInjected (or the Fault's Err); an Ambiguous one passes the call on,
// drops its result and returns an error wrapping ErrInjectedAmbiguous (or
// the Fault's Err). With no fault configured a FaultStore behaves exactly
// like the store it wraps.
type FaultStore struct {
	*fault.Injector
	inner Store
}

var (
	_ Store         = (*FaultStore)(nil)
	_ CommitLimiter = (*FaultStore)(nil)
)

// WithFaults wraps inner. seed drives every random choice the FaultStore
// makes; print it on failure to reproduce a run.
func WithFaults(inner Store, seed uint64) *FaultStore {
	return &FaultStore{Injector: fault.NewInjector("metastore", seed, faultOps, faultWrites), inner: inner}
}

// Inner returns the wrapped store.
func (f *FaultStore) Inner() Store { return f.inner }

// MaxCommitOps implements CommitLimiter with the inner store's limit.
func (f *FaultStore) MaxCommitOps() int { return MaxCommitOps(f.inner) }

// MaxCommitBytes implements CommitByteLimiter with the inner store's limit.
func (f *FaultStore) MaxCommitBytes() int { return MaxCommitBytes(f.inner) }

// OpBytes implements CommitByteLimiter with the inner store's count.
func (f *FaultStore) OpBytes(op Op) int { return OpBytes(f.inner, op) }

// Get implements Store.
func (f *FaultStore) Get(ctx context.Context, key string) (Item, error) {
	var it Item
	err := f.do(ctx, fault.Get, []string{key}, func() error {
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
	err := f.do(ctx, fault.Put, []string{key}, func() error {
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
	return f.do(ctx, fault.Delete, []string{key}, func() error {
		return f.inner.Delete(ctx, key, expect)
	})
}

// Scan implements Store.
func (f *FaultStore) Scan(ctx context.Context, prefix, startAfter string, limit int) ([]Item, error) {
	var items []Item
	err := f.do(ctx, fault.Scan, []string{prefix}, func() error {
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
	err := f.do(ctx, fault.Commit, keys, func() error {
		var err error
		vs, err = f.inner.Commit(ctx, ops)
		return err
	})
	if err != nil {
		return nil, err
	}
	return vs, nil
}

// do runs one call under its fault. call passes it on to the inner store.
func (f *FaultStore) do(ctx context.Context, op fault.Op, keys []string, call func() error) error {
	name := faultDraws[op]
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("metastore: %s: %w", name, err)
	}
	c := fault.Call{Op: op, Keys: keys}
	if len(keys) > 0 {
		c.Key = keys[0]
	}
	ft, err := f.Do(ctx, c, append([]string{name}, keys...), call)
	switch ft.Kind {
	case fault.Unavailable:
		return fmt.Errorf("metastore: %s %q: store down (%w): %w", name, keys, ErrInjected, ErrUnavailable)
	case fault.Fail:
		if ft.Err != nil {
			return fmt.Errorf("metastore: %s %q: %w", name, keys, ft.Err)
		}
		return fmt.Errorf("metastore: %s %q: %w", name, keys, ErrInjected)
	case fault.Ambiguous:
		cause := ft.Err
		if cause == nil {
			cause = ErrInjectedAmbiguous
		}
		if err != nil {
			return fmt.Errorf("metastore: %s %q: %w (inner: %v)", name, keys, cause, err)
		}
		return fmt.Errorf("metastore: %s %q: %w", name, keys, cause)
	}
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return fmt.Errorf("metastore: %s %q: waiting injected latency: %w", name, keys, err)
	}
	return err
}
