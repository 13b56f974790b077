package fault_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// settings is the shape both stores' FaultStores share: the same methods
// with the same signatures, promoted from their fault.Injector.
type settings interface {
	SetDown(down bool)
	SetLatency(d fault.LatencyDist, ops ...fault.Op) error
	SetErrorRate(p float64, ops ...fault.Op) error
	SetAmbiguousRate(p float64, ops ...fault.Op) error
	SetHook(hook func(fault.Call) fault.Fault)
	Injected() fault.Counters
}

var (
	_ settings = (*objstore.FaultStore)(nil)
	_ settings = (*metastore.FaultStore)(nil)
)

// TestSettingsRefuseBadInput: a rate outside [0, 1] and an operation the
// store does not have are refused with an error naming them, on both
// stores, and change nothing.
func TestSettingsRefuseBadInput(t *testing.T) {
	for _, tc := range []struct {
		name    string
		s       settings
		foreign fault.Op
	}{
		{"objstore", objstore.WithFaults(objstore.NewMem(), 1), fault.Commit},
		{"metastore", metastore.WithFaults(metastore.NewMem(), 1), fault.List},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, p := range []float64{-0.1, 1.5, math.NaN()} {
				if err := tc.s.SetErrorRate(p); err == nil || !strings.HasPrefix(err.Error(), tc.name+": ") || !strings.Contains(err.Error(), "SetErrorRate") {
					t.Errorf("SetErrorRate(%v) = %v, want an error of %s naming it", p, err, tc.name)
				}
				if err := tc.s.SetAmbiguousRate(p); err == nil {
					t.Errorf("SetAmbiguousRate(%v) accepted", p)
				}
			}
			if err := tc.s.SetErrorRate(1, tc.foreign); err == nil || !strings.Contains(err.Error(), string(tc.foreign)) {
				t.Errorf("SetErrorRate(1, %s) = %v, want an error naming the op", tc.foreign, err)
			}
			if err := tc.s.SetLatency(fault.Fixed(time.Hour), fault.Get, tc.foreign); err == nil {
				t.Errorf("SetLatency for %s accepted", tc.foreign)
			}
			if err := tc.s.SetErrorRate(1, fault.Get, fault.Put); err != nil {
				t.Errorf("SetErrorRate(1, get, put): %v", err)
			}
		})
	}
}

// TestPerOperationSettings: rates and latency are per operation on both
// stores; no operation means every one (for the ambiguous rate, every
// write).
func TestPerOperationSettings(t *testing.T) {
	ctx := context.Background()
	m := metastore.WithFaults(metastore.NewMem(), 1)
	if err := m.SetErrorRate(1, fault.Commit); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Put(ctx, "k", []byte("v"), metastore.NoVersion); err != nil {
		t.Fatalf("Put with only Commit failing: %v", err)
	}
	if _, err := m.Commit(ctx, []metastore.Op{{Kind: metastore.OpPut, Key: "j", Value: []byte("v"), Expect: metastore.NoVersion}}); !errors.Is(err, metastore.ErrInjected) {
		t.Fatalf("Commit with its error rate 1: %v, want ErrInjected", err)
	}
	if err := m.SetAmbiguousRate(1); err != nil { // every write
		t.Fatal(err)
	}
	if _, err := m.Get(ctx, "k"); err != nil {
		t.Fatalf("a read under the writes' ambiguous rate: %v", err)
	}
	if _, err := m.Put(ctx, "k2", []byte("v"), metastore.NoVersion); !errors.Is(err, metastore.ErrInjectedAmbiguous) {
		t.Fatalf("Put under the writes' ambiguous rate: %v", err)
	}

	o := objstore.WithFaults(objstore.NewMem(), 1)
	if err := o.SetAmbiguousRate(1, fault.Delete); err != nil {
		t.Fatal(err)
	}
	if err := o.PutIfAbsent(ctx, "a", []byte("x")); err != nil {
		t.Fatalf("PutIfAbsent with only Delete ambiguous: %v", err)
	}
	if err := o.Delete(ctx, "a"); !errors.Is(err, objstore.ErrInjectedAmbiguous) {
		t.Fatalf("Delete with its ambiguous rate 1: %v", err)
	}
	if _, err := o.Get(ctx, "a", 0, -1); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("the ambiguous Delete did not apply: %v", err)
	}
	if err := o.SetErrorRate(1); err != nil { // every op
		t.Fatal(err)
	}
	if _, err := o.List(ctx, "", "", 0); !errors.Is(err, objstore.ErrInjected) {
		t.Fatalf("List under every op's error rate: %v", err)
	}
	if got := o.Injected(); got.Ambiguous != 1 || got.Failed != 1 {
		t.Fatalf("Injected() = %+v, want 1 ambiguous, 1 failed", got)
	}
}

// TestHookReplacesTheDrawsWithoutShiftingThem: a hook's non-zero Fault is
// used as is (the rates and latency do not add to it; an Err alone fails
// the call), and hooked calls still make their draws, so the calls after
// them fail exactly as they would have without the hook.
func TestHookReplacesTheDrawsWithoutShiftingThem(t *testing.T) {
	ctx := context.Background()
	run := func(hookFirst int) []bool {
		m := metastore.WithFaults(metastore.NewMem(), 7)
		if err := m.SetErrorRate(0.5, fault.Get); err != nil {
			t.Fatal(err)
		}
		calls := 0
		m.SetHook(func(c fault.Call) fault.Fault {
			calls++
			if calls <= hookFirst {
				return fault.Fault{Err: errTest}
			}
			return fault.Fault{}
		})
		var failed []bool
		for i := range 40 {
			_, err := m.Get(ctx, "k")
			if i < hookFirst {
				if !errors.Is(err, errTest) || errors.Is(err, metastore.ErrInjected) {
					t.Fatalf("hooked call %d: %v, want the hook's error alone", i, err)
				}
				continue
			}
			failed = append(failed, errors.Is(err, metastore.ErrInjected))
		}
		return failed
	}
	plain, hooked := run(0), run(10)
	if !slices.Equal(plain[10:], hooked) {
		t.Fatalf("calls after hooked ones drew differently:\n plain  %v\n hooked %v", plain[10:], hooked)
	}
	if n := countTrue(plain); n < 10 || n > 30 {
		t.Fatalf("error rate 0.5 failed %d of 40 calls", n)
	}
}

var errTest = errors.New("test: scripted")

func countTrue(bs []bool) (n int) {
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

func TestLatencyDistributions(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	sample := func(d fault.LatencyDist, n int) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = d.Sample(r)
		}
		slices.Sort(out)
		return out
	}
	if got := sample(fault.Fixed(3*time.Millisecond), 10); got[0] != 3*time.Millisecond || got[9] != 3*time.Millisecond {
		t.Fatalf("Fixed(3ms) sampled %v", got)
	}
	u := sample(fault.Uniform(time.Millisecond, 2*time.Millisecond), 1000)
	if u[0] < time.Millisecond || u[999] > 2*time.Millisecond || u[500] < 1400*time.Microsecond || u[500] > 1600*time.Microsecond {
		t.Fatalf("Uniform(1ms, 2ms): min %v median %v max %v", u[0], u[500], u[999])
	}
	const n = 20000
	ln := sample(fault.LogNormal(10*time.Millisecond, 100*time.Millisecond), n)
	if p50 := ln[n/2]; p50 < 9*time.Millisecond || p50 > 11*time.Millisecond {
		t.Fatalf("LogNormal(10ms, 100ms) median = %v", p50)
	}
	if p99 := ln[n*99/100]; p99 < 80*time.Millisecond || p99 > 125*time.Millisecond {
		t.Fatalf("LogNormal(10ms, 100ms) p99 = %v", p99)
	}
	mix := sample(fault.Mixture(0.1, fault.Fixed(time.Millisecond), fault.Fixed(time.Second)), n)
	slow := n - slices.Index(mix, time.Second)
	if slow < n*8/100 || slow > n*12/100 {
		t.Fatalf("Mixture(0.1, 1ms, 1s): %d of %d slow", slow, n)
	}
}
