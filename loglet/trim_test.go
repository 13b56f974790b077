package loglet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

func TestTrimStreamLiveness(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, Standard, 1, 1, nil)
	s := r.star
	info, err := s.CreateStream(ctx, "live", StreamOptions{Class: Standard, Star: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	id := chain.StreamID(info.Name, info.Incarnation)
	if live, trim, err := s.streamLiveness(ctx, id); err != nil || !live || trim != 0 {
		t.Fatalf("fresh stream: live=%v trim=%d err=%v, want live, 0", live, trim, err)
	}
	if _, err := s.Append(ctx, "live", Batch{Records: []Record{{Body: []byte("a")}, {Body: []byte("b")}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Trim(ctx, "live", 1); err != nil {
		t.Fatal(err)
	}
	if live, trim, err := s.streamLiveness(ctx, id); err != nil || !live || trim != 1 {
		t.Fatalf("trimmed stream: live=%v trim=%d err=%v, want live, 1", live, trim, err)
	}
	if err := s.DeleteStream(ctx, "live"); err != nil {
		t.Fatal(err)
	}
	if live, _, err := s.streamLiveness(ctx, id); err != nil || live {
		t.Fatalf("deleted stream: live=%v err=%v, want not live", live, err)
	}
	info2, err := s.CreateStream(ctx, "live", StreamOptions{Class: Standard, Star: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if live, _, err := s.streamLiveness(ctx, id); err != nil || live {
		t.Fatalf("old incarnation after re-create: live=%v err=%v, want not live", live, err)
	}
	if live, _, err := s.streamLiveness(ctx, chain.StreamID(info2.Name, info2.Incarnation)); err != nil || !live {
		t.Fatalf("new incarnation: live=%v err=%v, want live", live, err)
	}
	if live, _, err := s.streamLiveness(ctx, "never"); err != nil || live {
		t.Fatalf("unknown stream: live=%v err=%v", live, err)
	}
}

// appendN appends n batches of per records each to stream, bodies "stream#seq".
func appendN(t *testing.T, s *Star, stream string, n, per int, ts func(seq int) int64) {
	t.Helper()
	seq := 0
	if tail, err := s.CheckTail(context.Background(), stream); err == nil {
		seq = int(tail.Seq)
	}
	for i := 0; i < n; i++ {
		var recs []Record
		for j := 0; j < per; j++ {
			r := Record{Body: []byte(fmt.Sprintf("%s#%d", stream, seq))}
			if ts != nil {
				r.Timestamp = ts(seq)
			}
			recs = append(recs, r)
			seq++
		}
		if _, err := s.Append(context.Background(), stream, Batch{Records: recs}); err != nil {
			t.Fatal(err)
		}
	}
}

// firstSeqs reads stream from start through every path a leader and a
// fresh Reader have, and returns the first seq each returned (-1: none),
// failing if any returns a record below min or a wrong body.
func firstSeqs(t *testing.T, s *Star, rd *Reader, stream string, start Position, min uint64) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[string]int64{}
	check := func(path string, recs []SequencedRecord, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out[path] = -1
		if len(recs) > 0 {
			out[path] = int64(recs[0].Seq)
		}
		for _, r := range recs {
			if r.Seq < min {
				t.Fatalf("%s returned seq %d below the trim point %d", path, r.Seq, min)
			}
			if want := fmt.Sprintf("%s#%d", stream, r.Seq); string(r.Body) != want {
				t.Fatalf("%s: seq %d holds %q, want %q", path, r.Seq, r.Body, want)
			}
		}
	}
	res, err := s.Read(ctx, stream, ReadQuery{Start: start})
	check("leader read", res.Records, err)
	sess, err := s.OpenReadSession(ctx, stream, ReadQuery{Start: start})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := sess.Recv(ctx)
	check("leader session", recs, err)
	if rd != nil {
		res, err := rd.Read(ctx, stream, ReadQuery{Start: start})
		check("reader read", res.Records, err)
		rs, err := rd.OpenReadSession(ctx, stream, ReadQuery{Start: start})
		if err != nil {
			t.Fatal(err)
		}
		recs, err := rs.Recv(ctx)
		check("reader session", recs, err)
	}
	return out
}

func wantFirst(t *testing.T, got map[string]int64, want int64) {
	t.Helper()
	for path, first := range got {
		if first != want {
			t.Errorf("%s: first record %d, want %d", path, first, want)
		}
	}
}

// refEnds lists the ends of the refs of stream id in the metastore.
func refEnds(t *testing.T, meta metastore.Store, id string) []uint64 {
	t.Helper()
	items, err := meta.Scan(context.Background(), chain.RefPrefix(id), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var ends []uint64
	for _, it := range refsOf(id, items) {
		ref, err := absorb.DecodeRef(it.Value)
		if err != nil {
			t.Fatal(err)
		}
		ends = append(ends, ref.End)
	}
	return ends
}

func streamID(t *testing.T, meta metastore.Store, name string) string {
	t.Helper()
	it, err := meta.Get(context.Background(), chain.StreamRecordKey(name))
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err := decodeStreamRecord(it)
	if err != nil {
		t.Fatal(err)
	}
	return rec.id()
}

func trimSeqOf(t *testing.T, meta metastore.Store, name string) uint64 {
	t.Helper()
	it, err := meta.Get(context.Background(), chain.StreamRecordKey(name))
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err := decodeStreamRecord(it)
	if err != nil {
		t.Fatal(err)
	}
	return rec.TrimSeq
}

// TestTrimReadsFromTrimSeq: after Trim, every read path starting below the
// trim point returns from it, across a straddling ref; the refs wholly
// below it are gone; the trim survives a clean reopen and a takeover; an
// earlier point is a no-op and a later one past the tail is clamped.
func TestTrimReadsFromTrimSeq(t *testing.T) {
	synctest.Test(t, testTrimReadsFromTrimSeq)
}

func testTrimReadsFromTrimSeq(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	p, err := w.open("a", nil)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, p.star, "t", 10, 10, nil) // seqs 0-99, 10 a batch
	waitAbsorbed(t, p.star)
	id := streamID(t, w.meta, "t")
	rd, err := NewReader(ReaderConfig{Meta: w.meta, Standard: []objstore.Store{w.std}})
	if err != nil {
		t.Fatal(err)
	}
	// A session opened before the trim, below it.
	early, err := p.star.OpenReadSession(ctx, "t", ReadQuery{Start: AtSeq(0), MaxRecords: 5})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.star.Trim(ctx, "t", 35); err != nil {
		t.Fatal(err)
	}
	recs, err := early.Recv(ctx)
	if err != nil || len(recs) == 0 || recs[0].Seq != 35 {
		t.Fatalf("session opened below the trim: %v %v, want from 35", recs, err)
	}
	for _, pos := range []Position{AtSeq(0), AtSeq(34), TailOffset(1000), AtTimestamp(0)} {
		wantFirst(t, firstSeqs(t, p.star, rd, "t", pos, 35), 35)
	}
	wantFirst(t, firstSeqs(t, p.star, rd, "t", AtSeq(50), 35), 50)
	for _, end := range refEnds(t, w.meta, id) {
		if end <= 35 {
			t.Errorf("ref ending at %d survived a trim at 35", end)
		}
	}
	// The first ref left straddles the trim point (its bounds depend on
	// how the absorb grouped the batches into rounds).
	if items, err := w.meta.Scan(ctx, chain.RefPrefix(id), "", 1); err != nil || len(items) == 0 {
		t.Errorf("no ref left after the trim: %v", err)
	} else if ref, err := absorb.DecodeRef(items[0].Value); err != nil || ref.Start > 35 || ref.End <= 35 {
		t.Errorf("the first ref left covers [%d, %d) (%v), want the one straddling 35", ref.Start, ref.End, err)
	}
	if err := p.star.Trim(ctx, "t", 20); err != nil {
		t.Fatal(err)
	}
	if got := trimSeqOf(t, w.meta, "t"); got != 35 {
		t.Fatalf("trim below an earlier trim moved it to %d", got)
	}
	wantFirst(t, firstSeqs(t, p.star, rd, "t", AtSeq(0), 35), 35)

	// A clean reopen.
	if err := p.star.Close(ctx); err != nil {
		t.Fatal(err)
	}
	p, err = w.open("a", nil)
	if err != nil {
		t.Fatal(err)
	}
	wantFirst(t, firstSeqs(t, p.star, rd, "t", AtSeq(0), 35), 35)
	// A takeover after a crash.
	p.kill()
	p2, err := w.open("b", nil)
	if err != nil {
		t.Fatal(err)
	}
	wantFirst(t, firstSeqs(t, p2.star, rd, "t", AtSeq(0), 35), 35)

	// Past the tail: clamped to it.
	if err := p2.star.Trim(ctx, "t", 1<<40); err != nil {
		t.Fatal(err)
	}
	if got := trimSeqOf(t, w.meta, "t"); got != 100 {
		t.Fatalf("trim past the tail set %d, want the tail 100", got)
	}
	res, err := p2.star.Read(ctx, "t", ReadQuery{Start: AtSeq(0)})
	if err != nil || len(res.Records) != 0 || res.Next != 100 {
		t.Fatalf("read after a trim to the tail: %d records, next %d, %v", len(res.Records), res.Next, err)
	}
	// Only the ref that carries the tail is left: a successor that
	// rebuilds tails from refs (a damaged snapshot) must not restart the
	// stream at 0 and assign its seqs again (the simulation found that).
	if ends := refEnds(t, w.meta, id); len(ends) != 1 || ends[0] != 100 {
		t.Fatalf("refs %v left after a trim to the tail, want the one ending at it", ends)
	}
	if tails, err := absorb.RebuildTails(ctx, w.meta, "s1", Standard, checkpointOf(t, w, Standard)); err != nil || tails.Streams[id].Next != 100 {
		t.Fatalf("tail rebuilt from refs after a trim to the tail: %+v %v, want 100", tails.Streams[id], err)
	}
	appendN(t, p2.star, "t", 1, 3, nil)
	wantFirst(t, firstSeqs(t, p2.star, nil, "t", AtSeq(0), 100), 100)
}

// TestTrimFlightIndex: records not yet absorbed (in the leader's flight
// index) below the trim point are not returned either.
func TestTrimFlightIndex(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	p, err := w.open("a", func(c *Config) { c.AbsorbInterval = time.Hour })
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, p.star, "t", 4, 10, nil)
	if err := p.star.Trim(ctx, "t", 15); err != nil {
		t.Fatal(err)
	}
	wantFirst(t, firstSeqs(t, p.star, nil, "t", AtSeq(0), 15), 15)
	wantFirst(t, firstSeqs(t, p.star, nil, "t", TailOffset(100), 15), 15)
}

// TestTrimWrittenByAnotherProcess: a Reader honours a trim at its next
// read; a leader at its next session, and in reads within trimRefresh.
func TestTrimWrittenByAnotherProcess(t *testing.T) {
	synctest.Test(t, testTrimWrittenByAnotherProcess)
}

func testTrimWrittenByAnotherProcess(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	p, err := w.open("a", nil)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, p.star, "t", 5, 10, nil)
	waitAbsorbed(t, p.star)
	// Another process writes the trim point into the record directly.
	it, err := w.meta.Get(ctx, chain.StreamRecordKey("t"))
	if err != nil {
		t.Fatal(err)
	}
	var rec streamRecord
	if err := json.Unmarshal(it.Value, &rec); err != nil {
		t.Fatal(err)
	}
	rec.TrimSeq = 12
	val, _ := json.Marshal(rec)
	if _, err := w.meta.Put(ctx, it.Key, val, it.Version); err != nil {
		t.Fatal(err)
	}
	rd, err := NewReader(ReaderConfig{Meta: w.meta, Standard: []objstore.Store{w.std}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := rd.Read(ctx, "t", ReadQuery{Start: AtSeq(0)})
	if err != nil || len(res.Records) == 0 || res.Records[0].Seq != 12 {
		t.Fatalf("reader after another process's trim: %v, want from 12", err)
	}
	sess, err := p.star.OpenReadSession(ctx, "t", ReadQuery{Start: AtSeq(0)})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := sess.Recv(ctx)
	if err != nil || len(recs) == 0 || recs[0].Seq != 12 {
		t.Fatalf("leader session opened after another process's trim: %v, want from 12", err)
	}
	// The session's refresh made the leader's reads honour it too.
	res, err = p.star.Read(ctx, "t", ReadQuery{Start: AtSeq(0)})
	if err != nil || len(res.Records) == 0 || res.Records[0].Seq != 12 {
		t.Fatalf("leader read after its session saw the trim: %v, want from 12", err)
	}
}

func TestTrimErrors(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, Standard, 1, 1, nil)
	s := r.star
	appendN(t, s, "e", 1, 3, nil)
	//lint:ignore SA1012 testing the nil-context guard
	if err := s.Trim(nil, "e", 1); !errors.Is(err, ErrNilContext) { //nolint:staticcheck
		t.Fatalf("nil ctx: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Trim(cctx, "e", 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: %v", err)
	}
	if got := trimSeqOf(t, r.meta, "e"); got != 0 {
		t.Fatalf("a cancelled trim set %d", got)
	}
	if err := s.Trim(ctx, "nope", 1); !errors.Is(err, ErrStreamNotFound) {
		t.Fatalf("unknown stream: %v", err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Trim(ctx, "e", 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed star: %v", err)
	}
}

// settleRef plants what the settler will write for the ref of id at
// index i: a settled object holding the ref's slot bytes (extents are
// object-absolute, so the same offsets hold) and the ref repointed at it.
func settleRef(t *testing.T, meta metastore.Store, std *objstore.Mem, id string, i int) string {
	t.Helper()
	ctx := context.Background()
	items, err := meta.Scan(ctx, chain.RefPrefix(id), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	items = refsOf(id, items)
	it := items[i]
	ref, err := absorb.DecodeRef(it.Value)
	if err != nil {
		t.Fatal(err)
	}
	key := chain.SettledKey(id, ref.Start, ref.End)
	for j, e := range ref.Extents {
		if j == 0 {
			data, err := std.Get(ctx, e.Key, 0, -1)
			if err != nil {
				t.Fatal(err)
			}
			if err := std.PutIfAbsent(ctx, key, data); err != nil {
				t.Fatal(err)
			}
		} else if e.Key != ref.Extents[0].Key {
			t.Fatalf("ref %s spans slots; the test plants one", it.Key)
		}
		ref.Extents[j].Key = key
	}
	val, _ := json.Marshal(ref)
	if _, err := meta.Put(ctx, it.Key, val, it.Version); err != nil {
		t.Fatal(err)
	}
	return key
}

func hasObject(m *objstore.Mem, key string) bool {
	for _, k := range m.Keys() {
		if k == key {
			return true
		}
	}
	return false
}

// TestTrimReclaimsSettledObjects: the settled objects behind refs wholly
// below the trim point are deleted; one a surviving (straddling) ref
// points into is kept, and chain slots are never deleted.
func TestTrimReclaimsSettledObjects(t *testing.T) {
	synctest.Test(t, testTrimReclaimsSettledObjects)
}

func testTrimReclaimsSettledObjects(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	p, err := w.open("a", nil)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, p.star, "t", 4, 10, nil)
	waitAbsorbed(t, p.star)
	id := streamID(t, w.meta, "t")
	ends := refEnds(t, w.meta, id)
	if len(ends) < 3 {
		t.Skipf("refs %v: want several to plant settled objects", ends)
	}
	gone := settleRef(t, w.meta, w.std, id, 0)
	kept := settleRef(t, w.meta, w.std, id, 1)
	slots := 0
	for _, k := range w.std.Keys() {
		if strings.HasPrefix(k, "chains/") {
			slots++
		}
	}
	// Trim inside the second ref: the first is deleted, the second kept.
	if err := p.star.Trim(ctx, "t", ends[0]+1); err != nil {
		t.Fatal(err)
	}
	if hasObject(w.std, gone) {
		t.Errorf("settled object %s of a trimmed ref survived", gone)
	}
	if !hasObject(w.std, kept) {
		t.Errorf("settled object %s of the straddling ref was deleted", kept)
	}
	after := 0
	for _, k := range w.std.Keys() {
		if strings.HasPrefix(k, "chains/") {
			after++
		}
	}
	if after != slots {
		t.Errorf("trim deleted chain slots: %d before, %d after", slots, after)
	}
	wantFirst(t, firstSeqs(t, p.star, nil, "t", AtSeq(0), ends[0]+1), int64(ends[0]+1))
	// Reclaim is idempotent.
	if err := p.star.reclaim(ctx, id, ends[0]+1); err != nil {
		t.Fatal(err)
	}
}

// TestTrimReclaimRetried: a reclaim that fails after the trim point is
// recorded leaves the records unreadable, and the retention pass finishes
// it.
func TestTrimReclaimRetried(t *testing.T) {
	synctest.Test(t, testTrimReclaimRetried)
}

func testTrimReclaimRetried(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	p, err := w.open("a", nil)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, p.star, "t", 4, 10, nil)
	waitAbsorbed(t, p.star)
	id := streamID(t, w.meta, "t")
	failDeletes := func(call fault.Call) fault.Fault {
		op, keys := call.Op, call.Keys
		if op == fault.Delete && len(keys) == 1 && strings.HasPrefix(keys[0], "refs/") {
			return fault.Fault{Kind: fault.Fail}
		}
		return fault.Fault{}
	}
	p.meta.SetHook(failDeletes) // every ref delete fails
	if err := p.star.Trim(ctx, "t", 25); err != nil {
		t.Fatal(err)
	}
	if ends := refEnds(t, w.meta, id); len(ends) == 0 || ends[0] > 25 {
		t.Fatalf("refs %v: the failing deletes should have left the old ones", ends)
	}
	wantFirst(t, firstSeqs(t, p.star, nil, "t", AtSeq(0), 25), 25)
	p.meta.SetHook(nil)
	p.star.runRetention(ctx, time.Now())
	for _, end := range refEnds(t, w.meta, id) {
		if end <= 25 {
			t.Errorf("ref ending at %d survived the retried reclaim", end)
		}
	}
}

// TestDeleteStreamReclaimsData: DeleteStream leaves no ref of the
// incarnation and no settled object behind its refs; a re-created name
// starts empty.
func TestDeleteStreamReclaimsData(t *testing.T) {
	synctest.Test(t, testDeleteStreamReclaimsData)
}

func testDeleteStreamReclaimsData(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	p, err := w.open("a", nil)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, p.star, "d", 5, 10, nil)
	waitAbsorbed(t, p.star)
	id := streamID(t, w.meta, "d")
	obj := settleRef(t, w.meta, w.std, id, 0)
	if err := p.star.DeleteStream(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	items, err := w.meta.Scan(ctx, chain.RefPrefix(id), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 0 {
		t.Fatalf("%d ref keys of the deleted incarnation left, first %s", len(items), items[0].Key)
	}
	if hasObject(w.std, obj) {
		t.Fatalf("settled object %s of the deleted incarnation left", obj)
	}
	appendN(t, p.star, "d", 1, 2, nil)
	res, err := p.star.Read(ctx, "d", ReadQuery{Start: AtSeq(0)})
	if err != nil || len(res.Records) != 2 || res.Records[0].Seq != 0 {
		t.Fatalf("re-created stream: %+v %v", res, err)
	}
}

// TestReadSessionWaitsPastATrimToTheTail: a session whose position a trim
// to the tail overtook waits for the stream to grow (it spun, found by the
// simulation: its wait asked for records past its position, durable but
// trimmed, and returned at once forever); then it reads from the tail.
func TestReadSessionWaitsPastATrimToTheTail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		r := newRig(t, Standard, 1, 3, nil)
		appendN(t, r.star, "t", 2, 5, nil) // seqs 0-9
		sess, err := r.star.OpenReadSession(ctx, "t", ReadQuery{Start: AtSeq(0), MaxRecords: 3})
		if err != nil {
			t.Fatal(err)
		}
		if recs, err := sess.Recv(ctx); err != nil || len(recs) == 0 || recs[0].Seq != 0 {
			t.Fatalf("first Recv: %v %v", recs, err)
		}
		if err := r.star.Trim(ctx, "t", 10); err != nil {
			t.Fatal(err)
		}
		got := make(chan []SequencedRecord, 1)
		go func() {
			recs, err := sess.Recv(ctx)
			if err != nil {
				t.Errorf("Recv: %v", err)
			}
			got <- recs
		}()
		synctest.Wait() // a spinning Recv never blocks: this would not return
		select {
		case recs := <-got:
			t.Fatalf("Recv returned %v with nothing readable", recs)
		default:
		}
		if _, err := r.star.Append(ctx, "t", Batch{Records: []Record{{Body: []byte("after")}}}); err != nil {
			t.Fatal(err)
		}
		recs := <-got
		if len(recs) != 1 || recs[0].Seq != 10 || string(recs[0].Body) != "after" {
			t.Fatalf("Recv after the trim: %v", recs)
		}
	})
}

// TestTrimPastTheAbsorbedTailKeepsTheLastRef: a trim past what the absorb
// has recorded (the rest still in the flight index) keeps the stream's
// last ref: the tails rebuilt from refs stay at the absorbed tail, so a
// successor's walk continues the stream (the simulation found a successor
// that could never open: its walk met a frame past the tail it rebuilt).
func TestTrimPastTheAbsorbedTailKeepsTheLastRef(t *testing.T) {
	synctest.Test(t, testTrimPastTheAbsorbedTailKeepsTheLastRef)
}

func testTrimPastTheAbsorbedTailKeepsTheLastRef(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	p, err := w.open("a", func(c *Config) { c.AbsorbInterval = time.Hour }) // the first round runs at once; later ones wait
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, p.star, "t", 1, 10, nil)
	waitAbsorbed(t, p.star)
	appendN(t, p.star, "t", 1, 10, nil) // 10-19, not absorbed
	id := streamID(t, w.meta, "t")
	cp := checkpointOf(t, w, Standard)
	before, ok, err := absorb.StreamTailFromRefs(ctx, w.meta, "s1", Standard, cp, id)
	if err != nil || !ok || before.Next != 10 {
		t.Fatalf("tail from refs before the trim: %+v %v %v", before, ok, err)
	}
	if err := p.star.Trim(ctx, "t", 15); err != nil {
		t.Fatal(err)
	}
	after, ok, err := absorb.StreamTailFromRefs(ctx, w.meta, "s1", Standard, cp, id)
	if err != nil || !ok || !sameTailPos(after, before) {
		t.Fatalf("tail from refs after a trim past the absorbed tail: %+v %v %v, before %+v", after, ok, err, before)
	}
	wantFirst(t, firstSeqs(t, p.star, nil, "t", AtSeq(0), 15), 15)
}
