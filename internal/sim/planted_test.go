package sim

import (
	"strings"
	"testing"

	"github.com/flightlog/flightlog/internal/plant"
)

// plantedSeeds is how many seeds a planted bug gets to show itself: within
// the CI budget.
const plantedSeeds = 4

// expectCaught runs seeds 1..plantedSeeds with a planted bug and fails
// unless the checker reports a violation on at least one of them.
func expectCaught(t *testing.T, name string, o Options, mixed bool) {
	t.Helper()
	expectCaughtIn(t, name, o, mixed, plantedSeeds)
}

// expectCaughtIn is expectCaught over seeds 1..n.
func expectCaughtIn(t *testing.T, name string, o Options, mixed bool, n int) {
	t.Helper()
	caught := 0
	for s := uint64(1); s <= uint64(n); s++ {
		o.Seed = s
		if mixed {
			o.Scenarios = MixedScenarios(s)
		}
		r := runSeed(t, o)
		if r.Failed() {
			caught++
			if caught == 1 {
				t.Logf("%s caught at seed %d: %s", name, s, strings.Join(r.Violations[:min(3, len(r.Violations))], "; "))
			}
		}
	}
	if caught == 0 {
		t.Fatalf("%s: no violation in %d seeds: the checker missed a planted bug", name, n)
	}
	t.Logf("%s: caught on %d of %d seeds", name, caught, n)
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

// TestPlantedRefOverwrite: an absorb that overwrites refs. Only a replay
// writes a ref that exists (a successor replaying a split round the
// incumbent left pending), so the rounds are split (a Commit limit) and the
// seeds run the takeover scenarios.
func TestPlantedRefOverwrite(t *testing.T) {
	t.Skip("not caught in 24 mixed seeds with a Commit limit of 3: absorb never re-puts an existing ref (a replay first drops the refs that exist, absorb.(*Committer).missingRefs), so the unconditional put never meets an existing key; the checker's direct invariant (observedMeta: a ref is never overwritten) stays, and catches the blind Commit")
	expectCaughtIn(t, "absorb overwriting refs", Options{Broken: Broken{RefOverwrite: true, CommitLimit: 3}, NoLinearizability: true}, true, 24)
}

// TestPlantedOutOfOrderRelease: loglet's planted bug that acks a flight as
// soon as it has W copies, without waiting for earlier slots (breaking
// invariant 1), is caught within the CI seed budget.
func TestPlantedOutOfOrderRelease(t *testing.T) {
	plant.ReleaseOutOfOrder.Store(true)
	defer plant.Reset()
	expectCaught(t, "acks released out of slot order", Options{NoLinearizability: true}, false)
}
