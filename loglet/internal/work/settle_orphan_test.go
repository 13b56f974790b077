package work_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
	"github.com/flightlog/flightlog/settle"
)

// TestSettleZombiePassOrphanReclaimedBySuccessor (issue 24, item 4): a
// pass of a leader that a successor deposes between writing its settled
// objects and repointing the refs onto them (a zombie pass) fails at the
// repoint, leaving objects no ref points at. They were marked pending
// before they were written, so the successor's first passes delete them:
// no orphan and no marker is left.
func TestSettleZombiePassOrphanReclaimedBySuccessor(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.maxSlots = 100
	var successor *[2]string
	meta := commitHook{Store: w.meta, before: func(ops []metastore.Op) {
		if successor != nil {
			return
		}
		for _, op := range ops {
			if op.Kind == metastore.OpPut && strings.HasPrefix(op.Key, "refs/") && strings.Contains(string(op.Value), "settled/") {
				// The repoint: a successor seals the checkpoint first.
				cp, _, err := absorb.ReadCheckpoint(ctx, w.meta, "s1", chain.Standard)
				if err != nil {
					t.Fatal(err)
				}
				_, ev, err := chain.ReadEpoch(ctx, w.meta, "s1", chain.Standard)
				if err != nil {
					t.Fatal(err)
				}
				if _, _, err := absorb.SealCheckpoint(ctx, w.meta, "s1", chain.Standard, "p2", cp.OwnerEpoch+1, ev); err != nil {
					t.Fatal(err)
				}
				successor = &[2]string{"p2", strconv.FormatUint(cp.OwnerEpoch+1, 10)}
				return
			}
		}
	}}
	same := func(s objstore.Store) objstore.Store { return s }
	if _, err := w.pass(ctx, chain.Standard, meta, same); err == nil || successor == nil {
		t.Fatalf("the zombie pass: %v (deposed %v), want its repoint refused", err, successor != nil)
	}
	if len(w.orphans(t)) == 0 {
		t.Fatal("the zombie pass wrote no settled object before its repoint: the orphan went untested")
	}
	w.as = successor
	for i := 0; i < 20; i++ {
		res, err := w.pass(ctx, chain.Standard, w.meta, same)
		if err != nil {
			t.Fatalf("the successor's pass %d: %v", i, err)
		}
		if res.Slots == 0 && res.Trim.At == res.Trim.Deleted && len(w.orphans(t)) == 0 {
			break
		}
	}
	if o := w.orphans(t); len(o) > 0 {
		t.Fatalf("settled objects of the zombie pass left with no ref pointing at them: %v", o)
	}
	marks, err := w.meta.Scan(ctx, settle.MarkerPrefix("s1", chain.Standard), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(marks) > 0 {
		t.Fatalf("markers left after the successor's passes: %v", marks)
	}
}
