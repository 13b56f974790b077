package loglet

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// settleRig is a star over Mem stores with settlement running fast.
type settleRig struct {
	meta *metastore.Mem
	std  *objstore.Mem
	exp  [3]*objstore.Mem
	cfg  Config
}

func newSettleRig() *settleRig {
	r := &settleRig{meta: metastore.NewMem(), std: objstore.NewMem()}
	for i := range r.exp {
		r.exp[i] = objstore.NewMem()
	}
	r.cfg = Config{Star: "s1", Owner: "p1", Meta: r.meta, CreateOnAppend: true, Logger: testLogger(),
		AbsorbInterval: 2 * time.Millisecond, SettleInterval: 5 * time.Millisecond,
		Standard: ClassConfig{Stores: []objstore.Store{r.std}, FlushDeadline: time.Millisecond},
		Express:  ClassConfig{Stores: []objstore.Store{r.exp[0], r.exp[1], r.exp[2]}, FlushDeadline: time.Millisecond}}
	return r
}

// transitKeys counts the chain slot objects left in every bucket.
func (r *settleRig) transitKeys() int {
	n := 0
	for _, b := range append([]*objstore.Mem{r.std}, r.exp[:]...) {
		for _, k := range b.Keys() {
			if strings.HasPrefix(k, "chains/") {
				n++
			}
		}
	}
	return n
}

// waitSettled waits, in a synctest bubble (see quiesceUntil), until both
// chains' trim cursors reach the end of the chain: every flight uploaded
// is absorbed, settled and trimmed. Every round settled is not enough: the
// last acked flight may not be absorbed yet, and its copies (two of three,
// if the third PUT is still on its way) are then still there. The star is
// fresh, so its chains start at slot 0 of epoch 1 and the cursor reaches
// Flights.
func waitSettled(t *testing.T, s *Star) {
	t.Helper()
	settled := func() bool {
		st := s.Stats()
		done := true
		for _, cs := range []*ClassStats{st.Standard, st.Express} {
			if cs == nil {
				continue
			}
			if cs.Settle.UnsettledRounds > 0 || cs.Settle.Passes == 0 || cs.Settle.TrimNext < cs.Flights {
				done = false
			} else if cs.Settle.TransitBytes != 0 {
				t.Fatalf("every round settled, yet %d transit bytes held", cs.Settle.TransitBytes)
			}
		}
		return done
	}
	if !quiesceUntil(30*time.Second, 2*time.Millisecond, settled) {
		st := s.Stats()
		t.Fatalf("settlement did not catch up: standard %+v express %+v", st.Standard.Settle, st.Express.Settle)
	}
}

// TestSettleServesHistoryFromSettledObjectsAlone: after settlement, every
// acked record reads back byte for byte with every chain slot object gone
// (trim deleted the settled ones; the test deletes whatever is left),
// through the leader and through a fresh Reader; and a fresh Open after a
// clean Close finds every stream at its tail.
func TestSettleServesHistoryFromSettledObjectsAlone(t *testing.T) {
	synctest.Test(t, testSettleServesHistoryFromSettledObjectsAlone)
}

func testSettleServesHistoryFromSettledObjectsAlone(t *testing.T) {
	r := newSettleRig()
	ctx := context.Background()
	s, err := Open(ctx, r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateStream(ctx, "e", StreamOptions{Class: Express}); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{}
	for i := 0; i < 200; i++ {
		for _, st := range []string{"a", "b", "e"} {
			body := fmt.Sprintf("%s-%d-%s", st, i, strings.Repeat("x", i%50))
			ack, err := s.Append(ctx, st, Batch{Records: []Record{{Body: []byte(body)}}})
			if err != nil {
				t.Fatal(err)
			}
			if ack.Start != uint64(len(want[st])) {
				t.Fatalf("%s: acked at %d, want %d", st, ack.Start, len(want[st]))
			}
			want[st] = append(want[st], body)
		}
	}
	waitSettled(t, s)
	st := s.Stats()
	if st.Standard.Settle.Objects == 0 || st.Express.Settle.Objects == 0 || st.Express.Settle.DeletedCopies == 0 {
		t.Fatalf("nothing settled: standard %+v express %+v", st.Standard.Settle, st.Express.Settle)
	}
	written := int(st.Standard.Flights) + 3*int(st.Express.Flights) // copies PUT
	left := r.transitKeys()
	t.Logf("transit objects: %d copies written, %d left; standard %+v; express %+v", written, left, st.Standard.Settle, st.Express.Settle)
	if left >= written || int(st.Standard.Settle.DeletedCopies+st.Express.Settle.DeletedCopies) < written-left {
		t.Fatalf("trim deleted too little: %d copies written, %d left, %d deleted", written, left, st.Standard.Settle.DeletedCopies+st.Express.Settle.DeletedCopies)
	}
	for _, b := range append([]*objstore.Mem{r.std}, r.exp[:]...) {
		for _, k := range b.Keys() {
			if strings.HasPrefix(k, "chains/") {
				if err := b.Delete(ctx, k); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	rd, err := NewReader(ReaderConfig{Meta: r.meta, Standard: []objstore.Store{r.std}, Express: []objstore.Store{r.exp[0], r.exp[1], r.exp[2]}, ReadCacheMiB: -1})
	if err != nil {
		t.Fatal(err)
	}
	check := func(who string, read func(string, uint64) (ReadResult, error)) {
		for name, bodies := range want {
			next := uint64(0)
			for next < uint64(len(bodies)) {
				res, err := read(name, next)
				if err != nil {
					t.Fatalf("%s: read %s at %d: %v", who, name, next, err)
				}
				if len(res.Records) == 0 {
					t.Fatalf("%s: read %s at %d: nothing", who, name, next)
				}
				for _, rec := range res.Records {
					if rec.Seq != next || string(rec.Record.Body) != bodies[next] {
						t.Fatalf("%s: %s seq %d: got seq %d %q, want %q", who, name, next, rec.Seq, rec.Record.Body, bodies[next])
					}
					next++
				}
			}
		}
	}
	check("fresh reader", func(name string, from uint64) (ReadResult, error) {
		return rd.Read(ctx, name, ReadQuery{Start: AtSeq(from), MaxRecords: 37})
	})
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(ctx, r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close(ctx)
	check("leader after reopen", func(name string, from uint64) (ReadResult, error) {
		return s2.Read(ctx, name, ReadQuery{Start: AtSeq(from), MaxRecords: 37})
	})
	for name, bodies := range want {
		ack, err := s2.Append(ctx, name, Batch{Records: []Record{{Body: []byte("after")}}})
		if err != nil || ack.Start != uint64(len(bodies)) {
			t.Fatalf("%s: append after reopen: %+v %v", name, ack, err)
		}
	}
	cur, _, err := chain.ReadTrimCursor(ctx, r.meta, "s1", Express)
	if err != nil || !chain.Start().Less(cur.At) {
		t.Fatalf("express trim cursor %+v %v", cur, err)
	}
}

// TestSettleTransitBytesHeld: Stats counts the flight copies absorbed
// rounds hold in the buckets until settlement frees them.
func TestSettleTransitBytesHeld(t *testing.T) {
	synctest.Test(t, testSettleTransitBytesHeld)
}

func testSettleTransitBytesHeld(t *testing.T) {
	r := newSettleRig()
	r.cfg.SettleInterval = -1 // off: nothing is freed
	ctx := context.Background()
	s, err := Open(ctx, r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	for i := 0; i < 20; i++ {
		if _, err := s.Append(ctx, "a", Batch{Records: []Record{{Body: []byte(fmt.Sprint(i))}}}); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, 30*time.Second, "every flight absorbed", func() bool { return s.Stats().Standard.FlightIndexBytes == 0 })
	st := s.Stats().Standard
	var stored int64
	for _, k := range r.std.Keys() {
		if strings.HasPrefix(k, "chains/") {
			obj, _ := r.std.Get(ctx, k, 0, -1)
			stored += int64(len(obj))
		}
	}
	if st.Settle.TransitBytes != stored || stored == 0 {
		t.Fatalf("TransitBytes %d, the bucket holds %d bytes of flights", st.Settle.TransitBytes, stored)
	}
}

// manyOpensThenSettle opens a star five times with settlement off, writing
// each time (the third process crashes, so epoch 3's cut is a fence's; the
// others close cleanly, their cuts are seals), then, after prep, opens it
// with settlement on and waits, on the fake clock of a synctest bubble,
// until both chains' trim cursors reach the live epoch. It checks every
// acked record reads back, every ref is settled or points into the live
// epoch, and no slot of an earlier epoch below its cut is left in any
// bucket. cuts are the cuts of the five epochs as the last record before
// prep carried them; prep may rewrite the records.
func manyOpensThenSettle(t *testing.T, prep func(w *world, cuts map[Class][]chain.Cut)) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		w := newWorld(t)
		g := newLedger()
		off := func(c *Config) { c.SettleInterval = -1 }
		for i := 1; i <= 5; i++ {
			p, err := w.open(fmt.Sprint("p", i), off)
			if err != nil {
				t.Fatalf("open %d: %v", i, err)
			}
			if i == 1 {
				if _, err := p.star.CreateStream(ctx, "e", StreamOptions{Class: Express}); err != nil {
					t.Fatal(err)
				}
			}
			for j := 0; j < 12; j++ {
				for _, st := range []string{"a", "e"} {
					if _, err := g.append(t, p.star, st, fmt.Sprintf("p%d-%d", i, j)); err != nil {
						t.Fatal(err)
					}
				}
			}
			if i == 3 {
				p.kill()
				continue
			}
			if err := p.star.Close(ctx); err != nil {
				t.Fatalf("close %d: %v", i, err)
			}
		}
		cuts := map[Class][]chain.Cut{}
		for _, c := range []Class{Standard, Express} {
			rec, _, err := chain.ReadEpoch(ctx, w.meta, "s1", c)
			if err != nil {
				t.Fatal(err)
			}
			cuts[c] = append(append(cuts[c], rec.Cuts...), *rec.Seal)
		}
		if prep != nil {
			prep(w, cuts)
		}
		p, err := w.open("p6", func(c *Config) { c.SettleInterval = 5 * time.Millisecond })
		if err != nil {
			t.Fatal(err)
		}
		for j := 0; j < 12; j++ {
			for _, st := range []string{"a", "e"} {
				if _, err := g.append(t, p.star, st, fmt.Sprintf("p6-%d", j)); err != nil {
					t.Fatal(err)
				}
			}
		}
		atLive := func() bool {
			st := p.star.Stats()
			for _, cs := range []*ClassStats{st.Standard, st.Express} {
				if cs.Settle.TrimEpoch < cs.Epoch || cs.Settle.TrimNext < cs.ReleasePoint || cs.Settle.UnsettledRounds > 0 {
					return false
				}
			}
			return true
		}
		if !quiesceUntil(10*time.Minute, 5*time.Millisecond, atLive) {
			st := p.star.Stats()
			t.Fatalf("settlement never reached the live epoch: standard %+v (epoch %d); express %+v (epoch %d)",
				st.Standard.Settle, st.Standard.Epoch, st.Express.Settle, st.Express.Epoch)
		}
		g.verify(t, p.star)
		live := p.star.Stats().Standard.Epoch
		items, err := w.meta.Scan(ctx, "refs/", "", 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			ref, err := absorb.DecodeRef(it.Value)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ref.Extents {
				if _, _, epoch, _, ok := chain.ParseSlotKey(e.Key); ok && epoch < live {
					t.Fatalf("ref %s still points into epoch %d, settled long ago: %s", it.Key, epoch, e.Key)
				}
			}
		}
		for c, bkts := range map[Class][]*objstore.Mem{Standard: {w.std}, Express: w.exp[:]} {
			cutOf := map[uint64]uint64{}
			for _, k := range cuts[c] {
				cutOf[k.Epoch] = k.Slot
			}
			for _, b := range bkts {
				for _, k := range b.Keys() {
					_, _, epoch, slot, ok := chain.ParseSlotKey(k)
					if !ok || epoch >= live {
						continue
					}
					if cut, known := cutOf[epoch]; !known || slot < cut {
						t.Fatalf("%s: slot %s of a settled epoch (cut %d, known %v) was not trimmed", c, k, cut, known)
					}
				}
			}
		}
	})
}

// TestSettleTurnedOnAfterManyOpens (issue "A stream's life without races",
// item 3): turning settlement on for a star opened five times with it off
// settles and trims everything. The epoch records used to drop the cuts of
// old epochs while settlement was off, and every pass then failed with
// "the cut of an epoch is unknown: epoch 1".
func TestSettleTurnedOnAfterManyOpens(t *testing.T) {
	manyOpensThenSettle(t, nil)
}

// TestSettleRederivesLostCuts: a star whose epoch records already lost
// the cuts of old epochs (written by a version that pruned them) settles
// once settlement is on: the pass re-derives each lost cut by a fence of
// the epoch from the trim cursor, and finds the cut the record had.
func TestSettleRederivesLostCuts(t *testing.T) {
	manyOpensThenSettle(t, func(w *world, cuts map[Class][]chain.Cut) {
		ctx := context.Background()
		for _, c := range []Class{Standard, Express} {
			if len(cuts[c]) != 5 {
				t.Fatalf("%s: the record carries cuts %v, want one per epoch", c, cuts[c])
			}
			it, err := w.meta.Get(ctx, chain.EpochKey("s1", c))
			if err != nil {
				t.Fatal(err)
			}
			var rec chain.EpochRecord
			if err := json.Unmarshal(it.Value, &rec); err != nil {
				t.Fatal(err)
			}
			rec.Cuts = rec.Cuts[len(rec.Cuts)-1:] // the old floor: the checkpoint's epoch only
			val, _ := json.Marshal(rec)
			if _, err := w.meta.Put(ctx, chain.EpochKey("s1", c), val, it.Version); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestSettleDeletesDoomedObjectsWhenIdle (issue "A stream's life without
// races", item 9): settled objects merged away wait DoomedGrace, then a
// pass deletes them even if the star has gone idle. Passes used to run
// only when new data was absorbed, so the last merges' objects stayed for
// good. On the fake clock of a synctest bubble.
func TestSettleDeletesDoomedObjectsWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		r := newSettleRig()
		r.cfg.doomedGrace = time.Minute
		s, err := Open(ctx, r.cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(ctx)
		doomed := func() []metastore.Item { // merged away (not pending: no ref named)
			items, err := r.meta.Scan(ctx, "stars/s1/standard/doomed/", "", 0)
			if err != nil {
				t.Fatal(err)
			}
			var out []metastore.Item
			for _, it := range items {
				if !strings.Contains(string(it.Value), `"ref"`) {
					out = append(out, it)
				}
			}
			return out
		}
		// Write until a merge dooms an object (each pass settles what the
		// last rounds absorbed into a small object the next one merges).
		for i := 0; len(doomed()) == 0; i++ {
			if i == 1000 {
				t.Fatal("no settled object was ever merged away")
			}
			if _, err := s.Append(ctx, "a", Batch{Records: []Record{{Body: []byte(fmt.Sprint("r", i))}}}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond) // the bubble's clock: a pass runs
		}
		var objs []string
		for _, it := range doomed() {
			var d struct {
				Key string `json:"key"`
			}
			if err := json.Unmarshal(it.Value, &d); err != nil {
				t.Fatal(err)
			}
			objs = append(objs, d.Key)
		}
		// Idle from here on.
		if !quiesceUntil(10*time.Minute, time.Second, func() bool { return len(doomed()) == 0 }) {
			t.Fatalf("%d doomed objects still there after 10m idle (grace %v): %v", len(doomed()), time.Minute, objs)
		}
		for _, k := range objs {
			if _, err := r.std.Get(ctx, k, 0, -1); err == nil {
				t.Fatalf("doomed object %s is still in the bucket, its marker gone", k)
			}
		}
	})
}

// TestSettleSplitRoundsKnowTheirRefs (issue 24, item 1): on a metastore
// that takes few ops a Commit (etcd: 128), a round of many streams' refs is
// split into Commits of chunks; each chunk's Commit returns its refs'
// versions, so the leader still knows every ref and its passes scan no
// stream's refs. Before, a split round reported none, the leader's
// knowledge restarted after every round, and on etcd at 10,000 streams
// settlement scanned every stream's refs every pass (~400 requests a
// second).
func TestSettleSplitRoundsKnowTheirRefs(t *testing.T) {
	synctest.Test(t, testSettleSplitRoundsKnowTheirRefs)
}

func testSettleSplitRoundsKnowTheirRefs(t *testing.T) {
	w := newWorld(t)
	p, err := w.open("a", func(c *Config) {
		c.Meta = fewOps{Store: c.Meta}
		c.SettleInterval = 100 * time.Millisecond
		c.AbsorbInterval = time.Second // rounds of many refs
	})
	if err != nil {
		t.Fatal(err)
	}
	const streams = 60
	for i := 0; i < streams; i++ {
		appendN(t, p.star, fmt.Sprintf("s%02d", i), 1, 2, nil)
	}
	time.Sleep(5 * time.Second)
	st := p.star.Stats()
	var refs, scans, settled uint64
	for _, cs := range []*ClassStats{st.Standard, st.Express} {
		refs += cs.AbsorbRefs
		scans += cs.Settle.RefScans
		settled += cs.Settle.SettledRefs
	}
	if settled < streams {
		t.Fatalf("%d settled refs for %d streams (%d refs absorbed)", settled, streams, refs)
	}
	if rounds := st.Standard.AbsorbRounds + st.Express.AbsorbRounds; refs < 8*rounds {
		t.Fatalf("%d refs in %d rounds: no round needed splitting, the test tests nothing", refs, rounds)
	}
	if scans != 0 {
		t.Fatalf("%d ref scans for %d streams whose refs split rounds wrote, want none", scans, streams)
	}
}

// fewOps is a metastore that takes 8 ops a Commit, so that rounds of many
// refs split.
type fewOps struct{ metastore.Store }

func (fewOps) MaxCommitOps() int             { return 8 }
func (m fewOps) MaxCommitBytes() int         { return metastore.MaxCommitBytes(m.Store) }
func (m fewOps) OpBytes(op metastore.Op) int { return metastore.OpBytes(m.Store, op) }

// TestSettleScansMarkersOnlyWhenDue (issue 24, item 1): a pass scans the
// doomed and pending markers only when the leader does not know that
// none is due yet: a scan reads every marker waiting for its grace (a few
// a stream merged within the last minute), which every pass of a busy
// star would otherwise pay, a request per 256 markers.
func TestSettleScansMarkersOnlyWhenDue(t *testing.T) {
	synctest.Test(t, testSettleScansMarkersOnlyWhenDue)
}

func testSettleScansMarkersOnlyWhenDue(t *testing.T) {
	w := newWorld(t)
	var cnt *markerScans
	p, err := w.open("a", func(c *Config) {
		cnt = &markerScans{Store: c.Meta}
		c.Meta = cnt
		c.SettleInterval = 100 * time.Millisecond
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 30; i++ { // 3 s of appends: passes merge, within the grace
		for s := 0; s < 5; s++ {
			appendN(t, p.star, fmt.Sprintf("m%d", s), 1, 1, nil)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second)
	st := p.star.Stats()
	passes := st.Standard.Settle.Passes + st.Express.Settle.Passes
	merged := st.Standard.Settle.Merged + st.Express.Settle.Merged
	scans := cnt.n.Load()
	t.Logf("%d passes, %d merged, %d marker scans", passes, merged, scans)
	if merged == 0 || passes < 10 {
		t.Fatalf("%d passes, %d merged: the test tests nothing", passes, merged)
	}
	if scans > 4 { // each chain's first pass, and slack
		t.Fatalf("%d scans of the markers in %d passes, none of them due (a minute's grace)", scans, passes)
	}
}

// markerScans counts the Scans of settlement's markers.
type markerScans struct {
	metastore.Store
	n atomic.Int64
}

func (m *markerScans) Scan(ctx context.Context, prefix, after string, limit int) ([]metastore.Item, error) {
	if strings.Contains(prefix, "/doomed/") {
		m.n.Add(1)
	}
	return m.Store.Scan(ctx, prefix, after, limit)
}

func (m *markerScans) MaxCommitOps() int           { return metastore.MaxCommitOps(m.Store) }
func (m *markerScans) MaxCommitBytes() int         { return metastore.MaxCommitBytes(m.Store) }
func (m *markerScans) OpBytes(op metastore.Op) int { return metastore.OpBytes(m.Store, op) }
