package work

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/loglet/internal/chaincore"
	"github.com/flightlog/flightlog/metastore"
)

// fourOps is a metastore that takes at most four ops a Commit (the least
// a loglet accepts), refusing more as etcd does: nothing written.
type fourOps struct{ metastore.Store }

func (fourOps) MaxCommitOps() int { return 4 }

func (s fourOps) Commit(ctx context.Context, ops []metastore.Op) ([]metastore.Version, error) {
	if len(ops) > 4 {
		return nil, fmt.Errorf("commit of %d ops: %w", len(ops), metastore.ErrTooLarge)
	}
	return s.Store.Commit(ctx, ops)
}

// TestSplitRoundStepsAndReplay runs a round of five refs against a
// metastore of four ops a Commit through the core and this package's
// workers: the core commits it in steps (the round marked pending, two
// chunks of refs, the advance). The owner then dies between the chunks of
// its next split round; the successor finds the round pending and
// replays exactly it, and the tails it reads back are every stream's
// acked tail.
func TestSplitRoundStepsAndReplay(t *testing.T) {
	streams := []string{"a", "b", "c", "d", "e", "f"}
	r := newChainRig(t, fourOps{metastore.NewMem()}, func(c *chaincore.Config) { c.AbsorbInterval = time.Hour })
	p := r.open()
	seen := map[string]int{}
	p.hold = func(req chaincore.Request) bool {
		seen[fmt.Sprintf("%T", req)]++
		return true
	}
	p.append(streams...)
	p.absorbed()
	// Two rounds: a's flight alone (the first round is due at once), then
	// the other five, split in two chunks of at most three refs (and the
	// seal check).
	for req, want := range map[string]int{"chaincore.CommitRound": 2, "chaincore.MarkRoundPending": 1, "chaincore.CommitRefs": 2, "chaincore.AdvanceRound": 1} {
		if seen[req] != want {
			t.Errorf("%s: %d requests, want %d (all: %v)", req, seen[req], want, seen)
		}
	}
	if cp := r.checkpoint(); cp.Pending != nil || cp.Next != uint64(len(streams)) {
		t.Fatalf("after the split round: checkpoint at %d, pending %v; want %d, none", cp.Next, cp.Pending, len(streams))
	}
	r.checkTails("after the split round")

	// The next round dies after its first chunk.
	chunks := 0
	p.hold = func(req chaincore.Request) bool {
		if _, ok := req.(chaincore.CommitRefs); ok {
			chunks++
			return chunks < 2
		}
		return true
	}
	p.append(streams...)
	p.dies()
	cp := r.checkpoint()
	if cp.Pending == nil || chunks != 2 {
		t.Fatalf("the owner died between chunks: checkpoint pending %v after %d chunks sent; want a pending round", cp.Pending, chunks)
	}
	pending := *cp.Pending
	q := r.open()
	q.absorbed()
	cp = r.checkpoint()
	if cp.Pending != nil || cp.Epoch != pending.Epoch || cp.Next < pending.To {
		t.Fatalf("the successor's checkpoint at %d/%d, pending %v; want past the pending round %+v", cp.Epoch, cp.Next, cp.Pending, pending)
	}
	r.checkTails("the successor")
	// Every stream's refs of both rounds are there, one each.
	for _, st := range streams {
		for end := uint64(1); end <= 2; end++ {
			if _, err := r.meta.Get(r.ctx, chain.RefKey(st, end)); err != nil {
				t.Errorf("stream %s: the ref ending at %d: %v", st, end, err)
			}
		}
	}
}
