package sim

import (
	"strings"
	"testing"
)

// plantedSeeds is how many seeds a planted bug gets to show itself: within
// the CI budget.
const plantedSeeds = 4

// expectCaught runs seeds 1..plantedSeeds with a planted bug and fails
// unless the checker reports a violation on at least one of them.
func expectCaught(t *testing.T, name string, o Options) {
	t.Helper()
	caught := 0
	for s := uint64(1); s <= plantedSeeds; s++ {
		o.Seed = s
		r := Run(t, o)
		if r.Failed() {
			caught++
			if caught == 1 {
				t.Logf("%s caught at seed %d: %s", name, s, strings.Join(r.Violations[:min(3, len(r.Violations))], "; "))
			}
		}
	}
	if caught == 0 {
		t.Fatalf("%s: no violation in %d seeds: the checker missed a planted bug", name, plantedSeeds)
	}
	t.Logf("%s: caught on %d of %d seeds", name, caught, plantedSeeds)
}

// TestPlantedLostPut: every bucket acknowledges a fraction of chain-slot PUTs
// it never stores. Standard K=1 seeds lose acked records outright; K=3
// seeds lose copies the quorum counted.
func TestPlantedLostPut(t *testing.T) {
	expectCaught(t, "lost PUT", Options{Broken: Broken{LostPut: 0.5}, NoLinearizability: true})
}

// TestPlantedStaleReader: the non-leader Reader's metastore view stops
// applying early; after Close it must still read every acked record.
func TestPlantedStaleReader(t *testing.T) {
	expectCaught(t, "stale reader", Options{Broken: Broken{StaleReader: true}, NoLinearizability: true})
}

// TestPlantedOverwritingPut: a PutIfAbsent that overwrites. Only a second
// writer (the fencer) exposes it, so it needs the fence scenario, which
// hangs today's loglet at Close (TestBugDeposedCloseHangs).
func TestPlantedOverwritingPut(t *testing.T) {
	t.Skip("needs the fence scenario, which hangs loglet's Close after deposition (TestBugDeposedCloseHangs, issue 7);")
	expectCaught(t, "overwriting PUT", Options{Broken: Broken{OverwritingPut: true}, Scenarios: Scenarios{Fence: true}, NoLinearizability: true})
}

// TestPlantedBlindCommit: a metastore Commit that ignores expected
// versions lets the deposed leader's absorb overwrite the successor's seal.
// Needs the fence scenario (TestBugDeposedCloseHangs).
func TestPlantedBlindCommit(t *testing.T) {
	t.Skip("needs the fence scenario, which hangs loglet's Close after deposition (TestBugDeposedCloseHangs, issue 7)")
	expectCaught(t, "blind Commit", Options{Broken: Broken{CommitIgnoresExpect: true}, Scenarios: Scenarios{Fence: true}, NoLinearizability: true})
}
