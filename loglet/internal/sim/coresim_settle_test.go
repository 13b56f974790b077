package sim

import (
	"flag"
	"testing"
)

var flagSettleErrSeeds = flag.Int("sim.settleerr.seeds", 64, "TestCoreSimSettlesUnderMetastoreErrors: number of seeds")

// TestCoreSimSettlesUnderMetastoreErrors is the regression run of a
// liveness bug: with every metastore request failing 6% of the time (and
// 3% more ambiguously), a pass of many requests failed as a whole nearly
// every time, and on the pass backoff (doubling to 30 s) settlement did not
// finish within 5 virtual minutes of the final open. A request that fails
// now retries inside the pass. (Every seed runs with settlement on.)
func TestCoreSimSettlesUnderMetastoreErrors(t *testing.T) {
	var passes, steps int
	failed := 0
	for s := uint64(1); s <= uint64(*flagSettleErrSeeds); s++ {
		r := RunCore(CoreOptions{Seed: s, MetaErr: 0.06})
		passes += r.SettlePasses
		steps += r.SettleSteps
		if len(r.Violations) > 0 {
			failed++
			t.Errorf("seed %d: %d violations, first: %s\nplan: %s", s, len(r.Violations), r.Violations[0], r.Plan)
		}
	}
	t.Logf("%d seeds, settlement on, metastore errors 6%% (3%% ambiguous): %d failed; %d passes of %d requests", *flagSettleErrSeeds, failed, passes, steps)
}
