package loglet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/objstore"
)

// Close(ctx) ends within its context in every state (docs/design.md, "A
// clean close"): the tests below put a star in each state Close must survive
// (a bucket set down, the metastore down, a halt recovery that cannot
// finish, a healthy star) and bound it by wall time, generously: they run
// under -race on two cores.

// closeBounded calls s.Close(ctx) and waits at most bound (wall time) for it
// to return: a Close still blocked then fails the test. It returns how long
// Close took and its error.
func closeBounded(ctx context.Context, t *testing.T, s *Star, bound time.Duration) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- s.Close(ctx) }()
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case err := <-done:
		return time.Since(start), err
	case <-timer.C:
		t.Fatalf("Close still blocked after %v", bound)
		return 0, nil
	}
}

// waitUntil checks cond each time every goroutine of the synctest bubble
// it runs in is blocked (synctest.Wait), and lets a millisecond of the
// bubble's clock pass (its timers fire) while cond does not hold, failing
// the test if cond does not hold within bound of that clock. The time is
// fake: neither the check nor the bound depends on the machine's speed.
// Outside a bubble it panics (synctest.Wait does).
func waitUntil(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	if !quiesceUntil(bound, time.Millisecond, cond) {
		t.Fatalf("not %s after %v (the bubble's clock)", what, bound)
	}
}

// quiesceUntil is waitUntil's loop: it reports whether cond held within
// bound of the bubble's clock, checked each time the bubble is blocked,
// with step of that clock between checks.
func quiesceUntil(bound, step time.Duration, cond func() bool) bool {
	start := time.Now()
	for synctest.Wait(); !cond(); synctest.Wait() {
		if time.Since(start) >= bound {
			return false
		}
		time.Sleep(step) // the bubble's clock: not a wait on the wall's
	}
	return true
}

// inBubble returns f to run in a testing/synctest bubble, for t.Run.
func inBubble(f func(*testing.T)) func(*testing.T) {
	return func(t *testing.T) { synctest.Test(t, f) }
}

// flying is a set of appends running in goroutines, each with a context
// that never ends: only the star can give them an outcome.
type flying struct {
	wg  sync.WaitGroup
	mu  sync.Mutex
	res []flyResult
}

type flyResult struct {
	stream, body string
	ack          Ack
	err          error
}

// start appends one record (body) to stream in a new goroutine.
func (f *flying) start(s *Star, stream, body string) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		ack, err := s.Append(context.Background(), stream, Batch{Records: []Record{{Body: []byte(body)}}})
		f.mu.Lock()
		f.res = append(f.res, flyResult{stream: stream, body: body, ack: ack, err: err})
		f.mu.Unlock()
	}()
}

// wait waits at most bound for every append to return and checks that each
// ended in exactly one outcome: acked (nil), or an error matching exactly
// one of ErrNotCommitted and ErrOutcomeUnknown.
func (f *flying) wait(t *testing.T, bound time.Duration) []flyResult {
	t.Helper()
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		f.mu.Lock()
		n := len(f.res)
		f.mu.Unlock()
		t.Fatalf("appends still blocked %v after Close (%d returned)", bound, n)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.res {
		if r.err == nil {
			continue
		}
		if nc, ou := errors.Is(r.err, ErrNotCommitted), errors.Is(r.err, ErrOutcomeUnknown); nc == ou {
			t.Errorf("append %q to %s: error matches both or neither outcome (not committed %v, unknown %v): %v", r.body, r.stream, nc, ou, r.err)
		}
	}
	return append([]flyResult(nil), f.res...)
}

// tally counts results by outcome.
func tally(res []flyResult) (acked, notCommitted, unknown int) {
	for _, r := range res {
		switch {
		case r.err == nil:
			acked++
		case errors.Is(r.err, ErrOutcomeUnknown):
			unknown++
		default:
			notCommitted++
		}
	}
	return
}

func tailOf(s *Star, stream string) uint64 {
	tail, err := s.CheckTail(context.Background(), stream)
	if err != nil {
		return 0
	}
	return tail.Seq
}

func appendOne(t *testing.T, s *Star, stream, body string) Ack {
	t.Helper()
	ack, err := s.Append(context.Background(), stream, Batch{Records: []Record{{Body: []byte(body)}}})
	if err != nil {
		t.Fatalf("append %q to %s: %v", body, stream, err)
	}
	return ack
}

// TestCloseBucketSetDown: Express K=3/W=2 with every bucket down after a
// few acks, appends in the window and in the pool. Close(500ms) returns
// within about its context, with an error that says why; every append
// returns, each with exactly one of the two failure outcomes (nothing can
// be acked with every bucket down), the flights Close gave up on
// outcome-unknown.
func TestCloseBucketSetDown(t *testing.T) {
	synctest.Test(t, testCloseBucketSetDown)
}

func testCloseBucketSetDown(t *testing.T) {
	r := newRig(t, Express, 3, 21, func(c *Config, _ []*objstore.FaultStore) {
		c.AbsorbInterval = 2 * time.Millisecond
	})
	for i := 0; i < 5; i++ {
		appendOne(t, r.star, "a", fmt.Sprint("ok-", i))
	}
	for _, f := range r.fault {
		f.SetDown(true)
	}
	var fl flying
	const n = 12
	for i := 0; i < n; i++ {
		fl.start(r.star, "a", fmt.Sprint("down-", i))
	}
	waitUntil(t, 5*time.Second, "every append admitted", func() bool { return tailOf(r.star, "a") == 5+n })
	waitUntil(t, 5*time.Second, "a flight in the window", func() bool { return r.star.Stats().Express.WindowInFlight > 0 })

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	took, err := closeBounded(ctx, t, r.star, 5*time.Second)
	t.Logf("Close took %v: %v", took, err)
	if took > 3*time.Second {
		t.Errorf("Close took %v with a 500ms context", took)
	}
	if err == nil {
		t.Fatal("Close with the bucket set down returned nil")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close's error does not say its context ended: %v", err)
	}
	res := fl.wait(t, 5*time.Second)
	acked, nc, unknown := tally(res)
	if acked != 0 || nc+unknown != n {
		t.Fatalf("outcomes: %d acked, %d not committed, %d unknown; want %d failed", acked, nc, unknown, n)
	}
	if unknown == 0 {
		t.Errorf("no append ended outcome-unknown, though a flight was in the window (%d not committed)", nc)
	}
	if !strings.Contains(err.Error(), "outcome-unknown") {
		t.Errorf("Close's error does not mention the batches it left outcome-unknown: %v", err)
	}
	st := r.star.Stats().Express
	if st.AckedBatches != 5 || st.FailedOutcomeUnknown+st.FailedNotCommitted != n {
		t.Errorf("stats: acked %d, unknown %d, not committed %d", st.AckedBatches, st.FailedOutcomeUnknown, st.FailedNotCommitted)
	}
}

// TestCloseMetastoreDown: the metastore goes down; appends still ack (it is
// not on the ack path) but nothing can be absorbed. Close(500ms) returns
// within about its context, with an error that names the unabsorbed
// flights; a process opened once the metastore is back takes the star over,
// walks the chain and reads every acked record.
func TestCloseMetastoreDown(t *testing.T) {
	synctest.Test(t, testCloseMetastoreDown)
}

func testCloseMetastoreDown(t *testing.T) {
	w := newWorld(t)
	g := newLedger()
	p1, err := w.open("p1", func(c *Config) { c.AbsorbInterval = 2 * time.Millisecond })
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := p1.star.CreateStream(ctx, "e", StreamOptions{Class: Express}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		for _, st := range []string{"a", "e"} {
			if _, err := g.append(t, p1.star, st, fmt.Sprint("up-", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	p1.meta.SetDown(true)
	for i := 0; i < 10; i++ {
		for _, st := range []string{"a", "e"} {
			if _, err := g.append(t, p1.star, st, fmt.Sprint("down-", i)); err != nil {
				t.Fatalf("append with the metastore down (not on the ack path): %v", err)
			}
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	took, err := closeBounded(cctx, t, p1.star, 5*time.Second)
	t.Logf("Close took %v: %v", took, err)
	if took > 3*time.Second {
		t.Errorf("Close took %v with a 500ms context", took)
	}
	if err == nil {
		t.Fatal("Close with the metastore down returned nil")
	}
	if !strings.Contains(err.Error(), "not absorbed") {
		t.Errorf("Close's error does not mention the unabsorbed flights: %v", err)
	}
	for _, c := range []Class{Standard, Express} {
		if !strings.Contains(err.Error(), c.String()) {
			t.Errorf("Close's error does not mention the %s chain: %v", c, err)
		}
	}
	p1.meta.SetDown(false) // back; p1 is closed and does nothing more
	p2, err := w.open("p2", nil)
	if err != nil {
		t.Fatalf("takeover after the metastore came back: %v", err)
	}
	g.verify(t, p2.star)
	for _, st := range []string{"a", "e"} {
		if ack, err := g.append(t, p2.star, st, "p2"); err != nil || ack.Start != 15 {
			t.Fatalf("%s on the successor: %+v %v (want seq 15)", st, ack, err)
		}
	}
}

// TestCloseMidRecovery: a foreign occupant at slot 2 halts the epoch, and
// the bucket goes down as soon as the occupant has been read, so the
// recovery's fence blocks. Appends made during the recovery wait in the
// pool. Close(500ms) returns within about its context with an error; the
// halted flight (never fenced) ends outcome-unknown and every pooled batch
// (never cut) not committed.
func TestCloseMidRecovery(t *testing.T) {
	synctest.Test(t, testCloseMidRecovery)
}

func testCloseMidRecovery(t *testing.T) {
	key2 := chain.SlotKey("s1", Standard, 1, 2)
	var down atomic.Bool
	r := newRig(t, Standard, 1, 22, func(c *Config, fs []*objstore.FaultStore) {
		fs[0].SetHook(func(call fault.Call) fault.Fault {
			op, key := call.Op, call.Key
			if down.Load() {
				return fault.Fault{Err: objstore.ErrUnavailable}
			}
			if op == fault.Get && key == key2 {
				down.Store(true) // the upload reads the occupant; everything after fails
			}
			return fault.Fault{}
		})
	})
	if err := r.mems[0].PutIfAbsent(context.Background(), key2, envelope.Poison(1, 2, envelope.NewNonce())); err != nil {
		t.Fatal(err)
	}
	appendOne(t, r.star, "a", "0")
	appendOne(t, r.star, "a", "1")
	var fl flying
	fl.start(r.star, "a", "halted")
	waitUntil(t, 5*time.Second, "recovering", func() bool {
		st := r.star.Stats().Standard
		return st.Halts == 1 && st.Recovering
	})
	for i := 0; i < 4; i++ {
		fl.start(r.star, "a", fmt.Sprint("pooled-", i))
	}
	waitUntil(t, 5*time.Second, "every append admitted", func() bool { return tailOf(r.star, "a") == 7 })
	if st := r.star.Stats().Standard; !st.Recovering || st.SuccessionStep != "fence" {
		t.Fatalf("recovering %v at step %q, want the fence (blocked)", st.Recovering, st.SuccessionStep)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	took, err := closeBounded(ctx, t, r.star, 5*time.Second)
	t.Logf("Close took %v: %v", took, err)
	if took > 3*time.Second {
		t.Errorf("Close took %v with a 500ms context", took)
	}
	if err == nil {
		t.Fatal("Close during a recovery that cannot finish returned nil")
	}
	for _, res := range fl.wait(t, 5*time.Second) {
		switch {
		case res.body == "halted" && !errors.Is(res.err, ErrOutcomeUnknown):
			t.Errorf("the halted flight (never fenced) ended %v, want outcome unknown", res.err)
		case res.body != "halted" && !errors.Is(res.err, ErrNotCommitted):
			t.Errorf("pooled batch %q (never cut) ended %v, want not committed", res.body, res.err)
		}
	}
}

// TestCloseCleanIsNilAndIdempotent: Close(context.Background()) on a
// healthy star returns nil quickly, and a second Close returns the same.
func TestCloseCleanIsNilAndIdempotent(t *testing.T) {
	synctest.Test(t, testCloseCleanIsNilAndIdempotent)
}

func testCloseCleanIsNilAndIdempotent(t *testing.T) {
	r := newRig(t, Express, 3, 23, nil)
	var fl flying
	for i := 0; i < 20; i++ {
		fl.start(r.star, fmt.Sprint("s", i%3), fmt.Sprint(i))
	}
	res := fl.wait(t, 10*time.Second)
	if acked, _, _ := tally(res); acked != 20 {
		t.Fatalf("%d of 20 appends acked on a healthy star", acked)
	}
	took, err := closeBounded(context.Background(), t, r.star, 5*time.Second)
	if err != nil {
		t.Fatalf("clean Close: %v", err)
	}
	t.Logf("clean Close took %v", took)
	if took > 2*time.Second {
		t.Errorf("clean Close of a healthy star took %v", took)
	}
	if err := r.star.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	rec, _, err := chain.ReadEpoch(context.Background(), r.meta, "s1", Express)
	if err != nil || rec.Seal == nil || rec.Seal.Epoch != rec.Epoch {
		t.Fatalf("epoch record after a clean Close: %+v %v (want a clean seal)", rec, err)
	}
	if _, err := r.star.Append(context.Background(), "s0", Batch{Records: []Record{{Body: []byte("late")}}}); !errors.Is(err, ErrClosed) || !errors.Is(err, ErrNotCommitted) {
		t.Fatalf("append after Close: %v", err)
	}
}

// TestCloseWithoutDeadlineBoundedByCloseTimeout: a Close whose context has
// no deadline is bounded by Config.CloseTimeout (300ms here) when it cannot
// finish (the bucket set is down); a second Close returns the first one's
// error.
func TestCloseWithoutDeadlineBoundedByCloseTimeout(t *testing.T) {
	synctest.Test(t, testCloseWithoutDeadlineBoundedByCloseTimeout)
}

func testCloseWithoutDeadlineBoundedByCloseTimeout(t *testing.T) {
	r := newRig(t, Express, 3, 24, func(c *Config, _ []*objstore.FaultStore) {
		c.CloseTimeout = 300 * time.Millisecond
	})
	for i := 0; i < 3; i++ {
		appendOne(t, r.star, "a", fmt.Sprint(i))
	}
	for _, f := range r.fault {
		f.SetDown(true)
	}
	var fl flying
	for i := 0; i < 4; i++ {
		fl.start(r.star, "a", fmt.Sprint("down-", i))
	}
	waitUntil(t, 5*time.Second, "every append admitted", func() bool { return tailOf(r.star, "a") == 7 })
	ctx, cancel := context.WithCancel(context.Background()) // no deadline
	defer cancel()
	took, err := closeBounded(ctx, t, r.star, 10*time.Second)
	t.Logf("Close took %v: %v", took, err)
	if took > 2*time.Second {
		t.Errorf("Close without a deadline took %v with CloseTimeout 300ms", took)
	}
	if err == nil {
		t.Fatal("Close with the bucket set down returned nil")
	}
	if acked, _, _ := tally(fl.wait(t, 5*time.Second)); acked != 0 {
		t.Errorf("%d appends acked with every bucket down", acked)
	}
	if err2 := r.star.Close(context.Background()); err2 != err {
		t.Errorf("second Close returned %v, want the first's %v", err2, err)
	}
}

// TestCloseWithEndedContext: Close with a context that has already ended
// still returns at once, and every admitted batch still gets exactly one
// outcome; a nil error means every one was acked.
func TestCloseWithEndedContext(t *testing.T) {
	synctest.Test(t, testCloseWithEndedContext)
}

func testCloseWithEndedContext(t *testing.T) {
	r := newRig(t, Standard, 1, 25, func(c *Config, fs []*objstore.FaultStore) {
		c.Standard.FlushDeadline = time.Hour // only Close cuts
		fs[0].SetLatency(fault.Fixed(20*time.Millisecond), fault.Put)
	})
	var fl flying
	for i := 0; i < 10; i++ {
		fl.start(r.star, "a", fmt.Sprint(i))
	}
	waitUntil(t, 5*time.Second, "every append admitted", func() bool { return tailOf(r.star, "a") == 10 })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	took, err := closeBounded(ctx, t, r.star, 5*time.Second)
	t.Logf("Close took %v: %v", took, err)
	if took > 2*time.Second {
		t.Errorf("Close with an ended context took %v", took)
	}
	acked, nc, unknown := tally(fl.wait(t, 5*time.Second))
	t.Logf("outcomes: %d acked, %d not committed, %d unknown", acked, nc, unknown)
	if err == nil && acked != 10 {
		t.Errorf("Close returned nil, but only %d of 10 batches were acked", acked)
	}
	if unknown > 0 && !strings.Contains(fmt.Sprint(err), "outcome-unknown") {
		t.Errorf("%d batches ended outcome-unknown, and Close's error does not say so: %v", unknown, err)
	}
}
