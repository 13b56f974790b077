package loglet

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// world is shared storage (K Mem buckets per class, one metastore) that
// several "processes" (stars) open, each through its own fault wrappers, so
// a process can be killed (its wrappers go down) while the storage lives.
type world struct {
	t     *testing.T
	mu    sync.Mutex // guards procs
	std   *objstore.Mem
	exp   [3]*objstore.Mem
	meta  *metastore.Mem
	procs []*proc
}

type proc struct {
	star   *Star
	meta   *metastore.FaultStore
	bkts   []*objstore.FaultStore
	owner  string
	killed bool
}

func newWorld(t *testing.T) *world {
	w := &world{t: t, std: objstore.NewMem(), meta: metastore.NewMem()}
	for i := range w.exp {
		w.exp[i] = objstore.NewMem()
	}
	t.Cleanup(func() {
		for _, p := range w.procs {
			if p.killed {
				p.star.crash()
			} else {
				p.star.Close()
			}
		}
	})
	return w
}

// open starts a process over the world's storage.
func (w *world) open(owner string, tweak func(*Config)) (*proc, error) {
	p := &proc{owner: owner, meta: metastore.WithFaults(w.meta, 1)}
	wrap := func(m *objstore.Mem) objstore.Store {
		f := objstore.WithFaults(m, uint64(len(p.bkts)+1))
		p.bkts = append(p.bkts, f)
		return f
	}
	retry := chain.RetryPolicy{MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}
	cfg := Config{Star: "s1", Owner: owner, Meta: p.meta, CreateOnAppend: true, Logger: quietLogger(), AbsorbInterval: 2 * time.Millisecond,
		Standard: ClassConfig{Buckets: []objstore.Store{wrap(w.std)}, FlushDeadline: time.Millisecond, CommitDeadline: time.Second, StragglerTimeout: 2 * time.Second, Retry: retry},
		Express: ClassConfig{Buckets: []objstore.Store{wrap(w.exp[0]), wrap(w.exp[1]), wrap(w.exp[2])}, FlushDeadline: time.Millisecond,
			CommitDeadline: time.Second, StragglerTimeout: 2 * time.Second, Retry: retry}}
	if tweak != nil {
		tweak(&cfg)
	}
	s, err := Open(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	p.star = s
	w.mu.Lock()
	w.procs = append(w.procs, p)
	w.mu.Unlock()
	return p, nil
}

// kill makes the process's storage unreachable, as if it had died: its
// goroutines linger like a dead process's would not, but can do nothing.
func (p *proc) kill() {
	p.killed = true
	p.meta.SetDown(true)
	for _, b := range p.bkts {
		b.SetDown(true)
	}
}

// ledger records what was acked, per stream, to check against reads.
type ledger struct {
	mu    sync.Mutex
	acked map[string]map[uint64]string
}

func newLedger() *ledger { return &ledger{acked: map[string]map[uint64]string{}} }

func (g *ledger) append(t *testing.T, s *Star, stream, body string) (Ack, error) {
	ack, err := s.Append(context.Background(), stream, Batch{Records: []Record{{Body: []byte(body)}}})
	if err == nil {
		g.mu.Lock()
		if g.acked[stream] == nil {
			g.acked[stream] = map[uint64]string{}
		}
		if old, dup := g.acked[stream][ack.Start]; dup {
			t.Errorf("%s seq %d acked twice: %q and %q", stream, ack.Start, old, body)
		}
		g.acked[stream][ack.Start] = body
		g.mu.Unlock()
	}
	return ack, err
}

// verify reads every stream through s and checks each acked record is
// there at its sequence number, and that sequence numbers are contiguous.
func (g *ledger) verify(t *testing.T, s *Star) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	for stream, acked := range g.acked {
		got := readAll(t, s, stream)
		for i, r := range got {
			if r.Seq != uint64(i) {
				t.Fatalf("%s: record %d has seq %d", stream, i, r.Seq)
			}
		}
		for seq, body := range acked {
			if seq >= uint64(len(got)) || string(got[seq].Body) != body {
				t.Fatalf("%s: acked seq %d (%q) not read back (read %d records)", stream, seq, body, len(got))
			}
		}
	}
}

func TestCleanCloseThenReopenContinues(t *testing.T) {
	w := newWorld(t)
	g := newLedger()
	p1, err := w.open("p1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p1.star.CreateStream(context.Background(), "e", StreamOptions{Class: Express}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		for _, st := range []string{"a", "e"} {
			if _, err := g.append(t, p1.star, st, fmt.Sprint("one-", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	p1.star.Close()
	w.meta.ResetCounters()
	p2, err := w.open("p2", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []string{"a", "e"} {
		ack, err := g.append(t, p2.star, st, "two")
		if err != nil || ack.Start != 20 {
			t.Fatalf("%s after reopen: %+v %v (want seq 20)", st, ack, err)
		}
	}
	g.verify(t, p2.star)
	for _, c := range []Class{Standard, Express} {
		rec, _, _ := chain.ReadEpoch(context.Background(), w.meta, "s1", c)
		if rec.Epoch != 2 || rec.Owner != "p2" || len(rec.Cuts) != 1 || !rec.Cuts[0].Clean {
			t.Fatalf("%s epoch record after reopen: %+v", c, rec)
		}
	}
}

// TestCrashRestartKeepsAckedRecords: a process killed without Close; its
// successor fences, walks, and every acked record is there and every
// stream continues its sequence. The takeover never lists.
func TestCrashRestartKeepsAckedRecords(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	w := newWorld(t)
	g := newLedger()
	p1, err := w.open("p1", func(c *Config) { c.AbsorbInterval = 50 * time.Millisecond })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p1.star.CreateStream(context.Background(), "e", StreamOptions{Class: Express}); err != nil {
		t.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(seed, 1))
	for i := 0; i < 60; i++ {
		st := []string{"a", "b", "e"}[rnd.IntN(3)]
		if _, err := g.append(t, p1.star, st, fmt.Sprint("p1-", i)); err != nil {
			t.Fatal(err)
		}
	}
	p1.kill() // some flights are released but not absorbed
	for _, m := range append([]*objstore.Mem{w.std}, w.exp[:]...) {
		m.ResetCounters()
	}
	p2, err := w.open("p2", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range append([]*objstore.Mem{w.std}, w.exp[:]...) {
		if n := m.Counters().Lists; n != 0 {
			t.Fatalf("takeover issued %d List calls", n)
		}
	}
	g.verify(t, p2.star)
	for _, st := range []string{"a", "b", "e"} {
		tail, _ := p2.star.CheckTail(context.Background(), st)
		ack, err := g.append(t, p2.star, st, "p2")
		if err != nil || ack.Start != tail.Seq {
			t.Fatalf("%s: append after takeover %+v %v, tail was %d", st, ack, err, tail.Seq)
		}
	}
	g.verify(t, p2.star)
}

// TestTwoSuccessorsRace: two processes take over a crashed one at once;
// every epoch has one minter, and both never serve the same epoch.
func TestTwoSuccessorsRace(t *testing.T) {
	w := newWorld(t)
	g := newLedger()
	p1, err := w.open("p1", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 30; i++ {
		if _, err := g.append(t, p1.star, "a", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	p1.kill()
	var wg sync.WaitGroup
	res := make([]*proc, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], errs[i] = w.open(fmt.Sprint("succ", i), nil)
		}()
	}
	wg.Wait()
	var live []*proc
	for i := range 2 {
		switch {
		case errs[i] == nil:
			live = append(live, res[i])
		case !errors.Is(errs[i], ErrTakeoverLost):
			t.Fatalf("successor %d: %v", i, errs[i])
		}
	}
	if len(live) == 0 {
		t.Fatal("no successor took over")
	}
	rec, _, _ := chain.ReadEpoch(context.Background(), w.meta, "s1", Standard)
	leader := live[len(live)-1]
	for _, p := range live {
		if p.owner == rec.Owner {
			leader = p
		}
	}
	if leader.owner != rec.Owner {
		t.Fatalf("epoch record owner %q is not a live successor", rec.Owner)
	}
	if _, err := g.append(t, leader.star, "a", "after"); err != nil {
		t.Fatalf("append on the winner: %v", err)
	}
	g.verify(t, leader.star)
}
