package work

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/loglet/internal/chaincore"
	"github.com/flightlog/flightlog/metastore"
)

// crashAfterSnapshot is a hold that lets every request through but the
// next CommitRound: the round's tails snapshot is written (its PutSnapshot,
// the round's first request, went through), and the process dies before
// the round's Commit. It records the snapshot's key in *key.
func (p *rigProc) crashAfterSnapshot(key *string) func(chaincore.Request) bool {
	return func(req chaincore.Request) bool {
		cr, ok := req.(chaincore.CommitRound)
		if !ok {
			return true
		}
		if _, err := absorb.ReadSnapshot(p.r.ctx, p.r.stores(), cr.SnapshotKey); err != nil {
			p.r.t.Fatalf("%s: the round's snapshot %s before its commit: %v", p.env.Owner, cr.SnapshotKey, err)
		}
		*key = cr.SnapshotKey
		return false
	}
}

// dies runs p, moving the clock to each wake it asks for, until its hold
// kills it.
func (p *rigProc) dies() {
	p.r.t.Helper()
	for i := 0; i < 100000; i++ {
		if !p.step() {
			return
		}
		wake := p.c.Ready().WakeAt
		if wake.IsZero() {
			p.r.t.Fatalf("%s: idle, not dead", p.env.Owner)
		}
		p.r.now = maxTime(p.r.now, wake)
		p.c.Step(p.r.now, chaincore.Tick{})
	}
	p.r.t.Fatalf("%s: never died", p.env.Owner)
}

// rounds has p absorb n rounds of one slot each.
func (p *rigProc) rounds(n int) {
	p.r.t.Helper()
	for i := 0; i < n; i++ {
		p.append("a")
		p.absorbed()
	}
}

// checkGone fails the test if a bucket still holds key.
func (r *chainRig) checkGone(what, key string) {
	r.t.Helper()
	for i := range r.buckets {
		if slices.Contains(r.snapshotKeys(i), key) {
			r.t.Errorf("bucket %d: %s %s is still there, named by nothing: left for ever", i, what, key)
		}
	}
}

// TestSuccessorDeletesUncommittedSnapshot: an owner dies between its
// round's tails snapshot PUT and the round's Commit (a crash; a successor's
// seal stops the Commit the same way). No checkpoint names that snapshot;
// the successor finds it by point lookups and deletes it. Before, its key
// held the round's end slot, which the successor cannot know: it stayed in
// every bucket for ever, one per such crash per chain.
func TestSuccessorDeletesUncommittedSnapshot(t *testing.T) {
	r := newChainRig(t, metastore.NewMem(), nil)
	p := r.open()
	p.append(manyStreams...)
	p.rounds(3)
	var orphan string
	p.append("a", "b")
	p.hold = p.crashAfterSnapshot(&orphan)
	p.dies()
	if orphan == "" || slices.Contains(r.checkpoint().Doomed, orphan) || r.checkpoint().Tails == orphan {
		t.Fatalf("the crashed round's snapshot %q: want one no checkpoint names", orphan)
	}
	q := r.open()
	q.rounds(keepRounds)
	r.checkTails("the successor")
	r.checkGone("the crashed round's tails snapshot", orphan)
}

// TestSuccessorDeletesRefusedRoundsUncommittedSnapshots: as above, the
// owner dying after the metastore refused its round as too large and it
// wrote the snapshot of the round planned again: both snapshots (the
// refused one, and its replacement of the next plan) are named by nothing,
// and the successor deletes both.
func TestSuccessorDeletesRefusedRoundsUncommittedSnapshots(t *testing.T) {
	ms := &tooLarge{Store: metastore.NewMem(), maxExtents: 4}
	r := newChainRig(t, ms, func(c *chaincore.Config) {
		c.AbsorbInterval = time.Second // rounds wait for the test's flights
	})
	p := r.open()
	p.append(manyStreams...)
	p.rounds(3)
	for i := 0; i < 8; i++ {
		p.append("a") // one round of them is refused (8 extents)
	}
	var refused []string
	var orphan string
	crash := p.crashAfterSnapshot(&orphan)
	p.hold = func(req chaincore.Request) bool {
		cr, ok := req.(chaincore.CommitRound)
		if !ok {
			return true
		}
		if len(refused) == 0 {
			refused = append(refused, cr.SnapshotKey)
			return true // written, then refused by the metastore
		}
		return crash(req)
	}
	p.dies()
	if ms.refused != 1 || orphan == "" || orphan == refused[0] {
		t.Fatalf("%d rounds refused, the refused round's snapshot %v, the crashed one's %q: want one refusal, two snapshots", ms.refused, refused, orphan)
	}
	q := r.open()
	q.rounds(keepRounds)
	r.checkTails("the successor")
	r.checkGone("the refused round's tails snapshot", refused[0])
	r.checkGone("the crashed round's tails snapshot", orphan)
}

// TestTakeoverDeletesTheBaseOfADamagedDelta: the checkpoint's tails
// snapshot is a delta, damaged in every bucket; the successor rebuilds the
// tails from the refs, so it never reads the delta's base. The checkpoint
// records that base, and the successor deletes it with the rest of its
// predecessor's snapshots. Before, nothing named it any more: it stayed in
// every bucket for ever.
func TestTakeoverDeletesTheBaseOfADamagedDelta(t *testing.T) {
	r := newChainRig(t, metastore.NewMem(), nil)
	p := r.open()
	p.append(manyStreams...) // a base deltas are small against
	p.rounds(3)
	p.close()
	cp := r.checkpoint()
	delta, err := absorb.ReadSnapshot(r.ctx, r.stores(), cp.Tails)
	if err != nil || delta.Base == "" {
		t.Fatalf("the checkpoint's snapshot %s: %+v, %v: want a delta", cp.Tails, delta, err)
	}
	for i, b := range r.buckets {
		if err := b.Corrupt(cp.Tails, 1); err != nil {
			t.Fatalf("bucket %d: %v", i, err)
		}
	}
	q := r.open()
	if n := q.c.Stats(r.now).TailsRebuilds; n != 1 {
		t.Fatalf("the successor rebuilt the tails %d times, want 1", n)
	}
	q.rounds(keepRounds)
	r.checkTails("the successor")
	r.checkGone("the damaged delta", cp.Tails)
	r.checkGone("the damaged delta's base", delta.Base)
	if t.Failed() {
		t.Logf("left: %s", strings.Join(r.snapshotKeys(0), " "))
	}
}

// keepRounds is more rounds than a superseded snapshot is kept for
// readers (16), and the round that then deletes it.
const keepRounds = 16 + 2
