package loglet

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/metastore"
)

// TestDecideLive: the cache's decision, case by case.
func TestDecideLive(t *testing.T) {
	t0 := time.Unix(1000, 0)
	g1 := catalogGen{found: true, version: "v1", value: "a"}
	g2 := catalogGen{found: true, version: "v2", value: "b"}
	live := &liveEntry{live: true, trimSeq: 7, gen: g1, read: t0}
	for _, c := range []struct {
		name   string
		e      *liveEntry
		gen    catalogGen
		genOK  bool
		at     time.Duration
		agedOK bool
		want   liveDecision
		aged   bool
	}{
		{"nothing cached", nil, g1, true, 0, true, liveReread, false},
		{"same generation", live, g1, true, time.Second, true, liveReuse, false},
		{"generation changed, answer young", live, g2, true, time.Second, true, liveReuse, false},
		{"generation changed", live, g2, true, trimRefresh, true, liveReread, false},
		{"generation absent then present", &liveEntry{live: true, read: t0}, g1, true, trimRefresh, true, liveReread, false},
		{"generation still absent", &liveEntry{live: true, read: t0}, catalogGen{}, true, trimRefresh, true, liveReuse, false},
		{"generation unknown", live, catalogGen{}, false, trimRefresh, true, liveReread, false},
		{"generation unknown, answer young", live, catalogGen{}, false, time.Second, true, liveReuse, false},
		{"aged, budget left", live, g1, true, liveMaxAge, true, liveReread, true},
		{"aged, no budget", live, g1, true, liveMaxAge, false, liveReuse, false},
		{"dead, generation changed", &liveEntry{gen: g1, read: t0}, g2, true, time.Hour, true, liveReuse, false},
		{"dead, generation unknown", &liveEntry{gen: g1, read: t0}, catalogGen{}, false, 0, true, liveReuse, false},
	} {
		d, aged := decideLive(c.e, c.gen, c.genOK, t0.Add(c.at), c.agedOK)
		if d != c.want || aged != c.aged {
			t.Errorf("%s: got decision %d aged %v, want %d aged %v", c.name, d, aged, c.want, c.aged)
		}
	}
}

// TestLiveAgedBudget: aged answers are re-read at most liveAgedReadsPerSec
// a second however many are aged, and the budget refills with time.
func TestLiveAgedBudget(t *testing.T) {
	s := &Star{}
	t0 := time.Unix(1000, 0)
	g := catalogGen{found: true, version: "v1"}
	const n = 100
	for i := range n {
		s.rememberLive(string(rune('a'+i%26))+string(rune('0'+i/26)), liveEntry{live: true, gen: g, read: t0, used: t0})
	}
	count := func(now time.Time) (rereads int) {
		for k := range s.live.byID {
			if _, ok := s.cachedLive(k, g, true, now); !ok {
				rereads++
				s.rememberLive(k, liveEntry{live: true, gen: g, read: now, used: now})
			}
		}
		return rereads
	}
	if got := count(t0.Add(time.Second)); got != 0 {
		t.Fatalf("fresh answers: %d re-reads, want 0", got)
	}
	now := t0.Add(liveMaxAge)
	if got := count(now); got != liveAgedReadsPerSec {
		t.Fatalf("all aged: %d re-reads, want %d (the budget)", got, liveAgedReadsPerSec)
	}
	if got := count(now); got != 0 {
		t.Fatalf("budget spent, same instant: %d re-reads, want 0", got)
	}
	if got := count(now.Add(time.Second)); got != liveAgedReadsPerSec {
		t.Fatalf("a second later: %d re-reads, want %d", got, liveAgedReadsPerSec)
	}
}

// TestLivenessSeesAnotherProcess: settlement's liveness answers come from
// the cache while the star's catalogue generation is unchanged (no record
// Get), and a trim, then a delete, by another process (another Star on the
// same metastore, as the CLI is) is seen by the asks trimRefresh later.
func TestLivenessSeesAnotherProcess(t *testing.T) {
	synctest.Test(t, testLivenessSeesAnotherProcess)
}

func testLivenessSeesAnotherProcess(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	var cnt *keyGets
	a, err := w.open("a", func(c *Config) {
		c.SettleInterval = -1 // the test asks itself
		cnt = &keyGets{Store: c.Meta, keys: map[string]bool{chain.StreamRecordKey("t"): true, chain.CatalogGenKey("s1"): true}}
		c.Meta = cnt
	})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, a.star, "t", 5, 10, nil)
	waitAbsorbed(t, a.star)
	a.star.mu.RLock()
	id := a.star.streams["t"].id
	a.star.mu.RUnlock()
	ask := func(what string) (bool, uint64, int64) {
		t.Helper()
		before := cnt.gets.Load()
		live, trim, err := a.star.streamLiveness(ctx, id)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return live, trim, cnt.gets.Load() - before
	}
	if live, trim, _ := ask("first"); !live || trim != 0 {
		t.Fatalf("first ask: live=%v trim=%d, want live, 0", live, trim)
	}
	if live, _, gets := ask("again"); !live || gets != 0 {
		t.Fatalf("ask again at once: live=%v, %d Gets, want live, 0", live, gets)
	}
	time.Sleep(catalogGenRefresh)
	if live, _, gets := ask("a refresh later"); !live || gets != 1 {
		t.Fatalf("a refresh later: live=%v, %d Gets, want live, 1 (the generation alone)", live, gets)
	}

	b, err := w.open("b", func(c *Config) { c.SettleInterval = -1 })
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(trimRefresh)
	if live, _, gets := ask("answer aged past trimRefresh, generation unchanged"); !live || gets != 1 {
		t.Fatalf("answer past trimRefresh, generation unchanged: live=%v, %d Gets, want live, 1 (the generation alone)", live, gets)
	}
	if err := b.star.Trim(ctx, "t", 20); err != nil {
		t.Fatal(err)
	}
	time.Sleep(trimRefresh)
	if live, trim, gets := ask("after the other's trim"); !live || trim != 20 || gets != 2 {
		t.Fatalf("after another process's trim: live=%v trim=%d, %d Gets, want live, 20, 2 (generation, record)", live, trim, gets)
	}
	if live, trim, gets := ask("after the other's trim, again"); !live || trim != 20 || gets != 0 {
		t.Fatalf("after another process's trim, again: live=%v trim=%d, %d Gets, want live, 20, 0", live, trim, gets)
	}
	if err := b.star.DeleteStream(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(trimRefresh)
	if live, _, _ := ask("after the other's delete"); live {
		t.Fatal("after another process's delete: still live")
	}
	if live, _, gets := ask("dead, again"); live || gets != 0 {
		t.Fatalf("dead, asked again: live=%v, %d Gets, want not live, 0", live, gets)
	}
}

// keyGets counts the Gets of some keys (a star's background loops read
// others).
type keyGets struct {
	metastore.Store
	keys map[string]bool
	gets atomic.Int64
}

func (m *keyGets) Get(ctx context.Context, key string) (metastore.Item, error) {
	if m.keys[key] {
		m.gets.Add(1)
	}
	return m.Store.Get(ctx, key)
}

func (m *keyGets) MaxCommitOps() int           { return metastore.MaxCommitOps(m.Store) }
func (m *keyGets) MaxCommitBytes() int         { return metastore.MaxCommitBytes(m.Store) }
func (m *keyGets) OpBytes(op metastore.Op) int { return metastore.OpBytes(m.Store, op) }

// TestTrimCommitsCatalogGen: a trim and a delete each change the star's
// catalogue generation.
func TestTrimCommitsCatalogGen(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, Standard, 1, 1, nil)
	s := r.star
	if _, err := s.CreateStream(ctx, "g", StreamOptions{Class: Standard, Star: "s1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "g", Batch{Records: []Record{{Body: []byte("a")}, {Body: []byte("b")}}}); err != nil {
		t.Fatal(err)
	}
	gen := func() catalogGen {
		it, err := s.cfg.Meta.Get(ctx, chain.CatalogGenKey("s1"))
		if err != nil && !errors.Is(err, metastore.ErrNotFound) {
			t.Fatal(err)
		}
		return catalogGen{found: err == nil, version: it.Version, value: string(it.Value)}
	}
	g0 := gen()
	if err := s.Trim(ctx, "g", 1); err != nil {
		t.Fatal(err)
	}
	g1 := gen()
	if g1 == g0 || !g1.found {
		t.Fatalf("trim: generation %+v, was %+v: want a new one", g1, g0)
	}
	if err := s.DeleteStream(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	if g2 := gen(); g2 == g1 {
		t.Fatalf("delete: generation unchanged %+v", g2)
	}
}

// TestLivenessSeededByTheCatalogue (issue 24, item 1): a stream the star
// serves has its liveness answer cached when the catalogue reads or writes
// its record (a create, a lookup, Open's load), so a settle pass's first
// ask about it reads no stream record: at 10,000 streams those first reads
// were most of settlement's metastore requests. A trim by another process
// still sends the ask back to the record.
func TestLivenessSeededByTheCatalogue(t *testing.T) {
	synctest.Test(t, testLivenessSeededByTheCatalogue)
}

func testLivenessSeededByTheCatalogue(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	records := map[string]bool{}
	for _, n := range []string{"created", "looked-up", "loaded"} {
		records[chain.StreamRecordKey(n)] = true
	}
	counting := func(cnt **keyGets) func(c *Config) {
		return func(c *Config) {
			c.SettleInterval = time.Hour // on, but the test asks itself
			*cnt = &keyGets{Store: c.Meta, keys: records}
			c.Meta = *cnt
		}
	}
	var ca *keyGets
	a, err := w.open("a", counting(&ca))
	if err != nil {
		t.Fatal(err)
	}
	// "loaded" exists before b opens (Open loads no record: b's first
	// lookup of it, below, reads it); "looked-up" is created by a after b
	// opened (b's lookup on append).
	appendN(t, a.star, "loaded", 1, 3, nil)
	var cb *keyGets
	b, err := w.open("b", counting(&cb))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.star.CreateStream(ctx, "created", StreamOptions{Class: Standard}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.star.CreateStream(ctx, "looked-up", StreamOptions{Class: Standard}); err != nil {
		t.Fatal(err)
	}
	appendN(t, b.star, "looked-up", 1, 3, nil)
	if _, err := b.star.stream(ctx, "loaded"); err != nil {
		t.Fatal(err)
	}
	idOf := func(s *Star, name string) string {
		s.mu.RLock()
		defer s.mu.RUnlock()
		st := s.streams[name]
		if st == nil {
			t.Fatalf("%s is not served", name)
		}
		return st.id
	}
	ask := func(s *Star, cnt *keyGets, name string) (bool, int64) {
		t.Helper()
		before := cnt.gets.Load()
		live, _, err := s.streamLiveness(ctx, idOf(s, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return live, cnt.gets.Load() - before
	}
	for _, c := range []struct {
		s    *Star
		cnt  *keyGets
		name string
	}{{a.star, ca, "created"}, {a.star, ca, "loaded"}, {b.star, cb, "looked-up"}, {b.star, cb, "loaded"}} {
		if live, gets := ask(c.s, c.cnt, c.name); !live || gets != 0 {
			t.Fatalf("%s: first ask: live=%v, %d Gets of its record, want live, 0", c.name, live, gets)
		}
	}
	// Another process's trim changes the generation: the seeded answer is
	// read again.
	if err := b.star.Trim(ctx, "loaded", 1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(trimRefresh)
	if live, gets := ask(a.star, ca, "loaded"); !live || gets != 1 {
		t.Fatalf("loaded, after b's trim: live=%v, %d Gets of its record, want live, 1", live, gets)
	}
}
