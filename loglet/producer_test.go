package loglet

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// countBodies counts each body's records in stream, read from s.
func countBodies(t *testing.T, s *Star, stream string) map[string][]uint64 {
	t.Helper()
	seen := map[string][]uint64{}
	for _, r := range readAll(t, s, stream) {
		seen[string(r.Body)] = append(seen[string(r.Body)], r.Seq)
	}
	return seen
}

func one(body string) Batch { return Batch{Records: []Record{{Body: []byte(body)}}} }

func withProducer(b Batch, id string, seq uint64) Batch {
	b.Producer = ProducerID{ID: id, Seq: seq}
	return b
}

// TestProducerRetryWhileBucketsDown is the newcomer's case (issue 25): the
// buckets are down, an append gives up (its context ends), and is retried
// while they are still down (outcome unknown again, never a mismatch that
// reads as "already written") and after they return: the batch is
// committed once, and the retry is answered with the original range.
func TestProducerRetryWhileBucketsDown(t *testing.T) {
	synctest.Test(t, testProducerRetryWhileBucketsDown)
}

func testProducerRetryWhileBucketsDown(t *testing.T) {
	w := newWorld(t)
	p1, err := w.open("p1", nil)
	if err != nil {
		t.Fatal(err)
	}
	s := p1.star
	if _, err := s.Append(context.Background(), "a", one("first")); err != nil {
		t.Fatal(err)
	}
	p1.bkts[0].SetDown(true) // the Standard bucket
	b := withProducer(one("mine"), "producer-1", 1)
	attempt := func(d time.Duration) (Ack, error) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		return s.Append(ctx, "a", b)
	}
	if ack, err := attempt(100 * time.Millisecond); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("append while the buckets are down: %+v %v, want outcome unknown", ack, err)
	}
	// The retry while still down waits for the first attempt, and is just
	// as unknown: it is neither admitted again nor a mismatch.
	ack, err := attempt(100 * time.Millisecond)
	var mm *SeqNumMismatchError
	if !errors.Is(err, ErrOutcomeUnknown) || errors.As(err, &mm) {
		t.Fatalf("retry while down: %+v %v, want outcome unknown", ack, err)
	}
	if tl, err := s.CheckTail(context.Background(), "a"); err != nil || tl.Seq != 2 || tl.Pending != 1 {
		t.Fatalf("tail while down: %+v %v, want Seq 2 Pending 1 (one attempt admitted)", tl, err)
	}
	p1.bkts[0].SetDown(false)
	ack, err = attempt(30 * time.Second)
	if err != nil || !ack.Duplicate || ack.Start != 1 || ack.End != 2 {
		t.Fatalf("retry after the buckets return: %+v %v, want the original [1, 2) as a duplicate", ack, err)
	}
	// Once acked, a later retry is answered from the window.
	again, err := attempt(30 * time.Second)
	if err != nil || !again.Duplicate || again.Start != 1 || again.End != 2 {
		t.Fatalf("a later retry: %+v %v, want the original [1, 2)", again, err)
	}
	if got := countBodies(t, s, "a"); len(got["mine"]) != 1 || got["mine"][0] != 1 || len(got) != 2 {
		t.Fatalf("records: %v, want mine once at 1", got)
	}
	// A new batch of the producer is a new batch.
	next, err := s.Append(context.Background(), "a", withProducer(one("mine-2"), "producer-1", 2))
	if err != nil || next.Duplicate || next.Start != 2 {
		t.Fatalf("the producer's next batch: %+v %v, want a new one at 2", next, err)
	}
}

// TestProducerRetryReachesSuccessor: the leader is killed (its storage cut
// off, as a SIGKILL leaves it) after acking a batch whose ack the producer
// never saw; the retry goes to the successor, which recognises it from the
// tails (an absorbed batch) or its walk (a released, unabsorbed one), and
// so does the successor's successor. Each batch is committed once.
func TestProducerRetryReachesSuccessor(t *testing.T) {
	synctest.Test(t, testProducerRetryReachesSuccessor)
}

func testProducerRetryReachesSuccessor(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	p1, err := w.open("p1", func(c *Config) { c.AbsorbInterval = 10 * time.Millisecond })
	if err != nil {
		t.Fatal(err)
	}
	absorbed, err := p1.star.Append(ctx, "a", withProducer(one("absorbed"), "p", 1))
	if err != nil {
		t.Fatal(err)
	}
	waitAbsorbed(t, p1.star)
	p1.meta.SetDown(true) // no more rounds: the next batch is released, never absorbed
	walked, err := p1.star.Append(ctx, "a", withProducer(one("walked"), "p", 2))
	if err != nil {
		t.Fatal(err)
	}
	p1.kill()
	p2, err := w.open("p2", nil)
	if err != nil {
		t.Fatal(err)
	}
	check := func(s *Star, who string) {
		t.Helper()
		for i, want := range []Ack{absorbed, walked} {
			got, err := s.Append(ctx, "a", withProducer(one(fmt.Sprint("retry-", i)), "p", uint64(i+1)))
			if err != nil || !got.Duplicate || got.Start != want.Start || got.End != want.End {
				t.Fatalf("%s: retry of batch %d: %+v %v, want a duplicate of [%d, %d)", who, i+1, got, err, want.Start, want.End)
			}
		}
		seen := countBodies(t, s, "a")
		if len(seen["absorbed"]) != 1 || len(seen["walked"]) != 1 || len(seen) != 2 {
			t.Fatalf("%s: records %v, want each batch once", who, seen)
		}
	}
	check(p2.star, "successor")
	waitAbsorbed(t, p2.star) // the walked batch's mark is in p2's tails now
	p2.kill()
	p3, err := w.open("p3", nil)
	if err != nil {
		t.Fatal(err)
	}
	check(p3.star, "the successor's successor")
}

// TestProducerAppendAs: a Producer numbers its batches and retries one
// whose outcome is unknown; AppendAs with an identity already committed
// is answered with its range.
func TestProducerAppendAs(t *testing.T) { synctest.Test(t, testProducerAppendAs) }

func testProducerAppendAs(t *testing.T) {
	w := newWorld(t)
	p1, err := w.open("p1", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pr := p1.star.NewProducer("a", "")
	if len(pr.ID()) != 32 {
		t.Fatalf("random producer ID %q", pr.ID())
	}
	first, err := pr.Append(ctx, one("x"))
	if err != nil || first.Duplicate {
		t.Fatal(first, err)
	}
	id := pr.Next()
	p1.bkts[0].SetDown(true)
	done := make(chan struct{})
	var ack Ack
	go func() {
		defer close(done)
		ack, err = pr.AppendAs(ctx, id, one("y"))
	}()
	synctest.Wait()
	time.Sleep(3 * time.Second) // the bubble's clock: past the commit deadline, a halt and its recovery attempts
	p1.bkts[0].SetDown(false)
	<-done
	if err != nil || ack.Start != 1 {
		t.Fatalf("AppendAs across an outage: %+v %v", ack, err)
	}
	dup, err := pr.AppendAs(ctx, id, one("y"))
	if err != nil || !dup.Duplicate || dup.Start != 1 {
		t.Fatalf("AppendAs again: %+v %v, want a duplicate of [1, 2)", dup, err)
	}
	if seen := countBodies(t, p1.star, "a"); len(seen["y"]) != 1 {
		t.Fatalf("records %v, want y once", seen)
	}
	if _, err := p1.star.Append(ctx, "a", Batch{Records: one("z").Records, Producer: ProducerID{Seq: 3}}); !errors.Is(err, ErrInvalidBatch) {
		t.Fatalf("a sequence without an ID: %v, want ErrInvalidBatch", err)
	}
}
