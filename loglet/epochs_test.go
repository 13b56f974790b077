package loglet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// world is shared storage (K Mem buckets per class, one metastore) that
// several "processes" (stars) open, each through its own fault wrappers, so
// a process can be killed (its wrappers go down) while the storage lives.
type world struct {
	openTimeout time.Duration // bounds each Open (default 10s)
	t           *testing.T
	mu          sync.Mutex // guards procs
	std         *objstore.Mem
	exp         [3]*objstore.Mem
	meta        *metastore.Mem
	procs       []*proc
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
				p.star.Close(context.Background())
			}
		}
	})
	return w
}

// open starts a process over the world's storage.
func (w *world) open(owner string, tweak func(*Config)) (*proc, error) {
	return w.openWith(owner, nil, tweak)
}

// openWith is open with a hook on the process's fault wrappers, set
// before Open runs.
func (w *world) openWith(owner string, prep func(*proc), tweak func(*Config)) (*proc, error) {
	p := &proc{owner: owner, meta: metastore.WithFaults(w.meta, 1)}
	wrap := func(m *objstore.Mem) objstore.Store {
		f := objstore.WithFaults(m, uint64(len(p.bkts)+1))
		p.bkts = append(p.bkts, f)
		return f
	}
	retry := chain.RetryPolicy{MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}
	cfg := Config{Star: "s1", Owner: owner, Meta: p.meta, CreateOnAppend: true, Logger: quietLogger(), AbsorbInterval: 2 * time.Millisecond,
		Standard: ClassConfig{Stores: []objstore.Store{wrap(w.std)}, FlushDeadline: time.Millisecond, CommitDeadline: time.Second, StragglerTimeout: 2 * time.Second, Retry: retry},
		Express: ClassConfig{Stores: []objstore.Store{wrap(w.exp[0]), wrap(w.exp[1]), wrap(w.exp[2])}, FlushDeadline: time.Millisecond,
			CommitDeadline: time.Second, StragglerTimeout: 2 * time.Second, Retry: retry}}
	if tweak != nil {
		tweak(&cfg)
	}
	if prep != nil {
		prep(p)
	}
	timeout := w.openTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	s, err := Open(ctx, cfg)
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
	p1.star.Close(context.Background())
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

// TestTwoSuccessorsRace: two processes take over a crashed one at once.
// Every epoch has one minter, and the race ends with one live process
// holding both of the star's chains (never with each holding one, which
// left a live star whose Standard chain was deposed by a failed Open).
func TestTwoSuccessorsRace(t *testing.T) {
	w := newWorld(t)
	g := newLedger()
	p1, err := w.open("p1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p1.star.CreateStream(context.Background(), "e", StreamOptions{Class: Express}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 30; i++ {
		for _, st := range []string{"a", "e"} {
			if _, err := g.append(t, p1.star, st, fmt.Sprint(i)); err != nil {
				t.Fatal(err)
			}
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
	live := map[string]*proc{}
	for i := range 2 {
		switch {
		case errs[i] == nil:
			live[res[i].owner] = res[i]
		case !errors.Is(errs[i], ErrTakeoverLost):
			t.Fatalf("successor %d: %v", i, errs[i])
		}
	}
	if len(live) == 0 {
		t.Fatalf("no successor took over: %v", errs)
	}
	var owners [2]string
	for _, c := range chain.Classes() {
		rec, _, err := chain.ReadEpoch(context.Background(), w.meta, "s1", c)
		if err != nil {
			t.Fatal(err)
		}
		owners[c] = rec.Owner
	}
	leader := live[owners[Standard]]
	if leader == nil || owners[Express] != owners[Standard] {
		t.Fatalf("the chains ended with owners %v; live successors %v, errors %v", owners, slices.Collect(maps.Keys(live)), errs)
	}
	for _, st := range []string{"a", "e"} {
		if _, err := g.append(t, leader.star, st, "after"); err != nil {
			t.Fatalf("append to %s on the winner: %v", st, err)
		}
	}
	g.verify(t, leader.star)
}

// TestZombieLeaderNeverAckedPastTheCut: p1 keeps appending while p2 takes the
// star over. Every append p1 saw acked is readable from p2 at its sequence
// number (an ack at or past the cut would not be); p1's later appends fail
// not-committed; sequence numbers are never assigned twice.
func TestZombieLeaderNeverAckedPastTheCut(t *testing.T) {
	for _, class := range []Class{Standard, Express} {
		t.Run(class.String(), func(t *testing.T) {
			w := newWorld(t)
			g := newLedger()
			only := func(c *Config) {
				if class == Standard {
					c.Express = ClassConfig{}
				} else {
					c.Standard = ClassConfig{}
				}
				c.CreateOnAppend = true
				c.DefaultClass = class
			}
			p1, err := w.open("p1", only)
			if err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			zombieDone := make(chan struct{})
			var afterErrs, zombieAcks int
			going := make(chan struct{}) // closed at the zombie's 30th ack
			go func() {
				defer close(zombieDone)
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					_, err := g.append(t, p1.star, fmt.Sprint("z", i%3), fmt.Sprint("p1-", i))
					switch {
					case err == nil:
						if zombieAcks++; zombieAcks == 30 {
							close(going)
						}
					case errors.Is(err, ErrNotCommitted), errors.Is(err, ErrOutcomeUnknown):
						afterErrs++
					default:
						t.Errorf("zombie append: %v", err)
						return
					}
				}
			}()
			// Let the incumbent get going. (Not in a synctest bubble: once
			// deposed, the zombie's appends fail at once and it never
			// blocks, so the bubble's clock could not advance.)
			select {
			case <-going:
			case <-zombieDone:
				t.Fatalf("the zombie stopped after %d acks", zombieAcks)
			}
			// The live incumbent may win the mint race once (its own
			// recovery after our seal); a host moving a star retries.
			var p2 *proc
			for attempt := 0; ; attempt++ {
				p2, err = w.open("p2", only)
				if err == nil {
					break
				}
				if !errors.Is(err, ErrTakeoverLost) || attempt == 10 {
					t.Fatal(err)
				}
				t.Logf("takeover attempt %d lost to the incumbent: %v", attempt, err)
			}
			for i := 0; i < 20; i++ {
				if _, err := g.append(t, p2.star, fmt.Sprint("z", i%3), fmt.Sprint("p2-", i)); err != nil {
					t.Fatal(err)
				}
			}
			close(stop)
			<-zombieDone
			t.Logf("zombie: %d acks, %d failed appends", zombieAcks, afterErrs)
			g.verify(t, p2.star)
			if _, err := p1.star.Append(context.Background(), "z0", Batch{Records: []Record{{Body: []byte("late")}}}); !errors.Is(err, ErrNotCommitted) {
				t.Fatalf("append on the deposed leader: %v", err)
			}
		})
	}
}

// TestDeposedReadTailCoversRecords: a deposed leader that has not noticed
// yet reads refs its successor wrote, past its own durable tail; the Tail
// it reports must still cover every record it returns (a caller computing
// lag as Tail.Seq − Next must not underflow). The simulation found this
// (one seed in 6,000 of a live takeover).
func TestDeposedReadTailCoversRecords(t *testing.T) {
	synctest.Test(t, testDeposedReadTailCoversRecords)
}

func testDeposedReadTailCoversRecords(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	express := func(c *Config) { c.Standard = ClassConfig{}; c.DefaultClass = Express }
	p1, err := w.open("p1", express)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if _, err := p1.star.Append(ctx, "a", Batch{Records: []Record{{Body: fmt.Appendf(nil, "p1-%d", i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	// Wait until p1 has absorbed everything: its reads then go to refs.
	waitUntil(t, 10*time.Second, "absorbed", func() bool {
		cs := p1.star.Stats().Express
		return cs.Checkpoint == cs.ReleasePoint
	})
	p2, err := w.open("p2", express)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if _, err := p2.star.Append(ctx, "a", Batch{Records: []Record{{Body: fmt.Appendf(nil, "p2-%d", i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p2.star.Close(context.Background()); err != nil { // absorbs p2's records: refs now run to 10
		t.Fatal(err)
	}
	res, err := p1.star.Read(ctx, "a", ReadQuery{Start: AtSeq(0)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != 10 {
		t.Fatalf("the deposed leader read %d records, want the 10 in refs", len(res.Records))
	}
	for i, r := range res.Records {
		if r.Seq != uint64(i) {
			t.Fatalf("record %d has seq %d", i, r.Seq)
		}
	}
	if res.Tail.Seq < res.Next {
		t.Fatalf("Read returned records up to %d with Tail %d behind them", res.Next, res.Tail.Seq)
	}
}

// TestTakeoverCrashAtEveryStep: a successor dies after its k-th metastore
// write (seal, mint, reseal, walk rounds) or its k-th object PUT (fence,
// probe, snapshots); the next successor recovers everything.
func TestTakeoverCrashAtEveryStep(t *testing.T) {
	kills := map[string][]int{
		"meta": {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, // seal, mint, reseal, walk rounds
		"obj":  {1, 2, 4, 8, 16, 32, 64, 128},   // fence, snapshots, garbage probe
	}
	for _, kind := range []string{"meta", "obj"} {
		for _, k := range kills[kind] {
			t.Run(fmt.Sprintf("%s-write-%d", kind, k), func(t *testing.T) {
				w := newWorld(t)
				g := newLedger()
				express := func(c *Config) {
					c.Standard, c.DefaultClass = ClassConfig{}, Express
					c.AbsorbInterval, c.AbsorbMaxSlots = time.Hour, 4 // a walk of several rounds
				}
				p1, err := w.open("p1", express)
				if err != nil {
					t.Fatal(err)
				}
				for i := 0; i < 25; i++ {
					if _, err := g.append(t, p1.star, fmt.Sprint("s", i%2), fmt.Sprint(i)); err != nil {
						t.Fatal(err)
					}
				}
				p1.kill() // nothing absorbed: the successor walks it all
				var writes atomic.Int32
				crashAfter := func(p *proc) {
					if kind == "meta" {
						p.meta.SetHook(func(call fault.Call) fault.Fault {
							op := call.Op
							if op != fault.Get && op != fault.Scan && writes.Add(1) > int32(k) {
								return fault.Fault{Kind: fault.Unavailable}
							}
							return fault.Fault{}
						})
						return
					}
					for _, b := range p.bkts {
						b.SetHook(func(call fault.Call) fault.Fault {
							op := call.Op
							if op == fault.Put && writes.Add(1) > int32(k) {
								return fault.Fault{Err: objstore.ErrUnavailable}
							}
							return fault.Fault{}
						})
					}
				}
				w.openTimeout = 300 * time.Millisecond // the dying successor's Open gives up
				p2, err := w.openWith("p2", crashAfter, func(c *Config) {
					express(c)
					c.Express.Retry = chain.RetryPolicy{MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}
				})
				w.openTimeout = 0
				if err == nil {
					// The crash point came after the takeover finished:
					// kill it now instead.
					p2.kill()
				} else {
					t.Logf("successor died mid-takeover: %v", err)
				}
				p3, err := w.open("p3", express)
				if err != nil {
					t.Fatalf("third process: %v", err)
				}
				g.verify(t, p3.star)
				for _, st := range []string{"s0", "s1"} {
					if _, err := g.append(t, p3.star, st, "p3"); err != nil {
						t.Fatal(err)
					}
				}
				g.verify(t, p3.star)
			})
		}
	}
}

// TestRefuseLiveOwnerLeavesTheLeader: an Open told to refuse a live owner
// fails with ErrLiveOwner and takes nothing over: the running leader keeps
// appending in its epoch. Once it closes cleanly, the same Open succeeds.
func TestRefuseLiveOwnerLeavesTheLeader(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	p1, err := w.open("p1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p1.star.Append(ctx, "a", Batch{Records: []Record{{Body: []byte("one")}}}); err != nil {
		t.Fatal(err)
	}
	before, _, _ := chain.ReadEpoch(ctx, w.meta, "s1", Standard)
	refuse := func(c *Config) { c.RefuseLiveOwner = true }
	if _, err := w.open("cli", refuse); !errors.Is(err, ErrLiveOwner) {
		t.Fatalf("open over a live owner: %v, want ErrLiveOwner", err)
	}
	after, _, _ := chain.ReadEpoch(ctx, w.meta, "s1", Standard)
	if after.Epoch != before.Epoch || after.Owner != "p1" {
		t.Fatalf("the refused open changed the epoch record: %+v -> %+v", before, after)
	}
	if ack, err := p1.star.Append(ctx, "a", Batch{Records: []Record{{Body: []byte("two")}}}); err != nil || ack.Start != 1 {
		t.Fatalf("the leader after a refused open: %+v %v", ack, err)
	}
	if err := p1.star.Close(ctx); err != nil {
		t.Fatal(err)
	}
	p2, err := w.open("cli", refuse)
	if err != nil {
		t.Fatalf("open after a clean close: %v", err)
	}
	if ack, err := p2.star.Append(ctx, "a", Batch{Records: []Record{{Body: []byte("three")}}}); err != nil || ack.Start != 2 {
		t.Fatalf("append after the handoff: %+v %v", ack, err)
	}
}

// TestSealedByDeadCandidate (bugs c and d of the leader-core issue): a
// candidate seals the checkpoint for a takeover and dies before minting.
// The seal is binding: the incumbent, once it notices (its next absorb
// round), fences its own epoch, acks what is below the cut, and stops
// leading the chain without minting and without touching the candidate's
// seal; its later appends fail not-committed with a NotLeaderError naming
// the sealer. The chain waits for the next Open, which takes it over with
// every acked record. (Before, the incumbent minted the next epoch anyway
// and resealed the checkpoint over the candidate's seal.)
func TestSealedByDeadCandidate(t *testing.T) {
	synctest.Test(t, testSealedByDeadCandidate)
}

func testSealedByDeadCandidate(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	g := newLedger()
	only := func(c *Config) { c.Express = ClassConfig{}; c.AbsorbInterval = time.Millisecond }
	p1, err := w.open("p1", only)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if _, err := g.append(t, p1.star, "a", fmt.Sprint("p1-", i)); err != nil {
			t.Fatal(err)
		}
	}
	rec, ver, err := chain.ReadEpoch(ctx, w.meta, "s1", Standard)
	if err != nil {
		t.Fatal(err)
	}
	// The candidate seals for epoch rec.Epoch+1, and dies.
	if _, _, err := absorb.SealCheckpoint(ctx, w.meta, "s1", Standard, "dead-candidate", rec.Epoch+1, ver); err != nil {
		t.Fatal(err)
	}
	// The incumbent goes on appending until it notices.
	var nl *NotLeaderError
	start := time.Now() // the bubble's clock
	for i := 0; ; i++ {
		_, err := g.append(t, p1.star, "a", fmt.Sprint("p1-late-", i))
		if errors.As(err, &nl) {
			break
		}
		if err != nil && !errors.Is(err, ErrNotCommitted) && !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("append after the seal: %v", err)
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("the incumbent never noticed it was sealed")
		}
	}
	if nl.Leader != "dead-candidate" || !errors.Is(nl, ErrNotCommitted) {
		t.Fatalf("NotLeaderError %+v: want the sealer named, not committed", nl)
	}
	after, _, err := chain.ReadEpoch(ctx, w.meta, "s1", Standard)
	if err != nil || after.Epoch != rec.Epoch {
		t.Fatalf("the sealed incumbent minted: epoch %d -> %d (%v)", rec.Epoch, after.Epoch, err)
	}
	cp, _, err := absorb.ReadCheckpoint(ctx, w.meta, "s1", Standard)
	if err != nil || cp.Owner != "dead-candidate" || cp.OwnerEpoch != rec.Epoch+1 {
		t.Fatalf("the candidate's seal was overwritten: %+v (%v)", cp, err)
	}
	if st := p1.star.Stats().Standard; !st.Deposed {
		t.Fatalf("stats do not say deposed: %+v", st)
	}
	// The next Open takes the chain over; every acked record is there.
	p3, err := w.open("p3", only)
	if err != nil {
		t.Fatalf("open after the candidate died: %v", err)
	}
	g.verify(t, p3.star)
	if _, err := g.append(t, p3.star, "a", "p3"); err != nil {
		t.Fatal(err)
	}
	g.verify(t, p3.star)
}
