package loglet

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/objstore"
)

var scaleOutSeed = flag.Uint64("scaleout.seed", 0, "seed of TestScaleOutMovesStarsUnderLoad (0: a random one, logged)")

// A scale-out deployment, as the test models it. A node is one process: it
// leads a set of stars, one *Star per star it leads (each opened with
// Config.Star set and Config.Stars listing every star of the deployment), all
// over the world's shared Mem buckets and metastore. A node that is asked to
// append to a star it does not lead answers with the NotLeaderError one of
// its stars gives for a foreign stream (which names the leader from the
// star's epoch record), as a host's request handler would.
type soNode struct {
	name string
	mu   sync.Mutex
	gen  int
	lead map[string]*Star // star name → the Star this node leads it with
}

// soStream is one stream's ledger: what was acked at which seq, and the fate
// of every body ever submitted (bodies are unique per attempt).
type soStream struct {
	name, star string
	class      Class
	mu         sync.Mutex
	acked      map[uint64]string
	fate       map[string]soFate
}

type soFate uint8

const (
	fateAcked        soFate = iota + 1
	fateNotCommitted        // must never be read back
	fateUnknown             // may or may not be read back
)

type soCluster struct {
	t       *testing.T
	w       *world
	stars   []string
	nodes   map[string]*soNode
	names   []string // node names, sorted
	streams []*soStream

	routeMu sync.Mutex
	route   map[string]string // the router's belief: star → node

	allMu sync.Mutex
	all   []*Star // every Star ever opened, for the final Close

	acks, notCommitted, unknown                  atomic.Int64
	namedReroutes, lookupReroutes, leaderNotOpen atomic.Int64
	deposedErrs, closedErrs, otherNotCommitted   atomic.Int64
}

// nodeOf returns the node an owner string names ("n2#5" → "n2").
func nodeOf(owner string) string {
	n, _, _ := strings.Cut(owner, "#")
	return n
}

// open makes node n lead star: a takeover if another node leads it. It
// retries when the live incumbent's own recovery wins the mint race.
func (c *soCluster) open(n *soNode, star string) *Star {
	c.t.Helper()
	for attempt := 0; ; attempt++ {
		n.mu.Lock()
		n.gen++
		owner := fmt.Sprintf("%s#%d", n.name, n.gen)
		n.mu.Unlock()
		p, err := c.w.open(owner, func(cfg *Config) {
			cfg.Star, cfg.Stars = star, c.stars
			cfg.CreateOnAppend = false // placement is by hash over Stars, at CreateStream
			cfg.Logger = testLogger()
		})
		if err == nil {
			c.allMu.Lock()
			c.all = append(c.all, p.star)
			c.allMu.Unlock()
			n.mu.Lock()
			n.lead[star] = p.star // a Star it led the star with before is left to the errors
			n.mu.Unlock()
			return p.star
		}
		if !errors.Is(err, ErrTakeoverLost) || attempt == 10 {
			c.t.Fatalf("%s opening star %s: %v", owner, star, err)
		}
		c.t.Logf("%s: takeover of %s lost to the incumbent's recovery; retrying: %v", owner, star, err)
	}
}

// retire forgets s as n's Star for star (it was deposed or closed).
func (n *soNode) retire(star string, s *Star) {
	n.mu.Lock()
	if n.lead[star] == s {
		delete(n.lead, star)
	}
	n.mu.Unlock()
}

// append is node n's request handler.
func (c *soCluster) nodeAppend(ctx context.Context, n *soNode, st *soStream, b Batch) (Ack, error) {
	n.mu.Lock()
	s := n.lead[st.star]
	var other *Star
	if s == nil {
		for _, name := range c.stars { // deterministic choice
			if o := n.lead[name]; o != nil {
				other = o
				break
			}
		}
	}
	n.mu.Unlock()
	if s != nil {
		ack, err := s.Append(ctx, st.name, b)
		if err != nil && (errors.Is(err, ErrNotLeader) || errors.Is(err, ErrClosed)) {
			n.retire(st.star, s)
		}
		return ack, err
	}
	if other != nil {
		return other.Append(ctx, st.name, b) // NotLeaderError naming the leader
	}
	return Ack{}, &NotLeaderError{Stream: st.name, Star: st.star} // leads nothing: cannot tell
}

func (c *soCluster) routeOf(star string) string {
	c.routeMu.Lock()
	defer c.routeMu.Unlock()
	return c.route[star]
}

func (c *soCluster) setRoute(star, node string) {
	if _, ok := c.nodes[node]; !ok {
		return
	}
	c.routeMu.Lock()
	c.route[star] = node
	c.routeMu.Unlock()
}

// send is the router: it appends b to st at the node it believes leads the
// stream's star and follows not-leader answers until the batch is acked or
// its outcome is unknown. Every attempt carries its own bodies (mk(attempt)),
// whose fate is recorded.
func (c *soCluster) send(st *soStream, mk func(attempt int) Batch) {
	// A bound on the retries, not a wait: each attempt waits on its
	// append's outcome.
	deadline := time.Now().Add(20 * time.Second)
	for attempt := 0; ; attempt++ {
		if time.Now().After(deadline) {
			c.t.Errorf("%s: could not route an append to star %s's leader within 20s", st.name, st.star)
			return
		}
		b := mk(attempt)
		node := c.routeOf(st.star)
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		ack, err := c.nodeAppend(ctx, c.nodes[node], st, b)
		timedOut := ctx.Err() != nil
		cancel()
		var nl *NotLeaderError
		switch {
		case err == nil:
			c.acks.Add(1)
			st.record(c.t, b, ack)
			return
		case errors.Is(err, ErrOutcomeUnknown):
			c.unknown.Add(1)
			st.mark(b, fateUnknown)
			if timedOut {
				c.t.Errorf("%s: append at %s hung for 15s: %v", st.name, node, err)
			}
			return // not retried: a retry would be a second copy
		case !errors.Is(err, ErrNotCommitted):
			c.t.Errorf("%s: append at %s: %v wraps neither outcome", st.name, node, err)
			return
		}
		c.notCommitted.Add(1)
		st.mark(b, fateNotCommitted)
		switch {
		case errors.As(err, &nl) && nl.Leader != "":
			c.namedReroutes.Add(1)
			if to := nodeOf(nl.Leader); to != node {
				c.setRoute(st.star, to)
				continue
			}
			// The epoch record names this node, which has not finished
			// opening the star (or has just handed it off): wait.
			c.leaderNotOpen.Add(1)
		case errors.Is(err, ErrNotLeader), errors.Is(err, ErrClosed):
			// A deposed lane's error names no leader in a field (only in
			// its text), and a closed star none at all: ask the epoch
			// record, as a host would.
			if errors.Is(err, ErrClosed) {
				c.closedErrs.Add(1)
			} else if !errors.As(err, &nl) {
				c.deposedErrs.Add(1)
			}
			c.lookupReroutes.Add(1)
			rec, _, rerr := chain.ReadEpoch(context.Background(), c.w.meta, st.star, st.class)
			if rerr == nil {
				c.setRoute(st.star, nodeOf(rec.Owner))
			}
		default:
			c.otherNotCommitted.Add(1)
			c.t.Logf("%s: not committed at %s, retrying: %v", st.name, node, err)
		}
		time.Sleep(time.Millisecond) // the router's back-off between attempts, as a host's
	}
}

func (st *soStream) mark(b Batch, f soFate) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, r := range b.Records {
		st.fate[string(r.Body)] = f
	}
}

func (st *soStream) record(t *testing.T, b Batch, ack Ack) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if ack.End-ack.Start != uint64(len(b.Records)) {
		t.Errorf("%s: ack [%d, %d) for %d records", st.name, ack.Start, ack.End, len(b.Records))
	}
	for i, r := range b.Records {
		seq := ack.Start + uint64(i)
		if old, dup := st.acked[seq]; dup {
			t.Errorf("%s: seq %d acked twice: %q and %q", st.name, seq, old, r.Body)
		}
		st.acked[seq] = string(r.Body)
		st.fate[string(r.Body)] = fateAcked
	}
}

// TestScaleOutMovesStarsUnderLoad: three nodes share the buckets and the
// metastore and lead six stars between them; producers append to streams
// placed on the stars by hash, through a router that follows not-leader
// answers; meanwhile stars move between nodes, mostly by takeover (the
// target opens the star while the old leader is live and is deposed), some
// by cooperative handoff (Close, then Open). At the end every acked record is
// read back exactly once at its sequence number through a Reader, sequences
// are contiguous, no batch that failed not-committed is there, and nothing
// that was never submitted is. The seed fixes the move schedule and the
// producers' choices (goroutine timing is not replayed):
//
//	go test ./loglet -race -run TestScaleOutMovesStarsUnderLoad -scaleout.seed=N
func TestScaleOutMovesStarsUnderLoad(t *testing.T) {
	seed := *scaleOutSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (replay: go test ./loglet -race -run TestScaleOutMovesStarsUnderLoad -scaleout.seed=%d)", seed, seed)
	const (
		nNodes     = 3
		nStars     = 6
		nProducers = 6
		perStar    = 4 // at least this many streams per star
		moves      = 14
	)
	c := &soCluster{t: t, w: newWorld(t), nodes: map[string]*soNode{}, route: map[string]string{}}
	for i := 0; i < nStars; i++ {
		c.stars = append(c.stars, fmt.Sprintf("s%d", i))
	}
	for i := 1; i <= nNodes; i++ {
		n := &soNode{name: fmt.Sprintf("n%d", i), lead: map[string]*Star{}}
		c.nodes[n.name] = n
		c.names = append(c.names, n.name)
	}
	leader := map[string]string{} // the mover's table: star → node
	for i, star := range c.stars {
		n := c.nodes[c.names[i%nNodes]]
		c.open(n, star)
		leader[star] = n.name
		c.route[star] = n.name
	}

	// Streams: placed by chain.PlaceStream through CreateStream, until every
	// star has perStar of them, alternating classes.
	ctx := context.Background()
	creator := c.nodes["n1"].lead["s0"]
	count := map[string]int{}
	for i := 0; len(count) < nStars || minCount(count) < perStar; i++ {
		name := fmt.Sprintf("orders-%03d", i)
		class := []Class{Standard, Express}[i%2]
		info, err := creator.CreateStream(ctx, name, StreamOptions{Class: class})
		if err != nil {
			t.Fatal(err)
		}
		if want := chain.PlaceStream(name, c.stars); info.Star != want {
			t.Fatalf("%s placed on %s, PlaceStream says %s", name, info.Star, want)
		}
		count[info.Star]++
		c.streams = append(c.streams, &soStream{name: name, star: info.Star, class: class, acked: map[uint64]string{}, fate: map[string]soFate{}})
	}
	t.Logf("%d streams over %d stars: %v", len(c.streams), nStars, count)

	// Producers.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for p := 0; p < nProducers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(p)+1))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				st := c.streams[rng.IntN(len(c.streams))]
				n := 1 + rng.IntN(3)
				c.send(st, func(attempt int) Batch {
					recs := make([]Record, n)
					for j := range recs {
						recs[j].Body = fmt.Appendf(nil, "%s/p%d/b%d/a%d/r%d", st.name, p, i, attempt, j)
					}
					return Batch{Records: recs}
				})
			}
		}()
	}

	// The mover.
	rng := rand.New(rand.NewPCG(seed, 0))
	var takeovers, handoffs int
	for m := 0; m < moves; m++ {
		// The load between moves: a duration, not a wait for a condition.
		// (Not in a synctest bubble: this test is about the goroutines'
		// real interleavings; on a bubble's clock an Open takes no time and
		// no producer ever meets a node still opening the star.)
		time.Sleep(time.Duration(60+rng.IntN(140)) * time.Millisecond)
		star := c.stars[rng.IntN(nStars)]
		from := c.nodes[leader[star]]
		var to *soNode
		for to == nil || to == from {
			to = c.nodes[c.names[rng.IntN(nNodes)]]
		}
		handoff := rng.IntN(4) == 0
		before := c.acks.Load()
		if handoff {
			from.mu.Lock()
			old := from.lead[star]
			from.mu.Unlock()
			if old != nil {
				old.Close(context.Background()) // flush, absorb, seal: the next owner skips the fence
				from.retire(star, old)
			}
			handoffs++
		} else {
			takeovers++
		}
		start := time.Now()
		c.open(to, star)
		leader[star] = to.name
		t.Logf("move %d: %s %s → %s by %s in %v (acks so far %d)", m, star, from.name, to.name, map[bool]string{true: "handoff", false: "takeover"}[handoff], time.Since(start).Round(time.Millisecond), before)
	}
	time.Sleep(100 * time.Millisecond) // the load after the last move: a duration, not a wait
	close(stop)
	wg.Wait()
	t.Logf("moves: %d takeovers, %d handoffs; batches: %d acked, %d attempts not committed (re-routed or retried), %d outcome unknown", takeovers, handoffs, c.acks.Load(), c.notCommitted.Load(), c.unknown.Load())
	t.Logf("router: %d re-routes by NotLeaderError.Leader (%d waits for a leader still opening), %d by epoch-record lookup (%d deposed-lane errors without a NotLeaderError, %d closed); %d other not-committed",
		c.namedReroutes.Load(), c.leaderNotOpen.Load(), c.lookupReroutes.Load(), c.deposedErrs.Load(), c.closedErrs.Load(), c.otherNotCommitted.Load())
	if c.acks.Load() == 0 {
		t.Fatal("no append was acked")
	}

	// Close every deposed Star, then the leaders (a clean seal each), so
	// everything acked is absorbed and a Reader sees it.
	live := map[*Star]bool{}
	for _, n := range c.nodes {
		n.mu.Lock()
		for star, s := range n.lead {
			if leader[star] == n.name {
				live[s] = true
			}
		}
		n.mu.Unlock()
	}
	c.allMu.Lock()
	all := append([]*Star(nil), c.all...)
	c.allMu.Unlock()
	for _, s := range all {
		if !live[s] {
			s.Close(context.Background())
		}
	}
	for _, s := range all {
		if live[s] {
			s.Close(context.Background())
			if st := s.Stats(); st.Standard.Halts+st.Express.Halts > 0 {
				t.Logf("leader of %s halted %d times (%s %s)", s.cfg.Star, st.Standard.Halts+st.Express.Halts, st.Standard.HaltCause, st.Express.HaltCause)
			}
		}
	}
	for _, star := range c.stars {
		for _, class := range []Class{Standard, Express} {
			rec, _, err := chain.ReadEpoch(ctx, c.w.meta, star, class)
			if err != nil {
				t.Fatal(err)
			}
			if nodeOf(rec.Owner) != leader[star] {
				t.Errorf("%s/%s: epoch %d owned by %q, but %s leads it", star, class, rec.Epoch, rec.Owner, leader[star])
			}
		}
	}

	// Read everything back through a Reader.
	r, err := NewReader(ReaderConfig{Meta: c.w.meta, Standard: []objstore.Store{c.w.std},
		Express: []objstore.Store{c.w.exp[0], c.w.exp[1], c.w.exp[2]}})
	if err != nil {
		t.Fatal(err)
	}
	var total, unknownRead int
	for _, st := range c.streams {
		var got []SequencedRecord
		for next := uint64(0); ; {
			res, err := r.Read(ctx, st.name, ReadQuery{Start: AtSeq(next), MaxRecords: 1000})
			if err != nil {
				t.Fatalf("read %s from %d: %v", st.name, next, err)
			}
			if len(res.Records) == 0 {
				break
			}
			got = append(got, res.Records...)
			next = res.Next
		}
		tail, err := r.CheckTail(ctx, st.name)
		if err != nil {
			t.Fatal(err)
		}
		if tail.Seq != uint64(len(got)) {
			t.Errorf("%s: read %d records, tail is %d", st.name, len(got), tail.Seq)
		}
		seen := map[string]uint64{}
		for i, rec := range got {
			if rec.Seq != uint64(i) {
				t.Fatalf("%s: record %d has seq %d (seed %d)", st.name, i, rec.Seq, seed)
			}
			body := string(rec.Body)
			if prev, dup := seen[body]; dup {
				t.Errorf("%s: %q read at seq %d and %d", st.name, body, prev, rec.Seq)
			}
			seen[body] = rec.Seq
			switch st.fate[body] {
			case fateAcked:
			case fateUnknown:
				unknownRead++
			case fateNotCommitted:
				t.Errorf("%s: seq %d holds %q, whose append failed not-committed", st.name, rec.Seq, body)
			default:
				t.Errorf("%s: seq %d holds %q, which was never appended", st.name, rec.Seq, body)
			}
		}
		seqs := make([]uint64, 0, len(st.acked))
		for seq := range st.acked {
			seqs = append(seqs, seq)
		}
		sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
		for _, seq := range seqs {
			body := st.acked[seq]
			if seq >= uint64(len(got)) || string(got[seq].Body) != body {
				t.Errorf("%s: acked seq %d (%q) not read back there (read %d records; seed %d)", st.name, seq, body, len(got), seed)
				break
			}
		}
		total += len(got)
	}
	t.Logf("read back %d records over %d streams (%d of them from appends whose outcome was unknown)", total, len(c.streams), unknownRead)
}

func minCount(m map[string]int) int {
	lo := -1
	for _, n := range m {
		if lo < 0 || n < lo {
			lo = n
		}
	}
	return lo
}
