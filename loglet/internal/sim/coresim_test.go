package sim

import (
	"flag"
	"io"
	"os"
	"runtime"
	"strings"
	"testing"
)

var (
	flagCoreSeeds = flag.Int("sim.core.seeds", 0, "TestCoreSim: number of seeds (default: the CI budget, coreSeeds)")
	flagCoreSeed  = flag.Uint64("sim.core.seed", 0, "TestCoreSim: first seed (default 1); alone, replays that one seed")
	flagCoreTrace = flag.Bool("sim.core.trace", false, "TestCoreSim: print each seed's trace to stderr")
	flagCoreDiff  = flag.Bool("sim.core.diff", false, "TestCoreSim: keep each run's trace and, when a seed does not replay, print where the two traces part")
	flagCoreQuiet = flag.Duration("sim.core.quiet", DefaultCoreQuiet, "TestCoreSim: bound, in virtual time, of the quiet period that ends each seed (no appends, faults off, until settlement catches up; then the leak checker); 0: none")
)

func coreReplay(seed uint64) string {
	return "go test ./loglet/internal/sim -run '^TestCoreSim$' -sim.core.seed=" + itoa(seed) + " -sim.core.trace -v"
}

func itoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		if v /= 10; v == 0 {
			break
		}
	}
	return string(b[i:])
}

// TestCoreSim runs the core-level simulation (coresim.go) over the CI seed
// budget, each seed twice: a seed must pass the checker and replay its
// exact trace (the two runs' trace hashes equal).
func TestCoreSim(t *testing.T) {
	first, n := coreSeedRange(*flagCoreSeed, *flagCoreSeeds)
	var tot CoreResult
	texts := map[*CoreResult]string{} // -sim.core.diff: each run's trace
	failed, replayed := replayTwice(t, first, n, *flagCoreTrace, func(s uint64, trace bool) *CoreResult {
		o := CoreOptions{Seed: s, Quiet: *flagCoreQuiet}
		if trace {
			o.Trace = os.Stderr
		}
		var text strings.Builder
		if *flagCoreDiff {
			o.Trace = &text
			if trace {
				o.Trace = io.MultiWriter(os.Stderr, &text)
			}
		}
		r := RunCore(o)
		if *flagCoreDiff {
			texts[r] = text.String()
		}
		return r
	}, func(r *CoreResult) seedRun {
		text := texts[r]
		delete(texts, r)
		return seedRun{trace: r.Trace, steps: r.Steps, violations: r.Violations, plan: r.Plan, text: text}
	}, coreReplay, func(r *CoreResult) {
		tot.Batches += r.Batches
		tot.Acked += r.Acked
		tot.NotCommitted += r.NotCommitted
		tot.Unknown += r.Unknown
		tot.Orphaned += r.Orphaned
		tot.Halts += r.Halts
		tot.Takeovers += r.Takeovers
		tot.CleanSealMints += r.CleanSealMints
		tot.Crashes += r.Crashes
		tot.Epochs += r.Epochs
		tot.Steps += r.Steps
		tot.SettlePasses += r.SettlePasses
		tot.SettleSteps += r.SettleSteps
		tot.SettledObjects += r.SettledObjects
		tot.Repoints += r.Repoints
		tot.StragglerLeaks += r.StragglerLeaks
		tot.SimTime += r.SimTime
		tot.SplitRounds += r.SplitRounds
		tot.RefChunks += r.RefChunks
		tot.PendingReplays += r.PendingReplays
		tot.Duplicates += r.Duplicates
		tot.InFlightRetries += r.InFlightRetries
		tot.PastWindow += r.PastWindow
		tot.Fences += r.Fences
		tot.FencedRefusals += r.FencedRefusals
		tot.EarlyRounds += r.EarlyRounds
	})
	t.Logf("fencing: %d fence batches issued, %d batches refused for their token", tot.Fences, tot.FencedRefusals)
	t.Logf("split absorb rounds (too large for one metastore Commit, committed in steps by the core): %d, their ref chunks written %d, pending rounds replayed by a successor %d", tot.SplitRounds, tot.RefChunks, tot.PendingReplays)
	if n >= 64 && failed == 0 && tot.SplitRounds == 0 {
		t.Errorf("no seed of %d split an absorb round: the core's split-round steps went unwalked", n)
	}
	t.Logf("clean takeovers sealed and minted in one Commit: %d", tot.CleanSealMints)
	if n >= 64 && failed == 0 && tot.CleanSealMints == 0 {
		t.Errorf("no seed of %d sealed and minted a clean takeover in one Commit: that path went unwalked", n)
	}
	if n >= 64 && failed == 0 && tot.EarlyRounds == 0 {
		t.Errorf("no seed of %d started an early absorb round: the backlog's early trigger went unwalked", n)
	}
	t.Logf("%d seeds from %d (%d failed), each run twice: %d of %d replayed their exact trace; %d steps, %v simulated; batches %d (acked %d, not committed %d, unknown %d, orphaned by a crash %d), halts %d, takeovers %d, crashes %d, epochs %d, early absorb rounds %d; settlement: %d passes of %d requests, %d repoints checked, %d settled objects at the end, %d straggler copies landed after their slot's delete; producer retries: %d answered as duplicates, %d waited for an attempt in flight, %d past the window",
		n, first, failed, replayed, n, tot.Steps, tot.SimTime, tot.Batches, tot.Acked, tot.NotCommitted, tot.Unknown, tot.Orphaned, tot.Halts, tot.Takeovers, tot.Crashes, tot.Epochs, tot.EarlyRounds, tot.SettlePasses, tot.SettleSteps, tot.Repoints, tot.SettledObjects, tot.StragglerLeaks, tot.Duplicates, tot.InFlightRetries, tot.PastWindow)
}

// TestCoreReplayPerturbed runs seeds that once failed to replay (a fence's
// look-ahead racing its cancel left a poison past the cut in one run and
// not the other) many times with goroutine scheduling shaken inside every
// bucket call and GOMAXPROCS varied: every run must hash like the plain
// run. It fails if an executor call's outcome comes to depend on the
// interleaving of its goroutines again.
func TestCoreReplayPerturbed(t *testing.T) {
	seeds := []uint64{687, 1303, 1972}
	runs := max(4, coreSeeds/16) // 16 runs a seed; 4 under -race (slow)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	procs := []int{1, 2, 4, 8}
	for _, s := range seeds {
		var plain strings.Builder
		want := RunCore(CoreOptions{Seed: s, Quiet: *flagCoreQuiet, Trace: &plain})
		for i := range runs {
			runtime.GOMAXPROCS(procs[i%len(procs)])
			var text strings.Builder
			got := RunCore(CoreOptions{Seed: s, Quiet: *flagCoreQuiet, Trace: &text, perturb: true})
			if got.Trace != want.Trace || got.Steps != want.Steps {
				t.Fatalf("seed %d, perturbed run %d (GOMAXPROCS %d): trace %x (%d steps), plain run %x (%d steps); %s",
					s, i, procs[i%len(procs)], got.Trace, got.Steps, want.Trace, want.Steps, traceDiff(plain.String(), text.String()))
			}
		}
	}
}
