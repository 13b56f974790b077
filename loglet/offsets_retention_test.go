package loglet

import (
	"context"
	"testing"
	"time"
)

// A retention pass rewrites a stream's record (its trim point), the
// incarnation staying the same: a group session on a retention stream goes
// on acknowledging across passes, and an offset read before a pass commits
// after it.
func TestOffsetsAcrossRetention(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	p, err := w.open("a", nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := p.star.CreateStream(ctx, "aged", StreamOptions{Class: Standard, Star: "s1", Retention: Retention{MaxAge: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	// seq i is stamped now − (10−i)·20min: seqs 7, 8, 9 are within the hour.
	stamp := func(seq int) int64 { return now.Add(-time.Duration(10-seq) * 20 * time.Minute).UnixMilli() }
	appendN(t, p.star, "aged", 10, 1, stamp)

	o := p.star.Offsets()
	prev, err := o.Get(ctx, "audit", "aged")
	if err != nil {
		t.Fatal(err)
	}
	g, err := p.star.OpenGroupSession(ctx, "billing", "aged", GroupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for g.Next() < 10 {
		if _, err := g.Recv(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.Ack(ctx, 2); err != nil {
		t.Fatal(err)
	}

	p.star.runRetention(ctx, now)
	if got := trimSeqOf(t, w.meta, "aged"); got != 7 {
		t.Fatalf("retention trimmed to %d, want 7", got)
	}
	if err := g.Ack(ctx, 7); err != nil {
		t.Fatalf("group ack after a retention pass: %v", err)
	}
	two, err := o.Commit(ctx, prev, 2)
	if err != nil {
		t.Fatalf("commit of an offset read before a retention pass: %v", err)
	}

	p.star.runRetention(ctx, now.Add(time.Hour))
	if got := trimSeqOf(t, w.meta, "aged"); got != 10 {
		t.Fatalf("the second pass trimmed to %d, want 10", got)
	}
	if err := g.Ack(ctx, 9); err != nil {
		t.Fatalf("group ack after a second retention pass: %v", err)
	}
	if _, err := o.Commit(ctx, two, 10); err != nil {
		t.Fatalf("second commit after a second retention pass: %v", err)
	}
	again, err := p.star.OpenGroupSession(ctx, "billing", "aged", GroupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if again.Next() != 10 {
		t.Fatalf("the group resumes at %d, want 10", again.Next())
	}
}
