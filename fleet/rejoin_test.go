package fleet

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// placedOn lists the stars the test's router places on member.
func (c *cluster) placedOn(member string) []string {
	var out []string
	for s, m := range c.router.Placement() {
		if m == member {
			out = append(out, s)
		}
	}
	return out
}

// ownerOf is the Owner in member's record, as the test's router sees it.
func (c *cluster) ownerOf(member string) (string, bool) {
	c.router.mu.Lock()
	defer c.router.mu.Unlock()
	m, ok := c.router.members[member]
	return m.Owner, ok
}

// waitFor waits until cond holds, checking it at each change of the test's
// router; it fails the test after a minute.
func (c *cluster) waitFor(what string, cond func() bool) {
	c.t.Helper()
	deadline := time.After(time.Minute)
	for {
		changed := c.router.Changed()
		if cond() {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			c.t.Fatalf("%s: not after a minute: members %v, leads %v", what, c.router.Members(), c.leadSummary())
		}
	}
}

// rejoinRun is one rejoin test's appenders and what they acked.
type rejoinRun struct {
	log  *ackLog
	stop func()
}

func (c *cluster) startAppends(nstreams int) *rejoinRun {
	var streams []string
	for i := range nstreams {
		streams = append(streams, fmt.Sprintf("stream-%02d", i))
	}
	log := newAckLog(c.stars, streams)
	ctx, cancel := context.WithCancel(c.t.Context())
	var wg sync.WaitGroup
	for _, s := range streams {
		wg.Go(func() { c.appendLoop(ctx, s, log) })
	}
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); wg.Wait() }) }
	c.t.Cleanup(stop)
	return &rejoinRun{log: log, stop: stop}
}

// backOn waits until every star of stars that carries streams has an ack
// by member after start.
func (a *ackLog) backOn(t *testing.T, what, member string, stars []string, start time.Time) {
	t.Helper()
	mv := move{what: what, start: start, moved: map[string]string{}}
	for _, s := range stars {
		mv.moved[s] = "not " + member
	}
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
				if !x.at.Before(start) && x.member == member {
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
			t.Fatalf("%s: star %s has no ack by %s after a minute", what, pending, member)
		}
	}
}

// TestFleetRejoin: a member whose lease is revoked under it while streams
// append stops serving its stars and closes them (the other member takes
// them over), opens a new session by itself, publishes its member record
// again under a new Owner, and placement gives it its stars back. Every
// acked record reads back once, in order, byte for byte.
func TestFleetRejoin(t *testing.T) {
	c := newCluster(t, 8)
	c.join("m0")
	n1 := c.join("m1")
	c.waitSettled("start", "m0", "m1")
	mine := c.placedOn("m1")
	if len(mine) == 0 {
		t.Fatalf("m1 is placed no star: %v", c.router.Placement())
	}
	run := c.startAppends(24)
	run.log.waitAcks(t, 200)

	oldLease := n1.session().Lease()
	oldOwner, _ := c.ownerOf("m1")
	start := time.Now()
	if _, err := c.admin.Revoke(t.Context(), oldLease); err != nil {
		t.Fatal(err)
	}
	c.waitFor("m1 back under a new Owner", func() bool {
		o, ok := c.ownerOf("m1")
		return ok && o != oldOwner
	})
	c.waitSettled("after the rejoin", "m0", "m1")
	back := time.Now()
	if got := n1.Rejoins(); got != 1 {
		t.Fatalf("Rejoins = %d, want 1", got)
	}
	if s := n1.session(); s == nil || s.Lease() == oldLease {
		t.Fatalf("m1's session after the rejoin: %v, the lost lease was %x", s, oldLease)
	}
	select {
	case <-n1.Done():
		t.Fatalf("m1 stopped: %v", n1.Err())
	default:
	}
	run.log.backOn(t, "rejoin m1", "m1", mine, back)
	takeover := map[string]time.Duration{}
	for _, s := range mine {
		if at, ok := run.log.firstAckBy(s, start, "m1"); ok && at.Before(back) {
			takeover[s] = at.Sub(start)
		}
	}
	t.Logf("m1 rejoined %v after its lease was revoked; %d of its %d stars acked on m0 meanwhile (p50 %v after the revoke)", back.Sub(start).Round(time.Millisecond), len(takeover), len(mine), p50(takeover))
	run.log.waitAcks(t, 200)
	run.stop()
	c.leave("m0")
	c.leave("m1")
	c.verify(run.log)
}

// cutProxy forwards TCP connections to an etcd endpoint until it is cut:
// then it drops every connection and refuses new ones (accepts and closes
// them), as an unreachable etcd would look, until it is restored.
type cutProxy struct {
	ln     net.Listener
	target string
	down   atomic.Bool
	mu     sync.Mutex
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target = strings.TrimPrefix(strings.TrimPrefix(target, "http://"), "https://")
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) accept() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.down.Load() {
			in.Close()
			continue
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns[in], p.conns[out] = true, true
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			io.Copy(dst, src)
			dst.Close()
			src.Close()
			p.mu.Lock()
			delete(p.conns, dst)
			delete(p.conns, src)
			p.mu.Unlock()
		}
		p.wg.Go(func() { pipe(out, in) })
		p.wg.Go(func() { pipe(in, out) })
	}
}

// cut drops every connection and refuses new ones until restore.
func (p *cutProxy) cut() {
	p.down.Store(true)
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
}

func (p *cutProxy) restore() { p.down.Store(false) }

// signalHandler passes records on to next and signals on ch each record
// whose message is msg.
type signalHandler struct {
	next slog.Handler
	msg  string
	ch   chan struct{}
}

func (h signalHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || h.next.Enabled(ctx, l)
}

func (h signalHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		select {
		case h.ch <- struct{}{}:
		default:
		}
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h signalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return signalHandler{h.next.WithAttrs(as), h.msg, h.ch}
}

func (h signalHandler) WithGroup(g string) slog.Handler {
	return signalHandler{h.next.WithGroup(g), h.msg, h.ch}
}

// TestFleetRejoinAfterOutage: a member whose etcd is unreachable (its
// client goes through a proxy the test cuts) for longer than the TTL loses
// its session while its stars still run; the other member takes them over
// (fence: nothing the cut-off member appends past the cut is acked); the
// member closes its stars, retries its rejoin while etcd stays
// unreachable, and, once the proxy is restored, rejoins and leads its
// stars again. Every acked record reads back once, in order, byte for byte.
func TestFleetRejoinAfterOutage(t *testing.T) {
	// The proxy first: the cluster's cleanup (closing the members) runs
	// before the proxy's.
	proxy := newCutProxy(t, endpoints(t)[0])
	c := newCluster(t, 8)
	c.join("m0")
	failed := make(chan struct{}, 1)
	n1 := c.joinWith("m1", []string{proxy.addr()}, func(cfg *Config) {
		cfg.Logger = slog.New(signalHandler{cfg.Logger.Handler(), "fleet: rejoin failed; will retry", failed})
	})
	c.waitSettled("start", "m0", "m1")
	mine := c.placedOn("m1")
	if len(mine) == 0 {
		t.Fatalf("m1 is placed no star: %v", c.router.Placement())
	}
	run := c.startAppends(24)
	run.log.waitAcks(t, 200)

	start := time.Now()
	proxy.cut()
	c.waitSettled("during the outage", "m0")
	select {
	case <-failed:
	case <-time.After(time.Minute):
		t.Fatal("m1 made no rejoin attempt a minute into the outage")
	}
	outage := time.Since(start)
	proxy.restore()
	c.waitSettled("after the outage", "m0", "m1")
	back := time.Now()
	if got := n1.Rejoins(); got != 1 {
		t.Fatalf("Rejoins = %d, want 1", got)
	}
	run.log.backOn(t, "m1 back after the outage", "m1", mine, back)
	t.Logf("etcd unreachable from m1 for %v; m1 led its stars again %v after the restore", outage.Round(time.Millisecond), back.Sub(start.Add(outage)).Round(time.Millisecond))
	run.log.waitAcks(t, 200)
	run.stop()
	c.leave("m0")
	c.leave("m1")
	c.verify(run.log)
}
