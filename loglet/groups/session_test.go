package groups_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/loglet/groups"
	"github.com/flightlog/flightlog/objstore"
)

// groupOpener opens group sessions on a star or on a Reader of its stores.
type groupOpener func(ctx context.Context, group, stream string, opts groups.Options) (*groups.Session, error)

func (r *ofsRig) openers(t *testing.T) map[string]groupOpener {
	t.Helper()
	reader, err := loglet.NewReader(loglet.ReaderConfig{Meta: r.meta, Standard: []objstore.Store{r.bucket}, PollInterval: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	on := func(log groups.Log) groupOpener {
		return func(ctx context.Context, group, stream string, opts groups.Options) (*groups.Session, error) {
			return groups.Open(ctx, log, group, stream, opts)
		}
	}
	return map[string]groupOpener{"star": on(r.star), "reader": on(reader)}
}

// recvUntil receives from g until it has records up to (excluding) end,
// and returns their sequence numbers and bodies.
func recvUntil(t *testing.T, g *groups.Session, end uint64) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []string
	for g.Next() < end {
		recs, err := g.Recv(ctx)
		if err != nil {
			t.Fatalf("recv (next %d, want up to %d): %v", g.Next(), end, err)
		}
		for _, rec := range recs {
			got = append(got, fmt.Sprintf("%d:%s", rec.Seq, rec.Body))
		}
	}
	return got
}

func seqs(stream string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%d:%s-%d", i, stream, i))
	}
	return out
}

func sameStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A group resumes after its last acknowledged record: what was delivered
// and not acknowledged (a crash between processing and commit) comes
// again, what was acknowledged never does.
func TestGroupSessionResumesAfterAck(t *testing.T) {
	for _, name := range []string{"star", "reader"} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			r := newOfsRig(t)
			open := r.openers(t)[name]
			r.create(t, "orders")
			r.appendN(t, "orders", 0, 10)

			g, err := open(ctx, "billing", "orders", groups.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got := recvUntil(t, g, 10); !sameStrings(got, seqs("orders", 0, 10)) {
				t.Fatalf("first session got %v", got)
			}
			if err := g.Ack(ctx, 3); err != nil {
				t.Fatal(err)
			}
			if c := g.Committed(); c.Next != 4 {
				t.Fatalf("committed %d after Ack(3), want 4", c.Next)
			}
			// "Crash": records 4..9 were processed but never acknowledged.
			g, err = open(ctx, "billing", "orders", groups.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if g.Next() != 4 {
				t.Fatalf("reopened at %d, want 4", g.Next())
			}
			if got := recvUntil(t, g, 10); !sameStrings(got, seqs("orders", 4, 10)) {
				t.Fatalf("re-delivered %v, want 4..9", got)
			}
			if err := g.Ack(ctx, 9); err != nil {
				t.Fatal(err)
			}
			r.appendN(t, "orders", 10, 2)
			g, err = open(ctx, "billing", "orders", groups.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got := recvUntil(t, g, 12); !sameStrings(got, seqs("orders", 10, 12)) {
				t.Fatalf("after acking everything got %v, want only 10..11", got)
			}
			// Another group has its own position.
			other, err := open(ctx, "audit", "orders", groups.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if other.Next() != 0 {
				t.Fatalf("a new group starts at %d, want 0", other.Next())
			}
		})
	}
}

func TestGroupSessionStartAndAckRules(t *testing.T) {
	ctx := context.Background()
	r := newOfsRig(t)
	r.create(t, "orders")
	r.appendN(t, "orders", 0, 5)

	// No committed offset: Start decides.
	g, err := groups.Open(ctx, r.star, "billing", "orders", groups.Options{Start: loglet.TailOffset(0)})
	if err != nil {
		t.Fatal(err)
	}
	if g.Next() != 5 {
		t.Fatalf("TailOffset(0) start at %d, want 5", g.Next())
	}
	if err := g.Ack(ctx, 5); err == nil {
		t.Fatalf("ack of a record the session never delivered succeeded")
	}
	r.appendN(t, "orders", 5, 1)
	if got := recvUntil(t, g, 6); !sameStrings(got, seqs("orders", 5, 6)) {
		t.Fatalf("got %v", got)
	}
	if err := g.Ack(ctx, 5); err != nil {
		t.Fatal(err)
	}
	// An ack at or below the committed offset is a no-op: the offset
	// never goes back.
	if err := g.Ack(ctx, 4); err != nil {
		t.Fatalf("ack below the committed offset: %v, want a no-op", err)
	}
	if off, _ := groups.OffsetsOf(r.star).Get(ctx, "billing", "orders"); off.Next != 6 {
		t.Fatalf("offset %d after a lower ack, want 6", off.Next)
	}
	// A committed offset beats Start.
	g, err = groups.Open(ctx, r.star, "billing", "orders", groups.Options{Start: loglet.AtSeq(1)})
	if err != nil {
		t.Fatal(err)
	}
	if g.Next() != 6 {
		t.Fatalf("reopened at %d, want the committed 6", g.Next())
	}
	if _, err := groups.Open(ctx, r.star, "bad group", "orders", groups.Options{}); !errors.Is(err, groups.ErrInvalidName) {
		t.Fatalf("bad group: %v, want ErrInvalidGroup", err)
	}
	if _, err := groups.Open(ctx, r.star, "billing", "nope", groups.Options{}); !errors.Is(err, loglet.ErrStreamNotFound) {
		t.Fatalf("missing stream: %v, want ErrStreamNotFound", err)
	}
}

// Two sessions of one group: their commits merge by maximum, and one that
// finds the group committed past it skips ahead.
func TestGroupSessionMembersMerge(t *testing.T) {
	ctx := context.Background()
	r := newOfsRig(t)
	r.create(t, "orders")
	r.appendN(t, "orders", 0, 10)
	a, err := groups.Open(ctx, r.star, "billing", "orders", groups.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := groups.Open(ctx, r.star, "billing", "orders", groups.Options{MaxRecords: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := recvUntil(t, b, 2); !sameStrings(got, seqs("orders", 0, 2)) {
		t.Fatalf("b got %v", got)
	}
	recvUntil(t, a, 10)
	if err := a.Ack(ctx, 7); err != nil {
		t.Fatal(err)
	}
	// b read its offset before a committed: its commit conflicts, and
	// merges to a's.
	if err := b.Ack(ctx, 1); err != nil {
		t.Fatalf("b's ack behind a's: %v", err)
	}
	if c := b.Committed(); c.Next != 8 {
		t.Fatalf("b learnt %d, want a's 8", c.Next)
	}
	if got := recvUntil(t, b, 10); !sameStrings(got, seqs("orders", 8, 10)) {
		t.Fatalf("b after the merge got %v, want 8..9 (skipping what a acknowledged)", got)
	}
	if err := b.Ack(ctx, 9); err != nil {
		t.Fatal(err)
	}
	// Now a is behind b: its ack of 8 merges without going back.
	if err := a.Ack(ctx, 8); err != nil {
		t.Fatal(err)
	}
	if off, _ := groups.OffsetsOf(r.star).Get(ctx, "billing", "orders"); off.Next != 10 {
		t.Fatalf("group offset %d, want 10", off.Next)
	}
}

// A stream deleted under a group session ends it, on a star and on a
// Reader, and its acks fail rather than move the next incarnation.
func TestGroupSessionStreamDeleted(t *testing.T) {
	for _, name := range []string{"star", "reader"} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			r := newOfsRig(t)
			open := r.openers(t)[name]
			r.create(t, "orders")
			r.appendN(t, "orders", 0, 3)
			g, err := open(ctx, "billing", "orders", groups.Options{})
			if err != nil {
				t.Fatal(err)
			}
			recvUntil(t, g, 3)
			if err := r.star.DeleteStream(ctx, "orders"); err != nil {
				t.Fatal(err)
			}
			r.create(t, "orders")
			if err := g.Ack(ctx, 2); !errors.Is(err, loglet.ErrStreamNotFound) {
				t.Fatalf("ack after the stream was re-created: %v, want ErrStreamNotFound", err)
			}
			rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			if _, err := g.Recv(rctx); !errors.Is(err, loglet.ErrStreamNotFound) {
				t.Fatalf("recv after the stream was re-created: %v, want ErrStreamNotFound", err)
			}
			fresh, err := open(ctx, "billing", "orders", groups.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if fresh.Next() != 0 || fresh.Committed().Committed() {
				t.Fatalf("the new incarnation's group session starts at %d (committed %v), want 0 with nothing committed", fresh.Next(), fresh.Committed().Committed())
			}
		})
	}
}

// A star's group session blocked waiting for records ends when its stream
// is deleted in the same process (the delete wakes the star's read session,
// whose next read finds the incarnation gone). If the delete lands before
// Recv blocks, the read's own check ends it instead; either way a Recv that
// hangs fails.
func TestGroupSessionBlockedRecvEndsOnDelete(t *testing.T) {
	ctx := context.Background()
	r := newOfsRig(t)
	r.create(t, "orders")
	g, err := groups.Open(ctx, r.star, "billing", "orders", groups.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := g.Recv(rctx)
		done <- err
	}()
	if err := r.star.DeleteStream(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, loglet.ErrStreamNotFound) {
		t.Fatalf("blocked recv on a deleted stream: %v, want ErrStreamNotFound", err)
	}
}
