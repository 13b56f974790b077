package groups_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/loglet/groups"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// ofsRig is a star over in-memory stores for the offsets tests: meta is
// what the star uses (a FaultStore over mem, no faults unless a test sets
// them), bucket its Standard bucket set of one.
type ofsRig struct {
	star   *loglet.Star
	mem    *metastore.Mem
	meta   *metastore.FaultStore
	bucket *objstore.Mem
}

func newOfsRig(t testing.TB) *ofsRig {
	t.Helper()
	r := &ofsRig{mem: metastore.NewMem(), bucket: objstore.NewMem()}
	r.meta = metastore.WithFaults(r.mem, 1)
	star, err := loglet.Open(context.Background(), loglet.Config{
		Star: "s1", Meta: r.meta, Logger: slog.New(slog.DiscardHandler),
		AbsorbInterval: 5 * time.Millisecond,
		SettleInterval: -1, // refs stay as absorbed: TestLagBytes counts their frame runs
		Standard:       loglet.ClassConfig{Stores: []objstore.Store{r.bucket}, FlushDeadline: time.Millisecond},
	})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { star.Close(context.Background()) })
	r.star = star
	return r
}

func (r *ofsRig) create(t testing.TB, stream string) loglet.StreamInfo {
	t.Helper()
	info, err := r.star.CreateStream(context.Background(), stream, loglet.StreamOptions{Class: loglet.Standard})
	if err != nil {
		t.Fatalf("create %q: %v", stream, err)
	}
	return info
}

// appendN appends n records "<stream>-<i>" for i from first.
func (r *ofsRig) appendN(t testing.TB, stream string, first, n int) {
	t.Helper()
	recs := make([]loglet.Record, n)
	for i := range recs {
		recs[i].Body = fmt.Appendf(nil, "%s-%d", stream, first+i)
	}
	if _, err := r.star.Append(context.Background(), stream, loglet.Batch{Records: recs}); err != nil {
		t.Fatalf("append to %q: %v", stream, err)
	}
}

func TestOffsetKeyLayout(t *testing.T) {
	inc := "i0123456789abcdef"
	if got, want := groups.Key("billing", "orders/eu", inc), "offsets/billing/"+chain.StreamKey("orders/eu")+"/"+inc; got != want {
		t.Errorf("OffsetKey = %q, want %q", got, want)
	}
	if got, want := groups.Key("billing", "old", ""), "offsets/billing/"+chain.StreamKey("old")+"/-"; got != want {
		t.Errorf("OffsetKey without incarnation = %q, want %q", got, want)
	}
	// No group's keys can be read as another's: a group is one segment.
	if strings.HasPrefix(groups.Key("ab", "s", inc), "offsets/a/") {
		t.Errorf("group ab's key is under group a's prefix")
	}
}

// longestStreamName is the longest name of n-byte units CreateStream
// accepts (chain.ValidateStreamKeys).
func longestStreamName(t *testing.T, unit string) string {
	t.Helper()
	name := ""
	for chain.ValidateStreamKeys(name+unit) == nil {
		name += unit
	}
	if name == "" {
		t.Fatalf("no name of %q is accepted", unit)
	}
	return name
}

func TestValidateOffsetKey(t *testing.T) {
	plain := longestStreamName(t, "a")
	escaped := longestStreamName(t, "é") // two bytes, each escaped to three
	safe := strings.Repeat("g", groups.SafeNameLen)
	cases := []struct {
		name, group, stream string
		ok                  bool
	}{
		{"plain", "billing", "orders", true},
		{"every allowed byte", "AZaz09._-", "orders", true},
		{"empty group", "", "orders", false},
		{"leading dot", ".hidden", "orders", false},
		{"slash", "a/b", "orders", false},
		{"space", "a b", "orders", false},
		{"NUL", "a\x00b", "orders", false},
		{"longest group", strings.Repeat("g", groups.MaxNameLen), "orders", true},
		{"group too long", strings.Repeat("g", groups.MaxNameLen+1), "orders", false},
		{"safe group, longest plain stream", safe, plain, true},
		{"safe group, longest escaped stream", safe, escaped, true},
		{"one past safe, longest plain stream", safe + "g", plain, false},
		{"bad stream", "billing", "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := groups.ValidateKey(c.group, c.stream)
			if (err == nil) != c.ok {
				t.Fatalf("ValidateOffsetKey(%q, %d-byte stream) = %v, want ok=%v", c.group, len(c.stream), err, c.ok)
			}
			if err != nil && c.stream != "" && !errors.Is(err, groups.ErrInvalidName) {
				t.Errorf("error %v does not match ErrInvalidGroup", err)
			}
			if err == nil {
				key := groups.Key(c.group, c.stream, chain.NewIncarnation())
				if merr := metastore.ValidateKey(key); merr != nil {
					t.Errorf("accepted, but the %d-byte key is refused: %v", len(key), merr)
				}
			}
		})
	}
}

func TestOffsetsCommitGetDelete(t *testing.T) {
	ctx := context.Background()
	r := newOfsRig(t)
	info := r.create(t, "orders")
	o := groups.OffsetsOf(r.star)

	zero, err := o.Get(ctx, "billing", "orders")
	if err != nil {
		t.Fatal(err)
	}
	if zero.Committed() || zero.Next != 0 || zero.Incarnation != info.Incarnation {
		t.Fatalf("fresh offset = %+v, want uncommitted at 0 of incarnation %s", zero, info.Incarnation)
	}
	five, err := o.Commit(ctx, zero, 5)
	if err != nil {
		t.Fatal(err)
	}
	got, err := o.Get(ctx, "billing", "orders")
	if err != nil || got.Next != 5 || got.Version != five.Version || !got.Committed() {
		t.Fatalf("Get after commit = %+v, %v; want Next 5 at %q", got, err, five.Version)
	}

	// A commit from a stale read loses, says so, and holds the winner.
	_, err = o.Commit(ctx, zero, 7)
	var conflict *groups.ConflictError
	if !errors.As(err, &conflict) || !errors.Is(err, groups.ErrConflict) || conflict.Current.Next != 5 {
		t.Fatalf("stale commit: %v, want an OffsetConflictError holding 5", err)
	}
	// Backwards is refused without a write.
	if _, err := o.Commit(ctx, five, 4); !errors.Is(err, groups.ErrBackwards) {
		t.Fatalf("backwards commit: %v, want ErrOffsetBackwards", err)
	}
	// The conflict's Current commits on.
	seven, err := o.Commit(ctx, conflict.Current, 7)
	if err != nil || seven.Next != 7 {
		t.Fatalf("commit from the conflict's current: %+v, %v", seven, err)
	}
	// Other groups and streams are untouched.
	if other, err := o.Get(ctx, "audit", "orders"); err != nil || other.Committed() {
		t.Fatalf("another group's offset = %+v, %v; want none", other, err)
	}

	// Delete is a CAS too.
	if err := o.Delete(ctx, five); !errors.Is(err, groups.ErrConflict) {
		t.Fatalf("stale delete: %v, want ErrOffsetConflict", err)
	}
	if err := o.Delete(ctx, zero); !errors.Is(err, groups.ErrConflict) {
		t.Fatalf("delete expecting none while one is committed: %v, want ErrOffsetConflict", err)
	}
	if err := o.Delete(ctx, seven); err != nil {
		t.Fatal(err)
	}
	if got, err := o.Get(ctx, "billing", "orders"); err != nil || got.Committed() || got.Next != 0 {
		t.Fatalf("after delete: %+v, %v; want uncommitted at 0", got, err)
	}
	if err := o.Delete(ctx, zero); err != nil {
		t.Fatalf("delete of an offset that is not there, expecting none: %v", err)
	}
}

func TestOffsetsRefuse(t *testing.T) {
	ctx := context.Background()
	r := newOfsRig(t)
	r.create(t, "orders")
	o := groups.OffsetsOf(r.star)
	if _, err := o.Get(ctx, "billing", "nope"); !errors.Is(err, loglet.ErrStreamNotFound) {
		t.Errorf("Get on a missing stream: %v, want ErrStreamNotFound", err)
	}
	if _, err := o.Get(ctx, "bill/ing", "orders"); !errors.Is(err, groups.ErrInvalidName) {
		t.Errorf("Get with a bad group: %v, want ErrInvalidGroup", err)
	}
	var nilCtx context.Context
	if _, err := o.Get(nilCtx, "billing", "orders"); !errors.Is(err, loglet.ErrNilContext) {
		t.Errorf("Get with a nil context: %v, want ErrNilContext", err)
	}
	handMade := groups.Offset{Group: "billing", Stream: "orders", Next: 0}
	if _, err := o.Commit(ctx, handMade, 1); err == nil {
		t.Errorf("Commit of an offset not read by Get succeeded")
	}
}

// Of many committers racing from the same offset, exactly one wins, and
// every loser is told who did.
func TestOffsetsRacingCommitters(t *testing.T) {
	ctx := context.Background()
	r := newOfsRig(t)
	r.create(t, "orders")
	o := groups.OffsetsOf(r.star)
	prev, err := o.Get(ctx, "billing", "orders")
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	var wg sync.WaitGroup
	results := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, results[i] = o.Commit(ctx, prev, uint64(10+i))
		}()
	}
	wg.Wait()
	final, err := o.Get(ctx, "billing", "orders")
	if err != nil {
		t.Fatal(err)
	}
	wins := 0
	for i, err := range results {
		var conflict *groups.ConflictError
		switch {
		case err == nil:
			wins++
			if final.Next != uint64(10+i) {
				t.Errorf("committer %d won, but the offset is %d", i, final.Next)
			}
		case errors.As(err, &conflict):
			if conflict.Current.Next != final.Next {
				t.Errorf("committer %d lost to %d, but the offset is %d", i, conflict.Current.Next, final.Next)
			}
		default:
			t.Errorf("committer %d: %v", i, err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d committers won, want exactly 1", wins)
	}
}

// An offset belongs to an incarnation: a stream deleted and created again
// starts every group afresh, and a commit read against the old one fails.
func TestOffsetsIncarnation(t *testing.T) {
	ctx := context.Background()
	r := newOfsRig(t)
	old := r.create(t, "orders")
	o := groups.OffsetsOf(r.star)
	prev, _ := o.Get(ctx, "billing", "orders")
	three, err := o.Commit(ctx, prev, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.star.DeleteStream(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Get(ctx, "billing", "orders"); !errors.Is(err, loglet.ErrStreamNotFound) {
		t.Fatalf("Get of a deleted stream: %v, want ErrStreamNotFound", err)
	}
	if _, err := o.Commit(ctx, three, 4); !errors.Is(err, loglet.ErrStreamNotFound) {
		t.Fatalf("commit on a deleted stream: %v, want ErrStreamNotFound", err)
	}
	fresh := r.create(t, "orders")
	if fresh.Incarnation == old.Incarnation {
		t.Fatalf("incarnation reused: %s", fresh.Incarnation)
	}
	got, err := o.Get(ctx, "billing", "orders")
	if err != nil || got.Committed() || got.Incarnation != fresh.Incarnation {
		t.Fatalf("Get on the new incarnation = %+v, %v; want uncommitted on %s", got, err, fresh.Incarnation)
	}
	if _, err := o.Commit(ctx, three, 4); !errors.Is(err, loglet.ErrStreamNotFound) {
		t.Fatalf("commit read against the old incarnation: %v, want ErrStreamNotFound", err)
	}
	if got, _ := o.Get(ctx, "billing", "orders"); got.Committed() {
		t.Fatalf("the old incarnation's commit moved the new one: %+v", got)
	}
	// The old incarnation's offset can still be cleaned up.
	if err := o.Delete(ctx, three); err != nil {
		t.Fatalf("delete the old incarnation's offset: %v", err)
	}
	if _, err := r.mem.Get(ctx, groups.Key("billing", "orders", old.Incarnation)); !errors.Is(err, metastore.ErrNotFound) {
		t.Fatalf("old offset still there after Delete: %v", err)
	}
}

// A commit whose response is lost (it applied) is recognised as the
// writer's own; one that failed before applying is an error and moves
// nothing.
func TestOffsetsAmbiguousCommit(t *testing.T) {
	ctx := context.Background()
	r := newOfsRig(t)
	info := r.create(t, "orders")
	o := groups.OffsetsOf(r.star)
	key := groups.Key("billing", "orders", info.Incarnation)
	var mu sync.Mutex
	next := fault.None
	r.meta.SetHook(func(call fault.Call) fault.Fault {
		op, keys := call.Op, call.Keys
		mu.Lock()
		defer mu.Unlock()
		if op == fault.Commit && len(keys) == 2 && keys[1] == key && next != fault.None {
			f := next
			next = fault.None
			return fault.Fault{Kind: f}
		}
		return fault.Fault{}
	})
	setFault := func(k fault.Kind) { mu.Lock(); next = k; mu.Unlock() }

	prev, _ := o.Get(ctx, "billing", "orders")
	setFault(fault.Ambiguous)
	got, err := o.Commit(ctx, prev, 4)
	if err != nil || got.Next != 4 {
		t.Fatalf("commit that applied and then failed: %+v, %v; want it recognised (Next 4)", got, err)
	}
	if n := r.meta.Injected().Ambiguous; n != 1 {
		t.Fatalf("the hook did not fire (%d ambiguous calls): the op or key names changed?", n)
	}
	setFault(fault.Fail)
	if _, err := o.Commit(ctx, got, 9); err == nil || errors.Is(err, groups.ErrConflict) {
		t.Fatalf("commit that failed before applying: %v, want a metastore error", err)
	}
	if now, _ := o.Get(ctx, "billing", "orders"); now.Next != 4 {
		t.Fatalf("a failed commit moved the offset to %d", now.Next)
	}
}
