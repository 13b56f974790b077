package starcore

import (
	"testing"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/loglet/internal/chaincore"
)

// The core keeps no import of the chain packages (they do I/O), so it
// restates two of their facts; these tests hold them to the originals.

func TestClassesAreTheChainPackages(t *testing.T) {
	if len(chain.Classes()) != NumClasses {
		t.Fatalf("chain has %d classes, starcore %d", len(chain.Classes()), NumClasses)
	}
	for _, c := range chain.Classes() {
		if got, want := Class(c).String(), c.String(); got != want {
			t.Errorf("class %d: starcore names it %q, chain %q", c, got, want)
		}
	}
	if Class(chain.Standard) != Standard || Class(chain.Express) != Express {
		t.Errorf("Standard/Express are %d/%d in chain, %d/%d here", chain.Standard, chain.Express, Standard, Express)
	}
}

func TestLiveOwnerAgreesWithTheChainCore(t *testing.T) {
	for _, owner := range []string{"p1", "p2"} {
		for epoch := uint64(1); epoch <= 3; epoch++ {
			for _, seal := range []uint64{0, 1, 2, 3} {
				rec := chain.EpochRecord{Epoch: epoch, Owner: owner}
				mine := EpochRecord{Epoch: epoch, Owner: owner}
				if seal > 0 {
					rec.Seal = &chain.Cut{Epoch: seal, Clean: true}
					mine.Sealed, mine.SealEpoch = true, seal
				}
				if got, want := LiveOwner(mine, "p1"), chaincore.LiveOwner(rec, "p1"); got != want {
					t.Errorf("owner %s epoch %d seal %d: starcore says live=%v, chaincore %v", owner, epoch, seal, got, want)
				}
			}
		}
	}
}
