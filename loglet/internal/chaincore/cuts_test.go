package chaincore

import (
	"testing"
	"time"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
)

// TestNextRecordBoundsTheCutsKept: with settlement off the cursor never
// moves, so the cuts an epoch record keeps for it are bounded
// (maxKeptCuts): the oldest go (a settle pass re-derives a lost cut), and
// never one a walk from the checkpoint needs.
func TestNextRecordBoundsTheCutsKept(t *testing.T) {
	c := New(Config{Star: "s", Class: chain.Express, Owner: "p1", Buckets: []string{"b0", "b1", "b2"}, W: 2, Window: 4}, time.Unix(1_000_000, 0))
	var prev []chain.Cut
	const n = maxKeptCuts + 100
	for e := uint64(1); e < n; e++ {
		prev = append(prev, chain.Cut{Epoch: e, Slot: e})
	}
	// A walk from the checkpoint (epoch n-50) needs every cut from there.
	s := &succession{kind: takeover, prev: chain.EpochRecord{Epoch: n, Cuts: prev}, cut: 7, cp: absorb.Checkpoint{Epoch: n - 50}}
	rec := c.nextRecord(s)
	if len(rec.Cuts) != maxKeptCuts {
		t.Fatalf("%d cuts kept, want %d", len(rec.Cuts), maxKeptCuts)
	}
	if last := rec.Cuts[len(rec.Cuts)-1]; last != (chain.Cut{Epoch: n, Slot: 7}) {
		t.Fatalf("the last cut is %+v, want the one just found", last)
	}
	if first := rec.Cuts[0].Epoch; first != n-maxKeptCuts+1 {
		t.Fatalf("the oldest cut kept is epoch %d, want %d", first, n-maxKeptCuts+1)
	}
	// A checkpoint so old that its walk needs more than the bound: all kept.
	s.cp = absorb.Checkpoint{Epoch: 10}
	if rec := c.nextRecord(s); rec.Cuts[0].Epoch != 10 || len(rec.Cuts) != n-10+1 {
		t.Fatalf("with the checkpoint at epoch 10: %d cuts from epoch %d, want every one from 10", len(rec.Cuts), rec.Cuts[0].Epoch)
	}
}

// TestNextRecordKeepsTheLatestCuts: once settlement has passed old epochs
// (their cuts below the floor go), the cuts of the last deposedCuts epochs
// stay all the same, so a leader deposed that recently learns its own cut
// when it comes back, and which of its flights are not committed.
func TestNextRecordKeepsTheLatestCuts(t *testing.T) {
	c := New(Config{Star: "s", Class: chain.Express, Owner: "p1", Buckets: []string{"b0", "b1", "b2"}, W: 2, Window: 4, SettleInterval: time.Second}, time.Unix(1_000_000, 0))
	const n = 40
	c.st.known = true
	c.st.at, c.st.deleted = chain.Position{Epoch: n, Next: 3}, chain.Position{Epoch: n, Next: 3}
	var prev []chain.Cut
	for e := uint64(1); e < n; e++ {
		prev = append(prev, chain.Cut{Epoch: e, Slot: e})
	}
	s := &succession{kind: takeover, prev: chain.EpochRecord{Epoch: n, Cuts: prev}, cut: 7, cp: absorb.Checkpoint{Epoch: n}}
	rec := c.nextRecord(s)
	if len(rec.Cuts) != deposedCuts {
		t.Fatalf("%d cuts kept (%v), want the last %d epochs'", len(rec.Cuts), rec.Cuts, deposedCuts)
	}
	if first := rec.Cuts[0].Epoch; first != n-deposedCuts+1 {
		t.Fatalf("the oldest cut kept is epoch %d, want %d", first, n-deposedCuts+1)
	}
}
