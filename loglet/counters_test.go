package loglet

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/flightlog/flightlog/loglet/internal/chaincore"
)

// TestProducerAndFencingCounters: the producer window's and fencing's
// refusals show in ClassStats: a retry of a committed batch
// (ProducerDuplicates), a retry of one in flight (ProducerInFlightWaits),
// a retry older than the window (ProducerPastWindow), a producer forgotten
// for a full window (ProducersEvicted) and a batch with the wrong token
// (Fenced).
func TestProducerAndFencingCounters(t *testing.T) { synctest.Test(t, testProducerAndFencingCounters) }

func testProducerAndFencingCounters(t *testing.T) {
	w := newWorld(t)
	p1, err := w.open("p1", func(c *Config) { c.ProducerWindow.Producers = 1 })
	if err != nil {
		t.Fatal(err)
	}
	s, ctx := p1.star, context.Background()
	type figures struct{ dup, wait, past, evicted, fenced uint64 }
	now := func() figures {
		st := s.Stats().Standard
		return figures{st.ProducerDuplicates, st.ProducerInFlightWaits, st.ProducerPastWindow, st.ProducersEvicted, st.Fenced}
	}
	check := func(what string, want figures) {
		t.Helper()
		if got := now(); got != want {
			t.Fatalf("after %s: %+v, want %+v", what, got, want)
		}
	}
	check("nothing", figures{})

	for seq := uint64(1); seq <= chaincore.ProducerBatches+1; seq++ {
		if _, err := s.Append(ctx, "a", withProducer(one(fmt.Sprint(seq)), "p", seq)); err != nil {
			t.Fatal(err)
		}
	}
	ack, err := s.Append(ctx, "a", withProducer(one("2"), "p", 2))
	if err != nil || !ack.Duplicate || ack.Start != 1 {
		t.Fatalf("retry of batch 2: %+v %v, want a duplicate of [1, 2)", ack, err)
	}
	check("a duplicate", figures{dup: 1})
	var pw *ProducerWindowError
	if _, err := s.Append(ctx, "a", withProducer(one("1"), "p", 1)); !errors.As(err, &pw) {
		t.Fatalf("retry of batch 1 past the window: %v, want a *ProducerWindowError", err)
	}
	check("a retry past the window", figures{dup: 1, past: 1})

	ack, err = s.Append(ctx, "a", withToken(one("fenced"), "x"))
	mustFenced(t, "a token on a stream without one", ack, err)
	check("a fenced batch", figures{dup: 1, past: 1, fenced: 1})

	// A second producer on a window of one forgets the first.
	if _, err := s.Append(ctx, "a", withProducer(one("q"), "q", 1)); err != nil {
		t.Fatal(err)
	}
	check("a second producer", figures{dup: 1, past: 1, evicted: 1, fenced: 1})

	// A retry while the first attempt is in flight (the bucket is down)
	// waits for it, and is answered with its range.
	p1.bkts[0].SetDown(true)
	first, retry := make(chan error, 1), make(chan error, 1)
	var retried Ack
	go func() {
		_, err := s.Append(ctx, "a", withProducer(one("r"), "r", 1))
		first <- err
	}()
	synctest.Wait()
	go func() {
		var err error
		retried, err = s.Append(ctx, "a", withProducer(one("r"), "r", 1))
		retry <- err
	}()
	synctest.Wait()
	check("a retry in flight", figures{dup: 1, past: 1, evicted: 1, wait: 1, fenced: 1})
	p1.bkts[0].SetDown(false)
	if err := <-first; err != nil {
		t.Fatalf("the first attempt: %v", err)
	}
	if err := <-retry; err != nil || !retried.Duplicate {
		t.Fatalf("the retry: %+v %v, want the first attempt's range", retried, err)
	}
	if seen := countBodies(t, s, "a"); len(seen["r"]) != 1 {
		t.Fatalf("records %v, want r once", seen)
	}
}
