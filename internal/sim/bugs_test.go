package sim

import (
	"strings"
	"testing"
	"time"
)

// runWithin runs o and fails if the run does not finish within d of wall
// time (a livelocked bubble never lets virtual time advance, so only a
// real-time watchdog sees it).
func runWithin(t *testing.T, o Options, d time.Duration) *Result {
	t.Helper()
	done := make(chan *Result, 1)
	go func() { done <- Run(t, o) }()
	select {
	case r := <-done:
		return r
	case <-time.After(d):
		t.Fatalf("seed %d: the simulation did not finish within %v of wall time (hang); replay: %s", o.Seed, d, replay(t.Name(), o.Seed))
		return nil
	}
}

// TestSimCrashRestart: the crash-restart scenario. It runs once loglet.Open
// takes over a star whose owner did not Close (issue 7's epochs).
func TestSimCrashRestart(t *testing.T) {
	if !*flagCrash {
		t.Skip("opt-in with -sim.crash: against the epochs work in progress, Open takes over and the checker's chain walk still assumes one epoch from seq 0 (false violations), and porcupine flags seed 1 (not yet triaged); issue 7")
	}
	first, n := seedRange()
	for s := first; s < first+uint64(min(n, 4)); s++ {
		r := runWithin(t, Options{Seed: s, Scenarios: Scenarios{CrashRestart: true}}, 2*time.Minute)
		if r.Skipped != "" {
			t.Skip(r.Skipped)
		}
		report(t, t.Name(), r)
	}
}

// TestBugReadTailBehindRecords: Star.Read below the flight index reports a
// Tail captured before it reads refs, so it can return records at or past
// the Tail it reports (loglet/star.go, Read: `tail := st.durable` under the
// lane lock, then hist.read after unlocking; the absorb and releases move
// on in between). A caller computing lag as Tail.Seq-Next underflows.
// Found by TestSim seeds 5 and 25.
func TestBugReadTailBehindRecords(t *testing.T) {
	t.Skip("loglet bug (issue 7 follow-up): Star.Read reports a Tail older than the records it returns; replay: go test ./internal/sim -run '^TestBugReadTailBehindRecords$' -v after removing this Skip")
	for _, s := range []uint64{5, 25} {
		r := Run(t, Options{Seed: s, Strict: true})
		for _, v := range r.Violations {
			if strings.Contains(v, "read-tail-behind") {
				t.Errorf("seed %d: %s", s, v)
			}
		}
	}
}

// TestBugDeposedCloseHangs: after a successor seals the checkpoint, the
// incumbent's absorb stops (ErrDeposed) and halts the lane, but its flusher
// may be blocked in backlog.Acquire (loglet/lane.go flushLoop, the Acquire
// on l.ctx) with the backlog full and nothing left to free it; lane.close
// waits for the flusher (<-l.flushr) before it cancels l.ctx or closes the
// backlog, so Close never returns. Meanwhile, once Star.Close has closed
// s.closing, the other lane's waitForCut spins: its select on
// l.star.closing is always ready while its own l.closing is still false
// (set only when Close reaches that lane), a busy loop for as long as the
// first lane takes to close (forever here; under synctest it also stops
// the virtual clock). Found with -sim.fence at seeds 2 and 6.
func TestBugDeposedCloseHangs(t *testing.T) {
	t.Skip("loglet bug (issue 7): Close hangs after deposition with a full backlog, and a lane's flusher busy-spins while another lane closes; replay: go test ./internal/sim -run '^TestSim$' -sim.fence -sim.seed=2 -timeout 60s")
	for _, s := range []uint64{2, 6} {
		r := runWithin(t, Options{Seed: s, Scenarios: Scenarios{Fence: true}}, 30*time.Second)
		report(t, "TestSim", r)
	}
}
