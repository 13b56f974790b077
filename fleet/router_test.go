package fleet

import (
	"encoding/json"
	"testing"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/metastore"
)

// newTableRouter is a Router fed by hand (apply), without etcd.
func newTableRouter(t *testing.T, meta metastore.Store) *Router {
	cfg := Config{Prefix: "p/", Stars: []string{"s0", "s1", "s2"}, Meta: meta}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg.applyDefaults()
	cfg.Logger = quiet()
	r := &Router{cfg: cfg, members: map[string]memberRecord{}, leads: map[string]map[string]Lead{}, claims: map[string]map[string]bool{}, changed: make(chan struct{}), streams: map[string]string{}, ops: newOpsState(), isStar: map[string]bool{}}
	for _, s := range cfg.Stars {
		r.isStar[s] = true
	}
	r.countUnledLocked()
	return r
}

func (r *Router) put(key string, v any) {
	b, _ := json.Marshal(v)
	r.mu.Lock()
	r.replaceLocked(r.applyLocked(key, b, false))
	r.mu.Unlock()
}

func (r *Router) del(key string) {
	r.mu.Lock()
	r.replaceLocked(r.applyLocked(key, nil, true))
	r.mu.Unlock()
}

func TestRouterTable(t *testing.T) {
	r := newTableRouter(t, metastore.NewMem())
	changed := r.Changed()
	a, b := Member{Name: "a", Addr: "a:1"}, Member{Name: "b", Addr: "b:1"}
	r.put(r.cfg.memberKey("a"), memberRecord{Member: a, Owner: "a/1"})
	select {
	case <-changed:
	default:
		t.Fatal("Changed not closed by a member's put")
	}
	r.put(r.cfg.memberKey("b"), memberRecord{Member: b, Owner: "b/1"})
	// A bad record and an unknown key are skipped.
	r.mu.Lock()
	r.apply(r.members, r.leads, r.claims, r.ops, r.cfg.memberKey("c"), []byte("{not json"), false)
	r.apply(r.members, r.leads, r.claims, r.ops, r.cfg.memberKey("d"), []byte(`{"name":"e"}`), false) // name != key
	r.apply(r.members, r.leads, r.claims, r.ops, r.cfg.leadsPrefix()+"no-slash", []byte(`{}`), false)
	r.mu.Unlock()
	if got := r.Members(); len(got) != 2 || got[0].Name != "a" || got[1].Name != "b" {
		t.Fatalf("Members = %v, want a, b", got)
	}
	want := Place(r.cfg.Stars, []Member{a, b})
	for s, m := range r.Placement() {
		if want[s] != m {
			t.Fatalf("Placement[%s] = %s, want %s", s, m, want[s])
		}
		if o, ok := r.Owner(s); !ok || o.Name != m {
			t.Fatalf("Owner(%s) = %v %v, want %s", s, o, ok, m)
		}
	}
	if !r.liveOwner("a/1") || r.liveOwner("a/0") || r.liveOwner("") {
		t.Fatal("liveOwner: want only the live members' Owners")
	}

	if _, _, ok := r.Leader("s0"); ok {
		t.Fatal("Leader of an unled star: ok")
	}
	// A deposed leader that has not noticed yet, and its successor: the
	// higher epoch wins.
	r.put(r.cfg.leadKey("s0", "a"), Lead{Member: a, Epoch: 3})
	r.put(r.cfg.leadKey("s0", "b"), Lead{Member: b, Epoch: 4})
	if m, ep, ok := r.Leader("s0"); !ok || m.Name != "b" || ep != 4 {
		t.Fatalf("Leader(s0) = %s %d %v, want b 4", m.Name, ep, ok)
	}
	if ls := r.Leads("s0"); len(ls) != 2 || ls[0].Epoch != 4 || ls[1].Epoch != 3 {
		t.Fatalf("Leads(s0) = %v, want epochs 4, 3", ls)
	}
	r.del(r.cfg.leadKey("s0", "b"))
	if m, ep, ok := r.Leader("s0"); !ok || m.Name != "a" || ep != 3 {
		t.Fatalf("after b's lead went: Leader(s0) = %s %d %v, want a 3", m.Name, ep, ok)
	}
	r.del(r.cfg.leadKey("s0", "a"))
	if _, _, ok := r.Leader("s0"); ok {
		t.Fatal("Leader after every lead went: ok")
	}
	r.del(r.cfg.memberKey("a"))
	for s, m := range r.Placement() {
		if m != "b" {
			t.Fatalf("after a left: Placement[%s] = %s, want b", s, m)
		}
	}
}

func TestRouterStarOf(t *testing.T) {
	ctx := t.Context()
	meta := metastore.NewMem()
	r := newTableRouter(t, meta)
	if _, err := meta.Put(ctx, chain.StreamRecordKey("old"), []byte(`{"name":"old","star":"s2"}`), metastore.NoVersion); err != nil {
		t.Fatal(err)
	}
	if _, err := meta.Put(ctx, chain.StreamRecordKey("bad"), []byte(`{"name":`), metastore.NoVersion); err != nil {
		t.Fatal(err)
	}
	if s, err := r.StarOf(ctx, "old"); err != nil || s != "s2" {
		t.Fatalf("StarOf(old) = %q, %v; want s2 (its record)", s, err)
	}
	if s, err := r.StarOf(ctx, "new"); err != nil || s != chain.PlaceStream("new", r.cfg.Stars) {
		t.Fatalf("StarOf(new) = %q, %v; want PlaceStream's %q", s, err, chain.PlaceStream("new", r.cfg.Stars))
	}
	if _, err := r.StarOf(ctx, "bad"); err == nil {
		t.Fatal("StarOf of a corrupt record: no error")
	}
	// Cached: the record's star is kept until Forget.
	meta.Delete(ctx, chain.StreamRecordKey("old"), metastore.AnyVersion)
	if s, _ := r.StarOf(ctx, "old"); s != "s2" {
		t.Fatalf("StarOf(old) after its record went = %q, want the cached s2", s)
	}
	r.Forget("old")
	if s, _ := r.StarOf(ctx, "old"); s != chain.PlaceStream("old", r.cfg.Stars) {
		t.Fatalf("StarOf(old) after Forget = %q, want PlaceStream's", s)
	}
	if _, _, _, err := r.Route(ctx, "old"); err == nil {
		t.Fatal("Route with no lead: no error")
	}
}

func TestConfigValidate(t *testing.T) {
	meta := metastore.NewMem()
	ok := Config{Stars: []string{"a", "b"}, Meta: meta}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		ok   bool
	}{
		{"ok", func(*Config) {}, true},
		{"no-stars", func(c *Config) { c.Stars = nil }, false},
		{"bad-star", func(c *Config) { c.Stars = []string{"A"} }, false},
		{"duplicate-star", func(c *Config) { c.Stars = []string{"a", "a"} }, false},
		{"no-meta", func(c *Config) { c.Meta = nil }, false},
		{"negative-ttl", func(c *Config) { c.TTL = -1 }, false},
		{"fractional-ttl", func(c *Config) { c.TTL = 1500 * 1e6 }, false},
		{"whole-ttl", func(c *Config) { c.TTL = 3 * 1e9 }, true},
	} {
		c := ok
		tc.edit(&c)
		if err := c.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

// A lead's put or delete changes no input of placement: the router must not
// hash every star on every member again for it (at 10^5 stars and 1,000
// members that is 10^8 hashes per watch response, and a handoff brings one
// response per moved star). A member's, a drain's or a move's change does.
func TestRouterPlacesOnlyOnMembershipChange(t *testing.T) {
	r := newTableRouter(t, metastore.NewMem())
	a := Member{Name: "a", Addr: "a:1"}
	r.put(r.cfg.memberKey("a"), memberRecord{Member: a, Owner: "a/1"})
	base := r.placed
	r.put(r.cfg.leadKey("s0", "a"), Lead{Member: a, Epoch: 1})
	r.del(r.cfg.leadKey("s0", "a"))
	if r.placed != base {
		t.Fatalf("a lead's put and delete placed the stars %d times, want 0", r.placed-base)
	}
	if st := r.Stats(); st.Unled != 3 {
		t.Fatalf("Unled = %d after the lead went, want 3", st.Unled)
	}
	r.put(r.cfg.leadKey("s1", "a"), Lead{Member: a, Epoch: 1})
	if st := r.Stats(); st.Unled != 2 {
		t.Fatalf("Unled = %d with s1 led, want 2", st.Unled)
	}
	for i, key := range []string{r.cfg.memberKey("b"), drainedPrefix("p/") + "a", movesPrefix("p/") + "s2"} {
		before := r.placed
		switch i {
		case 0:
			r.put(key, memberRecord{Member: Member{Name: "b", Addr: "b:1"}, Owner: "b/1"})
		default:
			r.putRaw(key, "b")
		}
		if r.placed != before+1 {
			t.Fatalf("%s: placed %d times, want 1", key, r.placed-before)
		}
	}
}

// TestRouterClaims: the controller's view holds the claims of live members
// only (a member whose key is gone opens nothing), and a claim goes when
// its key is deleted.
func TestRouterClaims(t *testing.T) {
	r := newTableRouter(t, metastore.NewMem())
	a := Member{Name: "a", Addr: "a:1"}
	r.put(r.cfg.memberKey("a"), memberRecord{Member: a, Owner: "a/1"})
	star := r.cfg.Stars[0]
	r.put(r.cfg.claimKey(star, "a"), "")
	r.put(r.cfg.claimKey(star, "gone"), "")
	_, _, claims := r.viewOf("a", []string{star})
	if got := claims[star]; len(got) != 1 || got[0] != "a" {
		t.Fatalf("claims of %s = %v, want [a] (gone is not live)", star, got)
	}
	r.put(r.cfg.memberKey("gone"), memberRecord{Member: Member{Name: "gone"}, Owner: "gone/1"})
	_, _, claims = r.viewOf("a", []string{star})
	if got := claims[star]; len(got) != 2 {
		t.Fatalf("claims of %s = %v, want a and gone (now live)", star, got)
	}
	// a's claim deleted (its lead replaced it), gone's member key gone
	// (its claim waits for the lease): neither counts.
	r.del(r.cfg.claimKey(star, "a"))
	r.del(r.cfg.memberKey("gone"))
	if _, _, claims = r.viewOf("a", []string{star}); len(claims[star]) != 0 {
		t.Fatalf("claims of %s = %v after the deletes, want none", star, claims[star])
	}
	// A bad claim key is skipped.
	r.put(r.cfg.claimsPrefix()+"no-slash", "")
	if _, ok := r.claims["no-slash"]; ok || len(r.claims) != 1 {
		t.Fatalf("claims table %v, want gone's claim of %s alone", r.claims, star)
	}
}
