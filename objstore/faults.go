package objstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/flightlog/flightlog/fault"
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

// The operations a FaultStore over a Store knows, for per-operation
// settings and hooks: fault.Put (PutIfAbsent), fault.Get, fault.Delete and
// fault.List. Put and Delete are its writes.
var (
	faultOps    = []fault.Op{fault.Put, fault.Get, fault.Delete, fault.List}
	faultWrites = []fault.Op{fault.Put, fault.Delete}
)

// FaultStore wraps a Store and injects latency and failures into its calls,
// from a seeded random source or from a scripted hook: the settings,
// draws and counters of its fault.Injector (SetDown, SetLatency,
// SetErrorRate, SetAmbiguousRate, SetHook, Injected), the same as
// metastore.FaultStore's. A call's draws are keyed by its operation and
// key (a List's: its prefix), so a failing run replays from its seed
// however goroutines are scheduled.
//
// A down store fails calls with an error wrapping ErrUnavailable; a Fail
// with one wrapping ErrInjected (or the Fault's Err); an Ambiguous one
// passes the call on, discards its result and returns an error wrapping
// ErrInjectedAmbiguous (or the Fault's Err). A call that a real client
// would refuse before sending anything (an ended context, an invalid key)
// gets the inner store's own answer, with no fault.
//
// With nothing configured a FaultStore is a transparent wrapper. It is safe
// for concurrent use, and its settings may be changed while calls are in
// flight.
type FaultStore struct {
	*fault.Injector
	inner Store
}

var _ Store = (*FaultStore)(nil)

// WithFaults returns a FaultStore over inner that injects nothing until it
// is told to. seed fixes the random source.
func WithFaults(inner Store, seed uint64) *FaultStore {
	return &FaultStore{Injector: fault.NewInjector("objstore", seed, faultOps, faultWrites), inner: inner}
}

// Inner returns the wrapped store.
func (f *FaultStore) Inner() Store { return f.inner }

// do runs one call under its fault. apply calls the inner store.
func (f *FaultStore) do(ctx context.Context, op fault.Op, key string, apply func() error) error {
	// A call that a real client would refuse before sending anything gets
	// the inner store's own answer, with no fault: faults model the bucket
	// and the network, not argument checking.
	if ctx.Err() != nil || (op != fault.List && ValidateKey(key) != nil) {
		return apply()
	}
	ft, err := f.Do(ctx, fault.Call{Op: op, Key: key, Keys: []string{key}}, []string{string(op), key}, apply)
	switch ft.Kind {
	case fault.Unavailable:
		return fmt.Errorf("objstore: faults: %s %q: %w", op, key, ErrUnavailable)
	case fault.Fail:
		cause := ft.Err
		if cause == nil {
			cause = ErrInjected
		}
		return fmt.Errorf("objstore: faults: %s %q: %w", op, key, cause)
	case fault.Ambiguous:
		cause := ft.Err
		if cause == nil {
			cause = ErrInjectedAmbiguous
		}
		return fmt.Errorf("objstore: faults: %s %q: %w", op, key, cause)
	}
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return fmt.Errorf("objstore: faults: %s %q: %w", op, key, err)
	}
	return err
}

// PutIfAbsent implements Store.
func (f *FaultStore) PutIfAbsent(ctx context.Context, key string, body []byte) error {
	return f.do(ctx, fault.Put, key, func() error { return f.inner.PutIfAbsent(ctx, key, body) })
}

// Get implements Store.
func (f *FaultStore) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	var out []byte
	err := f.do(ctx, fault.Get, key, func() error {
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
	return f.do(ctx, fault.Delete, key, func() error { return f.inner.Delete(ctx, key) })
}

// List implements Store. Faults are decided with prefix as the key.
func (f *FaultStore) List(ctx context.Context, prefix, startAfter string, limit int) ([]string, error) {
	var out []string
	err := f.do(ctx, fault.List, prefix, func() error {
		var err error
		out, err = f.inner.List(ctx, prefix, startAfter, limit)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
