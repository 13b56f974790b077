package sim

import (
	"flag"
	"os"
	"testing"
	"time"
)

var (
	flagSoakSeeds = flag.Int("sim.soak.seeds", 0, "TestCoreSoak: number of seeds (default: the CI budget, soakSeeds)")
	flagSoakSeed  = flag.Uint64("sim.soak.seed", 0, "TestCoreSoak: first seed (default 1); alone, replays that one seed")
	flagSoakFor   = flag.Duration("sim.soak.for", 0, "TestCoreSoak: virtual time each seed runs (default: the CI budget's, soakFor: a day without -race)")
	flagSoakTrace = flag.Bool("sim.soak.trace", false, "TestCoreSoak: print each seed's trace to stderr")
)

// TestCoreSoak runs a simulated day (coresim_soak.go) per seed: steady
// ingest with idle periods per stream, trims, deletes, re-creates and
// takeovers, settlement on. The quiet period's checker asserts that
// nothing is left unreclaimed (no orphan settled object, doomed or
// pending marker, under-replicated entry or settled slot's flight copy)
// and that idle streams keep few small settled objects. Replay a seed
// with -sim.soak.seed=N -sim.soak.trace -v.
func TestCoreSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("a simulated day a seed")
	}
	first, n := uint64(soakFirst), soakSeeds
	if *flagSoakSeeds > 0 {
		n = *flagSoakSeeds
	}
	if *flagSoakSeed != 0 {
		first, n = *flagSoakSeed, 1
	}
	soak := soakFor
	if *flagSoakFor > 0 {
		soak = *flagSoakFor
	}
	var steps, passes, deletes, trims, recreates, takeovers, smallMax int
	var sim time.Duration
	for s := first; s < first+uint64(n); s++ {
		o := CoreOptions{Seed: s, Quiet: DefaultCoreQuiet, Soak: soak}
		if *flagSoakTrace {
			o.Trace = os.Stderr
		}
		r := RunCore(o)
		t.Logf("seed %d: %v simulated, %d steps, %d settle passes, %d deletes, %d trims, %d re-creates, %d takeovers; at most %d small settled objects in an idle stream",
			s, r.SimTime, r.Steps, r.SettlePasses, r.SoakDeletes, r.SoakTrims, r.SoakRecreates, r.Takeovers, r.SoakSmallMax)
		if r.Failed() {
			t.Errorf("seed %d: %d violations, first: %s\nplan: %s\nreplay: go test ./loglet/internal/sim -run '^TestCoreSoak$' -sim.soak.seed=%d -sim.soak.for=%v -sim.soak.trace -v", s, len(r.Violations), r.Violations[0], r.Plan, s, soak)
		}
		steps, passes, deletes, trims, recreates, takeovers = steps+r.Steps, passes+r.SettlePasses, deletes+r.SoakDeletes, trims+r.SoakTrims, recreates+r.SoakRecreates, takeovers+r.Takeovers
		smallMax = max(smallMax, r.SoakSmallMax)
		sim += r.SimTime
	}
	t.Logf("%d seeds from %d: %v simulated, %d steps, %d settle passes; %d deletes, %d trims, %d re-creates, %d takeovers; at most %d small settled objects in an idle stream",
		n, first, sim, steps, passes, deletes, trims, recreates, takeovers, smallMax)
}
