package sim

import (
	"flag"
	"os"
	"testing"
)

var (
	flagCatalogSeeds = flag.Int("sim.catalog.seeds", 0, "TestCatalogSim: number of seeds (default: the CI budget, coreSeeds)")
	flagCatalogSeed  = flag.Uint64("sim.catalog.seed", 0, "TestCatalogSim: first seed (default 1); alone, replays that one seed")
	flagCatalogTrace = flag.Bool("sim.catalog.trace", false, "TestCatalogSim: print each seed's trace to stderr")
)

// TestCatalogSim runs the catalogue run of the core simulation
// (coresim_catalog.go) over the CI seed budget (256; 32 under -race), each
// twice: a seed must pass the
// checks and replay its exact trace (the two runs' trace hashes equal).
func TestCatalogSim(t *testing.T) {
	first, n := coreSeedRange(*flagCatalogSeed, *flagCatalogSeeds)
	replay := func(s uint64) string {
		return "go test ./loglet/internal/sim -run '^TestCatalogSim$' -sim.catalog.seed=" + itoa(s) + " -sim.catalog.trace -v"
	}
	var tot CatalogResult
	_, replayed := replayTwice(t, first, n, *flagCatalogTrace, func(s uint64, trace bool) *CatalogResult {
		o := CatalogOptions{Seed: s}
		if trace {
			o.Trace = os.Stderr
		}
		return RunCatalog(o)
	}, func(r *CatalogResult) seedRun {
		return seedRun{trace: r.Trace, steps: r.Steps, violations: r.Violations}
	}, replay, func(r *CatalogResult) {
		tot.Steps += r.Steps
		tot.Ops += r.Ops
		tot.Served += r.Served
		tot.Created += r.Created
		tot.Recreated += r.Recreated
		tot.Deleted += r.Deleted
		tot.Trimmed += r.Trimmed
		tot.Configured += r.Configured
		tot.Offsets += r.Offsets
		tot.Conflicts += r.Conflicts
		tot.Refused += r.Refused
	})
	t.Logf("%d seeds from %d, each run twice: %d replayed their exact trace; %d steps, %d operations: served %d, created %d (re-created %d), deleted %d, trimmed %d, configured %d, offsets committed %d, offset conflicts %d, appends refused %d",
		n, first, replayed, tot.Steps, tot.Ops, tot.Served, tot.Created, tot.Recreated, tot.Deleted, tot.Trimmed, tot.Configured, tot.Offsets, tot.Conflicts, tot.Refused)
}
