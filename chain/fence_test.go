package chain

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/objstore"
)

// TestDecideExhaustive checks Decide against the rule, spelled out
// independently, for every assignment of occupant kinds (two flight nonces
// among them) to K = 1..5 buckets and every W, and two properties: a slot is
// never both committed and dead, and a decision reached while some buckets
// are unknown is the decision of every way of filling them in (so fencers
// with different partial views never disagree).
func TestDecideExhaustive(t *testing.T) {
	na, nb := envelope.Nonce{1}, envelope.Nonce{2}
	alphabet := []Occupant{
		{Kind: OccupantUnknown},
		{Kind: OccupantFlight, Nonce: na},
		{Kind: OccupantFlight, Nonce: nb},
		{Kind: OccupantPoison, Nonce: na},
		{Kind: OccupantPoison, Nonce: nb},
		{Kind: OccupantCorrupt},
		{Kind: OccupantForeign, Nonce: na},
	}
	want := func(k, w int, occ []Occupant) Decision {
		var fa, fb, p int
		for _, o := range occ {
			switch {
			case o.Kind == OccupantFlight && o.Nonce == na:
				fa++
			case o.Kind == OccupantFlight && o.Nonce == nb:
				fb++
			case o.Kind == OccupantPoison:
				p++
			}
		}
		committed, dead := fa >= w || fb >= w, p >= k-w+1
		if committed && dead {
			t.Fatalf("K=%d W=%d %v: both committed and dead", k, w, kinds(occ))
		}
		switch {
		case committed:
			return Committed
		case dead:
			return Dead
		}
		return Undecided
	}
	total := 0
	for k := 1; k <= 5; k++ {
		for w := 1; w <= k; w++ {
			occ := make([]Occupant, k)
			idx := make([]int, k)
			for {
				for i := range occ {
					occ[i] = alphabet[idx[i]]
				}
				got := Decide(k, w, occ)
				if exp := want(k, w, occ); got != exp {
					t.Fatalf("Decide(K=%d, W=%d, %v) = %v, want %v", k, w, kinds(occ), got, exp)
				}
				if got != Undecided {
					// Filling in any unknown bucket keeps the decision.
					for i := range occ {
						if occ[i].Kind != OccupantUnknown {
							continue
						}
						for _, fill := range alphabet[1:] {
							more := slices.Clone(occ)
							more[i] = fill
							if d := Decide(k, w, more); d != got {
								t.Fatalf("K=%d W=%d: %v decides %v but %v decides %v", k, w, kinds(occ), got, kinds(more), d)
							}
						}
					}
				}
				total++
				// Next assignment (odometer).
				i := 0
				for ; i < k; i++ {
					idx[i]++
					if idx[i] < len(alphabet) {
						break
					}
					idx[i] = 0
				}
				if i == k {
					break
				}
			}
		}
		// The majority quorum is the one flightlog uses (1/1, 3/2); it is
		// covered above with every other W.
	}
	t.Logf("%d assignments checked", total)
	// Malformed input is undecided, never a guess.
	if Decide(3, 2, []Occupant{{Kind: OccupantPoison}, {Kind: OccupantPoison}}) != Undecided {
		t.Fatal("a short occupant list must be undecided")
	}
	if Decide(1, 0, []Occupant{{Kind: OccupantPoison}}) != Undecided || Decide(1, 2, []Occupant{{Kind: OccupantFlight}}) != Undecided {
		t.Fatal("W outside [1, K] must be undecided")
	}
}

func TestDecideOverride(t *testing.T) {
	occ := []Occupant{{Kind: OccupantCorrupt}, {Kind: OccupantFlight, Readable: true}, {Kind: OccupantPoison}}
	if d := Decide(3, 2, occ); d != Undecided {
		t.Fatalf("Decide = %v, want undecided", d)
	}
	if d, o := decideWith(3, 2, occ, false); d != Undecided || o {
		t.Fatalf("without the override: %v %v", d, o)
	}
	if d, o := decideWith(3, 2, occ, true); d != Committed || !o {
		t.Fatalf("with the override: %v %v, want committed by override", d, o)
	}
	// The override never revives a dead slot.
	dead := []Occupant{{Kind: OccupantPoison}, {Kind: OccupantFlight, Readable: true}, {Kind: OccupantPoison}}
	if d, o := decideWith(3, 2, dead, true); d != Dead || o {
		t.Fatalf("dead slot with the override: %v %v", d, o)
	}
}

func kinds(occ []Occupant) []string {
	var s []string
	for _, o := range occ {
		s = append(s, fmt.Sprintf("%s%x", o.Kind, o.Nonce[0]))
	}
	return s
}

func fence(t *testing.T, ts *testSet, epoch, from uint64, n envelope.Nonce, opt FenceOptions) FenceResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := Fence(ctx, ts.set, tStar, tClass, epoch, from, n, opt)
	if err != nil {
		t.Fatalf("fence: %v", err)
	}
	return res
}

// TestFenceCleanRun: after N committed slots the cut is N, poison (the
// fencer's) sits at N in every bucket, and nothing is listed. One slot at a
// time the fence touches nothing past the cut; looking ahead (the default)
// it poisons at most Parallel−1 slots past it, counted apart.
func TestFenceCleanRun(t *testing.T) {
	for _, sh := range shapes {
		for _, par := range []int{1, 0} {
			t.Run(fmt.Sprintf("%s,parallel=%d", shapeName(sh.k, sh.w), par), func(t *testing.T) {
				ts := newTestSet(sh.k, sh.w, 1)
				const n = 7
				ts.writeCommitted(t, 3, 0, n)
				nonce := envelope.NewNonce()
				res := fence(t, ts, 3, 0, nonce, FenceOptions{Parallel: par})
				if res.Cut != n || res.Committed != n || res.Poisoned != sh.k {
					t.Fatalf("got %+v, want cut %d, %d committed, %d poisons", res, n, n, sh.k)
				}
				reach := uint64(0) // how far past the cut the fence may poison
				if par == 0 {
					reach = DefaultFenceParallel - 1
				}
				if res.PoisonedAhead > int(reach)*sh.k {
					t.Fatalf("%d poisons past the cut with parallel %d", res.PoisonedAhead, par)
				}
				ahead := 0
				for i := range ts.mems {
					env, err := ts.envelopeAt(t, i, 3, n)
					if err != nil || env.Kind != envelope.KindPoison || env.Nonce != nonce {
						t.Fatalf("bucket %d at the cut: %+v %v, want our poison", i, env, err)
					}
					for s := uint64(n + 1); s <= n+DefaultFenceParallel; s++ {
						env, err := ts.envelopeAt(t, i, 3, s)
						switch {
						case errors.Is(err, objstore.ErrNotFound):
						case s > n+reach:
							t.Fatalf("bucket %d: the fence touched slot %d past the cut %d (parallel %d): %v", i, s, n, par, err)
						case err != nil || env.Kind != envelope.KindPoison || env.Nonce != nonce:
							t.Fatalf("bucket %d slot %d: %+v %v, want our poison or nothing", i, s, env, err)
						default:
							ahead++
						}
					}
				}
				if ahead != res.PoisonedAhead {
					t.Fatalf("%d poisons found past the cut, %d reported", ahead, res.PoisonedAhead)
				}
				// From the middle: the same cut.
				if res := fence(t, ts, 3, 4, envelope.NewNonce(), FenceOptions{Parallel: par}); res.Cut != n || res.Committed != n-4 {
					t.Fatalf("fence from 4: %+v", res)
				}
				ts.noLists(t)
			})
		}
	}
}

// TestFenceLookAheadAgrees: over random chains (committed slots, slots
// with fewer than W copies, gaps), a fence looking ahead reaches the cut,
// the count of committed slots and the in-range poisons of a fence taking
// one slot at a time, on an identical copy of the buckets.
func TestFenceLookAheadAgrees(t *testing.T) {
	for _, sh := range shapes {
		for seed := uint64(1); seed <= 40; seed++ {
			r := rand.New(rand.NewPCG(seed, 99))
			seq, look := newTestSet(sh.k, sh.w, seed), newTestSet(sh.k, sh.w, seed)
			n := r.IntN(40)
			for s := 0; s < n+r.IntN(20); s++ {
				var buckets []int
				if s < n {
					buckets = r.Perm(sh.k)[:sh.w+r.IntN(sh.k-sh.w+1)] // committed
				} else {
					buckets = r.Perm(sh.k)[:r.IntN(sh.k+1)] // anything
				}
				if len(buckets) == 0 {
					continue
				}
				seq.writeSlot(t, 1, uint64(s), buckets...)
				look.writeSlot(t, 1, uint64(s), buckets...)
			}
			from := uint64(r.IntN(n + 1))
			a := fence(t, seq, 1, from, envelope.NewNonce(), FenceOptions{Parallel: 1, ReadAhead: 1})
			// Half the seeds read ahead far past a short Parallel.
			opt := FenceOptions{Parallel: 1 + r.IntN(32), ReadAhead: r.IntN(3)}
			if seed%2 == 0 {
				opt = FenceOptions{Parallel: 1 + r.IntN(4), ReadAhead: r.IntN(64)}
			}
			b := fence(t, look, 1, from, envelope.NewNonce(), opt)
			if a.Cut != b.Cut || a.Committed != b.Committed || a.Poisoned != b.Poisoned {
				t.Fatalf("%s seed %d from %d: one at a time %+v, looking ahead (%+v) %+v", shapeName(sh.k, sh.w), seed, from, a, opt, b)
			}
			if b.PoisonedAhead > (opt.Parallel-1)*sh.k {
				t.Fatalf("%s seed %d: %d poisons past the cut with parallel %d", shapeName(sh.k, sh.w), seed, b.PoisonedAhead, opt.Parallel)
			}
			if a.Cut < uint64(n) {
				t.Fatalf("%s seed %d: cut %d below the %d committed slots", shapeName(sh.k, sh.w), seed, a.Cut, n)
			}
		}
	}
}

// TestFenceReadAhead: slots read ahead (past Parallel) are decided from
// what their buckets hold when every bucket holds something (a corrupt or
// foreign occupant beside W flight copies included), and otherwise fenced
// when their turn comes: the cut, the counts and the poisons are those of a
// fence one slot at a time, and nothing is placed past Parallel−1 slots
// beyond the cut, though the zombie's flights past it are read.
func TestFenceReadAhead(t *testing.T) {
	for _, o := range []FenceOptions{{Parallel: 1, ReadAhead: 64}, {Parallel: 2}, {Parallel: 4, ReadAhead: 16}, {Parallel: 16}, {Parallel: 3, ReadAhead: 3}} {
		t.Run(fmt.Sprintf("parallel=%d,read-ahead=%d", o.Parallel, o.ReadAhead), func(t *testing.T) {
			ctx := context.Background()
			ts := newTestSet(3, 2, 7)
			const e, cut = 6, 40
			key := func(s uint64) string { return SlotKey(tStar, tClass, e, s) }
			for s := uint64(0); s < 61; s++ {
				switch s {
				case 10: // a straggler never landed in bucket 2
					ts.writeSlot(t, e, s, 0, 1)
				case 20: // bucket 2's copy is damaged at rest
					ts.writeSlot(t, e, s)
					if err := ts.mems[2].Corrupt(key(s), 2); err != nil {
						t.Fatal(err)
					}
				case 30: // bucket 0 holds another slot's flight (a bug elsewhere)
					obj, _ := renderFlight(t, e, 29)
					if err := ts.mems[0].PutIfAbsent(ctx, key(s), obj); err != nil {
						t.Fatal(err)
					}
					ts.writeSlot(t, e, s, 1, 2)
				case cut: // one copy: dead
					ts.writeSlot(t, e, s, 0)
				default: // committed; past the cut, a zombie's
					ts.writeSlot(t, e, s)
				}
			}
			nonce := envelope.NewNonce()
			res := fence(t, ts, e, 0, nonce, o)
			if res.Cut != cut || res.Committed != cut || res.Poisoned != 3 || res.PoisonedAhead != 0 {
				t.Fatalf("got %+v, want cut %d, %d committed, 3 poisons (slot 10 bucket 2, slot 40 buckets 1 and 2), none ahead", res, cut, cut)
			}
			want := map[[2]uint64]bool{{10, 2}: true, {cut, 1}: true, {cut, 2}: true}
			for s := uint64(0); s < cut+64; s++ {
				for i := range ts.mems {
					env, err := ts.envelopeAt(t, i, e, s)
					ours := err == nil && env.Kind == envelope.KindPoison && env.Nonce == nonce
					if ours != want[[2]uint64{s, uint64(i)}] {
						t.Fatalf("slot %d bucket %d: our poison %v, want %v", s, i, ours, !ours)
					}
				}
			}
			if d := Decide(3, 2, ts.occupantsAt(t, e, 20)); d != Committed {
				t.Fatalf("slot 20 is %v", d)
			}
			ts.noLists(t)
		})
	}
}

// TestFenceMidUpload: the incumbent died mid-upload. A slot with W flight
// copies is committed (its missing bucket now holds poison, harmlessly); one
// with W−1 is dead, and its missing buckets now hold poison.
func TestFenceMidUpload(t *testing.T) {
	for _, sh := range shapes {
		t.Run(shapeName(sh.k, sh.w), func(t *testing.T) {
			ts := newTestSet(sh.k, sh.w, 2)
			ts.writeCommitted(t, 1, 0, 2)
			var wCopies, wMinus1 []int
			for i := 0; i < sh.w; i++ {
				wCopies = append(wCopies, i)
			}
			wMinus1 = wCopies[:sh.w-1]
			ts.writeSlot(t, 1, 2, wCopies...)
			if len(wMinus1) > 0 {
				ts.writeSlot(t, 1, 3, wMinus1...)
			}
			res := fence(t, ts, 1, 0, envelope.NewNonce(), FenceOptions{})
			if res.Cut != 3 || res.Committed != 3 {
				t.Fatalf("got %+v, want cut 3", res)
			}
			if d := Decide(sh.k, sh.w, ts.occupantsAt(t, 1, 2)); d != Committed {
				t.Fatalf("slot 2 with W copies is %v", d)
			}
			occ := ts.occupantsAt(t, 1, 3)
			if d := Decide(sh.k, sh.w, occ); d != Dead {
				t.Fatalf("slot 3 with W-1 copies is %v", d)
			}
			for i, o := range occ {
				want := OccupantPoison
				if i < len(wMinus1) {
					want = OccupantFlight
				}
				if o.Kind != want {
					t.Fatalf("slot 3 bucket %d holds %v, want %v", i, o.Kind, want)
				}
			}
			for i := sh.w; i < sh.k; i++ {
				if o := ts.occupantsAt(t, 1, 2)[i]; o.Kind != OccupantPoison {
					t.Fatalf("slot 2 bucket %d holds %v, want poison", i, o.Kind)
				}
			}
			ts.noLists(t)
		})
	}
}

// TestFenceIdempotent: a rerun (same fencer or another) reaches the same
// cut and places no new poison up to it; one slot at a time, it creates no
// object at all.
func TestFenceIdempotent(t *testing.T) {
	for _, sh := range shapes {
		for _, par := range []int{1, 0} {
			t.Run(fmt.Sprintf("%s,parallel=%d", shapeName(sh.k, sh.w), par), func(t *testing.T) {
				ts := newTestSet(sh.k, sh.w, 3)
				ts.writeCommitted(t, 2, 0, 4)
				ts.writeSlot(t, 2, 4, 0) // a straggler copy
				nonce := envelope.NewNonce()
				first := fence(t, ts, 2, 0, nonce, FenceOptions{Parallel: par})
				before := ts.putBytes()
				for _, n := range []envelope.Nonce{nonce, envelope.NewNonce()} {
					again := fence(t, ts, 2, 0, n, FenceOptions{Parallel: par})
					if again.Cut != first.Cut || again.Poisoned != 0 {
						t.Fatalf("rerun: %+v, first run %+v", again, first)
					}
				}
				// Looking ahead, a rerun may poison a slot past the cut that
				// the first run's look-ahead was stopped before reaching.
				if after := ts.putBytes(); par == 1 && after != before {
					t.Fatalf("reruns created %d bytes of objects", after-before)
				}
				ts.noLists(t)
			})
		}
	}
}

// TestFenceRacingFencers: two fencers race over the same chain, with random
// latencies, over a random prefix of committed slots, random partial slots
// after it and, in half the seeds, a zombie incumbent still writing past
// them. They must reach the same cut, and the buckets must then show every
// slot below it committed and the cut dead. Without a zombie the cut is
// known in advance (the first slot with fewer than W copies).
func TestFenceRacingFencers(t *testing.T) {
	seeds := map[int]int{1: 40, 3: 120}
	if testing.Short() {
		seeds = map[int]int{1: 10, 3: 30}
	}
	for _, sh := range shapes {
		t.Run(shapeName(sh.k, sh.w), func(t *testing.T) {
			var both, zombieCounted int
			for seed := uint64(1); seed <= uint64(seeds[sh.k]); seed++ {
				b, z := raceOnce(t, sh.k, sh.w, seed)
				both += b
				zombieCounted += z
			}
			t.Logf("%d seeds; in %d both fencers placed poison; in %d a zombie's slot ended up below the cut", seeds[sh.k], both, zombieCounted)
		})
	}
}

func raceOnce(t *testing.T, k, w int, seed uint64) (bothPlaced, zombieCounted int) {
	rng := rand.New(rand.NewPCG(seed, 0xfe11ce))
	ts := newTestSet(k, w, seed)
	const epoch = 5
	n := uint64(rng.IntN(5))
	ts.writeCommitted(t, epoch, 0, int(n))
	expected := uint64(0)
	found := false
	for s := n; s < n+3; s++ {
		var subset []int
		for i := 0; i < k; i++ {
			if rng.IntN(2) == 0 {
				subset = append(subset, i)
			}
		}
		if len(subset) > 0 {
			ts.writeSlot(t, epoch, s, subset...)
		}
		if !found && len(subset) < w {
			expected, found = s, true
		}
	}
	if !found {
		expected = n + 3
	}
	for _, f := range ts.faults {
		f.SetLatency(fault.Uniform(0, 2*time.Millisecond), fault.Put)
		f.SetLatency(fault.Uniform(0, time.Millisecond), fault.Get)
	}
	zombie := rng.IntN(2) == 0
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	zctx, zstop := context.WithCancel(ctx)
	var zwg sync.WaitGroup
	if zombie {
		zwg.Add(1)
		go func() { // keeps writing slots past the partial ones, in order
			defer zwg.Done()
			for s := n + 3; s < n+8 && zctx.Err() == nil; s++ {
				obj, nonce := renderFlight(t, epoch, s)
				f := Flight{Key: SlotKey(tStar, tClass, epoch, s), Obj: obj, Epoch: epoch, Slot: s, Nonce: nonce}
				for range WriteFlight(zctx, ts.set.Stores, f, quickRetry) {
				}
			}
		}()
	}
	var wg sync.WaitGroup
	results := make([]FenceResult, 2)
	errs := make([]error, 2)
	start := make(chan struct{})
	// The chains are short: a Parallel of 1 or 2 lets the read-ahead reach
	// the zombie's slots while it writes them.
	opts := []FenceOptions{{}, {Parallel: 1 + rng.IntN(2), ReadAhead: rng.IntN(12)}}
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = Fence(ctx, ts.set, tStar, tClass, epoch, 0, envelope.NewNonce(), opts[i])
		}()
	}
	close(start)
	wg.Wait()
	zstop()
	zwg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("seed %d: fencer %d: %v", seed, i, err)
		}
	}
	if results[0].Cut != results[1].Cut {
		t.Fatalf("seed %d (zombie %v): fencers disagree: cut %d vs %d", seed, zombie, results[0].Cut, results[1].Cut)
	}
	cut := results[0].Cut
	if !zombie && cut != expected {
		t.Fatalf("seed %d: cut %d, want %d", seed, cut, expected)
	}
	if cut < n {
		t.Fatalf("seed %d: cut %d below the %d fully committed slots", seed, cut, n)
	}
	for s := uint64(0); s < cut; s++ {
		if d := Decide(k, w, ts.occupantsAt(t, epoch, s)); d != Committed {
			t.Fatalf("seed %d: slot %d below the cut %d is %v", seed, s, cut, d)
		}
	}
	if d := Decide(k, w, ts.occupantsAt(t, epoch, cut)); d != Dead {
		t.Fatalf("seed %d: the cut %d is %v", seed, cut, d)
	}
	if got := results[0].Poisoned + results[1].Poisoned; got < k-w+1 {
		t.Fatalf("seed %d: %d poisons placed in all, want at least %d", seed, got, k-w+1)
	}
	ts.noLists(t)
	if results[0].Poisoned > 0 && results[1].Poisoned > 0 {
		bothPlaced = 1
	}
	if cut > n+3 {
		zombieCounted = 1
	}
	return bothPlaced, zombieCounted
}

// TestFenceAmbiguousPoison: a poison PUT that applied but reported failure
// (and one that failed without applying) is resolved by reading the key
// back: the fence reaches the right cut and counts the poison as its own.
func TestFenceAmbiguousPoison(t *testing.T) {
	for _, sh := range shapes {
		for _, mode := range []string{"applied", "not applied"} {
			t.Run(shapeName(sh.k, sh.w)+"/"+mode, func(t *testing.T) {
				ts := newTestSet(sh.k, sh.w, 4)
				ts.writeCommitted(t, 1, 0, 3)
				cutKey := SlotKey(tStar, tClass, 1, 3)
				victim := sh.k - 1
				var fired atomic.Bool
				ts.faults[victim].SetHook(func(call fault.Call) fault.Fault {
					op, key := call.Op, call.Key
					if op == fault.Put && key == cutKey && fired.CompareAndSwap(false, true) {
						if mode == "applied" {
							return fault.Fault{Kind: fault.Ambiguous}
						}
						return fault.Fault{Err: objstore.ErrInjected}
					}
					return fault.Fault{}
				})
				nonce := envelope.NewNonce()
				res := fence(t, ts, 1, 0, nonce, FenceOptions{Retry: quickRetry})
				if !fired.Load() {
					t.Fatal("the fault never fired")
				}
				// An applied PUT is found by its nonce and counted. One that
				// did not apply leaves the key empty: with K=1 the fence
				// retries it; with K=3 the other two poisons already make the
				// slot dead, so the fence decides without waiting (the
				// garbage probe poisons the rest).
				wantPoisoned, wantVictim := sh.k, true
				if mode == "not applied" && sh.k > 1 {
					wantPoisoned, wantVictim = sh.k-1, false
				}
				if res.Cut != 3 || res.Poisoned != wantPoisoned {
					t.Fatalf("got %+v, want cut 3 and %d poisons of ours", res, wantPoisoned)
				}
				env, err := ts.envelopeAt(t, victim, 1, 3)
				if wantVictim && (err != nil || env.Kind != envelope.KindPoison || env.Nonce != nonce) {
					t.Fatalf("bucket %d at the cut: %+v %v, want our poison", victim, env, err)
				}
				if !wantVictim && !errors.Is(err, objstore.ErrNotFound) {
					t.Fatalf("bucket %d at the cut: %+v %v, want empty", victim, env, err)
				}
				if inj := ts.faults[victim].Injected(); inj.Hooked != 1 {
					t.Fatalf("injected %+v", inj)
				}
				ts.noLists(t)
			})
		}
	}
}

// TestFenceDownBuckets: with K=3/W=2 one down bucket does not stop a fence
// (the other two decide every slot); two down block it with ErrUndecided
// until ctx ends; and a fence blocked that way completes once they are up.
func TestFenceDownBuckets(t *testing.T) {
	t.Run("one down", func(t *testing.T) {
		ts := newTestSet(3, 2, 5)
		ts.writeCommitted(t, 1, 0, 4)
		ts.faults[1].SetDown(true)
		res := fence(t, ts, 1, 0, envelope.NewNonce(), FenceOptions{})
		if res.Cut != 4 || res.Poisoned != 2 {
			t.Fatalf("got %+v, want cut 4 from two buckets", res)
		}
		ts.noLists(t)
	})
	t.Run("two down until ctx ends", func(t *testing.T) {
		ts := newTestSet(3, 2, 6)
		ts.writeCommitted(t, 1, 0, 2)
		ts.faults[1].SetDown(true)
		ts.faults[2].SetDown(true)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Millisecond)
		defer cancel()
		_, err := Fence(ctx, ts.set, tStar, tClass, 1, 0, envelope.NewNonce(), FenceOptions{Retry: quickRetry})
		var ue *UndecidedError
		if !errors.Is(err, ErrUndecided) || !errors.As(err, &ue) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want an *UndecidedError at the deadline", err)
		}
		if ue.Slot != 0 || !slices.Equal(ue.Occupants, []OccupantKind{OccupantFlight, OccupantUnknown, OccupantUnknown}) ||
			!errors.Is(ue.Causes[1], objstore.ErrUnavailable) {
			t.Fatalf("undecided error: %+v", ue)
		}
		t.Logf("error reads: %v", err)
		// Up again: the rerun decides.
		ts.faults[1].SetDown(false)
		ts.faults[2].SetDown(false)
		if res := fence(t, ts, 1, 0, envelope.NewNonce(), FenceOptions{}); res.Cut != 2 {
			t.Fatalf("after recovery: %+v", res)
		}
		ts.noLists(t)
	})
	t.Run("blocks then completes", func(t *testing.T) {
		ts := newTestSet(3, 2, 7)
		ts.writeCommitted(t, 1, 0, 3)
		var down atomic.Bool
		down.Store(true)
		var calls atomic.Int32
		retrying := make(chan struct{}, 1)
		for _, i := range []int{1, 2} {
			ts.faults[i].SetHook(func(call fault.Call) fault.Fault {
				if !down.Load() {
					return fault.Fault{}
				}
				if calls.Add(1) >= 8 { // several rounds have failed
					select {
					case retrying <- struct{}{}:
					default:
					}
				}
				return fault.Fault{Err: objstore.ErrUnavailable}
			})
		}
		done := make(chan FenceResult, 1)
		go func() {
			res, err := Fence(context.Background(), ts.set, tStar, tClass, 1, 0, envelope.NewNonce(), FenceOptions{Retry: quickRetry})
			if err != nil {
				t.Errorf("fence: %v", err)
			}
			done <- res
		}()
		<-retrying
		select {
		case res := <-done:
			t.Fatalf("fence finished with two buckets down: %+v", res)
		default:
		}
		down.Store(false)
		if res := <-done; res.Cut != 3 {
			t.Fatalf("got %+v, want cut 3", res)
		}
		ts.noLists(t)
	})
}

// TestFenceCorruptOccupant: a corrupt occupant counts as neither flight nor
// poison. The slot is still decided when the other buckets suffice; when
// they do not, it blocks, and the operator override decides it from a
// readable flight copy (but not from a damaged one).
func TestFenceCorruptOccupant(t *testing.T) {
	short := func(t *testing.T, ts *testSet, epoch, slot uint64, i int) {
		if err := ts.mems[i].PutIfAbsent(context.Background(), SlotKey(tStar, tClass, epoch, slot), []byte("FLG1 torn")); err != nil {
			t.Fatal(err)
		}
	}
	corruptEnvelope := func(t *testing.T, ts *testSet, epoch, slot uint64, i int) {
		if err := ts.mems[i].Corrupt(SlotKey(tStar, tClass, epoch, slot), 20); err != nil {
			t.Fatal(err)
		}
	}
	corruptBody := func(t *testing.T, ts *testSet, epoch, slot uint64, i int) {
		if err := ts.mems[i].Corrupt(SlotKey(tStar, tClass, epoch, slot), envelope.EnvelopeSize+3); err != nil {
			t.Fatal(err)
		}
	}
	undecided := func(t *testing.T, ts *testSet, opt FenceOptions) *UndecidedError {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		opt.Retry = quickRetry
		res, err := Fence(ctx, ts.set, tStar, tClass, 1, 0, envelope.NewNonce(), opt)
		var ue *UndecidedError
		if !errors.As(err, &ue) {
			t.Fatalf("got %+v, %v; want undecided", res, err)
		}
		return ue
	}

	t.Run("decided from the others", func(t *testing.T) {
		ts := newTestSet(3, 2, 8)
		ts.writeCommitted(t, 1, 0, 2)
		corruptEnvelope(t, ts, 1, 0, 0) // committed slot: two good copies remain
		short(t, ts, 1, 2, 0)           // free slot: the other two take poison
		res := fence(t, ts, 1, 0, envelope.NewNonce(), FenceOptions{})
		if res.Cut != 2 || res.Overridden != 0 {
			t.Fatalf("got %+v, want cut 2", res)
		}
		ts.noLists(t)
	})
	t.Run("blocks, override decides", func(t *testing.T) {
		ts := newTestSet(3, 2, 9)
		ts.writeSlot(t, 1, 0, 0, 1)
		corruptEnvelope(t, ts, 1, 0, 0) // {corrupt, flight, poison-to-be}
		ue := undecided(t, ts, FenceOptions{})
		if ue.Slot != 0 || !slices.Equal(ue.Occupants, []OccupantKind{OccupantCorrupt, OccupantFlight, OccupantPoison}) ||
			!envelope.IsCorruption(ue.Causes[0]) {
			t.Fatalf("undecided error: %v", ue)
		}
		res := fence(t, ts, 1, 0, envelope.NewNonce(), FenceOptions{AcceptReadableFlight: true, Retry: quickRetry})
		if res.Cut != 1 || res.Committed != 1 || res.Overridden != 1 {
			t.Fatalf("with the override: %+v, want slot 0 committed by override, cut 1", res)
		}
		ts.noLists(t)
	})
	t.Run("override refuses a damaged flight", func(t *testing.T) {
		ts := newTestSet(3, 2, 10)
		ts.writeSlot(t, 1, 0, 0, 1)
		corruptEnvelope(t, ts, 1, 0, 0)
		corruptBody(t, ts, 1, 0, 1)
		undecided(t, ts, FenceOptions{AcceptReadableFlight: true})
		ts.noLists(t)
	})
	t.Run("K=1 corrupt", func(t *testing.T) {
		ts := newTestSet(1, 1, 11)
		ts.writeCommitted(t, 1, 0, 1)
		corruptEnvelope(t, ts, 1, 0, 0)
		ue := undecided(t, ts, FenceOptions{AcceptReadableFlight: true})
		if ue.Occupants[0] != OccupantCorrupt {
			t.Fatalf("undecided error: %v", ue)
		}
		// DiscardUnreadable decides it dead: the cut is there.
		res := fence(t, ts, 1, 0, envelope.NewNonce(), FenceOptions{DiscardUnreadable: true, Retry: quickRetry})
		if res.Cut != 0 || res.Committed != 0 || res.Discarded != 1 {
			t.Fatalf("with DiscardUnreadable: %+v, want slot 0 discarded, cut 0", res)
		}
		ts.noLists(t)
	})
	t.Run("discard prefers a readable flight", func(t *testing.T) {
		// One copy corrupt, one readable, one absent (poisoned by the
		// fence): DiscardUnreadable implies AcceptReadableFlight, so the
		// readable copy wins and the slot is committed, not discarded.
		ts := newTestSet(3, 2, 13)
		ts.writeSlot(t, 1, 0, 0, 1)
		corruptEnvelope(t, ts, 1, 0, 0)
		res := fence(t, ts, 1, 0, envelope.NewNonce(), FenceOptions{DiscardUnreadable: true, Retry: quickRetry})
		if res.Cut != 1 || res.Committed != 1 || res.Overridden != 1 || res.Discarded != 0 {
			t.Fatalf("with DiscardUnreadable: %+v, want slot 0 committed by override, cut 1", res)
		}
	})
	t.Run("discard two corrupt of three", func(t *testing.T) {
		ts := newTestSet(3, 2, 14)
		ts.writeSlot(t, 1, 0, 0, 1)
		corruptEnvelope(t, ts, 1, 0, 0)
		corruptEnvelope(t, ts, 1, 0, 1)
		undecided(t, ts, FenceOptions{AcceptReadableFlight: true})
		res := fence(t, ts, 1, 0, envelope.NewNonce(), FenceOptions{DiscardUnreadable: true, Retry: quickRetry})
		if res.Cut != 0 || res.Discarded != 1 {
			t.Fatalf("with DiscardUnreadable: %+v, want slot 0 discarded", res)
		}
	})
}

func TestFenceArguments(t *testing.T) {
	ts := newTestSet(3, 2, 12)
	for _, bad := range []BucketSet{{}, {Stores: ts.set.Stores, W: 0}, {Stores: ts.set.Stores, W: 4}, {Stores: ts.set.Stores, W: 2, Names: []string{"a"}}} {
		if _, err := Fence(context.Background(), bad, tStar, tClass, 1, 0, envelope.Nonce{}, FenceOptions{}); err == nil {
			t.Errorf("Fence accepted %+v", bad)
		}
	}
	// The safety bound stops a fence chasing a writer.
	ts.writeCommitted(t, 1, 0, 3)
	_, err := Fence(context.Background(), ts.set, tStar, tClass, 1, 0, envelope.Nonce{}, FenceOptions{MaxSlots: 2})
	if !errors.Is(err, ErrFenceBound) {
		t.Fatalf("err = %v, want ErrFenceBound", err)
	}
}

// BenchmarkFenceBacklog fences a chain of n committed slots (K=3/W=2, every
// request Fixed(20ms), the takeover benchmark's fixed-20ms model) per
// look-ahead setting, and reports the time per fence and the requests it
// made: the figures loglet's BenchmarkTakeover splits out as fence-ms.
//
//	go test ./chain -run '^$' -bench FenceBacklog -benchtime 3x
func BenchmarkFenceBacklog(b *testing.B) {
	for _, n := range []int{0, 1024} {
		for _, opt := range []struct {
			name string
			opt  FenceOptions
		}{
			{"parallel=16/read-ahead=16", FenceOptions{Parallel: 16, ReadAhead: 16}},
			{"parallel=16/read-ahead=default", FenceOptions{Parallel: 16}},
		} {
			b.Run(fmt.Sprintf("backlog=%d/%s", n, opt.name), func(b *testing.B) {
				b.StopTimer()
				var reqs objstore.Counters
				var ahead int
				for i := 0; i < b.N; i++ {
					ts := newTestSet(3, 2, uint64(i))
					ts.writeCommitted(b, 1, 0, n)
					for _, m := range ts.mems {
						m.ResetCounters()
					}
					for _, f := range ts.faults {
						f.SetLatency(fault.Fixed(20*time.Millisecond), fault.Put)
						f.SetLatency(fault.Fixed(20*time.Millisecond), fault.Get)
					}
					b.StartTimer()
					res, err := Fence(context.Background(), ts.set, tStar, tClass, 1, 0, envelope.NewNonce(), opt.opt)
					b.StopTimer()
					if err != nil || res.Cut != uint64(n) {
						b.Fatalf("fence: %+v %v, want cut %d", res, err, n)
					}
					ahead = res.PoisonedAhead
					reqs = objstore.Counters{}
					for _, m := range ts.mems {
						c := m.Counters()
						reqs.Puts += c.Puts
						reqs.Gets += c.Gets
					}
				}
				b.ReportMetric(float64(reqs.Puts), "PUTs")
				b.ReportMetric(float64(reqs.Gets), "GETs")
				b.ReportMetric(float64(ahead), "poisoned-ahead")
			})
		}
	}
}
