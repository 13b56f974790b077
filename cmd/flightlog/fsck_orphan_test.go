package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/settle"
)

// TestFsckLeavesALostRaceOrphanToTheLeader (issue 24, item 4): a settled
// object written by a pass whose repoint lost its race (or by a deposed
// leader's pass) is marked pending before it is written. fsck notes it and
// --repair leaves it to the passes (a live pass may still be about to
// repoint onto it); the leader's next passes, with nothing new to settle,
// find the ref the marker names not pointing at it and reclaim it; fsck
// then finds nothing. (An orphan no marker names is fsck --repair's to
// reclaim: TestFsckSettledDamage/orphan-is-a-note.)
func TestFsckLeavesALostRaceOrphanToTheLeader(t *testing.T) {
	ctx := context.Background()
	dir, g, b := tempBackends(t)
	var lost time.Time // when the race was lost, on the bubbles' clock
	synctest.Test(t, func(t *testing.T) {
		writeSettled(ctx, t, g, b, map[string]string{})
		lost = time.Now()
	})
	b.Close()
	keys := settledKeys(t, dir, "orders")
	b, err := g.open(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	orphan := strings.Replace(keys[0], "settled/", "settled/zz-", 1)
	std := b.sets[chain.Standard][0]
	body, err := std.Get(ctx, keys[0], 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	refs, err := b.meta.Scan(ctx, "refs/", "", 1)
	if err != nil || len(refs) != 1 {
		t.Fatalf("a ref to name: %v %v", refs, err)
	}
	// As the losing pass leaves it: the pending marker, then the object.
	m := settle.Marker{Key: orphan, At: lost.UnixMilli(), Ref: refs[0].Key}
	if _, err := b.meta.Put(ctx, settle.MarkerKey(g.Star, chain.Standard, orphan), m.Encode(), metastore.NoVersion); err != nil {
		t.Fatal(err)
	}
	if err := std.PutIfAbsent(ctx, orphan, body); err != nil {
		t.Fatal(err)
	}
	b.Close()

	code, out, errs := cli(t, "", "fsck", "--repair", "--dir", dir)
	t.Logf("fsck --repair: exit %d\n%s", code, out)
	if code != exitOK || !strings.Contains(out, "note: settled object "+orphan+" in bucket standard: no ref points at it (marked by a settle pass") || strings.Contains(out, orphan+" in bucket standard: reclaimed") {
		t.Fatalf("fsck --repair with a pending-marked orphan: exit %d, want 0, a note, and the object left to the passes\n%s%s", code, out, errs)
	}
	if object(t, filepath.Join(dir, standardDir), orphan) == nil {
		t.Fatalf("fsck --repair deleted %s, a pass's marked object", orphan)
	}

	b2, err := g.open(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		star, err := g.openStarAs(ctx, b2, io.Discard, false, func(c *loglet.Config) { c.SettleInterval = 5 * time.Millisecond })
		if err != nil {
			t.Fatal(err)
		}
		defer star.Close(ctx)
		gone := func() bool {
			items, err := b2.meta.Scan(ctx, settle.MarkerPrefix(g.Star, chain.Standard), "", 0)
			return err == nil && len(items) == 0
		}
		if !quiesceUntil(10*time.Minute, time.Second, gone) {
			t.Fatalf("the leader left the lost race's marker for 10 idle minutes: %+v", star.Stats().Standard.Settle)
		}
	})
	b2.Close()
	if object(t, filepath.Join(dir, standardDir), orphan) != nil {
		t.Fatalf("the leader dropped the marker of %s but left the object", orphan)
	}
	code, out, errs = cli(t, "", "fsck", "--dir", dir)
	if code != exitOK || strings.Contains(out, orphan) || strings.Contains(out, "PROBLEM") {
		t.Fatalf("fsck after the leader's reclaim: exit %d, want 0 and no mention of %s\n%s%s", code, orphan, out, errs)
	}
}
