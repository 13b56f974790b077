package fleet

import (
	"context"
	"testing"

	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore"
)

// TestPrepareExclusiveOpen: an open whose claim kept every other member out
// (not deposing) asks loglet to take the star's chains over at once; a
// deposing open, whose claim is put whatever the others hold, keeps them
// one after the other, the first the star's lock.
func TestPrepareExclusiveOpen(t *testing.T) {
	ms := metastore.NewMem()
	n := &Node{
		cfg: Config{Stars: []string{"s1"}, OpenStar: func(context.Context, string) (loglet.Config, error) {
			return loglet.Config{Meta: ms}, nil
		}},
		sctx:  context.Background(),
		owner: "m1/abc",
	}
	for _, tc := range []struct {
		depose, want bool
	}{{false, true}, {true, false}} {
		p, err := n.prepare("s1", tc.depose)
		cfg := p.cfg
		if err != nil {
			t.Fatal(err)
		}
		if cfg.ExclusiveOpen != tc.want || cfg.Owner != "m1/abc" || cfg.Star != "s1" {
			t.Errorf("depose=%v: ExclusiveOpen=%v owner %q star %q, want ExclusiveOpen=%v owner m1/abc star s1", tc.depose, cfg.ExclusiveOpen, cfg.Owner, cfg.Star, tc.want)
		}
	}
}
