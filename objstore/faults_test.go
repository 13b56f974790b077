package objstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/objstore"
	"github.com/flightlog/flightlog/objstore/objstoretest"
)

// With nothing configured a FaultStore is transparent: it passes the kit.
func TestFaultStoreConformance(t *testing.T) {
	objstoretest.Run(t, objstoretest.Harness{
		New: func(testing.TB) objstore.Store { return objstore.WithFaults(objstore.NewMem(), 1) },
		Reopen: func(_ testing.TB, s objstore.Store) objstore.Store {
			return objstore.WithFaults(s.(*objstore.FaultStore).Inner(), 2)
		},
	})
}

func TestFaultStoreDown(t *testing.T) {
	ctx := context.Background()
	mem := objstore.NewMem()
	f := objstore.WithFaults(mem, 1)
	if err := f.PutIfAbsent(ctx, "before", []byte("x")); err != nil {
		t.Fatal(err)
	}
	mem.ResetCounters()
	f.SetDown(true)
	_, getErr := f.Get(ctx, "before", 0, -1)
	_, listErr := f.List(ctx, "", "", 0)
	for name, err := range map[string]error{
		"PutIfAbsent": f.PutIfAbsent(ctx, "during", []byte("x")),
		"Get":         getErr,
		"Delete":      f.Delete(ctx, "before"),
		"List":        listErr,
	} {
		if !errors.Is(err, objstore.ErrUnavailable) {
			t.Errorf("%s while down = %v, want ErrUnavailable", name, err)
		}
	}
	if got := mem.Counters(); got != (objstore.Counters{}) {
		t.Fatalf("calls while down reached the inner store: %+v", got)
	}
	if got := f.Injected().Unavailable; got != 4 {
		t.Fatalf("Injected().Unavailable = %d, want 4", got)
	}
	f.SetDown(false)
	if got, want := mem.Keys(), []string{"before"}; !slices.Equal(got, want) {
		t.Fatalf("keys after outage = %q, want %q (nothing applied while down)", got, want)
	}
	if err := f.PutIfAbsent(ctx, "after", nil); err != nil {
		t.Fatalf("PutIfAbsent after the outage = %v", err)
	}
}

func TestFaultStoreErrorRate(t *testing.T) {
	ctx := context.Background()
	const calls, p = 2000, 0.25
	mem := objstore.NewMem()
	f := objstore.WithFaults(mem, 42)
	f.SetErrorRate(p, fault.Put)
	failed := 0
	for i := range calls {
		key := fmt.Sprintf("k/%d", i)
		err := f.PutIfAbsent(ctx, key, []byte("x"))
		_, getErr := mem.Get(ctx, key, 0, -1)
		switch {
		case err == nil:
			if getErr != nil {
				t.Fatalf("put %d succeeded but the object is missing: %v", i, getErr)
			}
		case errors.Is(err, objstore.ErrInjected):
			failed++
			if !errors.Is(getErr, objstore.ErrNotFound) {
				t.Fatalf("put %d failed with ErrInjected but was applied", i)
			}
		default:
			t.Fatalf("put %d = %v", i, err)
		}
	}
	// Binomial(2000, 0.25): mean 500, sd ~19; the seed makes it exact, the
	// bounds only check the rate is honoured.
	if failed < 400 || failed > 600 {
		t.Fatalf("%d of %d puts failed at error rate %v (seed 42)", failed, calls, p)
	}
	if got := f.Injected().Failed; got != uint64(failed) {
		t.Fatalf("Injected().Failed = %d, want %d", got, failed)
	}
	// Other operations are unaffected.
	for i := range 100 {
		if _, err := f.Get(ctx, "k/0", 0, -1); err != nil && !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("get %d = %v; only puts should fail", i, err)
		}
	}

	// The same seed and call sequence inject the same faults.
	again := objstore.WithFaults(objstore.NewMem(), 42)
	again.SetErrorRate(p, fault.Put)
	failedAgain := 0
	for i := range calls {
		if again.PutIfAbsent(ctx, fmt.Sprintf("k/%d", i), []byte("x")) != nil {
			failedAgain++
		}
	}
	if failedAgain != failed {
		t.Fatalf("seed 42 replayed: %d failures, first run %d", failedAgain, failed)
	}
}

func TestFaultStoreAmbiguousAppliesThenFails(t *testing.T) {
	ctx := context.Background()
	mem := objstore.NewMem()
	f := objstore.WithFaults(mem, 7)
	f.SetAmbiguousRate(1, fault.Put)
	err := f.PutIfAbsent(ctx, "slot", []byte("flight"))
	if !errors.Is(err, objstore.ErrInjectedAmbiguous) {
		t.Fatalf("PutIfAbsent at ambiguous rate 1 = %v, want ErrInjectedAmbiguous", err)
	}
	if errors.Is(err, objstore.ErrExists) {
		t.Fatalf("an ambiguous failure must not look like ErrExists: %v", err)
	}
	got, getErr := mem.Get(ctx, "slot", 0, -1)
	if getErr != nil || string(got) != "flight" {
		t.Fatalf("after an ambiguous put, the object = %q, %v; want it applied", got, getErr)
	}
	f.SetAmbiguousRate(0, fault.Put)
	// The retry finds its own earlier write.
	if err := f.PutIfAbsent(ctx, "slot", []byte("flight")); !errors.Is(err, objstore.ErrExists) {
		t.Fatalf("retry after an ambiguous put = %v, want ErrExists", err)
	}
	if got := f.Injected().Ambiguous; got != 1 {
		t.Fatalf("Injected().Ambiguous = %d, want 1", got)
	}
}

func TestFaultStoreHook(t *testing.T) {
	ctx := context.Background()
	mem := objstore.NewMem()
	f := objstore.WithFaults(mem, 1)
	errZone := errors.New("zone b is on fire")
	var seen []string
	f.SetHook(func(call fault.Call) fault.Fault {
		op, key := call.Op, call.Key
		seen = append(seen, string(op)+" "+key)
		switch key {
		case "fail":
			return fault.Fault{Err: errZone}
		case "lost-response":
			return fault.Fault{Kind: fault.Ambiguous}
		case "lost-with-cause":
			return fault.Fault{Kind: fault.Ambiguous, Err: objstore.ErrUnavailable}
		}
		return fault.Fault{}
	})
	if err := f.PutIfAbsent(ctx, "fail", nil); !errors.Is(err, errZone) {
		t.Fatalf("scripted failure = %v, want %v", err, errZone)
	}
	if err := f.PutIfAbsent(ctx, "lost-response", nil); !errors.Is(err, objstore.ErrInjectedAmbiguous) {
		t.Fatalf("scripted lost response = %v, want ErrInjectedAmbiguous", err)
	}
	if err := f.PutIfAbsent(ctx, "lost-with-cause", nil); !errors.Is(err, objstore.ErrUnavailable) {
		t.Fatalf("scripted lost response with cause = %v, want ErrUnavailable", err)
	}
	if err := f.PutIfAbsent(ctx, "fine", nil); err != nil {
		t.Fatal(err)
	}
	if err := f.Delete(ctx, "fail"); !errors.Is(err, errZone) {
		t.Fatalf("scripted Delete failure = %v", err)
	}
	// Invalid keys never reach the hook.
	if err := f.PutIfAbsent(ctx, "../x", nil); !errors.Is(err, objstore.ErrInvalidKey) {
		t.Fatalf("invalid key = %v, want ErrInvalidKey", err)
	}
	if got, want := mem.Keys(), []string{"fine", "lost-response", "lost-with-cause"}; !slices.Equal(got, want) {
		t.Fatalf("applied keys = %q, want %q", got, want)
	}
	want := []string{"put fail", "put lost-response", "put lost-with-cause", "put fine", "delete fail"}
	if !slices.Equal(seen, want) {
		t.Fatalf("hook saw %q, want %q", seen, want)
	}
	if got := f.Injected(); got.Hooked != 4 || got.Failed != 2 || got.Ambiguous != 2 {
		t.Fatalf("Injected() = %+v, want 4 hooked, 2 errors, 2 ambiguous", got)
	}
}

func TestFaultStoreLatencyHonoursCancellation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := objstore.NewMem()
		f := objstore.WithFaults(mem, 1)
		f.SetLatency(fault.Fixed(time.Hour), fault.Put)
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		done := make(chan error)
		go func() { done <- f.PutIfAbsent(ctx, "k", []byte("x")) }()
		synctest.Wait()         // the put is waiting out its hour
		time.Sleep(time.Minute) // a minute of the hour passes (the bubble's clock)
		cancel()
		err := <-done
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("PutIfAbsent cancelled during its delay = %v, want context.Canceled", err)
		}
		if elapsed := time.Since(start); elapsed != time.Minute {
			t.Fatalf("cancelled put returned after %v of fake time, want 1m", elapsed)
		}
		if len(mem.Keys()) != 0 {
			t.Fatalf("a put cancelled during its delay was applied: %q", mem.Keys())
		}
		if got := f.Injected(); got.Cancelled != 1 || got.Delayed != 1 {
			t.Fatalf("Injected() = %+v, want 1 delayed, 1 cancelled", got)
		}

		// Uncancelled, the call takes exactly its latency of fake time.
		start = time.Now()
		if err := f.PutIfAbsent(context.Background(), "k", []byte("x")); err != nil {
			t.Fatal(err)
		}
		if elapsed := time.Since(start); elapsed != time.Hour {
			t.Fatalf("put took %v of fake time, want 1h", elapsed)
		}

		// A deadline ends the wait too.
		f.SetLatency(fault.Fixed(time.Hour), fault.Get)
		dctx, dcancel := context.WithTimeout(context.Background(), time.Second)
		defer dcancel()
		if _, err := f.Get(dctx, "k", 0, -1); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Get past its deadline = %v, want DeadlineExceeded", err)
		}
	})
}

// Heavy-tailed latency makes calls complete out of the order they were
// issued: what the chain's release-in-slot-order logic must cope with.
func TestFaultStoreLatencyReordersCompletions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := objstore.WithFaults(objstore.NewMem(), 2024)
		f.SetLatency(fault.LogNormal(20*time.Millisecond, 400*time.Millisecond), fault.Put)
		const n = 32
		completed := make(chan int, n)
		for i := range n {
			go func() {
				if err := f.PutIfAbsent(context.Background(), fmt.Sprintf("slot/%02d", i), nil); err != nil {
					t.Error(err)
				}
				completed <- i
			}()
			synctest.Wait() // issue strictly in order, so the seed decides every latency
		}
		var order []int
		for range n {
			order = append(order, <-completed)
		}
		if slices.IsSorted(order) {
			t.Fatalf("completions came in issue order %v; heavy-tailed latency should reorder them (seed 2024)", order)
		}
		slices.Sort(order)
		if order[0] != 0 || order[n-1] != n-1 {
			t.Fatalf("lost completions: %v", order)
		}
	})
}

// A call's latency and fate depend on the seed, its op and key, and how
// many such calls came before it, not on calls to other keys: two
// FaultStores with one seed, called on the same keys in opposite orders,
// delay and fail the same calls alike.
func TestFaultStoreDrawsDoNotDependOnInterleaving(t *testing.T) {
	type call struct {
		d   time.Duration
		err bool
	}
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	outcome := func(order []string) map[string][]call {
		got := map[string][]call{}
		synctest.Test(t, func(t *testing.T) {
			f := objstore.WithFaults(objstore.NewMem(), 7)
			f.SetErrorRate(0.5, fault.Get)
			f.SetLatency(fault.Uniform(0, time.Second), fault.Get)
			for range 10 {
				for _, k := range order {
					start := time.Now()
					_, err := f.Get(context.Background(), k, 0, -1)
					got[k] = append(got[k], call{time.Since(start), errors.Is(err, objstore.ErrInjected)})
				}
			}
		})
		return got
	}
	rev := slices.Clone(keys)
	slices.Reverse(rev)
	a, b := outcome(keys), outcome(rev)
	for _, k := range keys {
		if !slices.Equal(a[k], b[k]) {
			t.Fatalf("key %s: calls in one order drew %v, in the other %v", k, a[k], b[k])
		}
	}
	if slices.Equal(a["a"], a["b"]) {
		t.Fatal("keys a and b drew the same: draws are not per key")
	}
}
