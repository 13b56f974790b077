package chain

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/metastore"
)

// TestMintNextRace: two candidates mint from the same version; exactly one
// wins, and the other gets ErrMintLost with the winner's record.
func TestMintNextRace(t *testing.T) {
	ctx := context.Background()
	for round := 0; round < 50; round++ {
		ms := metastore.NewMem()
		first, v, err := MintFirst(ctx, ms, "s", Express, EpochRecord{Owner: "old", Window: 8, K: 3, W: 2, Buckets: []string{"a", "b", "c"}})
		if err != nil {
			t.Fatal(err)
		}
		owners := []string{"cand-a", "cand-b"}
		recs := make([]EpochRecord, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range owners {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				next := first
				next.Owner = owners[i]
				next.Cuts = []Cut{{Epoch: 1, Slot: uint64(10 + i)}}
				recs[i], _, errs[i] = MintNext(ctx, ms, "s", Express, first, v, next)
			}()
		}
		close(start)
		wg.Wait()
		won := -1
		for i, err := range errs {
			if err == nil {
				if won >= 0 {
					t.Fatalf("round %d: both candidates won", round)
				}
				won = i
			}
		}
		if won < 0 {
			t.Fatalf("round %d: nobody won: %v", round, errs)
		}
		lost := 1 - won
		if !errors.Is(errs[lost], ErrMintLost) || recs[lost].Owner != owners[won] || recs[lost].Epoch != 2 {
			t.Fatalf("round %d: loser got %+v, %v; want ErrMintLost with the winner's record", round, recs[lost], errs[lost])
		}
		got, _, err := ReadEpoch(ctx, ms, "s", Express)
		if err != nil || got.Owner != owners[won] || got.Epoch != 2 || got.Counter != first.Counter+1 {
			t.Fatalf("round %d: stored %+v %v", round, got, err)
		}
		if c, ok := got.CutOf(1); !ok || c.Slot != uint64(10+won) || c.Clean {
			t.Fatalf("round %d: cut of epoch 1: %+v %v", round, c, ok)
		}
	}
}

// TestMintNextAmbiguous: a mint that applied but reported failure is
// recognised as ours; one that failed without applying is retried; and a
// stale version loses.
func TestMintNextAmbiguous(t *testing.T) {
	ctx := context.Background()
	for name, kind := range map[string]fault.Kind{"applied then failed": fault.Ambiguous, "failed unapplied": fault.Fail} {
		t.Run(name, func(t *testing.T) {
			fs := metastore.WithFaults(metastore.NewMem(), 1)
			first, v, err := MintFirst(ctx, fs, "s", Standard, EpochRecord{Owner: "p1", Window: 4, K: 1, W: 1, Buckets: []string{"a"}})
			if err != nil {
				t.Fatal(err)
			}
			var fired atomic.Bool
			fs.SetHook(func(call fault.Call) fault.Fault {
				op := call.Op
				if op == fault.Put && fired.CompareAndSwap(false, true) {
					return fault.Fault{Kind: kind}
				}
				return fault.Fault{}
			})
			rec, v2, err := MintNext(ctx, fs, "s", Standard, first, v, EpochRecord{Owner: "p2", Window: 4, K: 1, W: 1, Buckets: []string{"a"}})
			if err != nil || rec.Epoch != 2 || rec.Owner != "p2" || !fired.Load() {
				t.Fatalf("mint through a %v put: %+v %v", kind, rec, err)
			}
			got, gv, _ := ReadEpoch(ctx, fs, "s", Standard)
			if gv != v2 || got.Owner != "p2" {
				t.Fatalf("stored %+v at %v, returned version %v", got, gv, v2)
			}
			// Minting again from the stale version loses: the record has moved on.
			if _, _, err := MintNext(ctx, fs, "s", Standard, first, v, EpochRecord{Owner: "p3", Window: 4, K: 3, W: 2, Buckets: []string{"a", "b", "c"}}); !errors.Is(err, ErrMintLost) {
				t.Fatalf("stale mint: %v", err)
			}
		})
	}
}

// TestSealEpoch: a clean seal records the cut on the epoch record (so CutOf
// finds it and the next mint can carry it), is idempotent, and a sealer
// whose record has moved on is deposed.
func TestSealEpoch(t *testing.T) {
	ctx := context.Background()
	ms := metastore.NewMem()
	rec, v, err := MintFirst(ctx, ms, "s", Express, EpochRecord{Owner: "p1", Window: 4, K: 3, W: 2, Buckets: []string{"a", "b", "c"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rec.CutOf(1); ok {
		t.Fatal("a live epoch has no cut")
	}
	v2, err := SealEpoch(ctx, ms, "s", Express, rec, v, 42)
	if err != nil {
		t.Fatal(err)
	}
	sealed, sv, err := ReadEpoch(ctx, ms, "s", Express)
	if err != nil || sv != v2 || sealed.Seal == nil || *sealed.Seal != (Cut{Epoch: 1, Slot: 42, Clean: true}) || sealed.Counter != rec.Counter+1 {
		t.Fatalf("sealed record %+v at %v, %v", sealed, sv, err)
	}
	if c, ok := sealed.CutOf(1); !ok || c.Slot != 42 || !c.Clean {
		t.Fatalf("CutOf(1) = %+v %v", c, ok)
	}
	if again, err := SealEpoch(ctx, ms, "s", Express, sealed, sv, 42); err != nil || again != sv {
		t.Fatalf("resealing: %v %v", again, err)
	}
	if _, err := SealEpoch(ctx, ms, "s", Express, sealed, sv, 43); err == nil {
		t.Fatal("a sealed epoch accepted a different cut")
	}
	// The next owner mints from the sealed record, carrying the clean cut.
	next, _, err := MintNext(ctx, ms, "s", Express, sealed, sv, EpochRecord{Owner: "p2", Window: 4, K: 3, W: 2, Buckets: []string{"a", "b", "c"}, Cuts: []Cut{*sealed.Seal}})
	if err != nil || next.Seal != nil {
		t.Fatalf("mint after seal: %+v %v", next, err)
	}
	if c, ok := next.CutOf(1); !ok || c.Slot != 42 || !c.Clean {
		t.Fatalf("the new record's cut of epoch 1: %+v %v", c, ok)
	}
	// The old owner, sealing from its stale version, is deposed.
	if _, err := SealEpoch(ctx, ms, "s", Express, rec, v, 42); !errors.Is(err, ErrDeposed) {
		t.Fatalf("stale seal: %v, want ErrDeposed", err)
	}
	// Cuts must be of earlier epochs.
	cur, cv, _ := ReadEpoch(ctx, ms, "s", Express)
	if _, _, err := MintNext(ctx, ms, "s", Express, cur, cv, EpochRecord{Cuts: []Cut{{Epoch: 3}}}); err == nil || errors.Is(err, ErrMintLost) {
		t.Fatalf("a cut of the minted epoch was accepted: %v", err)
	}
}

// TestHostileEpochRecordRefused (issue 13, item 8): an epoch record whose
// fields break a bound (a huge window, K or W; cuts of later epochs) is
// refused by ReadEpoch with ErrBadRecord, never used to size work.
func TestHostileEpochRecordRefused(t *testing.T) {
	ctx := context.Background()
	good := EpochRecord{Epoch: 3, Owner: "p", Window: 16, K: 3, W: 2, Buckets: []string{"a", "b", "c"}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*EpochRecord){
		"window":       func(r *EpochRecord) { r.Window = 1 << 40 },
		"window zero":  func(r *EpochRecord) { r.Window = 0 },
		"K":            func(r *EpochRecord) { r.K = 1 << 20 },
		"W over K":     func(r *EpochRecord) { r.W = 4 },
		"buckets":      func(r *EpochRecord) { r.Buckets = r.Buckets[:2] },
		"epoch 0":      func(r *EpochRecord) { r.Epoch = 0 },
		"future cut":   func(r *EpochRecord) { r.Cuts = []Cut{{Epoch: 3, Slot: 1}} },
		"foreign seal": func(r *EpochRecord) { r.Seal = &Cut{Epoch: 2, Slot: 1} },
	} {
		rec := good
		rec.Buckets = append([]string(nil), good.Buckets...)
		mutate(&rec)
		ms := metastore.NewMem()
		val, _ := json.Marshal(rec)
		if _, err := ms.Put(ctx, EpochKey("s", Express), val, metastore.NoVersion); err != nil {
			t.Fatal(err)
		}
		if _, _, err := ReadEpoch(ctx, ms, "s", Express); !errors.Is(err, ErrBadRecord) {
			t.Errorf("%s: ReadEpoch of %+v: %v, want ErrBadRecord", name, rec, err)
		}
	}
	ms := metastore.NewMem()
	ms.Put(ctx, EpochKey("s", Express), []byte("{not json"), metastore.NoVersion)
	if _, _, err := ReadEpoch(ctx, ms, "s", Express); !errors.Is(err, ErrBadRecord) {
		t.Errorf("garbage: %v", err)
	}
}
