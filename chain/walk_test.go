package chain

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/objstore"
)

// TestWalkFallsThrough: a committed slot whose first copies are corrupt,
// poisoned, missing or short is read from the next good copy, byte for byte
// as written, and every passed-over copy is counted.
func TestWalkFallsThrough(t *testing.T) {
	ctx := context.Background()
	ts := newTestSet(3, 2, 20)
	objs := ts.writeCommitted(t, 4, 0, 2) // slots 0, 1
	key := func(s uint64) string { return SlotKey(tStar, tClass, 4, s) }
	// Slot 1: bucket 0's copy has a flipped bit in its first frame.
	if err := ts.mems[0].Corrupt(key(1), envelope.EnvelopeSize+2); err != nil {
		t.Fatal(err)
	}
	// Slot 2: committed in buckets 1 and 2; a fencer's poison in bucket 0.
	if err := ts.mems[0].PutIfAbsent(ctx, key(2), envelope.Poison(4, 2, envelope.NewNonce())); err != nil {
		t.Fatal(err)
	}
	objs = append(objs, ts.writeSlot(t, 4, 2, 1, 2))
	// Slot 3: bucket 0's copy is gone (a straggler never landed).
	objs = append(objs, ts.writeSlot(t, 4, 3, 1, 2))
	// Slot 4: bucket 0 holds a short object, bucket 1 a corrupt envelope.
	if err := ts.mems[0].PutIfAbsent(ctx, key(4), []byte("FLG1")); err != nil {
		t.Fatal(err)
	}
	objs = append(objs, ts.writeSlot(t, 4, 4, 1, 2))
	if err := ts.mems[1].Corrupt(key(4), 9); err != nil {
		t.Fatal(err)
	}
	var got [][]byte
	var slots []uint64
	st, err := WalkWithStats(ctx, ts.set, tStar, tClass, 4, 0, 5, func(slot uint64, obj []byte, frames []envelope.FrameInfo) error {
		slots = append(slots, slot)
		got = append(got, obj)
		if len(frames) != 2 || frames[0].Stream != "orders" || frames[1].FirstSeq != slot*3 {
			t.Errorf("slot %d: frames %+v", slot, frames)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for s := range objs {
		if slots[s] != uint64(s) || !bytes.Equal(got[s], objs[s]) {
			t.Fatalf("slot %d: walked slot %d, bytes equal %v", s, slots[s], bytes.Equal(got[s], objs[s]))
		}
	}
	if st.Slots != 5 || st.Skipped != 5 {
		t.Fatalf("stats %+v, want 5 slots and 5 skipped copies (corrupt, poison, missing, short, corrupt envelope)", st)
	}
	// Walk from the middle, and an error from fn stops it.
	stop := errors.New("stop")
	calls := 0
	err = Walk(ctx, ts.set, tStar, tClass, 4, 3, 5, func(slot uint64, _ []byte, _ []envelope.FrameInfo) error {
		calls++
		return stop
	})
	if !errors.Is(err, stop) || calls != 1 || !strings.Contains(err.Error(), "slot 3") {
		t.Fatalf("err = %v after %d calls", err, calls)
	}
	ts.noLists(t)
}

// TestWalkReadAhead: along a chain of small flights with large ones among
// them (past walkHeadBytes: read ahead only by their heads, then whole in
// their turn) and damaged copies of both sizes, read ahead and read whole,
// every slot is handed over in order, byte for byte, each damaged copy is
// counted once, and no small slot is read twice; where large and small
// flights alternate, the walk stops reading heads, so a large slot costs
// one GET; in one walk and in walks of 256 slots.
func TestWalkReadAhead(t *testing.T) {
	ctx := context.Background()
	ts := newTestSet(3, 2, 27)
	const e, n = 6, 500
	key := func(s uint64) string { return SlotKey(tStar, tClass, e, s) }
	big := map[uint64]bool{30: true, 31: true, 50: true}
	for s := uint64(100); s < n; s += 2 {
		big[s] = true
	}
	var mu sync.Mutex
	gets := map[string]int{}
	ts.faults[0].SetHook(func(call fault.Call) fault.Fault {
		op, key := call.Op, call.Key
		if op == fault.Get {
			mu.Lock()
			gets[key]++
			mu.Unlock()
		}
		return fault.Fault{}
	})
	var objs [][]byte
	for s := uint64(0); s < n; s++ {
		buckets := []int{0, 1, 2}
		switch s {
		case 40, 60:
			buckets = []int{1, 2}
		}
		if big[s] {
			objs = append(objs, writeBig(t, ts, e, s, buckets...))
		} else {
			objs = append(objs, ts.writeSlot(t, e, s, buckets...))
		}
	}
	// Slot 40 (small): a fencer's poison in bucket 0. Slot 50 (large): bucket
	// 0's copy has a flipped bit in a frame. Slot 60 (small): bucket 0's copy
	// never landed.
	if err := ts.mems[0].PutIfAbsent(ctx, key(40), envelope.Poison(e, 40, envelope.NewNonce())); err != nil {
		t.Fatal(err)
	}
	if err := ts.mems[0].Corrupt(key(50), envelope.EnvelopeSize+100); err != nil {
		t.Fatal(err)
	}
	for _, batch := range []uint64{n, 256} {
		for _, m := range ts.mems {
			m.ResetCounters()
		}
		mu.Lock()
		clear(gets)
		mu.Unlock()
		var st WalkStats
		next := uint64(0)
		for from := uint64(0); from < n; from += batch {
			got, err := WalkWithStats(ctx, ts.set, tStar, tClass, e, from, min(from+batch, n), func(slot uint64, obj []byte, frames []envelope.FrameInfo) error {
				if slot != next || !bytes.Equal(obj, objs[slot]) || len(frames) == 0 {
					t.Fatalf("batch %d: slot %d handed over (want %d), bytes equal %v, %d frames", batch, slot, next, bytes.Equal(obj, objs[slot]), len(frames))
				}
				next++
				return nil
			})
			if err != nil {
				t.Fatalf("batch %d: walk from %d: %v", batch, from, err)
			}
			st.Slots += got.Slots
			st.Skipped += got.Skipped
		}
		if next != n || st.Slots != n || st.Skipped != 3 {
			t.Fatalf("batch %d: %d slots walked, stats %+v; want %d slots, 3 skipped (poison, corrupt, missing)", batch, next, st, n)
		}
		var total int64
		for _, m := range ts.mems {
			total += m.Counters().Gets
		}
		// One GET per small slot, one more for each damaged copy, and at
		// most two per large slot (its head, then the whole) plus one for
		// its damaged copy.
		if lo, hi := int64(n+3), int64(n+3+len(big)); total < lo || total > hi {
			t.Fatalf("batch %d: %d GETs, want between %d and %d", batch, total, lo, hi)
		}
		// Past any head read while the flights were all small, a large
		// slot is read once.
		for s := uint64(100 + walkDeepReadAhead); s < n; s++ {
			if big[s] && gets[key(s)] != 1 {
				t.Fatalf("batch %d: large slot %d read %d times from bucket 0 where sizes alternate, want once", batch, s, gets[key(s)])
			}
		}
	}
	ts.noLists(t)
}

// writeBig commits a flight of (epoch, slot) larger than walkHeadBytes to
// the listed buckets (all if none), as writeSlot does, and returns it.
func writeBig(t testing.TB, ts *testSet, epoch, slot uint64, buckets ...int) []byte {
	t.Helper()
	if len(buckets) == 0 {
		buckets = []int{0, 1, 2}
	}
	w := envelope.NewBundleWriter()
	rec := envelope.AppendRecord(nil, envelope.Record{Timestamp: 1, Body: bytes.Repeat([]byte{byte(slot)}, walkHeadBytes+1000)})
	if err := w.AddFrame("big", slot, 1, 1, 1, rec, envelope.CodecNone); err != nil {
		t.Fatal(err)
	}
	nonce := envelope.NewNonce()
	obj, _ := w.Finish(epoch, slot, nonce)
	var stores []objstore.Store
	for _, i := range buckets {
		stores = append(stores, ts.mems[i])
	}
	f := Flight{Key: SlotKey(tStar, tClass, epoch, slot), Obj: obj, Epoch: epoch, Slot: slot, Nonce: nonce}
	for r := range WriteFlight(context.Background(), stores, f, RetryPolicy{}) {
		if r.Status != CopyOurs {
			t.Fatalf("setup: write slot %d: %v (%v)", slot, r.Status, r.Err)
		}
	}
	return obj
}

// TestWalkNoGoodCopy: a committed slot with no good copy anywhere stops the
// walk with an error naming the slot, after retrying until ctx ends; the
// slots before it were handed over in order.
func TestWalkNoGoodCopy(t *testing.T) {
	for _, sh := range shapes {
		t.Run(shapeName(sh.k, sh.w), func(t *testing.T) {
			ts := newTestSet(sh.k, sh.w, 21)
			ts.writeCommitted(t, 1, 0, 3)
			for i := range ts.mems {
				if err := ts.mems[i].Corrupt(SlotKey(tStar, tClass, 1, 1), envelope.EnvelopeSize+1); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Millisecond)
			defer cancel()
			var seen []uint64
			err := Walk(ctx, ts.set, tStar, tClass, 1, 0, 3, func(slot uint64, _ []byte, _ []envelope.FrameInfo) error {
				seen = append(seen, slot)
				return nil
			})
			if !errors.Is(err, ErrNoGoodCopy) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "slot 1") {
				t.Fatalf("err = %v", err)
			}
			if len(seen) != 1 || seen[0] != 0 {
				t.Fatalf("fn saw %v, want [0]", seen)
			}
			t.Logf("error reads: %v", err)
			ts.noLists(t)
		})
	}
}

// TestWalkDownBucket: with K=3 a down first bucket is skipped.
func TestWalkDownBucket(t *testing.T) {
	ts := newTestSet(3, 2, 22)
	objs := ts.writeCommitted(t, 1, 0, 3)
	ts.faults[0].SetDown(true)
	i := 0
	err := Walk(context.Background(), ts.set, tStar, tClass, 1, 0, 3, func(slot uint64, obj []byte, _ []envelope.FrameInfo) error {
		if !bytes.Equal(obj, objs[i]) {
			t.Errorf("slot %d differs", slot)
		}
		i++
		return nil
	})
	if err != nil || i != 3 {
		t.Fatalf("err %v after %d slots", err, i)
	}
	ts.noLists(t)
}

// TestGarbageProbe: past the cut, free keys take poison, a zombie's flight
// copies are deleted and replaced by poison, poison stays; the zombie's
// next PUT into a probed slot finds poison (CopyForeign); a down bucket is
// reported, not fatal.
func TestGarbageProbe(t *testing.T) {
	for _, sh := range shapes {
		t.Run(shapeName(sh.k, sh.w), func(t *testing.T) {
			ctx := context.Background()
			ts := newTestSet(sh.k, sh.w, 23)
			ts.writeCommitted(t, 2, 0, 3)
			// The zombie pipelined slots 4 and 5 before the fence killed 3.
			ts.writeSlot(t, 2, 4)
			ts.writeSlot(t, 2, 5, 0)
			// One slot at a time: a look-ahead would poison part of the
			// probe's window first.
			res := fence(t, ts, 2, 0, envelope.NewNonce(), FenceOptions{Parallel: 1})
			if res.Cut != 3 {
				t.Fatalf("fence: %+v", res)
			}
			const window = 5
			nonce := envelope.NewNonce()
			pr, err := GarbageProbe(ctx, ts.set, tStar, tClass, 2, res.Cut, window, nonce)
			if err != nil {
				t.Fatal(err)
			}
			// Slot 3 already holds the fence's poison; the rest is ours.
			wantDeleted := sh.k + 1
			wantPoisoned := (window - 1) * sh.k
			if pr.DeletedFlights != wantDeleted || pr.Poisoned != wantPoisoned || pr.Unreachable != 0 {
				t.Fatalf("probe %+v, want %d deleted, %d poisoned", pr, wantDeleted, wantPoisoned)
			}
			for s := res.Cut; s < res.Cut+window; s++ {
				for i, o := range ts.occupantsAt(t, 2, s) {
					if o.Kind != OccupantPoison {
						t.Fatalf("slot %d bucket %d holds %v after the probe", s, i, o.Kind)
					}
				}
			}
			// The zombie's delayed PUT into a probed slot halts it.
			obj, zn := renderFlight(t, 2, 6)
			f := Flight{Key: SlotKey(tStar, tClass, 2, 6), Obj: obj, Epoch: 2, Slot: 6, Nonce: zn}
			for r := range WriteFlight(ctx, ts.set.Stores, f, quickRetry) {
				if r.Status != CopyForeign || r.Occupant == nil || r.Occupant.Kind != envelope.KindPoison {
					t.Fatalf("zombie PUT: %+v, want foreign poison", r)
				}
			}
			// A rerun changes nothing.
			again, err := GarbageProbe(ctx, ts.set, tStar, tClass, 2, res.Cut, window, nonce)
			if err != nil || again != (ProbeResult{}) {
				t.Fatalf("rerun: %+v %v", again, err)
			}
			ts.noLists(t)
		})
	}
}

func TestGarbageProbeDownBucket(t *testing.T) {
	ts := newTestSet(3, 2, 24)
	ts.writeSlot(t, 1, 1) // a zombie's flight past the cut at 0
	ts.faults[2].SetDown(true)
	pr, err := GarbageProbe(context.Background(), ts.set, tStar, tClass, 1, 0, 4, envelope.NewNonce())
	if err != nil {
		t.Fatal(err)
	}
	if pr.Unreachable != 4 || pr.DeletedFlights != 2 || pr.Poisoned != 8 {
		t.Fatalf("probe %+v, want bucket 2's 4 keys unreachable, 2 deleted, 8 poisoned", pr)
	}
	// The bucket's keys are probed in parallel and share one failure
	// count: each attempt is a PUT and a GET, an attempt may start while
	// the count is below probeAttempts, and every key may have one in
	// flight when it gets there. So the down bucket sees at most
	// 2·(probeAttempts−1+keys) calls, not 2·probeAttempts·keys as it
	// would if each key gave up on its own.
	const keys = 4
	if inj := ts.faults[2].Injected(); inj.Unavailable > 2*(probeAttempts-1+keys) {
		t.Fatalf("the down bucket was tried %d times; it should be given up after %d failures in all", inj.Unavailable, probeAttempts)
	}
	// An ambiguous PUT that applied is still counted and the key poisoned.
	ts = newTestSet(1, 1, 25)
	ts.faults[0].SetAmbiguousRate(1, fault.Put)
	pr, err = GarbageProbe(context.Background(), ts.set, tStar, tClass, 1, 0, 3, envelope.NewNonce())
	if err != nil || pr.Poisoned != 3 || pr.Unreachable != 0 {
		t.Fatalf("probe through ambiguous PUTs: %+v %v", pr, err)
	}
	ts.noLists(t)
}

// TestTrim: trim deletes committed slots from every bucket, keeps the
// poison at the cut, is idempotent, and reports a down bucket.
func TestTrim(t *testing.T) {
	for _, sh := range shapes {
		t.Run(shapeName(sh.k, sh.w), func(t *testing.T) {
			ctx := context.Background()
			ts := newTestSet(sh.k, sh.w, 26)
			ts.writeCommitted(t, 1, 0, 6)
			res := fence(t, ts, 1, 0, envelope.NewNonce(), FenceOptions{Parallel: 1}) // no look-ahead poisons past the cut
			n, err := Trim(ctx, ts.set, tStar, tClass, 1, 0, 4)
			if err != nil || n != 4*sh.k {
				t.Fatalf("trim: %d %v", n, err)
			}
			for i, m := range ts.mems {
				want := []string{SlotKey(tStar, tClass, 1, 4), SlotKey(tStar, tClass, 1, 5), SlotKey(tStar, tClass, 1, res.Cut)}
				if got := m.Keys(); strings.Join(got, ",") != strings.Join(want, ",") {
					t.Fatalf("bucket %d keys %v, want %v", i, got, want)
				}
			}
			// Again, and the rest up to the cut: missing keys are fine.
			if n, err := Trim(ctx, ts.set, tStar, tClass, 1, 0, res.Cut); err != nil || n != int(res.Cut)*sh.k {
				t.Fatalf("second trim: %d %v", n, err)
			}
			for i, m := range ts.mems {
				if got := m.Keys(); len(got) != 1 || got[0] != SlotKey(tStar, tClass, 1, res.Cut) {
					t.Fatalf("bucket %d keys %v, want only the poison at the cut", i, got)
				}
			}
			ts.noLists(t)
		})
	}
	t.Run("down bucket", func(t *testing.T) {
		ts := newTestSet(3, 2, 27)
		ts.writeCommitted(t, 1, 0, 3)
		ts.faults[1].SetDown(true)
		n, err := Trim(context.Background(), ts.set, tStar, tClass, 1, 0, 3)
		if !errors.Is(err, ErrTrimIncomplete) || !errors.Is(err, objstore.ErrUnavailable) || n != 6 {
			t.Fatalf("trim with a down bucket: %d %v", n, err)
		}
		if !strings.Contains(err.Error(), "zone-b: 3 of 3 deletes failed") {
			t.Fatalf("error does not name the bucket: %v", err)
		}
		if len(ts.mems[1].Keys()) != 3 || len(ts.mems[0].Keys()) != 0 {
			t.Fatal("trim deleted the wrong keys")
		}
		ts.faults[1].SetDown(false)
		if n, err := Trim(context.Background(), ts.set, tStar, tClass, 1, 0, 3); err != nil || n != 9 || len(ts.mems[1].Keys()) != 0 {
			t.Fatalf("retrim: %d %v", n, err)
		}
		ts.noLists(t)
	})
}

// BenchmarkWalkBacklog walks n committed slots of small flights (K=3/W=2,
// every GET Fixed(20ms)), in one walk and in walks of 256 slots (a
// takeover's absorb rounds), and reports the GETs made.
//
//	go test ./chain -run '^$' -bench WalkBacklog -benchtime 3x
func BenchmarkWalkBacklog(b *testing.B) {
	const n = 1024
	for _, batch := range []uint64{n, 256} {
		b.Run(fmt.Sprintf("slots=%d/batch=%d", n, batch), func(b *testing.B) {
			b.StopTimer()
			ts := newTestSet(3, 2, 1)
			ts.writeCommitted(b, 1, 0, n)
			for _, f := range ts.faults {
				f.SetLatency(fault.Fixed(20*time.Millisecond), fault.Get)
			}
			var gets int64
			for i := 0; i < b.N; i++ {
				for _, m := range ts.mems {
					m.ResetCounters()
				}
				b.StartTimer()
				for from := uint64(0); from < n; from += batch {
					var walked uint64
					err := Walk(context.Background(), ts.set, tStar, tClass, 1, from, from+batch, func(uint64, []byte, []envelope.FrameInfo) error {
						walked++
						return nil
					})
					if err != nil || walked != batch {
						b.Fatalf("walk [%d, %d): %d slots, %v", from, from+batch, walked, err)
					}
				}
				b.StopTimer()
				gets = 0
				for _, m := range ts.mems {
					gets += m.Counters().Gets
				}
			}
			b.ReportMetric(float64(gets), "GETs")
		})
	}
}
