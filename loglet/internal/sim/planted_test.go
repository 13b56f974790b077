//go:build invariants

package sim

import (
	"flag"
	"strings"
	"testing"

	"github.com/flightlog/flightlog/internal/invariants"
	"github.com/flightlog/flightlog/metastore"
)

// plantedSeeds is how many seeds a planted bug gets to show itself: the
// race-build CI budget of TestSim (ciSeeds). Each test stops at the first
// seed that catches its bug; -sim.rate runs every seed (or -sim.seeds of
// them) and reports the catch rate.
const plantedSeeds = ciSeeds

var flagRate = flag.Bool("sim.rate", false, "planted-bug tests: run every seed and report the catch rate instead of stopping at the first catch")

// expectCaught runs seeds from 1 with a planted bug and fails unless the
// checker reports a violation within plantedSeeds seeds.
// With scenarios, each seed runs TestSim's scenario for it (-sim.scenario,
// default the mix).
func expectCaught(t *testing.T, name string, o Options, withScenarios bool) {
	t.Helper()
	n := plantedSeeds
	if *flagSeeds > 0 {
		n = *flagSeeds
	}
	caught, ran := 0, 0
	var seeds []uint64
	for s := uint64(1); s <= uint64(n); s++ {
		o.Seed = s
		if withScenarios {
			o.Scenarios = scenarios(t, s)
		}
		r := runSeed(t, o)
		ran++
		if r.Failed() {
			caught++
			seeds = append(seeds, s)
			if caught == 1 {
				t.Logf("%s caught at seed %d: %s", name, s, strings.Join(r.Violations[:min(3, len(r.Violations))], "; "))
			}
			if !*flagRate {
				break
			}
		}
	}
	if caught == 0 {
		t.Fatalf("%s: no violation in %d seeds: the checker missed a planted bug", name, n)
	}
	t.Logf("%s: caught on %d of %d seeds run: %v", name, caught, ran, seeds)
}

// TestPlantedLostPut: every bucket acknowledges a fraction of chain-slot PUTs
// it never stores. Standard K=1 seeds lose acked records outright; K=3
// seeds lose copies the quorum counted.
func TestPlantedLostPut(t *testing.T) {
	expectCaught(t, "lost PUT", Options{Broken: Broken{LostPut: 0.5}, NoLinearizability: true}, false)
}

// TestPlantedStaleReader: the non-leader Reader's metastore view stops
// applying early; after Close it must still read every acked record.
func TestPlantedStaleReader(t *testing.T) {
	expectCaught(t, "stale reader", Options{Broken: Broken{StaleReader: true}, NoLinearizability: true}, false)
}

// TestPlantedOverwritingPut: a PutIfAbsent that overwrites. A second
// writer (the successor's fence and garbage probe, the incumbent's own
// recovery fence) replaces flight copies with poison and back.
func TestPlantedOverwritingPut(t *testing.T) {
	expectCaught(t, "overwriting PUT", Options{Broken: Broken{OverwritingPut: true}, NoLinearizability: true}, true)
}

// TestPlantedBlindCommit: a metastore Commit that ignores expected versions
// lets the deposed leader's absorb overwrite the successor's seal.
func TestPlantedBlindCommit(t *testing.T) {
	expectCaught(t, "blind Commit", Options{Broken: Broken{CommitIgnoresExpect: true}, NoLinearizability: true}, true)
}

// TestPlantedMirrorFence: a fence that accepts W−1 copies (a bucket that
// reports a fencer's poison key occupied by another bucket's flight copy):
// slots decided committed below a cut hold fewer than W copies, and a
// second fencer cuts elsewhere.
func TestPlantedMirrorFence(t *testing.T) {
	expectCaught(t, "fence accepting W−1 copies", Options{Broken: Broken{MirrorFence: true}, NoLinearizability: true}, true)
}

// TestPlantedRefOverwrite: absorb's planted bug that writes span refs as
// plain puts and never checks which refs a replayed round already wrote.
// Only a replay meets an existing ref (a successor replaying the split round
// its predecessor left pending, a retry after an ambiguous chunk), so the
// rounds are split (a Commit limit) and the seeds run the scenario mix.
func TestPlantedRefOverwrite(t *testing.T) {
	invariants.Plant(t, invariants.AbsorbOverwritesRefs)
	expectCaught(t, "absorb overwriting refs", Options{Broken: Broken{CommitLimit: metastore.MinCommitOps}, NoLinearizability: true}, true)
}

// TestPlantedOutOfOrderRelease: loglet's planted bug that acks a flight as
// soon as it has W copies, without waiting for earlier slots (breaking
// invariant 1), is caught within the CI seed budget.
func TestPlantedOutOfOrderRelease(t *testing.T) {
	invariants.Plant(t, invariants.ReleaseOutOfOrder)
	expectCaught(t, "acks released out of slot order", Options{NoLinearizability: true}, false)
}

// TestPlantedMintIgnoresSeal: an incumbent that mints over a successor's
// seal (the old Reseal) is caught by the seal checker (sealwatch.go).
func TestPlantedMintIgnoresSeal(t *testing.T) {
	invariants.Plant(t, invariants.MintIgnoresSeal)
	expectCaught(t, "a mint over another owner's seal", Options{}, true)
}

// TestPlantedRecreateReusesKeys: a re-created stream that keeps its
// predecessor's keys shows the old incarnation's records; the lifers catch
// it.
func TestPlantedRecreateReusesKeys(t *testing.T) {
	invariants.Plant(t, invariants.RecreateReusesKeys)
	expectCaught(t, "a re-created stream reusing its predecessor's keys", Options{NoLinearizability: true}, false)
}
