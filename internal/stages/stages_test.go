package stages

import (
	"slices"
	"testing"
	"time"
)

var t0 = time.Unix(1000, 0)

// at is t0 plus ms milliseconds (fractions allowed).
func at(ms float64) time.Time { return t0.Add(dur(ms)) }

func dur(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// handSamples are five acked batches of four flights, and one never acked,
// given out of slot order. The flush deadline is 1ms. Every figure below
// is worked out by hand in the comments; want holds them, in slot order.
func handSamples() []Sample {
	// A (epoch 1, slot 0): cut by the deadline, 0.2ms late. Ideal cut
	// 1.0, ideal release 1.0 + StoreW 5 = 6.0.
	a := Trace{Submitted: at(0), Epoch: 1, Slot: 0, Oldest: at(0), Claimed: at(1.2), PutStart: at(1.5),
		Durable: at(6.6), StoreW: dur(5), Released: at(6.6)}
	// B (epoch 1, slot 1): its W-th copy (StoreW 2) is faster than A's, so
	// it is durable at 3.8 and waits for A until 6.6. Ideal cut 1.5, its
	// own ideal release 3.5, but A's 6.0 comes first: ideal 6.0.
	b := Trace{Submitted: at(0.5), Epoch: 1, Slot: 1, Oldest: at(0.5), Claimed: at(1.5), PutStart: at(1.7),
		Durable: at(3.8), StoreW: dur(2), Released: at(6.6)}
	// C (epoch 1, slot 2): cut by size, claimed at 2.0, after its
	// deadline (0.8 + 1 = 1.8): a flight cut by size waits for nothing,
	// so no overshoot. Ideal cut 2.0, release 2.0 + 6 = 8.0.
	c := Trace{Submitted: at(0.8), Epoch: 1, Slot: 2, Oldest: at(0.8), BySize: true, Claimed: at(2.0), PutStart: at(2.25),
		Durable: at(8.4), StoreW: dur(6), Released: at(8.4)}
	// D (epoch 2, slot 0): claimed at 9.4, before its deadline (10.0):
	// no overshoot. Ideal cut 9.4, release 9.4 + 1 = 10.4 (past C's 8.0:
	// an epoch's slots come after every earlier epoch's).
	d := Trace{Submitted: at(9), Epoch: 2, Slot: 0, Oldest: at(9), Claimed: at(9.4), PutStart: at(9.5),
		Durable: at(10.6), StoreW: dur(1), Released: at(10.6)}
	// E: failed, never released.
	e := Trace{Submitted: at(9), Epoch: 2, Slot: 1, Oldest: at(9), Claimed: at(9.5), PutStart: at(9.6)}
	a2 := a
	a2.Submitted = at(0.1)
	return []Sample{
		{d, at(10.65)},
		{e, at(11)},
		{c, at(8.5)},
		{a, at(6.7)},
		{b, at(6.8)},
		{a2, at(6.9)},
	}
}

type handRow struct {
	epoch, slot uint64
	d           [NumStages]float64 // ms
}

// want: cut-over, claim-put, wth-copy, order-wait, to-producer, own-cost.
var want = []handRow{
	{1, 0, [NumStages]float64{0.2, 0.3, 5.1, 0, 0.1, 0.7}}, // A: seen 6.7, ideal 6.0
	{1, 0, [NumStages]float64{0.2, 0.3, 5.1, 0, 0.3, 0.9}}, // A's second batch: seen 6.9
	{1, 1, [NumStages]float64{0, 0.2, 2.1, 2.8, 0.2, 0.8}}, // B: seen 6.8, ideal 6.0
	{1, 2, [NumStages]float64{0, 0.25, 6.15, 0, 0.1, 0.5}}, // C: seen 8.5, ideal 8.0
	{2, 0, [NumStages]float64{0, 0.1, 1.1, 0, 0.05, 0.25}}, // D: seen 10.65, ideal 10.4
}

func collect(t *testing.T, c *Collector) []handRow {
	t.Helper()
	var got []handRow
	c.Each(time.Millisecond, func(tr *Trace, d Durations) {
		r := handRow{epoch: tr.Epoch, slot: tr.Slot}
		for s, v := range d {
			r.d[s] = float64(v) / float64(time.Millisecond)
		}
		got = append(got, r)
	})
	return got
}

func checkRows(t *testing.T, got []handRow) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d batches, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.epoch != w.epoch || g.slot != w.slot {
			t.Errorf("batch %d: flight %d/%d, want %d/%d", i, g.epoch, g.slot, w.epoch, w.slot)
		}
		for s := range All() {
			// dur() truncates to the nanosecond: allow one either side.
			if diff := g.d[s] - w.d[s]; diff > 2e-6 || diff < -2e-6 {
				t.Errorf("batch %d (flight %d/%d): %s = %.6fms, want %.6fms", i, w.epoch, w.slot, Stage(s), g.d[s], w.d[s])
			}
		}
	}
}

func TestHandBuiltStages(t *testing.T) {
	var c Collector
	for _, s := range handSamples() {
		c.Add(s.Trace, s.Seen)
	}
	checkRows(t, collect(t, &c))
}

func TestMergeIsTheSameBreakdown(t *testing.T) {
	samples := handSamples()
	var x, y Collector
	// A's two batches land in different collectors; the merge keeps x's
	// before y's, so A's batch seen at 6.7 must be in x.
	for i, s := range samples {
		if i == 1 || i == 3 { // E and A's first batch
			x.Add(s.Trace, s.Seen)
		} else {
			y.Add(s.Trace, s.Seen)
		}
	}
	x.Merge(&y)
	checkRows(t, collect(t, &x))
	if b := x.Breakdown(time.Millisecond); b.Batches != 5 || b.Skipped != 1 {
		t.Fatalf("merged: %d batches, %d skipped; want 5, 1", b.Batches, b.Skipped)
	}
}

func TestComputeHistograms(t *testing.T) {
	b := Compute(handSamples(), time.Millisecond)
	if b.Batches != 5 || b.Skipped != 1 {
		t.Fatalf("%d batches, %d skipped; want 5, 1", b.Batches, b.Skipped)
	}
	for s := range All() {
		sn := b.Snapshot(Stage(s))
		var hi float64
		var zeros uint64
		for _, w := range want {
			hi = max(hi, w.d[s])
			if w.d[s] == 0 {
				zeros++
			}
		}
		if sn.Count != 5 || sn.ZeroCount != zeros {
			t.Errorf("%s: count %d (zero %d), want 5 (zero %d)", Stage(s), sn.Count, sn.ZeroCount, zeros)
		}
		// Max is exact; a quantile is a bucket's lower bound, at most
		// 2.14% below.
		if got := float64(sn.Max) / 1e6; got-hi > 2e-6 || got-hi < -2e-6 {
			t.Errorf("%s: max %.6fms, want %.6fms", Stage(s), got, hi)
		}
		if q := float64(sn.Quantile(1)) / 1e6; q > hi+2e-6 || q < hi*0.978 {
			t.Errorf("%s: p100 %.6fms, want about %.6fms", Stage(s), q, hi)
		}
	}
	// own-cost's median of 0.25, 0.5, 0.7, 0.8, 0.9 is 0.7.
	if p50 := float64(b.Snapshot(OwnCost).Quantile(0.5)) / 1e6; p50 > 0.7 || p50 < 0.7*0.978 {
		t.Errorf("own-cost p50 %.6fms, want about 0.7ms", p50)
	}
}

func TestEmptyAndNames(t *testing.T) {
	b := Compute(nil, time.Millisecond)
	if b.Batches != 0 || b.Snapshot(OwnCost).Quantile(0.99) != 0 {
		t.Fatalf("empty breakdown: %+v", b)
	}
	var got []string
	for _, s := range All() {
		got = append(got, s.String())
	}
	if w := []string{"cut-over", "claim-put", "wth-copy", "order-wait", "to-producer", "own-cost"}; !slices.Equal(got, w) {
		t.Fatalf("names %v, want %v", got, w)
	}
}
