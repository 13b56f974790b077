package fleet

import (
	"testing"

	"github.com/flightlog/flightlog/metastore"
)

func (r *Router) putRaw(key, val string) {
	r.mu.Lock()
	r.replaceLocked(r.apply(r.members, r.leads, r.claims, r.ops, key, []byte(val), false))
	r.mu.Unlock()
}

// A drained member is placed nothing while another member is live; a moved
// star goes to its member while that member is live; the counters follow.
func TestRouterDrainAndMove(t *testing.T) {
	r := newTableRouter(t, metastore.NewMem())
	a, b := Member{Name: "a", Addr: "a:1"}, Member{Name: "b", Addr: "b:1"}
	r.put(r.cfg.memberKey("a"), memberRecord{Member: a, Owner: "a/1"})
	r.put(r.cfg.memberKey("b"), memberRecord{Member: b, Owner: "b/1"})
	before := r.Placement()
	onA := 0
	for _, m := range before {
		if m == "a" {
			onA++
		}
	}
	changes := r.Stats().PlacementChanges

	r.putRaw(drainedPrefix(r.cfg.Prefix)+"a", "2026-12-03T10:00:00Z")
	for s, m := range r.Placement() {
		if m != "b" {
			t.Fatalf("drained a still placed %s: %v", s, r.Placement())
		}
	}
	st := r.Stats()
	if st.PlacementChanges-changes != uint64(onA) || len(st.Drained) != 1 || st.Drained[0] != "a" {
		t.Fatalf("after the drain: %+v (want %d more placement changes, a drained)", st, onA)
	}
	// With b gone, the drained a is the only member: it is placed all.
	r.del(r.cfg.memberKey("b"))
	for s, m := range r.Placement() {
		if m != "a" {
			t.Fatalf("drained a, alone, not placed %s: %v", s, r.Placement())
		}
	}
	r.put(r.cfg.memberKey("b"), memberRecord{Member: b, Owner: "b/2"})

	// A move overrides the drain and the hashing while its member lives.
	r.putRaw(movesPrefix(r.cfg.Prefix)+"s1", "a")
	if p := r.Placement(); p["s1"] != "a" || p["s0"] != "b" || p["s2"] != "b" {
		t.Fatalf("s1 moved to a: placement %v", p)
	}
	if st := r.Stats(); st.Moves["s1"] != "a" || st.Unled != 3 || st.Stars != 3 || st.Members != 2 {
		t.Fatalf("stats %+v", st)
	}
	r.del(r.cfg.memberKey("a"))
	if p := r.Placement(); p["s1"] != "b" {
		t.Fatalf("s1 moved to a member that left: placement %v", p)
	}
	r.put(r.cfg.memberKey("a"), memberRecord{Member: a, Owner: "a/2"})
	r.del(movesPrefix(r.cfg.Prefix) + "s1")
	r.del(drainedPrefix(r.cfg.Prefix) + "a")
	if p := r.Placement(); len(p) != len(before) {
		t.Fatalf("placement %v", p)
	} else {
		for s := range before {
			if p[s] != before[s] {
				t.Fatalf("undrained and unmoved: placement %v, want %v", p, before)
			}
		}
	}
	r.put(r.cfg.leadKey("s0", "b"), Lead{Member: b, Epoch: 1})
	if st := r.Stats(); st.Unled != 2 {
		t.Fatalf("one star led: unled %d, want 2", st.Unled)
	}
}
