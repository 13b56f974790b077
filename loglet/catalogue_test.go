package loglet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// heldGet is a metastore that, once armed, holds the answer of the first
// Get of one key: the Get reads the store at once, then waits for release
// before returning what it read (a lookup that read the record and was
// descheduled before it cached it).
type heldGet struct {
	metastore.Store
	key     string
	mu      sync.Mutex
	armed   bool
	read    chan struct{} // closed once the held Get has read the store
	release chan struct{} // closed by the test: the held Get returns
}

func (h *heldGet) arm(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.key, h.armed = key, true
	h.read, h.release = make(chan struct{}), make(chan struct{})
}

func (h *heldGet) Get(ctx context.Context, key string) (metastore.Item, error) {
	h.mu.Lock()
	hold := h.armed && key == h.key
	if hold {
		h.armed = false
	}
	h.mu.Unlock()
	it, err := h.Store.Get(ctx, key)
	if hold {
		close(h.read)
		<-h.release
	}
	return it, err
}

// TestNoAckIntoAnIncarnationDeletedBefore (issue "A stream's life without
// races", item 1): a lookup that missed the cache and read the stream
// record just before DeleteStream committed must not put the deleted
// incarnation back in the cache once DeleteStream has returned. Before, it
// did: appends made after DeleteStream returned were acked into the deleted
// incarnation, which nothing can read and whose data is reclaimed. With
// CreateOnAppend, such an append creates the name afresh instead.
func TestNoAckIntoAnIncarnationDeletedBefore(t *testing.T) {
	for _, create := range []bool{false, true} {
		t.Run(fmt.Sprintf("create-on-append=%v", create), func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t)
			held := &heldGet{}
			p1, err := w.open("p1", func(c *Config) {
				c.CreateOnAppend = create
				held.Store = c.Meta
				c.Meta = held
			})
			if err != nil {
				t.Fatal(err)
			}
			// The stream lives on s1 but is created (after s1's leader
			// opened) by a process leading s2, so s1's leader has not
			// cached it: its first append misses.
			p0, err := w.open("p0", func(c *Config) { c.Star, c.Stars = "s2", []string{"s1", "s2"} })
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p0.star.CreateStream(ctx, "x", StreamOptions{Class: Standard, Star: "s1"}); err != nil {
				t.Fatal(err)
			}
			old := streamID(t, w.meta, "x")
			held.arm(chain.StreamRecordKey("x"))
			racer := make(chan error, 1)
			go func() {
				_, err := p1.star.Append(ctx, "x", Batch{Records: []Record{{Body: []byte("racing the delete")}}})
				racer <- err
			}()
			select {
			case <-held.read: // the lookup read the record: the delete has not committed
			case err := <-racer:
				t.Fatalf("the append did not look the stream up: %v", err)
			}
			if err := p1.star.DeleteStream(ctx, "x"); err != nil {
				t.Fatal(err)
			}
			close(held.release) // DeleteStream has returned; now the lookup goes on
			err = <-racer
			ack, err2 := p1.star.Append(ctx, "x", Batch{Records: []Record{{Body: []byte("after the delete")}}})
			if !create {
				if !errors.Is(err, ErrStreamNotFound) {
					t.Errorf("append whose lookup raced DeleteStream and was admitted after it returned: %v, want ErrStreamNotFound", err)
				}
				if !errors.Is(err2, ErrStreamNotFound) {
					t.Fatalf("append made after DeleteStream returned: ack %+v, err %v, want ErrStreamNotFound (acked into the deleted incarnation)", ack, err2)
				}
				if _, err := p1.star.CheckTail(ctx, "x"); !errors.Is(err, ErrStreamNotFound) {
					t.Fatalf("CheckTail after the delete: %v, want ErrStreamNotFound", err)
				}
				return
			}
			if err != nil || err2 != nil {
				t.Fatalf("appends after the delete, creating the name afresh: %v, %v", err, err2)
			}
			it, err := w.meta.Get(ctx, chain.StreamRecordKey("x"))
			if err != nil {
				t.Fatalf("the appends after the delete were acked, but the name has no record: %v (acked into the deleted incarnation)", err)
			}
			if rec, _, err := decodeStreamRecord(it); err != nil || rec.id() == old {
				t.Fatalf("record after the delete: %+v %v, want a new incarnation", rec, err)
			}
			if res, err := p1.star.Read(ctx, "x", ReadQuery{Start: AtSeq(0)}); err != nil || len(res.Records) != 2 {
				t.Fatalf("the new incarnation holds %d records (%v), want both appends", len(res.Records), err)
			}
		})
	}
}

// ambiguousDelete makes the next DeleteStream of name over meta ambiguous:
// its Commit applies and reports failure, and the re-read that would learn
// the outcome fails too.
func ambiguousDelete(meta *metastore.FaultStore, name string) {
	key := chain.StreamRecordKey(name)
	committed := false // the hook runs under the FaultStore's lock
	meta.SetHook(func(call fault.Call) fault.Fault {
		op, keys := call.Op, call.Keys
		switch {
		case op == fault.Commit && slices.Contains(keys, key):
			committed = true
			return fault.Fault{Kind: fault.Ambiguous}
		case op == fault.Get && committed && keys[0] == key:
			return fault.Fault{Kind: fault.Fail}
		}
		return fault.Fault{}
	})
}

// deletedLeft fails t if any ref or marker of the deleted incarnation id
// is left.
func deletedLeft(t *testing.T, meta metastore.Store, id, when string) {
	t.Helper()
	if ends := refEnds(t, meta, id); len(ends) > 0 {
		t.Errorf("%s: refs of the deleted incarnation left, ending at %v", when, ends)
	}
	if _, err := meta.Get(context.Background(), chain.DeletedKey(id)); !errors.Is(err, metastore.ErrNotFound) {
		t.Errorf("%s: the deleted incarnation's marker: %v, want it deleted", when, err)
	}
}

// TestDeleteStreamReclaimsRefsAbsorbedAfterIt (issue "A stream's life
// without races", item 8): batches acked before DeleteStream but absorbed
// after it leave refs its reclaim could not see; with settlement off,
// nothing deleted them before. The delete's marker keeps the reclaim due
// until the absorb has passed everything admitted to the incarnation, and
// the retention pass of the star's leader (here a successor's, after the
// deleting process closed) reclaims them and then drops the marker.
func TestDeleteStreamReclaimsRefsAbsorbedAfterIt(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	p1, err := w.open("p1", func(c *Config) { c.SettleInterval = -1 }) // settlement off: nothing else reclaims the refs
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, p1.star, "d", 1, 5, nil)
	id := streamID(t, w.meta, "d")
	p1.meta.SetHook(func(call fault.Call) fault.Fault {
		op, keys := call.Op, call.Keys
		if op == fault.Commit && slices.ContainsFunc(keys, func(k string) bool { return strings.HasPrefix(k, "refs/") }) {
			return fault.Fault{Kind: fault.Fail} // every absorb round fails, for now
		}
		return fault.Fault{}
	})
	appendN(t, p1.star, "d", 3, 5, nil) // acked, not absorbed
	if err := p1.star.DeleteStream(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	p1.star.runRetention(ctx, time.Now())
	if _, err := w.meta.Get(ctx, chain.DeletedKey(id)); err != nil {
		t.Errorf("the deleted incarnation's marker, with its acked batches not absorbed yet: %v, want it kept", err)
	}
	p1.meta.SetHook(nil)
	if err := p1.star.Close(ctx); err != nil { // absorbs what is released
		t.Fatal(err)
	}
	if len(refEnds(t, w.meta, id)) == 0 {
		t.Fatal("the close absorbed no ref of the deleted incarnation: the test checks nothing")
	}
	p2, err := w.open("p2", nil)
	if err != nil {
		t.Fatal(err)
	}
	p2.star.runRetention(ctx, time.Now())
	deletedLeft(t, w.meta, id, "after the successor's retention pass")
}

// TestAmbiguousDeleteStreamReclaims (item 8): a DeleteStream whose Commit
// applied but reported failure, and whose re-read could not learn it,
// returns the error; its retry finds no record (ErrStreamNotFound) and
// still reclaims the incarnation, from the marker the Commit wrote. Before,
// the retry queued nothing and the refs stayed forever. A Commit that
// reports failure but whose re-read shows the record gone is a success.
func TestAmbiguousDeleteStreamReclaims(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	p0, err := w.open("p0", nil)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, p0.star, "d", 3, 5, nil)
	appendN(t, p0.star, "e", 3, 5, nil)
	if err := p0.star.Close(ctx); err != nil { // absorbs both: they have refs
		t.Fatal(err)
	}
	p1, err := w.open("p1", nil)
	if err != nil {
		t.Fatal(err)
	}
	d, e := streamID(t, w.meta, "d"), streamID(t, w.meta, "e")
	if len(refEnds(t, w.meta, d)) == 0 || len(refEnds(t, w.meta, e)) == 0 {
		t.Fatal("no refs to reclaim: the test checks nothing")
	}

	ambiguousDelete(p1.meta, "d")
	err = p1.star.DeleteStream(ctx, "d")
	p1.meta.SetHook(nil)
	if err == nil {
		t.Fatal("DeleteStream whose outcome could not be learned reported success")
	}
	if err := p1.star.DeleteStream(ctx, "d"); !errors.Is(err, ErrStreamNotFound) {
		t.Fatalf("retried DeleteStream: %v, want ErrStreamNotFound", err)
	}
	deletedLeft(t, w.meta, d, "after the retried ambiguous delete")

	p1.meta.SetHook(func(call fault.Call) fault.Fault {
		op, keys := call.Op, call.Keys
		if op == fault.Commit && slices.Contains(keys, chain.StreamRecordKey("e")) {
			return fault.Fault{Kind: fault.Ambiguous}
		}
		return fault.Fault{}
	})
	err = p1.star.DeleteStream(ctx, "e")
	p1.meta.SetHook(nil)
	if err != nil {
		t.Fatalf("DeleteStream whose Commit applied and reported failure, the record then read gone: %v, want nil", err)
	}
	deletedLeft(t, w.meta, e, "after the ambiguous delete learned it applied")
}

// heldPut is a bucket that, once armed, holds the first PUT of a chain
// slot until release.
type heldPut struct {
	objstore.Store
	mu            sync.Mutex
	armed         bool
	held, release chan struct{}
}

func (h *heldPut) arm() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed, h.held, h.release = true, make(chan struct{}), make(chan struct{})
}

func (h *heldPut) PutIfAbsent(ctx context.Context, key string, body []byte) error {
	h.mu.Lock()
	hold := h.armed && strings.HasPrefix(key, "chains/")
	if hold {
		h.armed = false
	}
	h.mu.Unlock()
	if hold {
		close(h.held)
		select {
		case <-h.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return h.Store.PutIfAbsent(ctx, key, body)
}

// committed is a metastore that closes done once a Commit touching key
// has applied.
type committed struct {
	metastore.Store
	key  string
	done chan struct{}
	once sync.Once
}

func (c *committed) Commit(ctx context.Context, ops []metastore.Op) ([]metastore.Version, error) {
	vs, err := c.Store.Commit(ctx, ops)
	if err == nil && slices.ContainsFunc(ops, func(op metastore.Op) bool { return op.Key == c.key }) {
		c.once.Do(func() { close(c.done) })
	}
	return vs, err
}

// TestDeleteStreamWaitsForTheAppendsAdmittedBeforeIt (item 1): an append
// admitted before the delete took effect is ordered before it and keeps
// its course (acked), and DeleteStream returns only once it has its
// outcome: no ack for the incarnation follows DeleteStream's return.
func TestDeleteStreamWaitsForTheAppendsAdmittedBeforeIt(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	put := &heldPut{}
	sig := &committed{key: chain.StreamRecordKey("x"), done: make(chan struct{})}
	p1, err := w.open("p1", func(c *Config) {
		put.Store = c.Standard.Stores[0]
		c.Standard.Stores = []objstore.Store{put}
		sig.Store = c.Meta
		c.Meta = sig
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p1.star.CreateStream(ctx, "x", StreamOptions{Class: Standard}); err != nil {
		t.Fatal(err)
	}
	acked := p1.star.Stats().Standard.AckedBatches
	put.arm()
	racer := make(chan error, 1)
	go func() {
		_, err := p1.star.Append(ctx, "x", Batch{Records: []Record{{Body: []byte("admitted before the delete")}}})
		racer <- err
	}()
	<-put.held // admitted: its flight's PUT is under way
	go func() {
		<-sig.done // the delete has committed: let the flight land
		close(put.release)
	}()
	if err := p1.star.DeleteStream(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if got := p1.star.Stats().Standard.AckedBatches; got != acked+1 {
		t.Errorf("DeleteStream returned with %d batches acked, want %d: the append admitted before it had no outcome yet", got, acked+1)
	}
	if err := <-racer; err != nil {
		t.Errorf("append admitted before the delete: %v, want acked (it is ordered before the delete)", err)
	}
}

// TestCacheNeverGoesBackToAnOlderIncarnation (found by the catalogue run of
// the core simulator): a lookup reads incarnation i1 and is descheduled;
// another process deletes the stream and creates it again (i2, of which
// this leader learns nothing until its retention pass); a second append
// here reads i2 and caches it. When the first lookup's reply lands, the
// cache moved since it looked: it reads again, and its append goes to i2.
// Before, it replaced i2 with i1 in the cache: it and every later append
// were acked into the deleted incarnation.
func TestCacheNeverGoesBackToAnOlderIncarnation(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	held := &heldGet{}
	p1, err := w.open("p1", func(c *Config) {
		held.Store = c.Meta
		c.Meta = held
	})
	if err != nil {
		t.Fatal(err)
	}
	p0, err := w.open("p0", func(c *Config) { c.Star, c.Stars = "s2", []string{"s1", "s2"} })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p0.star.CreateStream(ctx, "x", StreamOptions{Class: Standard, Star: "s1"}); err != nil {
		t.Fatal(err)
	}
	held.arm(chain.StreamRecordKey("x"))
	racer := make(chan error, 1)
	go func() {
		_, err := p1.star.Append(ctx, "x", Batch{Records: []Record{{Body: []byte("late lookup")}}})
		racer <- err
	}()
	select {
	case <-held.read: // the lookup read i1
	case err := <-racer:
		t.Fatalf("the append did not look the stream up: %v", err)
	}
	if err := p0.star.DeleteStream(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	info, err := p0.star.CreateStream(ctx, "x", StreamOptions{Class: Standard, Star: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p1.star.Append(ctx, "x", Batch{Records: []Record{{Body: []byte("into i2")}}}); err != nil {
		t.Fatal(err)
	}
	close(held.release)
	if err := <-racer; err != nil {
		t.Fatalf("the append whose lookup read i1: %v", err)
	}
	if _, err := p1.star.Append(ctx, "x", Batch{Records: []Record{{Body: []byte("after")}}}); err != nil {
		t.Fatal(err)
	}
	if id := streamID(t, w.meta, "x"); id != chain.StreamID("x", info.Incarnation) {
		t.Fatalf("the stream's record is %s, want the re-created %s", id, info.Incarnation)
	}
	res, err := p1.star.Read(ctx, "x", ReadQuery{Start: AtSeq(0)})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range res.Records {
		got = append(got, string(r.Body))
	}
	if len(got) != 3 || got[0] != "into i2" {
		t.Fatalf("the re-created incarnation holds %q, want the three appends made after it was created (some went to the deleted one)", got)
	}
}
