package sim

import (
	"flag"
	"os"
	"strings"
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
	first, n := uint64(1), coreSeeds
	if *flagCatalogSeed != 0 {
		first, n = *flagCatalogSeed, 1
	}
	if *flagCatalogSeeds > 0 {
		n = *flagCatalogSeeds
	}
	var tot CatalogResult
	replayed := 0
	for s := first; s < first+uint64(n); s++ {
		o := CatalogOptions{Seed: s}
		if *flagCatalogTrace {
			o.Trace = os.Stderr
		}
		r := RunCatalog(o)
		o.Trace = nil
		again := RunCatalog(o)
		replay := "go test ./loglet/internal/sim -run '^TestCatalogSim$' -sim.catalog.seed=" + itoa(s) + " -sim.catalog.trace -v"
		if r.Trace == again.Trace && r.Steps == again.Steps {
			replayed++
		} else {
			t.Errorf("seed %d did not replay: trace %x (%d steps), then %x (%d steps); replay: %s", s, r.Trace, r.Steps, again.Trace, again.Steps, replay)
		}
		if r.Failed() {
			t.Errorf("seed %d: %d violations:\n  %s\nreplay: %s", s, len(r.Violations), strings.Join(r.Violations, "\n  "), replay)
		}
		tot.Steps += r.Steps
		tot.Ops += r.Ops
		tot.Served += r.Served
		tot.Created += r.Created
		tot.Recreated += r.Recreated
		tot.Deleted += r.Deleted
		tot.Trimmed += r.Trimmed
		tot.Offsets += r.Offsets
		tot.Conflicts += r.Conflicts
		tot.Refused += r.Refused
	}
	t.Logf("%d seeds from %d, each run twice: %d replayed their exact trace; %d steps, %d operations: served %d, created %d (re-created %d), deleted %d, trimmed %d, offsets committed %d, offset conflicts %d, appends refused %d",
		n, first, replayed, tot.Steps, tot.Ops, tot.Served, tot.Created, tot.Recreated, tot.Deleted, tot.Trimmed, tot.Offsets, tot.Conflicts, tot.Refused)
}
