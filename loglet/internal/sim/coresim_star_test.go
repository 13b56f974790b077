package sim

import (
	"flag"
	"os"
	"slices"
	"strings"
	"testing"
)

var (
	flagStarSeeds = flag.Int("sim.star.seeds", 0, "TestCoreStarSim: number of seeds (default: TestCoreSim's budget, coreSeeds)")
	flagStarSeed  = flag.Uint64("sim.star.seed", 0, "TestCoreStarSim: first seed (default 1); alone, replays that one seed")
	flagStarTrace = flag.Bool("sim.star.trace", false, "TestCoreStarSim: print each seed's trace to stderr")
)

// TestCoreStarSim runs the star-leadership simulation (coresim_star.go),
// each seed twice: a seed must pass the checker and replay its exact trace.
func TestCoreStarSim(t *testing.T) {
	first, n := coreSeedRange(*flagStarSeed, *flagStarSeeds)
	replay := func(s uint64) string {
		return "go test ./loglet/internal/sim -run '^TestCoreStarSim$' -sim.star.seed=" + itoa(s) + " -sim.star.trace -v"
	}
	var tot StarResult
	failed, replayed := replayTwice(t, first, n, *flagStarTrace, func(s uint64, trace bool) *StarResult {
		o := StarOptions{Seed: s}
		if trace {
			o.Trace = os.Stderr
		}
		return RunCoreStar(o)
	}, func(r *StarResult) seedRun {
		return seedRun{trace: r.Trace, steps: r.Steps, violations: r.Violations, plan: r.Plan}
	}, replay, func(r *StarResult) {
		tot.Opens += r.Opens
		tot.Served += r.Served
		tot.Failed += r.Failed
		tot.Retakes += r.Retakes
		tot.Together += r.Together
		tot.Steps += r.Steps
		tot.SimTime += r.SimTime
	})
	t.Logf("%d seeds from %d (%d failed), each run twice: %d of %d replayed their exact trace; %d steps, %v simulated; star openings %d (served %d, failed %d), retakes %d, every chain taken over at once %d",
		n, first, failed, replayed, n, tot.Steps, tot.SimTime, tot.Opens, tot.Served, tot.Failed, tot.Retakes, tot.Together)
	if n >= 64 && failed == 0 && tot.Together == 0 {
		t.Errorf("no opening of %d seeds took every chain over at once: that path went unwalked", n)
	}
}

// TestCoreStarSimFindsABlindShell plants a shell that never finds a
// rival on the first chain: the checker must catch the star split
// between two processes on some seed (and replay it exactly). The split
// needs a rival to take the first chain between a process's own opening of
// it and its start of the second, which few seeds draw (seed 738 is the
// first since an opening that finds the first lost closes the later
// chains it won cleanly), hence the budget: a blind seed costs about
// 3 ms. The blind shell reports no chain lost while serving either: the
// take-back (starcore.Core.ChainLost) mends every split it makes within
// 20,000 seeds.
func TestCoreStarSimFindsABlindShell(t *testing.T) {
	for s := uint64(1); s <= 1024; s++ {
		r := RunCoreStar(StarOptions{Seed: s, BlindHoldChecks: true})
		if !r.failed() {
			continue
		}
		again := RunCoreStar(StarOptions{Seed: s, BlindHoldChecks: true})
		if again.Trace != r.Trace || !slices.Equal(again.Violations, r.Violations) {
			t.Fatalf("seed %d: the planted run did not replay", s)
		}
		t.Logf("seed %d: found it: %s", s, strings.Join(r.Violations, "; "))
		return
	}
	t.Fatal("1024 seeds with blind hold checks, and no violation found")
}
