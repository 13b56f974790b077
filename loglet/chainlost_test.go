package loglet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/fault"
)

// TestChainLostWhileServingIsTakenBack (issue 28): a rival takes a serving
// star's later chain (Express; Standard, the first, is the star's lock)
// over, as one that passed its live-owner check can after this process's
// last hold check. The star's leadership, told by the deposed lane
// (starcore.Core.ChainLost), checks it still holds the first chain and
// takes the later one back through the opening's takeover, deposing the
// rival; the class's streams then append on the new lane. Every record
// acked before, by the rival, and after is read back at its sequence
// number. (Before, the star kept the deposed lane: every append to the
// class failed with a *NotLeaderError until the star was opened again.)
func TestChainLostWhileServingIsTakenBack(t *testing.T) {
	synctest.Test(t, testChainLostWhileServingIsTakenBack)
}

func testChainLostWhileServingIsTakenBack(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	g := newLedger()
	var logs lockedBuffer
	p1 := openQuiet(t, w, &logs)
	for i := range 5 {
		for _, st := range []string{"a", "e"} {
			if _, err := g.append(t, p1.star, st, fmt.Sprint("p1-before-", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A reader of the class follows the stream across the retake.
	sess, err := p1.star.OpenReadSession(ctx, "e", ReadQuery{Start: AtSeq(0)})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()

	p1.star.mu.RLock()
	before := p1.star.streams["e"] // what an append that looked "e" up now holds
	p1.star.mu.RUnlock()
	synctest.Wait() // p1 is idle: its first absorb round is done, the next an hour away

	// The rival: a process whose only chain is the Express one takes it
	// over from p1 (fencing p1's epoch) and acks appends there.
	rival, err := w.open("rival", func(c *Config) { c.Standard, c.DefaultClass = ClassConfig{}, Express })
	if err != nil {
		t.Fatal(err)
	}
	rivalEpoch := recordedEpoch(t, w, Express)
	for i := range 5 {
		if _, err := g.append(t, rival.star, "e", fmt.Sprint("rival-", i)); err != nil {
			t.Fatal(err)
		}
	}

	// p1's Express lane finds itself deposed at its next flight; the
	// star takes the chain back. Appends meanwhile are refused (not
	// committed) or, for the one in flight at the deposition, unknown.
	start := time.Now() // the bubble's clock
	for i := 0; ; i++ {
		_, err := g.append(t, p1.star, "e", fmt.Sprint("p1-during-", i))
		if err == nil {
			break
		}
		if !errors.Is(err, ErrNotCommitted) && !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("append to the lost class: %v", err)
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("the star never took its lost Express chain back (last append: %v); logs:\n%s", err, logs.logged())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(logs.logged(), "took back a chain lost while serving") {
		t.Fatalf("no retake logged:\n%s", logs.logged())
	}
	if e := recordedEpoch(t, w, Express); e <= rivalEpoch {
		t.Fatalf("Express epoch after the retake %d, want past the rival's %d", e, rivalEpoch)
	}
	if rec, _, err := chain.ReadEpoch(ctx, w.meta, "s1", Standard); err != nil || rec.Owner != "p1" {
		t.Fatalf("Standard epoch record %+v (%v): want p1's still", rec, err)
	}
	// An append that looked "e" up before the swap holds the lost lane:
	// it refuses the batch as deposed (not committed, naming the rival
	// and its epoch), and the lane was swapped since, so the append path
	// submits it again to the new lane.
	var nl *NotLeaderError
	err = before.lane.reserve(ctx, "e", 1)
	if !errors.As(err, &nl) || nl.Leader != "rival" || nl.Epoch != rivalEpoch {
		t.Fatalf("the lost lane refused a batch with %v, want a *NotLeaderError naming the rival at epoch %d", err, rivalEpoch)
	}
	if !p1.star.laneSwapped(before, err) {
		t.Fatal("a batch the lost lane refused after the swap is not submitted again")
	}
	for i := range 5 {
		for _, st := range []string{"a", "e"} {
			if _, err := g.append(t, p1.star, st, fmt.Sprint("p1-after-", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The rival is deposed: it acks nothing more.
	if _, err := rival.star.Append(ctx, "e", Batch{Records: []Record{{Body: []byte("rival-late")}}}); !errors.Is(err, ErrNotCommitted) {
		t.Fatalf("append on the deposed rival: %v, want not committed", err)
	}
	g.verify(t, p1.star)

	// The read session, opened on the lost lane, reads on past the
	// retake: every acked record of "e", in order.
	g.mu.Lock()
	acked := g.acked["e"]
	g.mu.Unlock()
	var last uint64
	for seq := range acked {
		last = max(last, seq)
	}
	var got []SequencedRecord
	for len(got) == 0 || got[len(got)-1].Seq < last {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		recs, err := sess.Recv(rctx)
		cancel()
		if err != nil {
			t.Fatalf("read session after %d records: %v", len(got), err)
		}
		got = append(got, recs...)
	}
	for i, r := range got {
		if r.Seq != uint64(i) {
			t.Fatalf("read session: record %d has seq %d", i, r.Seq)
		}
		if body, ok := acked[r.Seq]; ok && string(r.Body) != body {
			t.Fatalf("read session: seq %d is %q, acked %q", r.Seq, r.Body, body)
		}
	}
}

// openQuiet opens p1 logging to logs, with an Express stream "e". p1
// learns of a rival at its next flight, not from an absorb round or a
// seal check first (an hour apart), so a rival's appends come before; no
// retention or settlement pass runs.
func openQuiet(t *testing.T, w *world, logs *lockedBuffer) *proc {
	t.Helper()
	p1, err := w.open("p1", func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
		c.AbsorbInterval, c.SealCheckInterval = time.Hour, time.Hour
		c.RetentionInterval, c.SettleInterval = -1, -1
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p1.star.CreateStream(context.Background(), "e", StreamOptions{Class: Express}); err != nil {
		t.Fatal(err)
	}
	return p1
}

// recordedEpoch is class c's current epoch in w's metastore.
func recordedEpoch(t *testing.T, w *world, c Class) uint64 {
	t.Helper()
	rec, _, err := chain.ReadEpoch(context.Background(), w.meta, "s1", c)
	if err != nil {
		t.Fatal(err)
	}
	return rec.Epoch
}

// TestFirstChainLostWhileServingIsNotTakenBack: the first chain (Standard)
// is the star's lock; once a rival holds it, the star takes nothing back
// (the rival, holding the lock, is the one to lead the star): the loss is
// reported, and appends to the class keep failing as not led here.
func TestFirstChainLostWhileServingIsNotTakenBack(t *testing.T) {
	synctest.Test(t, testFirstChainLostWhileServingIsNotTakenBack)
}

func testFirstChainLostWhileServingIsNotTakenBack(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	var logs lockedBuffer
	p1, err := w.open("p1", func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p1.star.Append(ctx, "a", Batch{Records: []Record{{Body: []byte("p1")}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.open("rival", func(c *Config) { c.Express = ClassConfig{} }); err != nil {
		t.Fatal(err)
	}
	rivalEpoch := recordedEpoch(t, w, Standard)
	// p1's Standard lane finds itself deposed at its next flight.
	_, err = p1.star.Append(ctx, "a", Batch{Records: []Record{{Body: []byte("late")}}})
	if !errors.Is(err, ErrNotCommitted) && !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("append after the rival took the first chain: %v", err)
	}
	waitUntil(t, 10*time.Second, "the first chain's loss reported", func() bool {
		return strings.Contains(logs.logged(), "lost the star's first chain to a rival")
	})
	synctest.Wait()
	if e := recordedEpoch(t, w, Standard); e != rivalEpoch {
		t.Fatalf("Standard epoch %d after the loss, want the rival's %d (nothing taken back)", e, rivalEpoch)
	}
	var nl *NotLeaderError
	if _, err := p1.star.Append(ctx, "a", Batch{Records: []Record{{Body: []byte("later")}}}); !errors.As(err, &nl) || nl.Leader != "rival" {
		t.Fatalf("append to the lost first chain: %v, want a *NotLeaderError naming the rival", err)
	}
}

// TestCloseEndsARetakeUnderWay: Close while the star takes a lost chain
// back (its takeover failing over and over: the chain's writes refused)
// ends the retake first, then closes: it returns within its bound and
// leaves no goroutine behind (the bubble would not end).
func TestCloseEndsARetakeUnderWay(t *testing.T) {
	synctest.Test(t, testCloseEndsARetakeUnderWay)
}

func testCloseEndsARetakeUnderWay(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	var logs lockedBuffer
	p1 := openQuiet(t, w, &logs)
	if _, err := p1.star.Append(ctx, "e", Batch{Records: []Record{{Body: []byte("p1")}}}); err != nil {
		t.Fatal(err)
	}
	// Once the retake starts, p1's writes to the Express chain's records
	// fail: its takeover retries until its context ends. Then a rival
	// takes the Express chain over.
	express := map[string]bool{chain.EpochKey("s1", Express): true, chain.CheckpointKey("s1", Express): true}
	p1.meta.SetHook(func(c fault.Call) fault.Fault {
		if c.Op == fault.Get || c.Op == fault.Scan || !strings.Contains(logs.logged(), "taking it back if the star's first chain is still ours") {
			return fault.Fault{}
		}
		for _, k := range c.Keys {
			if express[k] {
				return fault.Fault{Kind: fault.Unavailable}
			}
		}
		return fault.Fault{}
	})
	synctest.Wait() // p1 is idle: its first absorb round is done, the next an hour away
	if _, err := w.open("rival", func(c *Config) { c.Standard, c.DefaultClass = ClassConfig{}, Express }); err != nil {
		t.Fatalf("%v; logs:\n%s", err, logs.logged())
	}
	if _, err := p1.star.Append(ctx, "e", Batch{Records: []Record{{Body: []byte("late")}}}); err == nil {
		t.Fatal("an append to the deposed lane was acked")
	}
	waitUntil(t, 10*time.Second, "the retake started", func() bool {
		return strings.Contains(logs.logged(), "taking it back if the star's first chain is still ours")
	})
	time.Sleep(time.Second) // the bubble's clock: the takeover fails and retries meanwhile
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	p1.star.Close(cctx)
	if took := time.Since(start); took >= 5*time.Second {
		t.Fatalf("Close took %v with a retake under way", took)
	}
	if !strings.Contains(logs.logged(), "could not take back a chain lost while serving") {
		t.Fatalf("the retake did not end as failed; logs:\n%s", logs.logged())
	}
}

// TestExclusiveOpenTakesNothingBack: with Config.ExclusiveOpen the host
// keeps rivals out, so a chain lost while serving is the host's move (a
// member deposed while cut off): the star does not take it back.
func TestExclusiveOpenTakesNothingBack(t *testing.T) {
	synctest.Test(t, testExclusiveOpenTakesNothingBack)
}

func testExclusiveOpenTakesNothingBack(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	var logs lockedBuffer
	p1, err := w.open("p1", func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		c.ExclusiveOpen = true
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p1.star.CreateStream(ctx, "e", StreamOptions{Class: Express}); err != nil {
		t.Fatal(err)
	}
	if _, err := p1.star.Append(ctx, "e", Batch{Records: []Record{{Body: []byte("p1")}}}); err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
	if _, err := w.open("rival", func(c *Config) { c.Standard, c.DefaultClass = ClassConfig{}, Express }); err != nil {
		t.Fatal(err)
	}
	rivalEpoch := recordedEpoch(t, w, Express)
	if _, err := p1.star.Append(ctx, "e", Batch{Records: []Record{{Body: []byte("late")}}}); err == nil {
		t.Fatal("an append to the deposed lane was acked")
	}
	waitUntil(t, 10*time.Second, "p1's Express lane deposed", func() bool { return p1.star.lane(Express).deadFate() != nil })
	time.Sleep(time.Second) // the bubble's clock: a retake would run meanwhile
	synctest.Wait()
	if e := recordedEpoch(t, w, Express); e != rivalEpoch || strings.Contains(logs.logged(), "taking it back") {
		t.Fatalf("Express epoch %d (the rival's %d) after the loss; logs:\n%s", e, rivalEpoch, logs.logged())
	}
}

// TestAppendsRacingARetake: producers append to the lost class without
// pause while the star finds the chain lost, takes it back and swaps the
// new lane in, so some of their appends looked the stream up before the
// swap and are submitted after it (or the other way round). Each append
// is acked, or fails as not committed or outcome unknown: never another
// error, and every acked record is read back at its sequence number, once.
// Each producer is acked on the new lane after the swap.
func TestAppendsRacingARetake(t *testing.T) {
	synctest.Test(t, testAppendsRacingARetake)
}

func testAppendsRacingARetake(t *testing.T) {
	w := newWorld(t)
	g := newLedger()
	var logs lockedBuffer
	p1 := openQuiet(t, w, &logs)
	if _, err := g.append(t, p1.star, "e", "p1-first"); err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
	rival, err := w.open("rival", func(c *Config) { c.Standard, c.DefaultClass = ClassConfig{}, Express })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.append(t, rival.star, "e", "rival"); err != nil {
		t.Fatal(err)
	}
	retaken := func() bool { return strings.Contains(logs.logged(), "took back a chain lost while serving") }
	const producers = 4
	errs := make(chan error, producers)
	for p := range producers {
		go func() {
			after := 0 // acks since the retake was logged
			for i := 0; after < 5; i++ {
				done := retaken()
				_, err := g.append(t, p1.star, "e", fmt.Sprintf("p%d-%d", p, i))
				switch {
				case err == nil && done:
					after++
				case err == nil:
				case errors.Is(err, ErrNotCommitted), errors.Is(err, ErrOutcomeUnknown):
					time.Sleep(time.Millisecond) // the bubble's clock
				default:
					errs <- fmt.Errorf("producer %d, append %d: %w", p, i, err)
					return
				}
				if i > 1000 {
					errs <- fmt.Errorf("producer %d: no 5 acks after the retake in %d appends; logs:\n%s", p, i, logs.logged())
					return
				}
			}
			errs <- nil
		}()
	}
	for range producers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if !retaken() {
		t.Fatalf("no retake logged:\n%s", logs.logged())
	}
	g.verify(t, p1.star)
}
