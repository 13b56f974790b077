package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore/etcd"
	"github.com/flightlog/flightlog/objstore"
)

// endpoints returns the etcd cluster the tests use, from the environment,
// or skips (fails under FLIGHTLOG_REQUIRE_SERVERS=1).
func endpoints(t testing.TB) []string {
	t.Helper()
	eps := os.Getenv("FLIGHTLOG_ETCD_ENDPOINTS")
	if eps == "" {
		msg := "FLIGHTLOG_ETCD_ENDPOINTS is not set: run ./scripts/test.sh, which starts etcd on loopback and sets it"
		if os.Getenv("FLIGHTLOG_REQUIRE_SERVERS") == "1" {
			t.Fatal(msg + " (FLIGHTLOG_REQUIRE_SERVERS=1: a missing server is a failure)")
		}
		t.Skip(msg)
	}
	return strings.Split(eps, ",")
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// testLog logs at WARN and above to the test's output (-v), for
// post-mortems of a failure.
func testLog(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel()}))
	}
	return quiet()
}

// cluster is a fleet of members as goroutines in this process: one etcd
// client and one etcd metastore each (so a member can be cut off alone),
// shared in-memory buckets, one random prefix.
type cluster struct {
	t      *testing.T
	eps    []string
	prefix string
	stars  []string
	stores []objstore.Store
	admin  *clientv3.Client
	meta   *etcd.Store // the test's own metastore handle (reads, cleanup)
	router *Router     // the test's own router: what the appenders ask

	mu        sync.Mutex
	nodes     map[string]*Node
	clients   map[string]*clientv3.Client
	abandoned []*loglet.Star // stars of crashed members, closed at cleanup
}

func newCluster(t *testing.T, nstars int) *cluster {
	eps := endpoints(t)
	var b [6]byte
	rand.Read(b[:])
	c := &cluster{
		t: t, eps: eps, prefix: "flightlog-test/fleet-" + hex.EncodeToString(b[:]) + "/",
		nodes: map[string]*Node{}, clients: map[string]*clientv3.Client{},
	}
	for i := range nstars {
		c.stars = append(c.stars, fmt.Sprintf("s%02d", i))
	}
	for range 3 {
		c.stores = append(c.stores, objstore.NewMem())
	}
	c.admin = c.client()
	meta, err := etcd.New(etcd.Config{Client: c.admin, Prefix: c.prefix})
	if err != nil {
		t.Fatal(err)
	}
	c.meta = meta
	c.router, err = NewRouter(t.Context(), c.admin, c.config(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.mu.Lock()
		nodes := c.nodes
		c.mu.Unlock()
		for _, n := range nodes {
			n.Close(context.Background())
		}
		c.router.Close()
		var wg sync.WaitGroup
		for _, s := range c.abandoned {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				s.Close(ctx)
				cancel()
			})
		}
		wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c.admin.Delete(ctx, c.prefix, clientv3.WithPrefix())
		cancel()
		meta.Close()
		c.admin.Close()
		for _, cl := range c.clients {
			cl.Close()
		}
	})
	return c
}

func (c *cluster) client() *clientv3.Client {
	cl, err := clientv3.New(clientv3.Config{Endpoints: c.eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		c.t.Fatal(err)
	}
	return cl
}

// config is the fleet's Config for a member whose metastore is meta.
func (c *cluster) config(meta *etcd.Store) Config {
	cfg := Config{
		Prefix: c.prefix, Stars: c.stars, Meta: c.meta,
		TTL: 2 * time.Second, HandoffWait: 3 * time.Second,
		CheckInterval: 200 * time.Millisecond,
		CloseTimeout:  5 * time.Second,
		Logger:        testLog(c.t),
	}
	if meta != nil {
		cfg.Meta = meta
		cfg.OpenStar = func(ctx context.Context, star string) (loglet.Config, error) {
			return loglet.Config{
				Meta:              meta,
				Standard:          loglet.ClassConfig{Stores: c.stores, W: 2, FlushDeadline: time.Millisecond, ChainBacklogFlights: 1 << 15, ChainBacklogMiB: 256},
				CreateOnAppend:    true,
				SealCheckInterval: 200 * time.Millisecond,
				PreflightTimeout:  -1,
				FencePatience:     -1,
				Logger:            testLog(c.t),
			}, nil
		}
	}
	return cfg
}

// join starts member name with its own client and metastore.
func (c *cluster) join(name string) *Node { return c.joinWith(name, c.eps, nil) }

// joinWith starts member name with its own client of eps and metastore,
// its Config changed by mod (if not nil).
func (c *cluster) joinWith(name string, eps []string, mod func(*Config)) *Node {
	cl, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		c.t.Fatal(err)
	}
	meta, err := etcd.New(etcd.Config{Client: cl, Prefix: c.prefix})
	if err != nil {
		c.t.Fatal(err)
	}
	cfg := c.config(meta)
	if mod != nil {
		mod(&cfg)
	}
	n, err := Join(c.t.Context(), cl, Member{Name: name, Addr: name + ".test:80"}, cfg)
	if err != nil {
		c.t.Fatalf("join %s: %v", name, err)
	}
	c.mu.Lock()
	c.nodes[name], c.clients[name] = n, cl
	c.mu.Unlock()
	return n
}

func (c *cluster) node(name string) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[name]
}

// leave closes member name cleanly.
func (c *cluster) leave(name string) {
	n := c.node(name)
	if err := n.Close(context.Background()); err != nil {
		c.t.Errorf("close %s: %v", name, err)
	}
	c.mu.Lock()
	delete(c.nodes, name)
	c.mu.Unlock()
}

// crash stops member name's controller as a crash would (nothing closed,
// no lead withdrawn) and closes its etcd client, so its lease expires
// after the TTL and its metastore is cut off. Its stars keep running,
// abandoned: it returns them.
func (c *cluster) crash(name string) map[string]*loglet.Star {
	n := c.node(name)
	n.cancel()
	<-n.done
	n.ops.Wait()
	n.mu.Lock()
	held := map[string]*loglet.Star{}
	for s, h := range n.stars {
		if h.star != nil {
			held[s] = h.star
		}
	}
	n.mu.Unlock()
	n.router.Close()
	c.mu.Lock()
	cl := c.clients[name]
	delete(c.nodes, name)
	delete(c.clients, name)
	for _, s := range held {
		c.abandoned = append(c.abandoned, s)
	}
	c.mu.Unlock()
	cl.Close()
	return held
}

// waitSettled waits until the live members are exactly names and every
// star is led by its placed owner, and only by it. It fails the test after
// a minute.
func (c *cluster) waitSettled(what string, names ...string) {
	c.t.Helper()
	deadline := time.After(time.Minute)
	for {
		changed := c.router.Changed()
		var live []string
		for _, m := range c.router.Members() {
			live = append(live, m.Name)
		}
		if slices.Equal(live, names) && c.settled() {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			c.t.Fatalf("%s: stars not all led by their owners after a minute: placement %v, leads %v", what, c.router.Placement(), c.leadSummary())
		}
	}
}

func (c *cluster) settled() bool {
	owners := c.router.Placement()
	if len(owners) != len(c.stars) {
		return false
	}
	for _, s := range c.stars {
		ls := c.router.Leads(s)
		if len(ls) != 1 || ls[0].Member.Name != owners[s] {
			return false
		}
	}
	return true
}

func (c *cluster) leadSummary() map[string]string {
	out := map[string]string{}
	for _, s := range c.stars {
		var parts []string
		for _, l := range c.router.Leads(s) {
			parts = append(parts, fmt.Sprintf("%s@%d", l.Member.Name, l.Epoch))
		}
		out[s] = strings.Join(parts, ",")
	}
	return out
}

// ackLog is what the appenders did: per stream the bodies acked (in ack
// order) and those definitely not committed; per star the time and member
// of every ack.
type ackLog struct {
	mu      sync.Mutex
	acked   map[string][][]byte
	refused map[string]map[string]bool
	byStar  map[string][]starAck
	used    map[string]bool // stars with a stream
	total   atomic.Int64
	notify  chan struct{}
}

type starAck struct {
	at     time.Time
	member string
}

func newAckLog(stars []string, streams []string) *ackLog {
	used := map[string]bool{}
	for _, s := range streams {
		used[chain.PlaceStream(s, stars)] = true
	}
	return &ackLog{used: used, acked: map[string][][]byte{}, refused: map[string]map[string]bool{}, byStar: map[string][]starAck{}, notify: make(chan struct{}, 1)}
}

// waitAcks waits until n more appends have been acked.
func (a *ackLog) waitAcks(t *testing.T, n int64) {
	t.Helper()
	goal := a.total.Load() + n
	deadline := time.After(time.Minute)
	for a.total.Load() < goal {
		select {
		case <-a.notify:
		case <-deadline:
			t.Fatalf("waiting for %d acks: %d after a minute", n, a.total.Load()-goal+n)
		}
	}
}

// appendLoop appends to stream through the router until ctx ends: each
// attempt carries a new body (so a retry never duplicates one whose
// outcome is unknown); on a routing miss or a failure it waits for the
// router's next change (or 50ms).
func (c *cluster) appendLoop(ctx context.Context, stream string, log *ackLog) {
	for i := 0; ctx.Err() == nil; i++ {
		body := fmt.Appendf(nil, "%s/%06d/%s", stream, i, strings.Repeat("x", i%97))
		changed := c.router.Changed()
		star, m, _, err := c.router.Route(ctx, stream)
		var st *loglet.Star
		if err == nil {
			if n := c.node(m.Name); n != nil {
				st, _ = n.Star(star)
			}
		}
		if st == nil {
			// Never sent: not committed.
			log.refuse(stream, body)
			wait(ctx, changed)
			continue
		}
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err = st.Append(actx, stream, loglet.Batch{Records: []loglet.Record{{Body: body}}})
		cancel()
		switch {
		case err == nil:
			log.ack(stream, star, m.Name, body)
		case errors.Is(err, loglet.ErrNotCommitted):
			log.refuse(stream, body)
			wait(ctx, changed)
		default:
			wait(ctx, changed) // outcome unknown: the body may or may not be there, once
		}
	}
}

func wait(ctx context.Context, changed <-chan struct{}) {
	select {
	case <-ctx.Done():
	case <-changed:
	case <-time.After(50 * time.Millisecond):
	}
}

func (a *ackLog) ack(stream, star, member string, body []byte) {
	a.mu.Lock()
	a.acked[stream] = append(a.acked[stream], body)
	a.byStar[star] = append(a.byStar[star], starAck{time.Now(), member})
	a.mu.Unlock()
	a.total.Add(1)
	select {
	case a.notify <- struct{}{}:
	default:
	}
}

func (a *ackLog) refuse(stream string, body []byte) {
	a.mu.Lock()
	if a.refused[stream] == nil {
		a.refused[stream] = map[string]bool{}
	}
	a.refused[stream][string(body)] = true
	a.mu.Unlock()
}

// firstAckBy is the first ack on star at or after t by a member other than
// old; false if none.
func (a *ackLog) firstAckBy(star string, t time.Time, old string) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, x := range a.byStar[star] {
		if !x.at.Before(t) && x.member != old {
			return x.at, true
		}
	}
	return time.Time{}, false
}

// move is one membership change: when it started and which stars it moved
// from whom.
type move struct {
	what  string
	start time.Time
	moved map[string]string // star -> old owner
}

func (c *cluster) movesFrom(what string, before, after map[string]string, start time.Time) move {
	mv := move{what: what, start: start, moved: map[string]string{}}
	for s, o := range before {
		if after[s] != o {
			mv.moved[s] = o
		}
	}
	return mv
}

// waitMoved waits until every star mv moved that carries streams has an
// ack on a member other than its old owner (so the next move cannot hide
// this one's window).
func (a *ackLog) waitMoved(t *testing.T, mv move) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		a.mu.Lock()
		pending := ""
		for s := range mv.moved {
			if !a.used[s] {
				continue
			}
			found := false
			for _, x := range a.byStar[s] {
				if !x.at.Before(mv.start) && x.member != mv.moved[s] {
					found = true
					break
				}
			}
			if !found {
				pending = s
				break
			}
		}
		a.mu.Unlock()
		if pending == "" {
			return
		}
		select {
		case <-a.notify:
		case <-deadline:
			t.Fatalf("%s: star %s has no ack on its new owner after a minute", mv.what, pending)
		}
	}
}

// windows returns the unavailability window of every star mv moved: from
// its start to the star's first ack on another member.
func (a *ackLog) windows(t *testing.T, mv move) map[string]time.Duration {
	out := map[string]time.Duration{}
	for s, old := range mv.moved {
		if !a.used[s] {
			continue // no stream on it
		}
		at, ok := a.firstAckBy(s, mv.start, old)
		if !ok {
			t.Errorf("%s: star %s (from %s) has no ack on its new owner", mv.what, s, old)
			continue
		}
		out[s] = at.Sub(mv.start)
	}
	return out
}

func p50(ds map[string]time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(maps.Values(ds))
	return s[len(s)/2]
}

// placementWith is the placement over the given member names.
func (c *cluster) placementWith(names ...string) map[string]string {
	ms := make([]Member, len(names))
	for i, n := range names {
		ms[i] = Member{Name: n, Addr: n + ".test:80"}
	}
	return Place(c.stars, ms)
}

// verify reads every stream back with a loglet.Reader and checks it against
// the log: every acked body once, in ack order, byte for byte; no body that
// was refused; nothing that was never sent.
func (c *cluster) verify(log *ackLog) {
	t := c.t
	rd, err := loglet.NewReader(loglet.ReaderConfig{Meta: c.meta, Standard: c.stores})
	if err != nil {
		t.Fatal(err)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	streams := make([]string, 0, len(log.acked))
	for s := range log.acked {
		streams = append(streams, s)
	}
	sort.Strings(streams)
	total := 0
	for _, stream := range streams {
		var got [][]byte
		for next := uint64(0); ; {
			res, err := rd.Read(t.Context(), stream, loglet.ReadQuery{Start: loglet.AtSeq(next)})
			if err != nil {
				t.Fatalf("read %s at %d: %v", stream, next, err)
			}
			for _, r := range res.Records {
				got = append(got, r.Body)
			}
			if len(res.Records) == 0 {
				break
			}
			next = res.Next
		}
		acked := log.acked[stream]
		seen := map[string]bool{}
		ai := 0
		for seq, b := range got {
			k := string(b)
			if seen[k] {
				t.Fatalf("stream %s: body %.20q read twice (seq %d)", stream, b, seq)
			}
			seen[k] = true
			if log.refused[stream][k] {
				t.Fatalf("stream %s: body %.20q was refused (not committed) but reads back at seq %d", stream, b, seq)
			}
			if !strings.HasPrefix(k, stream+"/") {
				t.Fatalf("stream %s: seq %d holds %.30q, never sent to it", stream, seq, b)
			}
			if ai < len(acked) && string(acked[ai]) == k {
				ai++
			}
		}
		if ai != len(acked) {
			t.Fatalf("stream %s: acked body %d of %d (%.20q) is missing or out of order in the %d records read", stream, ai, len(acked), acked[ai], len(got))
		}
		total += len(acked)
	}
	t.Logf("verified %d acked records in %d streams", total, len(streams))
}

// TestFleetChurn runs 3 members under continuous appends to many streams,
// then crashes one, adds two, removes one cleanly and restarts the rest one
// by one (leave, join again); every acked record
// reads back once, in order, byte for byte. It logs the unavailability
// window per moved star (p50) for the crash and for the planned moves.
func TestFleetChurn(t *testing.T) {
	c := newCluster(t, 12)
	for _, n := range []string{"m0", "m1", "m2"} {
		c.join(n)
	}
	c.waitSettled("start", "m0", "m1", "m2")

	var streams []string
	for i := range 36 {
		streams = append(streams, fmt.Sprintf("stream-%02d", i))
	}
	log := newAckLog(c.stars, streams)
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for _, s := range streams {
		wg.Go(func() { c.appendLoop(ctx, s, log) })
	}
	stopped := false
	stopAll := func() {
		if !stopped {
			stopped = true
			stop()
			wg.Wait()
		}
	}
	defer stopAll()
	log.waitAcks(t, 300)

	var moves []move
	// A crash: m1's controller stops and its client closes; its lease
	// expires after the TTL.
	before := c.placementWith("m0", "m1", "m2")
	start := time.Now()
	c.crash("m1")
	moves = append(moves, c.movesFrom("crash m1", before, c.placementWith("m0", "m2"), start))
	c.waitSettled("after the crash", "m0", "m2")
	log.waitMoved(t, moves[len(moves)-1])
	log.waitAcks(t, 300)

	// Two join: planned moves onto them.
	before = c.placementWith("m0", "m2")
	start = time.Now()
	c.join("m3")
	moves = append(moves, c.movesFrom("join m3", before, c.placementWith("m0", "m2", "m3"), start))
	c.waitSettled("after m3 joined", "m0", "m2", "m3")
	log.waitMoved(t, moves[len(moves)-1])
	log.waitAcks(t, 200)
	before = c.placementWith("m0", "m2", "m3")
	start = time.Now()
	c.join("m4")
	moves = append(moves, c.movesFrom("join m4", before, c.placementWith("m0", "m2", "m3", "m4"), start))
	c.waitSettled("after m4 joined", "m0", "m2", "m3", "m4")
	log.waitMoved(t, moves[len(moves)-1])
	log.waitAcks(t, 200)

	// One leaves cleanly.
	before = c.placementWith("m0", "m2", "m3", "m4")
	start = time.Now()
	c.leave("m0")
	moves = append(moves, c.movesFrom("leave m0", before, c.placementWith("m2", "m3", "m4"), start))
	c.waitSettled("after m0 left", "m2", "m3", "m4")
	log.waitMoved(t, moves[len(moves)-1])
	log.waitAcks(t, 300)

	// A rolling restart: each member leaves cleanly and joins again under
	// its name (a new session, a new Owner).
	live := []string{"m2", "m3", "m4"}
	for _, name := range live {
		rest := slices.DeleteFunc(slices.Clone(live), func(n string) bool { return n == name })
		before = c.placementWith(live...)
		start = time.Now()
		c.leave(name)
		moves = append(moves, c.movesFrom("restart "+name+" (leave)", before, c.placementWith(rest...), start))
		c.waitSettled("restart "+name+": left", rest...)
		log.waitMoved(t, moves[len(moves)-1])
		start = time.Now()
		c.join(name)
		moves = append(moves, c.movesFrom("restart "+name+" (join)", c.placementWith(rest...), before, start))
		c.waitSettled("restart "+name+": back", live...)
		log.waitMoved(t, moves[len(moves)-1])
		log.waitAcks(t, 100)
	}
	stopAll()

	planned := map[string]time.Duration{}
	for _, mv := range moves {
		ws := log.windows(t, mv)
		t.Logf("%s: %d stars moved, unavailability p50 %v, all %v", mv.what, len(mv.moved), p50(ws), ws)
		if !strings.HasPrefix(mv.what, "crash") {
			for s, w := range ws {
				planned[mv.what+"/"+s] = w
			}
		}
	}
	t.Logf("planned moves: %d stars, unavailability p50 %v (TTL %v)", len(planned), p50(planned), c.config(nil).TTL)
	// Close the members so every star is sealed, then read back.
	for _, n := range []string{"m2", "m3", "m4"} {
		c.leave(n)
	}
	c.verify(log)
}

// logLevel is WARN, or FLIGHTLOG_FLEET_LOG (e.g. INFO) for a post-mortem.
func logLevel() slog.Level {
	var l slog.Level = slog.LevelWarn
	if v := os.Getenv("FLIGHTLOG_FLEET_LOG"); v != "" {
		l.UnmarshalText([]byte(v))
	}
	return l
}

// TestFleetPartition: a member cut off from etcd (its client closed: no
// session, no metastore) but not from the buckets keeps its star and keeps
// appending to it. Its lease expires, the star's new owner opens it (seal,
// fence, mint), and from then on none of the cut-off member's appends is
// acked; every one it acked before reads back, once, in order.
func TestFleetPartition(t *testing.T) {
	c := newCluster(t, 4)
	c.join("m0")
	c.join("m1")
	c.waitSettled("start", "m0", "m1")
	// A star m1 leads, and a stream on it.
	var star, stream string
	for i := 0; stream == ""; i++ {
		s := fmt.Sprintf("p-%d", i)
		if st := chain.PlaceStream(s, c.stars); c.router.Placement()[st] == "m1" {
			star, stream = st, s
		}
		if i > 10000 {
			t.Fatalf("no stream lands on a star of m1: placement %v", c.router.Placement())
		}
	}
	victim, ok := c.node("m1").Star(star)
	if !ok {
		t.Fatalf("m1 does not hold %s", star)
	}
	_, oldEpoch, _ := c.router.Leader(star)

	log := newAckLog(c.stars, []string{stream})
	type attempt struct {
		start time.Time
		acked bool
		err   error
	}
	var (
		mu       sync.Mutex
		attempts []attempt
		succAt   time.Time // when the successor's lead was seen
		after    int       // attempts started after succAt and ended
	)
	enough := make(chan struct{})
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			body := fmt.Appendf(nil, "%s/%06d/victim", stream, i)
			start := time.Now()
			actx, cancel := context.WithTimeout(ctx, time.Second)
			_, err := victim.Append(actx, stream, loglet.Batch{Records: []loglet.Record{{Body: body}}})
			cancel()
			switch {
			case err == nil:
				log.ack(stream, star, "m1", body)
			case errors.Is(err, loglet.ErrNotCommitted):
				log.refuse(stream, body)
			}
			mu.Lock()
			attempts = append(attempts, attempt{start, err == nil, err})
			if !succAt.IsZero() && start.After(succAt) {
				if after++; after == 5 {
					close(enough)
				}
			}
			mu.Unlock()
			if err != nil {
				wait(ctx, nil)
			}
		}
	})
	log.waitAcks(t, 50)

	// The partition: m1's controller stops as if it never noticed, and
	// its etcd client goes (session and metastore with it).
	cut := time.Now()
	c.crash("m1")
	c.waitSettled("after the partition", "m0")
	m, epoch, _ := c.router.Leader(star)
	if m.Name != "m0" || epoch <= oldEpoch {
		t.Fatalf("successor: %s at epoch %d, want m0 past epoch %d", m.Name, epoch, oldEpoch)
	}
	mu.Lock()
	succAt = time.Now()
	mu.Unlock()
	select {
	case <-enough:
	case <-time.After(time.Minute):
		t.Fatalf("the cut-off member made fewer than 5 attempts in a minute after the takeover")
	}
	stop()
	wg.Wait()

	var before, beforeSucc, afterSucc int
	var lastErr error
	for _, a := range attempts {
		switch {
		case a.start.Before(cut) && a.acked:
			before++
		case a.start.Before(succAt) && a.acked:
			beforeSucc++
		case !a.start.Before(succAt):
			if a.acked {
				afterSucc++
			}
			lastErr = a.err
		}
	}
	t.Logf("cut-off member: %d acks before the cut, %d acks between the cut and the takeover (it still believed it led), %d acks after it (want 0); last error: %v", before, beforeSucc, afterSucc, lastErr)
	if afterSucc != 0 {
		t.Fatalf("the cut-off member acked %d appends started after its successor took over", afterSucc)
	}
	// The successor serves the stream, after everything the cut-off
	// member acked.
	succ, ok := c.node("m0").Star(star)
	if !ok {
		t.Fatalf("m0 does not serve %s", star)
	}
	for i := range 20 {
		body := fmt.Appendf(nil, "%s/%06d/successor", stream, i)
		if _, err := succ.Append(t.Context(), stream, loglet.Batch{Records: []loglet.Record{{Body: body}}}); err != nil {
			t.Fatalf("successor append %d: %v", i, err)
		}
		log.ack(stream, star, "m0", body)
	}
	c.leave("m0")
	c.verify(log)
}

// TestFleetSessionLost: with Config.NoRejoin, a member whose lease is
// revoked under it (as when it expires) stops: Done closes, Err is
// ErrSessionLost, its stars are closed, and the other member leads every
// star.
func TestFleetSessionLost(t *testing.T) {
	c := newCluster(t, 4)
	c.join("m0")
	n1 := c.joinWith("m1", c.eps, func(cfg *Config) { cfg.NoRejoin = true })
	c.waitSettled("start", "m0", "m1")
	if len(n1.Leading()) == 0 {
		t.Fatalf("m1 leads nothing: placement %v", c.router.Placement())
	}
	if _, err := c.admin.Revoke(t.Context(), n1.session().Lease()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-n1.Done():
	case <-time.After(time.Minute):
		t.Fatal("m1 still running a minute after its lease was revoked")
	}
	if err := n1.Err(); !errors.Is(err, ErrSessionLost) {
		t.Fatalf("Err = %v, want ErrSessionLost", err)
	}
	if got := n1.Leading(); len(got) != 0 {
		t.Fatalf("m1 still leads %v after losing its session", got)
	}
	c.waitSettled("after m1 lost its session", "m0")
	if n1.Rejoins() != 0 {
		t.Fatalf("m1 rejoined %d times under NoRejoin", n1.Rejoins())
	}
	if err := n1.Close(t.Context()); err != nil {
		t.Fatalf("Close after a lost session: %v", err)
	}
	c.mu.Lock()
	delete(c.nodes, "m1")
	c.mu.Unlock()
}

// TestFleetLeadFollowsRecovery: a leader that halts and recovers in place
// mints a new epoch; its member publishes its lead again at that epoch, so
// the route's epoch matches the star's epoch record.
func TestFleetLeadFollowsRecovery(t *testing.T) {
	c := newCluster(t, 1)
	n := c.join("m0")
	c.waitSettled("start", "m0")
	star := c.stars[0]
	_, epoch, _ := c.router.Leader(star)
	// Foreign occupants (another writer's poison) in one bucket at the
	// epoch's early slots: the first copy that meets one halts the epoch,
	// and the recovery mints the next.
	for slot := uint64(2); slot < 8; slot++ {
		key := chain.SlotKey(star, loglet.Standard, epoch, slot)
		if err := c.stores[0].PutIfAbsent(t.Context(), key, envelope.Poison(epoch, slot, envelope.NewNonce())); err != nil {
			t.Fatal(err)
		}
	}
	st, ok := n.Star(star)
	if !ok {
		t.Fatalf("m0 does not hold %s", star)
	}
	for i := range 20 {
		body := fmt.Appendf(nil, "r/%d", i)
		if _, err := st.Append(t.Context(), "r", loglet.Batch{Records: []loglet.Record{{Body: body}}}); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	if s := st.Stats().Standard; s.Halts == 0 || s.Epoch <= epoch {
		t.Fatalf("no recovery: %d halts, epoch %d (was %d)", s.Halts, s.Epoch, epoch)
	}
	deadline := time.After(time.Minute)
	for {
		changed := c.router.Changed()
		m, ep, _ := c.router.Leader(star)
		if ep == st.Stats().Standard.Epoch {
			if m.Name != "m0" {
				t.Fatalf("lead of %s by %s, want m0", star, m.Name)
			}
			t.Logf("lead republished at epoch %d (was %d)", ep, epoch)
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("lead still at epoch %d a minute after the recovery minted %d", ep, st.Stats().Standard.Epoch)
		}
	}
}

// TestFleetJoinTwice: a name already live is refused; after its Close the
// name joins again.
func TestFleetJoinTwice(t *testing.T) {
	c := newCluster(t, 2)
	c.join("m0")
	cl := c.client()
	defer cl.Close()
	meta, err := etcd.New(etcd.Config{Client: cl, Prefix: c.prefix})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := Join(t.Context(), cl, Member{Name: "m0"}, c.config(meta)); err == nil {
		n.Close(t.Context())
		t.Fatal("a second m0 joined while the first is live")
	}
	c.leave("m0")
	n, err := Join(t.Context(), cl, Member{Name: "m0"}, c.config(meta))
	if err != nil {
		t.Fatalf("join again after Close: %v", err)
	}
	if err := n.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(t.Context()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
