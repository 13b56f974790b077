package fleet

import (
	"testing"
	"time"
)

// seen waits until the test's router sees cond (the watch delivered an
// operator's key), and fails after a minute.
func (c *cluster) seen(what string, cond func(RouterStats) bool) {
	c.t.Helper()
	deadline := time.After(time.Minute)
	for {
		changed := c.router.Changed()
		if cond(c.router.Stats()) {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			c.t.Fatalf("the router did not see %s in a minute: %+v", what, c.router.Stats())
		}
	}
}

// A drain moves every star off the member by clean handoffs; a move pins a
// star on a member, drained or not; undoing both puts placement back.
func TestFleetDrainAndMove(t *testing.T) {
	c := newCluster(t, 6)
	c.join("a")
	c.join("b")
	c.waitSettled("joined", "a", "b")
	ctx := t.Context()
	if err := Drain(ctx, c.admin, c.prefix, "a", true); err != nil {
		t.Fatal(err)
	}
	c.seen("the drain", func(st RouterStats) bool { return len(st.Drained) == 1 })
	c.waitSettled("a drained", "a", "b")
	for s, m := range c.router.Placement() {
		if m != "a" {
			continue
		}
		t.Fatalf("star %s still placed on the drained a", s)
	}
	if led := c.node("a").Leading(); len(led) != 0 {
		t.Fatalf("drained a still leads %v", led)
	}
	star := c.stars[0]
	if err := Move(ctx, c.admin, c.prefix, star, "a"); err != nil {
		t.Fatal(err)
	}
	c.seen("the move", func(st RouterStats) bool { return st.Moves[star] == "a" })
	c.waitSettled("a star moved to a", "a", "b")
	if m, _, ok := c.router.Leader(star); !ok || m.Name != "a" {
		t.Fatalf("star %s moved to a is led by %v %v", star, m.Name, ok)
	}
	st := c.router.Stats()
	if st.Moves[star] != "a" || len(st.Drained) != 1 || st.PlacementChanges == 0 {
		t.Fatalf("router stats %+v", st)
	}
	if err := Move(ctx, c.admin, c.prefix, star, ""); err != nil {
		t.Fatal(err)
	}
	if err := Drain(ctx, c.admin, c.prefix, "a", false); err != nil {
		t.Fatal(err)
	}
	c.seen("the undoing", func(st RouterStats) bool { return len(st.Drained) == 0 && len(st.Moves) == 0 })
	c.waitSettled("undone", "a", "b")
	want := Place(c.stars, c.router.Members())
	for s, m := range c.router.Placement() {
		if want[s] != m {
			t.Fatalf("after undoing: %s placed on %s, want %s", s, m, want[s])
		}
	}
	if err := Drain(ctx, c.admin, c.prefix, "Bad Name", true); err == nil {
		t.Fatal("a bad member name was drained")
	}
	if err := Move(ctx, c.admin, c.prefix, "no/such", "a"); err == nil {
		t.Fatal("a bad star name was moved")
	}
}
