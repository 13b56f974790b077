package fleet

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A member placed a star that another member still leads stands by: its
// claim is in etcd while the other's lead is, and it opens the star only
// when that lead goes; placed elsewhere meanwhile, it withdraws its claim.
// The other member here is a ghost (its member key and lead under a lease
// of the test's, no node behind them), so the lead stays as long as the
// test wants.
func TestFleetStandBy(t *testing.T) {
	c := newCluster(t, 2)
	ctx := t.Context()
	star := c.stars[0]
	cfg := c.config(nil)
	lease, err := c.admin.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	ghost := Member{Name: "ghost", Addr: "ghost.test:80"}
	mv, _ := json.Marshal(memberRecord{Member: ghost, Owner: "ghost/0"})
	lv, _ := json.Marshal(Lead{Member: ghost, Epoch: 1})
	// Drained, the ghost wins no star while a is live: every star is
	// placed on a, and the ghost's lead of star is what a waits for.
	if err := Drain(ctx, c.admin, c.prefix, "ghost", true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.admin.Txn(ctx).Then(
		clientv3.OpPut(cfg.memberKey("ghost"), string(mv), clientv3.WithLease(lease.ID)),
		clientv3.OpPut(cfg.leadKey(star, "ghost"), string(lv), clientv3.WithLease(lease.ID)),
	).Commit(); err != nil {
		t.Fatal(err)
	}
	claimedBy := func() []string {
		_, _, claims := c.router.viewOf("", []string{star})
		return claims[star]
	}
	until := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			changed := c.router.Changed()
			if cond() {
				return
			}
			select {
			case <-changed:
			case <-deadline:
				t.Fatalf("%s: not in 30s; claims %v, leader %v", what, claimedBy(), c.leadSummary())
			}
		}
	}
	// HandoffWait past the test's waits: a claim seen is a standby's, not
	// a deposing open's.
	a := c.joinWith("a", c.eps, func(cfg *Config) { cfg.HandoffWait = 10 * time.Minute })
	until("a stands by", func() bool { return slices.Equal(claimedBy(), []string{"a"}) })
	if _, ok := a.Star(star); ok {
		t.Fatalf("a serves %s while the ghost still leads it", star)
	}
	// Placed on the ghost now: a withdraws its claim.
	if err := Move(ctx, c.admin, c.prefix, star, "ghost"); err != nil {
		t.Fatal(err)
	}
	until("a withdraws its claim", func() bool { return len(claimedBy()) == 0 })
	// Back on a: it stands by again; the ghost's lead goes (as a clean
	// close withdraws it), and a opens the star at once.
	if err := Move(ctx, c.admin, c.prefix, star, ""); err != nil {
		t.Fatal(err)
	}
	until("a stands by again", func() bool { return slices.Equal(claimedBy(), []string{"a"}) })
	if _, err := c.admin.Delete(ctx, cfg.leadKey(star, "ghost")); err != nil {
		t.Fatal(err)
	}
	until("a leads the star", func() bool {
		m, _, ok := c.router.Leader(star)
		return ok && m.Name == "a" && len(claimedBy()) == 0
	})
	if _, ok := a.Star(star); !ok {
		t.Fatalf("a leads %s in etcd but does not serve it", star)
	}
}
