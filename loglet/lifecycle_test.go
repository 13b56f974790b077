package loglet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// readBodies reads every record of stream through read and returns the
// bodies in seq order, checking the seqs run from 0 with no gap.
func readBodies(t *testing.T, read func(ctx context.Context, stream string, q ReadQuery) (ReadResult, error), stream string) []string {
	t.Helper()
	var out []string
	next := uint64(0)
	for {
		res, err := read(context.Background(), stream, ReadQuery{Start: AtSeq(next)})
		if err != nil {
			t.Fatalf("read %s at %d: %v", stream, next, err)
		}
		if len(res.Records) == 0 {
			return out
		}
		for _, r := range res.Records {
			if r.Seq != uint64(len(out)) {
				t.Fatalf("%s: record %d has seq %d", stream, len(out), r.Seq)
			}
			out = append(out, string(r.Body))
		}
		next = res.Next
	}
}

func appendBodies(t *testing.T, s *Star, stream string, bodies ...string) Ack {
	t.Helper()
	var b Batch
	for _, x := range bodies {
		b.Records = append(b.Records, Record{Body: []byte(x)})
	}
	ack, err := s.Append(context.Background(), stream, b)
	if err != nil {
		t.Fatalf("append to %s: %v", stream, err)
	}
	return ack
}

// waitAbsorbed waits, in a synctest bubble (see waitUntil), until every
// released flight of s's Standard chain is absorbed.
func waitAbsorbed(t *testing.T, s *Star) {
	t.Helper()
	waitUntil(t, 10*time.Second, "absorbed", func() bool {
		st := s.Stats().Standard
		return st.FlightIndexBytes == 0 && st.Backlog.Flights == 0
	})
}

// TestDeleteAndRecreateIsAFreshStream (issue 13, item 1): a stream deleted
// and created again under the same name is a new incarnation: it starts at
// seq 0, none of the old records is readable through it (from the leader's
// flight index, from refs, from a Reader), the absorb goes on, and the star
// opens again afterwards. Before incarnations, the re-created stream was
// acked at seqs already committed, read the old records, killed the next
// absorb round ("frame at 0 does not continue its tail 5"), and every later
// Open of the star failed.
func TestDeleteAndRecreateIsAFreshStream(t *testing.T) {
	for _, absorbed := range []bool{true, false} {
		t.Run(fmt.Sprintf("old-absorbed=%v", absorbed), inBubble(func(t *testing.T) {
			w := newWorld(t)
			ctx := context.Background()
			interval := time.Millisecond
			if !absorbed {
				interval = time.Hour // the old records stay in the flight index
			}
			cfg := func(c *Config) { c.Express = ClassConfig{}; c.CreateOnAppend = false; c.AbsorbInterval = interval }
			p1, err := w.open("p1", cfg)
			if err != nil {
				t.Fatal(err)
			}
			first, err := p1.star.CreateStream(ctx, "a", StreamOptions{Class: Standard})
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 5; i++ {
				appendBodies(t, p1.star, "a", fmt.Sprint("old-", i))
			}
			if absorbed {
				waitAbsorbed(t, p1.star)
			}
			if err := p1.star.DeleteStream(ctx, "a"); err != nil {
				t.Fatal(err)
			}
			if _, err := p1.star.Append(ctx, "a", Batch{Records: []Record{{Body: []byte("x")}}}); !errors.Is(err, ErrStreamNotFound) || !errors.Is(err, ErrNotCommitted) {
				t.Fatalf("append to a deleted stream: %v", err)
			}
			second, err := p1.star.CreateStream(ctx, "a", StreamOptions{Class: Standard})
			if err != nil {
				t.Fatal(err)
			}
			if second.Incarnation == first.Incarnation || second.Incarnation == "" {
				t.Fatalf("incarnations %q then %q", first.Incarnation, second.Incarnation)
			}
			if ack := appendBodies(t, p1.star, "a", "new-0"); ack.Start != 0 {
				t.Fatalf("the re-created stream's first ack is at %d, want 0", ack.Start)
			}
			appendBodies(t, p1.star, "a", "new-1")
			if got := readBodies(t, p1.star.Read, "a"); strings.Join(got, ",") != "new-0,new-1" {
				t.Fatalf("the leader reads %v", got)
			}
			if err := p1.star.Close(ctx); err != nil {
				t.Fatalf("close: %v", err)
			}
			rd, err := NewReader(ReaderConfig{Meta: w.meta, Standard: []objstore.Store{w.std}})
			if err != nil {
				t.Fatal(err)
			}
			if got := readBodies(t, rd.Read, "a"); strings.Join(got, ",") != "new-0,new-1" {
				t.Fatalf("a Reader reads %v", got)
			}
			if tail, err := rd.CheckTail(ctx, "a"); err != nil || tail.Seq != 2 {
				t.Fatalf("Reader tail %+v %v", tail, err)
			}
			p2, err := w.open("p2", cfg)
			if err != nil {
				t.Fatalf("the star does not open after a re-creation: %v", err)
			}
			if ack := appendBodies(t, p2.star, "a", "new-2"); ack.Start != 2 {
				t.Fatalf("after reopen: ack at %d, want 2", ack.Start)
			}
			if got := readBodies(t, p2.star.Read, "a"); strings.Join(got, ",") != "new-0,new-1,new-2" {
				t.Fatalf("after reopen the leader reads %v", got)
			}
		}))
	}
}

// TestRecreateOnAnotherStar: the name moves to another star as a new
// incarnation; its refs do not collide with the old star's, and a Reader
// sees only the new records.
func TestRecreateOnAnotherStar(t *testing.T) {
	synctest.Test(t, testRecreateOnAnotherStar)
}

func testRecreateOnAnotherStar(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	on := func(star string) func(*Config) {
		return func(c *Config) {
			c.Star, c.Stars, c.Express, c.CreateOnAppend, c.AbsorbInterval = star, []string{"s1", "s2"}, ClassConfig{}, false, time.Millisecond
		}
	}
	p1, err := w.open("p1", on("s1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p1.star.CreateStream(ctx, "a", StreamOptions{Class: Standard, Star: "s1"}); err != nil {
		t.Fatal(err)
	}
	appendBodies(t, p1.star, "a", "s1-0", "s1-1", "s1-2")
	waitAbsorbed(t, p1.star)
	if err := p1.star.DeleteStream(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	p2, err := w.open("p2", on("s2"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p2.star.CreateStream(ctx, "a", StreamOptions{Class: Standard, Star: "s2"}); err != nil {
		t.Fatal(err)
	}
	if ack := appendBodies(t, p2.star, "a", "s2-0"); ack.Start != 0 {
		t.Fatalf("first ack on s2 at %d", ack.Start)
	}
	if err := p2.star.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p1.star.Append(ctx, "a", Batch{Records: []Record{{Body: []byte("x")}}}); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("append on s1's leader to a stream now on s2: %v", err)
	}
	rd, _ := NewReader(ReaderConfig{Meta: w.meta, Standard: []objstore.Store{w.std}})
	if got := readBodies(t, rd.Read, "a"); strings.Join(got, ",") != "s2-0" {
		t.Fatalf("a Reader reads %v", got)
	}
}

// TestStreamNameKeyLimit (issue 13, item 2): a name whose longest key fits
// every backend is accepted and lives (appends, absorb, reopen); one byte
// more is refused at creation with a clear error, and so is it under
// CreateOnAppend. Before, a 482-499-byte name was accepted and acked, and
// every absorb round then failed with ErrInvalidKey.
func TestStreamNameKeyLimit(t *testing.T) {
	synctest.Test(t, testStreamNameKeyLimit)
}

func testStreamNameKeyLimit(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	longest := ""
	for n := 1; n <= chain.MaxStreamNameLen; n++ {
		if chain.ValidateStreamKeys(strings.Repeat("n", n)) != nil {
			break
		}
		longest = strings.Repeat("n", n)
	}
	cfg := func(c *Config) { c.Express = ClassConfig{}; c.AbsorbInterval = time.Millisecond }
	p1, err := w.open("p1", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p1.star.CreateStream(ctx, longest+"n", StreamOptions{Class: Standard}); !errors.Is(err, ErrInvalidBatch) || !errors.Is(err, chain.ErrInvalidName) {
		t.Fatalf("a name one byte over the key limit: %v", err)
	}
	if _, err := p1.star.Append(ctx, longest+"n", Batch{Records: []Record{{Body: []byte("x")}}}); !errors.Is(err, ErrNotCommitted) || !errors.Is(err, chain.ErrInvalidName) {
		t.Fatalf("create-on-append of a name one byte over the key limit: %v", err)
	}
	appendBodies(t, p1.star, longest, "one")
	waitAbsorbed(t, p1.star)
	if st := p1.star.Stats().Standard; st.AbsorbFailures != 0 {
		t.Fatalf("absorb failures with the longest name: %d", st.AbsorbFailures)
	}
	if err := p1.star.Close(ctx); err != nil {
		t.Fatal(err)
	}
	p2, err := w.open("p2", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if ack := appendBodies(t, p2.star, longest, "two"); ack.Start != 1 {
		t.Fatalf("after reopen: %d", ack.Start)
	}
}

// TestFutureTimestampsCapped (issue 13, item 2): a timestamp in the future
// (microseconds passed for milliseconds) is capped at arrival, so the
// stream's later records keep their own timestamps and reads by timestamp
// keep working; with UncappedTimestamps it is kept.
func TestFutureTimestampsCapped(t *testing.T) {
	for _, uncapped := range []bool{false, true} {
		t.Run(fmt.Sprintf("uncapped=%v", uncapped), func(t *testing.T) {
			w := newWorld(t)
			ctx := context.Background()
			p, err := w.open("p1", func(c *Config) { c.Express = ClassConfig{}; c.UncappedTimestamps = uncapped })
			if err != nil {
				t.Fatal(err)
			}
			before := time.Now().UnixMilli()
			micro := time.Now().UnixMicro()
			if _, err := p.star.Append(ctx, "a", Batch{Records: []Record{{Timestamp: micro, Body: []byte("micro")}}}); err != nil {
				t.Fatal(err)
			}
			appendBodies(t, p.star, "a", "later")
			after := time.Now().UnixMilli()
			res, err := p.star.Read(ctx, "a", ReadQuery{Start: AtSeq(0)})
			if err != nil || len(res.Records) != 2 {
				t.Fatalf("read: %+v %v", res, err)
			}
			first, second := res.Records[0].Timestamp, res.Records[1].Timestamp
			if uncapped {
				if first != micro || second != micro {
					t.Fatalf("uncapped: timestamps %d, %d; want %d kept (and the next not earlier)", first, second, micro)
				}
				return
			}
			if first < before || first > after || second < first || second > after {
				t.Fatalf("capped: timestamps %d, %d; want within [%d, %d]", first, second, before, after)
			}
			if res, err := p.star.Read(ctx, "a", ReadQuery{Start: AtTimestamp(first)}); err != nil || len(res.Records) != 2 {
				t.Fatalf("read by timestamp after a capped record: %+v %v", res, err)
			}
		})
	}
}

// TestTailsSnapshotCostsWhatChanged (issue 13, item 5): with many streams
// written once and one active, a round writes a delta of the streams it
// changed, not every stream's tail; a successor and a Reader still learn
// every tail (a delta and its base: two reads). Before, every round
// rewrote every tail (20,000 streams, one active: 874 KB PUT per round).
func TestTailsSnapshotCostsWhatChanged(t *testing.T) {
	synctest.Test(t, testTailsSnapshotCostsWhatChanged)
}

func testTailsSnapshotCostsWhatChanged(t *testing.T) {
	const streams = 2000
	w := newWorld(t)
	ctx := context.Background()
	cfg := func(c *Config) { c.Express = ClassConfig{}; c.AbsorbInterval = time.Millisecond }
	p1, err := w.open("p1", cfg)
	if err != nil {
		t.Fatal(err)
	}
	sess := make([]*AppendSession, streams)
	var futs []*AckFuture
	for i := range sess {
		s, err := p1.star.OpenAppendSession(ctx, fmt.Sprintf("s%04d", i))
		if err != nil {
			t.Fatal(err)
		}
		f, err := s.Submit(ctx, Batch{Records: []Record{{Body: []byte("x")}}})
		if err != nil {
			t.Fatal(err)
		}
		futs = append(futs, f)
	}
	for _, f := range futs {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waitAbsorbed(t, p1.star)
	before := p1.star.Stats().Standard
	const rounds = 30
	for i := 0; i < rounds; i++ {
		appendBodies(t, p1.star, "s0000", fmt.Sprint("active-", i))
		waitAbsorbed(t, p1.star)
	}
	after := p1.star.Stats().Standard
	n := after.AbsorbRounds - before.AbsorbRounds
	perRound := float64(after.TailsSnapshotBytes-before.TailsSnapshotBytes) / float64(n)
	full := float64(after.TailsBaseBytes)
	t.Logf("%d rounds with one active stream of %d: %.0f snapshot bytes per round; a full snapshot is %.0f; %d full snapshots in all (%d in these rounds)",
		n, streams, perRound, full, after.TailsFullSnapshots, after.TailsFullSnapshots-before.TailsFullSnapshots)
	if n < rounds/2 || perRound > full/16+100 || after.TailsFullSnapshots-before.TailsFullSnapshots > 1 {
		t.Fatalf("%d rounds, %.0f snapshot bytes per round: want a delta (at most 1/16 of a full snapshot), not every stream's tail (%.0f)", n, perRound, full)
	}
	// Superseded snapshots are deleted some rounds later (readers may
	// still read them): they do not pile up.
	keys, err := w.std.List(ctx, "snapshots/", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 16+4 { // 16 kept for readers, the current one, its base, and those due at the next round
		t.Fatalf("%d tails snapshots kept after %d rounds: superseded ones are not deleted", len(keys), after.AbsorbRounds)
	}
	rd, _ := NewReader(ReaderConfig{Meta: w.meta, Standard: []objstore.Store{w.std}})
	for _, name := range []string{"s0000", "s0001", "s1999"} {
		want := uint64(1)
		if name == "s0000" {
			want = rounds + 1
		}
		if tail, err := rd.CheckTail(ctx, name); err != nil || tail.Seq != want {
			t.Fatalf("Reader tail of %s: %+v %v, want %d", name, tail, err, want)
		}
	}
	p1.kill() // the successor learns every tail from the delta, its base and its walk
	p2, err := w.open("p2", cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"s0000", "s0001", "s1234", "s1999"} {
		want := uint64(1)
		if name == "s0000" {
			want = rounds + 1
		}
		if ack := appendBodies(t, p2.star, name, "p2"); ack.Start != want {
			t.Fatalf("after takeover %s continues at %d, want %d", name, ack.Start, want)
		}
	}
}

// TestDeleteAppliedThenFailedForgetsTheStream: a DeleteStream whose Commit
// applied but reported failure (an ambiguous metastore write), retried by
// the host, finds the record gone (ErrStreamNotFound), and the star then
// serves the name as deleted. Before, the retry's not-found path kept the
// cached stream, and the leader went on reading the deleted incarnation
// (found by the simulation's lifers).
func TestDeleteAppliedThenFailedForgetsTheStream(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	p1, err := w.open("p1", func(c *Config) { c.Express, c.CreateOnAppend = ClassConfig{}, false })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p1.star.CreateStream(ctx, "a", StreamOptions{Class: Standard}); err != nil {
		t.Fatal(err)
	}
	appendBodies(t, p1.star, "a", "old-0", "old-1")
	ambiguousDelete(p1.meta, "a") // DeleteStream re-reads the record after a failed Commit: fail that too
	err = p1.star.DeleteStream(ctx, "a")
	p1.meta.SetHook(nil)
	if err == nil {
		t.Fatal("DeleteStream over an ambiguous metastore reported success")
	}
	if err := p1.star.DeleteStream(ctx, "a"); !errors.Is(err, ErrStreamNotFound) {
		t.Fatalf("retried DeleteStream: %v, want ErrStreamNotFound (the first attempt applied)", err)
	}
	if res, err := p1.star.Read(ctx, "a", ReadQuery{Start: AtSeq(0)}); !errors.Is(err, ErrStreamNotFound) {
		t.Fatalf("read of the deleted stream on its leader: %d records, %v", len(res.Records), err)
	}
	if _, err := p1.star.CheckTail(ctx, "a"); !errors.Is(err, ErrStreamNotFound) {
		t.Fatalf("CheckTail of the deleted stream on its leader: %v", err)
	}
}

// TestSuccessorNeverAdoptsAPredecessorsDelta: a leader writes a round's
// tails snapshot (a delta over its own full one) and dies before the
// round's Commit. Its successor absorbs the same range and writes its own
// snapshot for the same position; it must not take the predecessor's delta
// there as the full snapshot its own deltas build on. Before, the keys were
// the same (the position alone), PutSnapshot took the existing delta as
// written, the successor's later deltas built on a delta, and every read of
// the tails then failed ("builds on ..., itself a delta"; found by the
// simulation's crowd of streams).
func TestSuccessorNeverAdoptsAPredecessorsDelta(t *testing.T) {
	synctest.Test(t, testSuccessorNeverAdoptsAPredecessorsDelta)
}

func testSuccessorNeverAdoptsAPredecessorsDelta(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	cfg := func(c *Config) { c.Express, c.AbsorbInterval = ClassConfig{}, time.Millisecond }
	p1, err := w.open("p1", cfg)
	if err != nil {
		t.Fatal(err)
	}
	// A full snapshot of many streams, then a delta of one.
	for i := 0; i < 64; i++ {
		appendBodies(t, p1.star, fmt.Sprintf("s%02d", i), "x")
	}
	waitAbsorbed(t, p1.star)
	appendBodies(t, p1.star, "s00", "y")
	waitAbsorbed(t, p1.star)
	before := p1.star.Stats().Standard
	appendBodies(t, p1.star, "s00", "z")
	waitAbsorbed(t, p1.star)
	if st := p1.star.Stats().Standard; st.TailsFullSnapshots != before.TailsFullSnapshots {
		t.Fatalf("precondition: a round of one stream wrote a full snapshot (%d full before, %d after)", before.TailsFullSnapshots, st.TailsFullSnapshots)
	}
	// The next round's snapshot is PUT (a delta), its Commit never lands.
	p1.meta.SetHook(func(call fault.Call) fault.Fault {
		op := call.Op
		if op == fault.Commit {
			return fault.Fault{Kind: fault.Fail}
		}
		return fault.Fault{}
	})
	appendBodies(t, p1.star, "s00", "w")
	waitUntil(t, 10*time.Second, "the round tried by the absorb", func() bool {
		return p1.star.Stats().Standard.AbsorbFailures != before.AbsorbFailures
	})
	p1.kill()
	p2, err := w.open("p2", cfg)
	if err != nil {
		t.Fatal(err)
	}
	appendBodies(t, p2.star, "s01", "v")
	waitAbsorbed(t, p2.star)
	appendBodies(t, p2.star, "s02", "u")
	waitAbsorbed(t, p2.star)
	rd, _ := NewReader(ReaderConfig{Meta: w.meta, Standard: []objstore.Store{w.std}})
	for stream, want := range map[string]uint64{"s00": 4, "s01": 2, "s02": 2, "s63": 1} {
		tail, err := rd.CheckTail(ctx, stream)
		if err != nil || tail.Seq != want {
			t.Fatalf("a Reader's CheckTail(%s) = %d, %v; want %d", stream, tail.Seq, err, want)
		}
	}
	if err := p2.star.Close(ctx); err != nil {
		t.Fatal(err)
	}
	p3, err := w.open("p3", cfg)
	if err != nil {
		t.Fatalf("Open after the successor's Close: %v", err)
	}
	if tail, err := p3.star.CheckTail(ctx, "s00"); err != nil || tail.Seq != 4 {
		t.Fatalf("third leader's CheckTail(s00) = %d, %v", tail.Seq, err)
	}
}

// conflictingAfterApply is a metastore whose Commits apply and then report
// ErrConflict (a client's retry finding its own first attempt) and whose
// Gets fail, while on.
type conflictingAfterApply struct {
	metastore.Store
	on bool
}

func (m *conflictingAfterApply) Commit(ctx context.Context, ops []metastore.Op) ([]metastore.Version, error) {
	vs, err := m.Store.Commit(ctx, ops)
	if m.on && err == nil {
		return nil, metastore.ErrConflict
	}
	return vs, err
}

func (m *conflictingAfterApply) Get(ctx context.Context, key string) (metastore.Item, error) {
	if m.on {
		return metastore.Item{}, metastore.ErrUnavailable
	}
	return m.Store.Get(ctx, key)
}

// TestCreateStreamNeverGuessesTheNameIsTaken: a CreateStream whose Commit
// reports a conflict re-reads the record to learn whether the write was its
// own; when that re-read fails it returns an error that is not
// ErrStreamExists (it does not know), and the name is never reported taken
// before anyone took it. Before, it returned ErrStreamExists on the guess
// (found by the simulation's crowd: "exists before anyone created it").
func TestCreateStreamNeverGuessesTheNameIsTaken(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	m := &conflictingAfterApply{Store: w.meta}
	p1, err := w.open("p1", func(c *Config) { c.Express, c.Meta = ClassConfig{}, m })
	if err != nil {
		t.Fatal(err)
	}
	m.on = true
	_, err = p1.star.CreateStream(ctx, "a", StreamOptions{Class: Standard})
	m.on = false
	if err == nil || errors.Is(err, ErrStreamExists) {
		t.Fatalf("CreateStream with a conflicting Commit and a failed re-read: %v (want an error that does not claim the name is taken)", err)
	}
	if _, err := p1.star.CreateStream(ctx, "a", StreamOptions{Class: Standard}); !errors.Is(err, ErrStreamExists) {
		t.Fatalf("retried CreateStream: %v (the first attempt applied)", err)
	}
	appendBodies(t, p1.star, "a", "x")
}

// TestStarReadSessionEndsWhenItsStreamIsRecreated: a leader's read
// session follows the incarnation it opened on. Deleted and created again
// under the same name, the session ends with ErrStreamNotFound, whether it
// was waiting for records (it is woken) or comes back later; it never reads
// the new incarnation from the old position.
func TestStarReadSessionEndsWhenItsStreamIsRecreated(t *testing.T) {
	r := newRig(t, Standard, 1, 21, nil)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if _, err := r.star.Append(ctx, "a", Batch{Records: []Record{{Body: []byte(fmt.Sprint("old-", i))}}}); err != nil {
			t.Fatal(err)
		}
	}
	waiting, err := r.star.OpenReadSession(ctx, "a", ReadQuery{Start: AtSeq(3)})
	if err != nil {
		t.Fatal(err)
	}
	later, err := r.star.OpenReadSession(ctx, "a", ReadQuery{Start: AtSeq(1)})
	if err != nil {
		t.Fatal(err)
	}
	if recs, err := later.Recv(ctx); err != nil || len(recs) != 2 {
		t.Fatalf("first Recv: %d records, %v", len(recs), err)
	}
	done := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second) // before the fix it was never woken
		defer cancel()
		_, err := waiting.Recv(wctx)
		done <- err
	}()
	if err := r.star.DeleteStream(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.star.CreateStream(ctx, "a", StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if _, err := r.star.Append(ctx, "a", Batch{Records: []Record{{Body: []byte(fmt.Sprint("new-", i))}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; !errors.Is(err, ErrStreamNotFound) {
		t.Fatalf("the waiting session's Recv: %v, want ErrStreamNotFound", err)
	}
	if recs, err := later.Recv(ctx); !errors.Is(err, ErrStreamNotFound) {
		t.Fatalf("the later session's Recv: %d records (%q...), %v; want ErrStreamNotFound", len(recs), firstBody(recs), err)
	}
}

func firstBody(recs []SequencedRecord) string {
	if len(recs) == 0 {
		return ""
	}
	return string(recs[0].Body)
}
