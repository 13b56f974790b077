package groups_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/loglet/groups"
	"github.com/flightlog/flightlog/objstore"
)

// Groups lists every group of every stream; List the offsets of the
// stream's current incarnation only; Lags says how far each is behind the
// tail, on the leader and on a Reader, and counts from the trim point.
func TestListAndLag(t *testing.T) {
	ctx := context.Background()
	r := newOfsRig(t)
	r.create(t, "orders")
	r.create(t, "orders-eu") // a name that shares a prefix with "orders"
	r.appendN(t, "orders", 0, 10)
	r.appendN(t, "orders-eu", 0, 2)
	o := groups.OffsetsOf(r.star)
	commit := func(group, stream string, next uint64) {
		t.Helper()
		off, err := o.Get(ctx, group, stream)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := o.Commit(ctx, off, next); err != nil {
			t.Fatal(err)
		}
	}
	commit("billing", "orders", 4)
	commit("audit", "orders", 10)
	commit("shipping", "orders-eu", 1)

	names, err := o.Groups(ctx)
	if err != nil || !slices.Equal(names, []string{"audit", "billing", "shipping"}) {
		t.Fatalf("Groups = %v, %v; want [audit billing shipping]", names, err)
	}
	check := func(name string, log groups.TailLog, trim uint64, want ...uint64) {
		t.Helper()
		lags, err := groups.Lags(ctx, log, "orders", groups.LagOptions{Bytes: true})
		if err != nil {
			t.Fatalf("%s: Lags: %v", name, err)
		}
		var got []string
		for i, l := range lags {
			got = append(got, l.Offset.Group)
			w := uint64(0)
			if i < len(want) {
				w = want[i]
			}
			if l.Tail != 10 || l.TrimSeq != trim || l.Records != w {
				t.Errorf("%s: %s's lag %+v, want tail 10, trim %d, %d records", name, l.Offset.Group, l, trim, w)
			}
		}
		if !slices.Equal(got, []string{"audit", "billing"}) {
			t.Fatalf("%s: Lags of orders lists %v, want [audit billing]", name, got)
		}
	}
	check("star", r.star, 0, 0, 6)

	// A trim past the group's offset: what is behind it is not lag.
	if err := r.star.Trim(ctx, "orders", 7); err != nil {
		t.Fatal(err)
	}
	l, err := groups.LagOf(ctx, r.star, "billing", "orders", groups.LagOptions{})
	if err != nil || l.TrimSeq != 7 || l.Records != 3 || l.Offset.Next != 4 {
		t.Fatalf("LagOf after a trim to 7 = %+v, %v; want 3 records from the trim point", l, err)
	}
	// A group that never committed counts from the trim point too.
	if l, err := groups.LagOf(ctx, r.star, "new", "orders", groups.LagOptions{}); err != nil || l.Offset.Committed() || l.Records != 3 {
		t.Fatalf("LagOf of a group with no offset = %+v, %v; want 3", l, err)
	}

	// A Reader reads the absorbed tail: after the star's Close absorbed
	// everything, the same.
	if err := r.star.Close(ctx); err != nil {
		t.Fatal(err)
	}
	reader, err := loglet.NewReader(loglet.ReaderConfig{Meta: r.meta, Standard: []objstore.Store{r.bucket}, PollInterval: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	check("reader", reader, 7, 0, 3)
}

// Another incarnation starts every group afresh: List shows none of the
// old one's offsets.
func TestListAfterRecreate(t *testing.T) {
	ctx := context.Background()
	r := newOfsRig(t)
	r.create(t, "orders")
	r.appendN(t, "orders", 0, 3)
	o := groups.OffsetsOf(r.star)
	off, err := o.Get(ctx, "billing", "orders")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Commit(ctx, off, 2); err != nil {
		t.Fatal(err)
	}
	if offs, err := o.List(ctx, "orders"); err != nil || len(offs) != 1 || offs[0].Next != 2 {
		t.Fatalf("List = %+v, %v; want billing at 2", offs, err)
	}
	if err := r.star.DeleteStream(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	r.create(t, "orders")
	if offs, err := o.List(ctx, "orders"); err != nil || len(offs) != 0 {
		t.Fatalf("List after the stream was created again = %+v, %v; want none", offs, err)
	}
	if _, err := o.List(ctx, "missing"); !errors.Is(err, loglet.ErrStreamNotFound) {
		t.Fatalf("List of a stream that does not exist: %v, want ErrStreamNotFound", err)
	}
}

// Reset moves an offset either way, as a compare-and-swap; the group's
// next session starts there.
func TestReset(t *testing.T) {
	ctx := context.Background()
	r := newOfsRig(t)
	r.create(t, "orders")
	r.appendN(t, "orders", 0, 10)
	o := groups.OffsetsOf(r.star)
	zero, err := o.Get(ctx, "billing", "orders")
	if err != nil {
		t.Fatal(err)
	}
	eight, err := o.Commit(ctx, zero, 8)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Reset(ctx, zero, 2); !errors.Is(err, groups.ErrConflict) {
		t.Fatalf("Reset from a stale offset: %v, want ErrConflict", err)
	}
	two, err := o.Reset(ctx, eight, 2)
	if err != nil || two.Next != 2 {
		t.Fatalf("Reset back to 2 = %+v, %v", two, err)
	}
	g, err := groups.Open(ctx, r.star, "billing", "orders", groups.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if recs, err := g.Recv(ctx); err != nil || recs[0].Seq != 2 {
		t.Fatalf("the session after a Reset to 2 starts at %v, %v", recs, err)
	}
	if _, err := o.Reset(ctx, two, 9); err != nil {
		t.Fatalf("Reset forward: %v", err)
	}
	if got, _ := o.Get(ctx, "billing", "orders"); got.Next != 9 {
		t.Fatalf("after Reset to 9: %d", got.Next)
	}
}

// Close ends a Recv blocked on the tail, and every call after it.
func TestSessionClose(t *testing.T) {
	ctx := context.Background()
	r := newOfsRig(t)
	r.create(t, "orders")
	r.appendN(t, "orders", 0, 1)
	g, err := groups.Open(ctx, r.star, "billing", "orders", groups.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Recv(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := g.Recv(ctx) // caught up: blocks on the tail
		done <- err
	}()
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, groups.ErrClosed) {
		t.Fatalf("blocked Recv after Close: %v, want ErrClosed", err)
	}
	if _, err := g.Recv(ctx); !errors.Is(err, groups.ErrClosed) {
		t.Fatalf("Recv after Close: %v, want ErrClosed", err)
	}
	if err := g.Ack(ctx, 0); !errors.Is(err, groups.ErrClosed) {
		t.Fatalf("Ack after Close: %v, want ErrClosed", err)
	}
	if err := g.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if off, _ := groups.OffsetsOf(r.star).Get(ctx, "billing", "orders"); off.Committed() {
		t.Fatalf("Close committed %+v; it commits nothing", off)
	}
}

// Lag.Bytes sums the absorbed frame runs past each group's position; with
// one record per append, one run per record, so it is exact here.
func TestLagBytes(t *testing.T) {
	ctx := context.Background()
	r := newOfsRig(t)
	r.create(t, "orders")
	for i := range 10 {
		r.appendN(t, "orders", i, 1) // one flight, one run each: "orders-<i>"
	}
	o := groups.OffsetsOf(r.star)
	for group, next := range map[string]uint64{"a": 0, "b": 4, "c": 10} {
		off, err := o.Get(ctx, group, "orders")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := o.Commit(ctx, off, next); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.star.Close(ctx); err != nil { // everything absorbed
		t.Fatal(err)
	}
	reader, err := loglet.NewReader(loglet.ReaderConfig{Meta: r.meta, Standard: []objstore.Store{r.bucket}})
	if err != nil {
		t.Fatal(err)
	}
	lags, err := groups.Lags(ctx, reader, "orders", groups.LagOptions{Bytes: true})
	if err != nil || len(lags) != 3 {
		t.Fatalf("Lags = %+v, %v", lags, err)
	}
	all, four, none := lags[0].Bytes, lags[1].Bytes, lags[2].Bytes
	if all <= 0 || none != 0 || four*10 != all*6 {
		t.Fatalf("bytes behind from 0, 4 and 10: %d, %d, %d; want 6/10 of the first from 4, and 0 from the tail", all, four, none)
	}
	if l, err := groups.LagOf(ctx, reader, "b", "orders", groups.LagOptions{}); err != nil || l.Bytes != 0 || l.Records != 6 {
		t.Fatalf("LagOf without Bytes = %+v, %v; want 6 records and no byte count", l, err)
	}
	if l, err := groups.LagOf(ctx, reader, "b", "orders", groups.LagOptions{Bytes: true}); err != nil || l.Bytes != four {
		t.Fatalf("LagOf with Bytes = %+v, %v; want %d bytes", l, err, four)
	}
}
