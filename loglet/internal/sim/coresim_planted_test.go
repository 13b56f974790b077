//go:build invariants

package sim

import (
	"testing"

	"github.com/flightlog/flightlog/internal/invariants"
)

// expectCoreCaught runs core-simulation seeds from 1 with a planted bug
// and fails unless the checker reports a violation within the budget (the
// CI budget of TestCoreSim); -sim.rate runs every seed and reports the
// catch rate.
func expectCoreCaught(t *testing.T, name string, o CoreOptions) {
	t.Helper()
	n := coreSeeds
	if *flagCoreSeeds > 0 {
		n = *flagCoreSeeds
	}
	var caught []uint64
	for s := uint64(1); s <= uint64(n); s++ {
		o.Seed = s
		r := RunCore(o)
		if r.Failed() {
			if len(caught) == 0 {
				t.Logf("%s caught at seed %d: %s", name, s, r.Violations[0])
			}
			caught = append(caught, s)
			if !*flagRate {
				break
			}
		}
	}
	if len(caught) == 0 {
		t.Fatalf("%s: not caught in %d core-simulation seeds", name, n)
	}
	if *flagRate {
		t.Logf("%s: caught on %d of %d seeds", name, len(caught), n)
	}
}

func TestCorePlantedOutOfOrderRelease(t *testing.T) {
	invariants.Plant(t, invariants.ReleaseOutOfOrder)
	expectCoreCaught(t, "acks released out of slot order", CoreOptions{})
}

func TestCorePlantedRefOverwrite(t *testing.T) {
	invariants.Plant(t, invariants.AbsorbOverwritesRefs)
	expectCoreCaught(t, "absorb overwriting refs", CoreOptions{Broken: Broken{CommitLimit: 2}})
}

func TestCorePlantedOverwritingPut(t *testing.T) {
	expectCoreCaught(t, "overwriting PUT", CoreOptions{Broken: Broken{OverwritingPut: true}})
}

func TestCorePlantedLostPut(t *testing.T) {
	expectCoreCaught(t, "lost PUT", CoreOptions{Broken: Broken{LostPut: 0.05}})
}

func TestCorePlantedMirrorFence(t *testing.T) {
	expectCoreCaught(t, "fence accepting W−1 copies", CoreOptions{Broken: Broken{MirrorFence: true}})
}

func TestCorePlantedBlindCommit(t *testing.T) {
	expectCoreCaught(t, "blind Commit", CoreOptions{Broken: Broken{CommitIgnoresExpect: true}})
}

func TestCorePlantedMintIgnoresSeal(t *testing.T) {
	invariants.Plant(t, invariants.MintIgnoresSeal)
	expectCoreCaught(t, "a mint over another owner's seal", CoreOptions{})
}

func TestCorePlantedDedupeOff(t *testing.T) {
	invariants.Plant(t, invariants.DedupeOff)
	expectCoreCaught(t, "producer dedupe off", CoreOptions{})
}

func TestCorePlantedFencingOff(t *testing.T) {
	invariants.Plant(t, invariants.FencingOff)
	expectCoreCaught(t, "fencing tokens ignored at admission", CoreOptions{})
}
