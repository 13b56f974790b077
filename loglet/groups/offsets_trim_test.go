package groups_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/loglet/groups"
	"github.com/flightlog/flightlog/metastore"
)

// A Trim rewrites the stream record (its trim point) but the stream is the
// same incarnation: an offset read before it commits after it, and only a
// delete (and re-create) fails the commit with ErrStreamNotFound.
func TestOffsetsCommitAcrossTrim(t *testing.T) {
	ctx := context.Background()
	r := newOfsRig(t)
	r.create(t, "orders")
	r.appendN(t, "orders", 0, 10)
	o := groups.OffsetsOf(r.star)
	zero, err := o.Get(ctx, "billing", "orders")
	if err != nil {
		t.Fatal(err)
	}
	three, err := o.Commit(ctx, zero, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.star.Trim(ctx, "orders", 5); err != nil {
		t.Fatal(err)
	}
	seven, err := o.Commit(ctx, three, 7)
	if err != nil {
		t.Fatalf("commit of an offset read before a Trim: %v", err)
	}
	if got, err := o.Get(ctx, "billing", "orders"); err != nil || got.Next != 7 || got.Version != seven.Version {
		t.Fatalf("Get after the commit = %+v, %v; want Next 7 at %q", got, err, seven.Version)
	}
	// A stale offset across a Trim is still a conflict, not a lost stream.
	_, err = o.Commit(ctx, three, 8)
	var conflict *groups.ConflictError
	if !errors.As(err, &conflict) || conflict.Current.Next != 7 {
		t.Fatalf("stale commit across a Trim: %v, want an OffsetConflictError holding 7", err)
	}
	// The offset a commit returned commits again after another Trim.
	if err := r.star.Trim(ctx, "orders", 8); err != nil {
		t.Fatal(err)
	}
	nine, err := o.Commit(ctx, seven, 9)
	if err != nil {
		t.Fatalf("second commit across a second Trim: %v", err)
	}
	// Delete and re-create: the old incarnation's offset fails, trims or not.
	if err := r.star.DeleteStream(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	fresh := r.create(t, "orders")
	if _, err := o.Commit(ctx, nine, 10); !errors.Is(err, loglet.ErrStreamNotFound) {
		t.Fatalf("commit read against a deleted incarnation: %v, want ErrStreamNotFound", err)
	}
	if got, err := o.Get(ctx, "billing", "orders"); err != nil || got.Committed() || got.Incarnation != fresh.Incarnation {
		t.Fatalf("the new incarnation's offset = %+v, %v; want uncommitted on %s", got, err, fresh.Incarnation)
	}
}

// rewriteRecord rewrites stream's record in mem, bypassing the star, with
// edit applied to its JSON fields: what another process's Trim (or delete
// and re-create) does between an offset's read and its commit.
func rewriteRecord(t *testing.T, mem *metastore.Mem, stream string, edit func(map[string]any)) {
	ctx := context.Background()
	key := chain.StreamRecordKey(stream)
	it, err := mem.Get(ctx, key)
	if err != nil {
		t.Error(err)
		return
	}
	var rec map[string]any
	if err := json.Unmarshal(it.Value, &rec); err != nil {
		t.Error(err)
		return
	}
	edit(rec)
	val, _ := json.Marshal(rec)
	if _, err := mem.Put(ctx, key, val, it.Version); err != nil {
		t.Error(err)
	}
}

// The commit and the incarnation check are one: a trim landing between
// the offset's read and its commit (here, just before each of the first
// two commit attempts) does not fail the commit, and a delete and
// re-create landing there does, writing nothing.
func TestOffsetsCommitRacesTrim(t *testing.T) {
	ctx := context.Background()
	r := newOfsRig(t)
	info := r.create(t, "orders")
	o := groups.OffsetsOf(r.star)
	key := groups.Key("billing", "orders", info.Incarnation)
	var mu sync.Mutex
	var before []func() // each runs before one commit of the offset reaches the store
	r.meta.SetHook(func(call fault.Call) fault.Fault {
		op, keys := call.Op, call.Keys
		mu.Lock()
		defer mu.Unlock()
		if op == fault.Commit && len(keys) == 2 && keys[1] == key && len(before) > 0 {
			f := before[0]
			before = before[1:]
			f()
		}
		return fault.Fault{}
	})
	setBefore := func(fs ...func()) { mu.Lock(); before = fs; mu.Unlock() }
	fired := func() {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if len(before) > 0 {
			t.Fatalf("%d racing writes never ran: the op or key names changed?", len(before))
		}
	}
	trimTo := func(seq float64) func() {
		return func() { rewriteRecord(t, r.mem, "orders", func(rec map[string]any) { rec["trim_seq"] = seq }) }
	}

	prev, err := o.Get(ctx, "billing", "orders")
	if err != nil {
		t.Fatal(err)
	}
	setBefore(trimTo(1), trimTo(2)) // two trims: two retries
	four, err := o.Commit(ctx, prev, 4)
	if err != nil || four.Next != 4 {
		t.Fatalf("commit racing two trims: %+v, %v; want Next 4", four, err)
	}
	fired()
	if got, err := o.Get(ctx, "billing", "orders"); err != nil || got.Next != 4 {
		t.Fatalf("after the commit: %+v, %v; want Next 4", got, err)
	}

	setBefore(func() {
		rewriteRecord(t, r.mem, "orders", func(rec map[string]any) {
			rec["incarnation"] = "i" + "0123456789abcdef"
			rec["trim_seq"] = 0
		})
	})
	if _, err := o.Commit(ctx, four, 6); !errors.Is(err, loglet.ErrStreamNotFound) {
		t.Fatalf("commit racing a re-create: %v, want ErrStreamNotFound", err)
	}
	fired()
	if it, err := r.mem.Get(ctx, key); err != nil || it.Version != four.Version {
		t.Fatalf("the old incarnation's offset moved: %+v, %v", it, err)
	}
}

// A group session acknowledges across a Trim, from a star and from a
// Reader, and the group resumes after what it acknowledged.
func TestGroupSessionAckAcrossTrim(t *testing.T) {
	for _, name := range []string{"star", "reader"} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			r := newOfsRig(t)
			open := r.openers(t)[name]
			r.create(t, "orders")
			r.appendN(t, "orders", 0, 6)
			g, err := open(ctx, "billing", "orders", groups.Options{})
			if err != nil {
				t.Fatal(err)
			}
			recvUntil(t, g, 6)
			if err := g.Ack(ctx, 1); err != nil {
				t.Fatal(err)
			}
			if err := r.star.Trim(ctx, "orders", 4); err != nil {
				t.Fatal(err)
			}
			if err := g.Ack(ctx, 5); err != nil {
				t.Fatalf("ack after a Trim: %v", err)
			}
			again, err := open(ctx, "billing", "orders", groups.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if again.Next() != 6 {
				t.Fatalf("the group resumes at %d, want 6", again.Next())
			}
		})
	}
}
