package sim

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	flagSeeds = flag.Int("sim.seeds", 0, "number of seeds to run (default: the CI budget, or $SIM_SEEDS)")
	flagSeed  = flag.Uint64("sim.seed", 0, "first seed (default 1, or $SIM_SEED); alone, replays that one seed")
	flagV     = flag.Bool("sim.v", false, "log every seed's plan and summary")
	flagCrash = flag.Bool("sim.crash", false, "run TestSimCrashRestart (needs loglet takeover)")
	flagFence = flag.Bool("sim.fence", false, "run the zombie-fence scenario on even seeds (hangs today's loglet: see TestBugDeposedCloseHangs)")
)

// ciSeeds is the default seed budget: it keeps `go test -race ./internal/sim`
// well under a minute of wall time on two cores.
const ciSeeds = 12

func seedRange() (first uint64, n int) {
	first, n = 1, ciSeeds
	if v, err := strconv.ParseUint(os.Getenv("SIM_SEED"), 10, 64); err == nil {
		first, n = v, 1
	}
	if v, err := strconv.Atoi(os.Getenv("SIM_SEEDS")); err == nil && v > 0 {
		n = v
	}
	if *flagSeed != 0 {
		first, n = *flagSeed, 1
	}
	if *flagSeeds > 0 {
		n = *flagSeeds
	}
	return first, n
}

func replay(test string, seed uint64) string {
	return fmt.Sprintf("go test ./internal/sim -run '^%s$' -sim.seed=%d -v", test, seed)
}

func report(t *testing.T, test string, r *Result) {
	t.Helper()
	if *flagV {
		t.Logf("%s\n  appends %d (acked %d, not committed %d, unknown %d of which present %d), reads %d (errors %d), halts %d, zone downs %d, corrupted %d, fences %d, linearizability %s, sim time %v\n  injected %+v\n  metastore %+v",
			r.Plan, r.Appends, r.Acked, r.NotCommitted, r.Unknown, r.UnknownPresent, r.Reads, r.ReadErrors, r.Halts, r.ZoneDowns, r.Corrupted, r.Fences, r.Linearizability, r.SimTime, r.Injected, r.MetaInjected)
	}
	if r.Failed() {
		t.Errorf("seed %d: %d violations:\n  %s\nplan: %s\nreplay: %s", r.Seed, len(r.Violations), strings.Join(r.Violations, "\n  "), r.Plan, replay(test, r.Seed))
	}
}

// TestSim runs the CI seed budget (or -sim.seeds / -sim.seed) with every
// fault of the menu (and, with -sim.fence, the fence scenario on even seeds).
func TestSim(t *testing.T) {
	first, n := seedRange()
	start := time.Now()
	var sim time.Duration
	var tot Result
	known := map[string]int{}
	failed := 0
	for s := first; s < first+uint64(n); s++ {
		r := Run(t, Options{Seed: s, Scenarios: Scenarios{Fence: *flagFence && s%2 == 0}})
		sim += r.SimTime
		report(t, "TestSim", r)
		if r.Failed() {
			failed++
		}
		tot.Appends += r.Appends
		tot.Acked += r.Acked
		tot.NotCommitted += r.NotCommitted
		tot.Unknown += r.Unknown
		tot.UnknownPresent += r.UnknownPresent
		tot.Reads += r.Reads
		tot.Halts += r.Halts
		tot.ZoneDowns += r.ZoneDowns
		tot.Corrupted += r.Corrupted
		add(&tot.Injected, r.Injected)
		tot.MetaInjected.Failed += r.MetaInjected.Failed
		tot.MetaInjected.Ambiguous += r.MetaInjected.Ambiguous
		tot.MetaInjected.Delayed += r.MetaInjected.Delayed
		for k, v := range r.KnownBugs {
			known[k] += v
		}
	}
	t.Logf("%d seeds from %d (%d failed): %v simulated in %v wall; appends %d (acked %d, not committed %d, unknown %d of which present %d), reads %d, halts %d, zone downs %d, corrupted copies %d; injected %+v; metastore failed %d ambiguous %d delayed %d; known-bug findings %v",
		n, first, failed, sim, time.Since(start), tot.Appends, tot.Acked, tot.NotCommitted, tot.Unknown, tot.UnknownPresent, tot.Reads, tot.Halts, tot.ZoneDowns, tot.Corrupted,
		tot.Injected, tot.MetaInjected.Failed, tot.MetaInjected.Ambiguous, tot.MetaInjected.Delayed, known)
}
