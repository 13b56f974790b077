package loglet

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// earlyRun is what one run of an absorb-pacing test saw: the Standard
// chain's figures at Close and the virtual time its appends took.
type earlyRun struct {
	st      ClassStats
	elapsed time.Duration
}

// runAbsorbPacing opens a Standard-only star in a synctest bubble (virtual
// time; instant stores) with the given AbsorbInterval, AbsorbEarlyPercent
// and backlog bound (0: the defaults), runs producers that each append n one-record batches, gap apart
// (0: back to back, each waiting for its ack), and returns what it saw.
func runAbsorbPacing(t *testing.T, interval time.Duration, early, backlogFlights, producers, n int, gap time.Duration) earlyRun {
	t.Helper()
	var out earlyRun
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		cfg := Config{Star: "s1", Meta: metastore.NewMem(), CreateOnAppend: true, Logger: quietLogger(),
			AbsorbInterval: interval, AbsorbEarlyPercent: early, SettleInterval: -1,
			Standard: ClassConfig{Stores: []objstore.Store{objstore.NewMem()}, ParallelUploads: 2,
				ChainBacklogFlights: backlogFlights, FlushDeadline: time.Millisecond}}
		s, err := Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, producers)
		for p := range producers {
			wg.Go(func() {
				for i := range n {
					if _, err := s.Append(ctx, fmt.Sprintf("p%d", p), Batch{Records: []Record{{Body: []byte("x")}}}); err != nil {
						errs <- fmt.Errorf("producer %d, append %d: %w", p, i, err)
						return
					}
					time.Sleep(gap)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		out.elapsed = time.Since(start)
		out.st = *s.Stats().Standard
		if err := s.Close(ctx); err != nil {
			t.Fatalf("close: %v", err)
		}
	})
	return out
}

// TestAbsorbEarlyDrainsTightBacklog: producers that fill a backlog of four
// flights faster than a 1s AbsorbInterval drains it wait at the bound for
// the rest of each interval when rounds wait for it (AbsorbEarlyPercent
// negative), and hardly at all with the early trigger (the default, 50):
// rounds then follow the backlog, at the metastore's pace. The wait is
// measured as the appends' virtual time and the stalls counted and timed:
// a stall begins when a cut comes due (a 1ms FlushDeadline after its
// batch), so on the interval alone it takes most of the appends' time.
func TestAbsorbEarlyDrainsTightBacklog(t *testing.T) {
	const producers, n = 4, 40
	off := runAbsorbPacing(t, time.Second, -1, 4, producers, n, 0)
	on := runAbsorbPacing(t, time.Second, 0, 4, producers, n, 0)
	for _, r := range []struct {
		name string
		earlyRun
	}{{"interval only", off}, {"early", on}} {
		t.Logf("%s: %v virtual for %d appends; %d rounds (%d early), %d metastore requests; backlog stalls %v, %v",
			r.name, r.elapsed, producers*n, r.st.AbsorbRounds, r.st.AbsorbEarlyRounds, r.st.MetastoreRequests, r.st.Backlog.Stalls, time.Duration(r.st.Backlog.StalledNanos))
	}
	if off.st.AbsorbEarlyRounds != 0 {
		t.Errorf("interval only: %d early rounds, want 0", off.st.AbsorbEarlyRounds)
	}
	if off.elapsed < 5*time.Second || stallCount(off.st) == 0 {
		t.Fatalf("interval only: %v for the appends, %d stalls: the test no longer outruns the interval", off.elapsed, stallCount(off.st))
	}
	if stalled := time.Duration(off.st.Backlog.StalledNanos); stalled < off.elapsed/2 {
		t.Errorf("interval only: stalled %v of the appends' %v, want most of it (the stall is timed from the flush deadline)", stalled, off.elapsed)
	}
	if on.st.AbsorbEarlyRounds == 0 {
		t.Errorf("early: no early round")
	}
	if on.elapsed*10 > off.elapsed || stallCount(on.st) >= stallCount(off.st) {
		t.Errorf("early: %v for the appends and %d stalls, against %v and %d on the interval only: want a tenth of the time at most, and fewer stalls",
			on.elapsed, stallCount(on.st), off.elapsed, stallCount(off.st))
	}
}

// stallCount is the backlog's stalls, every cause.
func stallCount(st ClassStats) uint64 {
	var n uint64
	for _, c := range st.Backlog.Stalls {
		n += c
	}
	return n
}

// TestAbsorbEarlyKeepsQuietChainOnInterval: at low ingest (one append every
// 50ms; the default AbsorbInterval, 100ms, and backlog bound) the backlog never nears its mark, so the
// early trigger changes nothing: no early round, and the same rounds and
// metastore requests as with it off, at most one round per AbsorbInterval.
func TestAbsorbEarlyKeepsQuietChainOnInterval(t *testing.T) {
	const n, gap = 100, 50 * time.Millisecond
	off := runAbsorbPacing(t, 0, -1, 0, 1, n, gap)
	on := runAbsorbPacing(t, 0, 0, 0, 1, n, gap)
	for _, r := range []struct {
		name string
		earlyRun
	}{{"interval only", off}, {"early", on}} {
		t.Logf("%s: %v virtual; %d rounds (%d early), %d metastore requests (%.1f/s)", r.name, r.elapsed, r.st.AbsorbRounds, r.st.AbsorbEarlyRounds,
			r.st.MetastoreRequests, float64(r.st.MetastoreRequests)/r.elapsed.Seconds())
	}
	if on.st.AbsorbEarlyRounds != 0 {
		t.Errorf("%d early rounds at low ingest, want 0", on.st.AbsorbEarlyRounds)
	}
	if on.st.AbsorbRounds != off.st.AbsorbRounds || on.st.MetastoreRequests != off.st.MetastoreRequests {
		t.Errorf("early: %d rounds, %d metastore requests; interval only: %d, %d: want the same", on.st.AbsorbRounds, on.st.MetastoreRequests, off.st.AbsorbRounds, off.st.MetastoreRequests)
	}
	// One round per interval while appending, plus the first and Close's.
	if max := uint64(on.elapsed/(100*time.Millisecond)) + 3; on.st.AbsorbRounds > max {
		t.Errorf("%d rounds in %v: more than one per AbsorbInterval (%d at most)", on.st.AbsorbRounds, on.elapsed, max)
	}
}

// TestAbsorbEarlyPercentValidated: over 100 is refused with a clear error;
// 0 takes the default, 50; negative turns the early trigger off.
func TestAbsorbEarlyPercentValidated(t *testing.T) {
	c := DefaultConfig()
	if c.AbsorbEarlyPercent != 50 {
		t.Errorf("default AbsorbEarlyPercent %d, want 50", c.AbsorbEarlyPercent)
	}
	for _, tc := range []struct {
		pct  int
		want string
	}{{101, "AbsorbEarlyPercent=101: want at most 100"}, {100, ""}, {-1, ""}} {
		c := Config{Star: "s1", Meta: metastore.NewMem(), AbsorbEarlyPercent: tc.pct,
			Standard: ClassConfig{Stores: []objstore.Store{objstore.NewMem()}}}
		err := c.Validate()
		if got := fmt.Sprint(err); (tc.want == "") != (err == nil) || (tc.want != "" && !strings.Contains(got, tc.want)) {
			t.Errorf("AbsorbEarlyPercent=%d: Validate() = %v, want %q", tc.pct, err, tc.want)
		}
	}
}
