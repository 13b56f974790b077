package metastore_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/metastore/metastoretest"
)

func TestFaultStoreWithoutFaultsConformance(t *testing.T) {
	metastoretest.Run(t, metastoretest.Harness{
		New:         func(testing.TB) metastore.Store { return metastore.WithFaults(metastore.NewMem(), 1) },
		MaxValueLen: metastore.MemMaxValueLen,
	})
}

func TestFaultStoreDown(t *testing.T) {
	ctx := t.Context()
	m := metastore.NewMem()
	f := metastore.WithFaults(m, 1)
	f.SetDown(true)
	_, err := f.Put(ctx, "k", []byte("v"), metastore.NoVersion)
	if !errors.Is(err, metastore.ErrUnavailable) || !errors.Is(err, metastore.ErrInjected) {
		t.Fatalf("Put on a down store: %v, want ErrUnavailable and ErrInjected", err)
	}
	_, err = f.Get(ctx, "k")
	if !errors.Is(err, metastore.ErrUnavailable) {
		t.Fatalf("Get on a down store: %v, want ErrUnavailable", err)
	}
	if _, err := m.Get(ctx, "k"); !errors.Is(err, metastore.ErrNotFound) {
		t.Fatalf("a write to a down store reached the inner store: %v", err)
	}
	if got := m.Counters().Requests(); got != 1 {
		t.Fatalf("inner store saw %d requests while down, want only this test's Get", got)
	}
	f.SetDown(false)
	if _, err := f.Put(ctx, "k", []byte("v"), metastore.NoVersion); err != nil {
		t.Fatalf("Put after SetDown(false): %v", err)
	}
	if got := f.Injected().Unavailable; got != 2 {
		t.Fatalf("Injected().Unavailable = %d, want 2", got)
	}
}

func TestFaultStoreErrorRate(t *testing.T) {
	ctx := t.Context()
	m := metastore.NewMem()
	f := metastore.WithFaults(m, 7)
	f.SetErrorRate(1)
	for _, call := range faultCalls {
		if err := call.do(ctx, f); !errors.Is(err, metastore.ErrInjected) {
			t.Fatalf("%s at error rate 1: %v, want ErrInjected", call.name, err)
		}
	}
	if got := m.Counters().Requests(); got != 0 {
		t.Fatalf("failed calls reached the inner store: %d requests", got)
	}
	if got := f.Injected().Failed; got != uint64(len(faultCalls)) {
		t.Fatalf("Injected().Failed = %d, want %d", got, len(faultCalls))
	}
}

// TestFaultStoreSeedReproduces checks that a seed fixes which calls fail
// and that a rate of one half fails about half of them.
func TestFaultStoreSeedReproduces(t *testing.T) {
	pattern := func(seed uint64) []bool {
		f := metastore.WithFaults(metastore.NewMem(), seed)
		f.SetErrorRate(0.5)
		var failed []bool
		for range 200 {
			_, err := f.Get(context.Background(), "k")
			failed = append(failed, errors.Is(err, metastore.ErrInjected))
		}
		return failed
	}
	a, b, c := pattern(42), pattern(42), pattern(43)
	if !slices.Equal(a, b) {
		t.Fatal("two FaultStores with seed 42 failed different calls")
	}
	if slices.Equal(a, c) {
		t.Fatal("seeds 42 and 43 failed the same 200 calls")
	}
	n := 0
	for _, f := range a {
		if f {
			n++
		}
	}
	if n < 70 || n > 130 {
		t.Fatalf("error rate 0.5 failed %d of 200 calls (seed 42)", n)
	}
}

func TestFaultStoreAmbiguousRate(t *testing.T) {
	ctx := t.Context()
	m := metastore.NewMem()
	f := metastore.WithFaults(m, 3)
	f.SetAmbiguousRate(1)

	_, err := f.Put(ctx, "k", []byte("v"), metastore.NoVersion)
	if !errors.Is(err, metastore.ErrInjectedAmbiguous) {
		t.Fatalf("Put at ambiguous rate 1: %v, want ErrInjectedAmbiguous", err)
	}
	it, err := f.Get(ctx, "k") // reads are not affected
	if err != nil || string(it.Value) != "v" {
		t.Fatalf("the ambiguous Put did not apply: %q, %v", it.Value, err)
	}
	_, err = f.Commit(ctx, []metastore.Op{{Kind: metastore.OpPut, Key: "c", Value: []byte("x"), Expect: metastore.NoVersion}})
	if !errors.Is(err, metastore.ErrInjectedAmbiguous) {
		t.Fatalf("Commit at ambiguous rate 1: %v", err)
	}
	if _, err := m.Get(ctx, "c"); err != nil {
		t.Fatalf("the ambiguous Commit did not apply: %v", err)
	}
	if err := f.Delete(ctx, "k", it.Version); !errors.Is(err, metastore.ErrInjectedAmbiguous) {
		t.Fatalf("Delete at ambiguous rate 1: %v", err)
	}
	if _, err := m.Get(ctx, "k"); !errors.Is(err, metastore.ErrNotFound) {
		t.Fatalf("the ambiguous Delete did not apply: %v", err)
	}
	if _, err := f.Scan(ctx, "", "", 0); err != nil {
		t.Fatalf("Scan at ambiguous rate 1: %v, want nil (reads unaffected)", err)
	}
	if got := f.Injected().Ambiguous; got != 3 {
		t.Fatalf("Injected().Ambiguous = %d, want 3", got)
	}
}

func TestFaultStoreLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		f := metastore.WithFaults(metastore.NewMem(), 1)
		f.SetLatency(fault.Fixed(time.Second))
		start := time.Now()
		if _, err := f.Put(ctx, "k", []byte("v"), metastore.NoVersion); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != time.Second {
			t.Fatalf("Put with 1s latency took %v of fake time", d)
		}

		// Cancellation ends the wait, and nothing is applied.
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error)
		go func() {
			_, err := f.Put(cctx, "k2", []byte("v"), metastore.NoVersion)
			done <- err
		}()
		synctest.Wait() // the Put is blocked in its latency wait
		select {
		case err := <-done:
			t.Fatalf("Put returned before its latency: %v", err)
		default:
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Put cancelled during latency: %v, want context.Canceled", err)
		}
		f.SetLatency(nil)
		if _, err := f.Get(ctx, "k2"); !errors.Is(err, metastore.ErrNotFound) {
			t.Fatalf("a Put cancelled during its latency applied: %v", err)
		}

		// A distribution draws from the seeded generator.
		f.SetLatency(fault.DistFunc(func(r *rand.Rand) time.Duration {
			return time.Duration(1+r.IntN(10)) * time.Millisecond
		}))
		start = time.Now()
		if _, err := f.Get(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < time.Millisecond || d > 10*time.Millisecond {
			t.Fatalf("Get with latency in [1ms, 10ms] took %v", d)
		}
		got := f.Injected()
		if got.Delayed != 3 || got.Cancelled != 1 {
			t.Fatalf("Injected() = %+v, want Delayed 3, Cancelled 1", got)
		}
	})
}

func TestFaultStoreHook(t *testing.T) {
	ctx := t.Context()
	m := metastore.NewMem()
	f := metastore.WithFaults(m, 1)
	type call struct {
		op   fault.Op
		keys []string
	}
	var calls []call
	commits := 0
	f.SetHook(func(fc fault.Call) fault.Fault {
		op, keys := fc.Op, fc.Keys
		calls = append(calls, call{op, slices.Clone(keys)})
		switch op {
		case fault.Commit:
			commits++
			if commits == 2 {
				return fault.Fault{Kind: fault.Fail}
			}
			if commits == 3 {
				return fault.Fault{Kind: fault.Ambiguous}
			}
		case fault.Get:
			return fault.Fault{Kind: fault.Unavailable}
		}
		return fault.Fault{}
	})
	ops := func(key string) []metastore.Op {
		return []metastore.Op{
			{Kind: metastore.OpPut, Key: key, Value: []byte("v"), Expect: metastore.NoVersion},
			{Kind: metastore.OpCheck, Key: "z", Expect: metastore.NoVersion},
		}
	}
	if _, err := f.Commit(ctx, ops("a")); err != nil {
		t.Fatalf("first Commit: %v", err)
	}
	if _, err := f.Commit(ctx, ops("b")); !errors.Is(err, metastore.ErrInjected) {
		t.Fatalf("second Commit: %v, want ErrInjected", err)
	}
	if _, err := f.Commit(ctx, ops("c")); !errors.Is(err, metastore.ErrInjectedAmbiguous) {
		t.Fatalf("third Commit: %v, want ErrInjectedAmbiguous", err)
	}
	if _, err := f.Get(ctx, "a"); !errors.Is(err, metastore.ErrUnavailable) {
		t.Fatalf("Get: %v, want ErrUnavailable", err)
	}
	if _, err := f.Scan(ctx, "p/", "", 0); err != nil {
		t.Fatalf("Scan: %v", err)
	}
	items, err := m.Scan(ctx, "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 2 || items[0].Key != "a" || items[1].Key != "c" {
		t.Fatalf("inner store holds %v, want a and c (b failed before applying)", items)
	}
	want := []call{
		{fault.Commit, []string{"a", "z"}},
		{fault.Commit, []string{"b", "z"}},
		{fault.Commit, []string{"c", "z"}},
		{fault.Get, []string{"a"}},
		{fault.Scan, []string{"p/"}},
	}
	if !slices.EqualFunc(calls, want, func(a, b call) bool { return a.op == b.op && slices.Equal(a.keys, b.keys) }) {
		t.Fatalf("hook saw %v, want %v", calls, want)
	}
	f.SetHook(nil)
	if _, err := f.Get(ctx, "a"); err != nil {
		t.Fatalf("Get after removing the hook: %v", err)
	}
	got := f.Injected()
	if got.Failed != 1 || got.Ambiguous != 1 || got.Unavailable != 1 {
		t.Fatalf("Injected() = %+v", got)
	}
}

func TestFaultStoreForwardsCommitLimit(t *testing.T) {
	if got := metastore.MaxCommitOps(metastore.WithFaults(metastore.NewMem(), 1)); got != 0 {
		t.Fatalf("MaxCommitOps over Mem = %d, want 0", got)
	}
	if got := metastore.MaxCommitOps(metastore.WithFaults(limited{metastore.NewMem()}, 1)); got != 8 {
		t.Fatalf("MaxCommitOps over a store limited to 8 = %d", got)
	}
}

type limited struct{ metastore.Store }

func (limited) MaxCommitOps() int { return 8 }

var faultCalls = []struct {
	name string
	do   func(context.Context, metastore.Store) error
}{
	{"Get", func(ctx context.Context, s metastore.Store) error { _, err := s.Get(ctx, "k"); return err }},
	{"Put", func(ctx context.Context, s metastore.Store) error {
		_, err := s.Put(ctx, "k", nil, metastore.NoVersion)
		return err
	}},
	{"Delete", func(ctx context.Context, s metastore.Store) error { return s.Delete(ctx, "k", metastore.AnyVersion) }},
	{"Scan", func(ctx context.Context, s metastore.Store) error { _, err := s.Scan(ctx, "", "", 0); return err }},
	{"Commit", func(ctx context.Context, s metastore.Store) error {
		_, err := s.Commit(ctx, []metastore.Op{{Kind: metastore.OpCheck, Key: "k", Expect: metastore.AnyVersion}})
		return err
	}},
}

// A call's faults depend on the seed, its op and keys, and how many such
// calls came before it, not on calls to other keys: two FaultStores with one
// seed, called on the same keys in opposite orders, fail the same calls.
func TestFaultStoreDrawsDoNotDependOnInterleaving(t *testing.T) {
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	outcome := func(order []string) map[string][]bool {
		f := metastore.WithFaults(metastore.NewMem(), 7)
		f.SetErrorRate(0.5)
		got := map[string][]bool{}
		for range 20 {
			for _, k := range order {
				_, err := f.Get(context.Background(), k)
				got[k] = append(got[k], errors.Is(err, metastore.ErrInjected))
			}
		}
		return got
	}
	rev := slices.Clone(keys)
	slices.Reverse(rev)
	a, b := outcome(keys), outcome(rev)
	for _, k := range keys {
		if !slices.Equal(a[k], b[k]) {
			t.Fatalf("key %s: calls in one order failed %v, in the other %v", k, a[k], b[k])
		}
	}
	if slices.Equal(a["a"], a["b"]) {
		t.Fatal("keys a and b failed the same 20 calls: draws are not per key")
	}
}
