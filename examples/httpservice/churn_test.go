package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/flightlog/flightlog/contrib/fleethttp"
	"github.com/flightlog/flightlog/fleet"
	"github.com/flightlog/flightlog/internal/hang"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore/etcd"
)

// Churn settings: a short lease, many stars, many streams.
const (
	churnTTL     = 2 * time.Second
	churnStars   = 12
	churnStreams = 48
)

// churn is the fleet of member processes under test and the test's view
// of it: its own router (the waits), the writers' acks (the windows).
type churn struct {
	t      *testing.T
	bin    string
	args   []string
	cli    *clientv3.Client
	prefix string
	router *fleet.Router
	stars  []string

	mu     sync.Mutex
	procs  map[string]*proc // live member processes
	exited []*proc          // stopped ones (their logs are scanned at the end)
	client atomic.Pointer[fleethttp.Client]

	// acks[star] are the times of the acks of appends to the star's
	// streams, in order (appended under mu).
	acks map[string][]time.Time
	// handoffs are the moves the test's router saw, in order (under mu).
	handoffs []handoff
}

// handoff is one star's move as etcd shows it: from the change of its
// placed member (a member key or a drain seen by the router) to the lead
// of that member.
type handoff struct {
	star        string
	placed, led time.Time
}

// event is one change of the fleet: the stars whose leader it changed,
// and the span from the change to the first ack of every star after the
// fleet settled.
type event struct {
	kind       string // crash or planned
	what       string
	start, end time.Time
	moved      []string
}

// TestFleetProcessChurn runs member processes on loopback against one
// etcd and one bucket directory, under continuous appends to 48 streams
// through any member, and changes the fleet under the load: kill -9 of one
// member, two joins, a drain and a clean leave (SIGTERM), then a rolling
// restart of every member (SIGTERM, wait until its stars are led
// elsewhere, start it again, wait until it leads its stars again). At the
// end every stream reads back, byte for byte, as the records its writer
// had acked, each once, in ack order. Each writer retries a batch with
// the same producer id and seq until it is acked, so an attempt whose
// outcome was unknown (its member killed while it forwarded it) is
// committed at most once: its retry is answered as a duplicate, and no
// record is accepted as "maybe".
//
// It logs the unavailability window of every star an event moved: the
// longest interval without an ack on the star that overlaps the event
// (from the last ack before it to the first after it), as p50/p99/max for
// the crash and for the planned moves, and asserts only bounds computed
// from the configuration, with slack for a busy machine.
func TestFleetProcessChurn(t *testing.T) {
	eps := etcdEndpoints(t)
	dir := t.TempDir()
	c := &churn{t: t, bin: filepath.Join(dir, "httpservice"), procs: map[string]*proc{}, acks: map[string][]time.Time{}}
	if out, err := exec.Command("go", "build", "-o", c.bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var rnd [6]byte
	rand.Read(rnd[:])
	c.prefix = "flightlog-test/churn-" + hex.EncodeToString(rnd[:]) + "/"
	c.args = []string{"--etcd", strings.Join(eps, ","), "--prefix", c.prefix, "--stars", fmt.Sprint(churnStars),
		"--ttl", churnTTL.String(), "--bucket", "file://" + filepath.ToSlash(filepath.Join(dir, "standard")),
		"--express", expressFlag(dir)}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	c.cli = cli
	t.Cleanup(func() { cli.Close() })
	meta, err := etcd.New(etcd.Config{Client: cli, Prefix: c.prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer meta.Close()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cli.Delete(ctx, c.prefix, clientv3.WithPrefix())
	})
	for i := range churnStars {
		c.stars = append(c.stars, fmt.Sprintf("s%d", i))
	}
	c.router, err = fleet.NewRouter(t.Context(), cli, fleet.Config{Prefix: c.prefix, Stars: c.stars, Meta: meta})
	if err != nil {
		t.Fatal(err)
	}
	defer c.router.Close()

	// Together: the first to join starts opening every star, and hands
	// the ones placed on the others over as they join (its claims, then
	// its leads, are waited for), with no fence.
	for _, name := range []string{"m1", "m2", "m3"} {
		c.start(name)
	}
	c.waitLed("start")
	go c.follow()

	// The writers: one per stream, each batch one record (the stream and
	// its seq, and bytes a text codec would mangle), retried with its
	// producer id and seq until acked.
	// Every third stream is an Express one (K=3, W=2), created through a
	// member; the others are Standard, created by their first append.
	streams := make([]string, churnStreams)
	starOf := map[string]string{}
	for i := range streams {
		streams[i] = fmt.Sprintf("churn-%02d", i)
		if i%3 == 0 {
			info, err := c.client.Load().CreateStream(t.Context(), streams[i], loglet.StreamOptions{Class: loglet.Express})
			if err != nil || info.Class != loglet.Express {
				t.Fatalf("create %s as Express: %+v, %v", streams[i], info, err)
			}
		}
		star, err := c.router.StarOf(t.Context(), streams[i])
		if err != nil {
			t.Fatal(err)
		}
		starOf[streams[i]] = star
	}
	for _, s := range c.stars {
		if !slices.Contains(slices.Collect(maps.Values(starOf)), s) {
			t.Fatalf("no stream is placed on star %s: the windows need every star written (use more streams)", s)
		}
	}
	stop := make(chan struct{})
	type written struct {
		stream        string
		bodies        [][]byte
		retried, dups int
	}
	results := make(chan written, len(streams))
	for _, stream := range streams {
		star := starOf[stream]
		go func() {
			w := written{stream: stream}
			defer func() { results <- w }()
			for seq := uint64(0); ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				body := append(fmt.Appendf(nil, "%s/%06d", stream, seq), 0, 0xff, '\n')
				b := loglet.Batch{Records: []loglet.Record{{Body: body}}, Producer: loglet.ProducerID{ID: "churn-" + stream, Seq: seq}}
				for try := 0; ; try++ {
					ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(hang.Bound(t)))
					ack, err := c.client.Load().Append(ctx, stream, b)
					cancel()
					if err == nil {
						if ack.Duplicate {
							w.dups++
						}
						break
					}
					w.retried++
					if !errors.Is(err, loglet.ErrNotCommitted) && !errors.Is(err, loglet.ErrOutcomeUnknown) || t.Context().Err() != nil || try > 1000 {
						t.Errorf("append %s seq %d (try %d): %v", stream, seq, try, err)
						return
					}
				}
				now := time.Now()
				c.mu.Lock()
				c.acks[star] = append(c.acks[star], now)
				c.mu.Unlock()
				w.bodies = append(w.bodies, body)
			}
		}()
	}
	c.waitAcked("the writers' start", time.Now())

	var events []event
	// kill -9 one member: its lease expires after the TTL, and its stars'
	// new owners take them over (a fence).
	events = append(events, c.change("crash", "kill -9 m2", func() { c.kill("m2") }))
	// Two joins: stars move to them by clean handoffs.
	events = append(events, c.change("planned", "join m4", func() { c.start("m4") }))
	events = append(events, c.change("planned", "join m5", func() { c.start("m5") }))
	// A clean removal: drain (its stars move while it serves), then
	// SIGTERM, with nothing left to hand over.
	events = append(events, c.change("planned", "drain m1", func() {
		if err := fleet.Drain(t.Context(), cli, c.prefix, "m1", true); err != nil {
			t.Fatal(err)
		}
		c.waitRouter("the drain of m1", func() bool { return slices.Contains(c.router.Stats().Drained, "m1") })
	}))
	events = append(events, c.change("planned", "stop drained m1", func() { c.stop("m1") }))
	// A rolling restart of every member: SIGTERM (its Close hands each
	// star over), wait until they are led elsewhere, start it again, wait
	// until it leads its stars again.
	for _, name := range []string{"m3", "m4", "m5"} {
		events = append(events, c.change("planned", "restart: stop "+name, func() { c.stop(name) }))
		events = append(events, c.change("planned", "restart: start "+name, func() { c.start(name) }))
	}

	close(stop)
	acked := map[string][][]byte{}
	retried, dups, total := 0, 0, 0
	for range streams {
		w := <-results
		acked[w.stream] = w.bodies
		retried, dups, total = retried+w.retried, dups+w.dups, total+len(w.bodies)
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d records acked on %d streams; %d attempts failed and were retried, %d retries answered as duplicates (committed by an earlier attempt)",
		total, len(streams), retried, dups)

	// Every acked record once, in order, byte for byte, through the
	// members.
	client := c.client.Load()
	for _, stream := range streams {
		want := acked[stream]
		var got []loglet.SequencedRecord
		for next := uint64(0); next < uint64(len(want)); {
			res, err := client.Read(t.Context(), stream, next, fleethttp.ReadOptions{})
			if err != nil {
				t.Fatalf("read %s from %d: %v", stream, next, err)
			}
			if len(res.Records) == 0 {
				t.Fatalf("read %s from %d: nothing, tail %d, want %d records", stream, next, res.Tail.Seq, len(want))
			}
			got = append(got, res.Records...)
			next = res.Next
		}
		tail, err := client.CheckTail(t.Context(), stream)
		if err != nil || tail.Seq != uint64(len(want)) {
			t.Fatalf("%s: tail %+v, %v; want %d (an acked record lost, or one duplicated)", stream, tail, err, len(want))
		}
		if len(got) != len(want) {
			t.Fatalf("%s: read %d records, acked %d", stream, len(got), len(want))
		}
		for i, r := range got {
			if r.Seq != uint64(i) || !bytes.Equal(r.Body, want[i]) {
				t.Fatalf("%s: record %d is seq %d %q, want %q", stream, i, r.Seq, r.Body, want[i])
			}
		}
	}

	c.report(events)

	// The members leave cleanly; no planned move fenced a live owner (a
	// new owner opens with may_depose=true only when the old owner's
	// clean close did not come within HandoffWait).
	c.mu.Lock()
	live := make([]*proc, 0, len(c.procs))
	for _, p := range c.procs {
		live = append(live, p)
	}
	c.mu.Unlock()
	for _, p := range live {
		c.stop(p.name)
	}
	if d := os.Getenv("CHURN_LOGDIR"); d != "" {
		for i, p := range c.exited {
			os.WriteFile(filepath.Join(d, fmt.Sprintf("%02d-%s.log", i, p.name)), p.log.Bytes(), 0o644)
		}
	}
	c.stages(events)
	for _, p := range c.exited {
		if bytes.Contains(p.log.Bytes(), []byte("may_depose=true")) {
			t.Errorf("%s opened a star deposing a live owner (a planned move that was not a clean handoff):\n%s", p.name, p.log)
		}
	}
}

// follow records the handoffs the router shows until the test ends.
func (c *churn) follow() {
	placed := map[string]time.Time{} // star -> when its placed member changed, until it leads
	last := c.router.Placement()
	for {
		changed := c.router.Changed()
		now := time.Now()
		owners := c.router.Placement()
		for _, s := range c.stars {
			if owners[s] != last[s] {
				placed[s] = now
			}
			if at, ok := placed[s]; ok {
				if m, _, led := c.router.Leader(s); led && m.Name == owners[s] {
					c.mu.Lock()
					c.handoffs = append(c.handoffs, handoff{star: s, placed: at, led: now})
					c.mu.Unlock()
					delete(placed, s)
				}
			}
		}
		last = owners
		select {
		case <-changed:
		case <-c.t.Context().Done():
			return
		}
	}
}

// start starts member name and waits until the fleet has placed and led
// every star on the live members.
func (c *churn) start(name string) {
	p := start(c.t, c.bin, name, c.args...)
	c.mu.Lock()
	c.procs[name] = p
	c.mu.Unlock()
	c.updateClient()
}

// kill kills member name with SIGKILL.
func (c *churn) kill(name string) {
	c.mu.Lock()
	p := c.procs[name]
	delete(c.procs, name)
	c.mu.Unlock()
	c.updateClient()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		c.t.Fatal(err)
	}
	<-p.exit
}

// stop sends member name SIGTERM and waits for a clean exit.
func (c *churn) stop(name string) {
	c.t.Helper()
	c.mu.Lock()
	p := c.procs[name]
	c.mu.Unlock()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		c.t.Fatal(err)
	}
	select {
	case err := <-p.exit:
		if err != nil {
			c.t.Fatalf("%s exited with %v after SIGTERM:\n%s", name, err, p.log)
		}
	case <-hang.After(c.t):
		c.t.Fatalf("%s did not exit after SIGTERM", name)
	}
	c.mu.Lock()
	delete(c.procs, name)
	c.exited = append(c.exited, p)
	c.mu.Unlock()
	c.updateClient()
}

// updateClient gives the writers a client of the live members.
func (c *churn) updateClient() {
	c.mu.Lock()
	var addrs []string
	for _, p := range c.procs {
		addrs = append(addrs, p.addr)
	}
	c.mu.Unlock()
	if len(addrs) == 0 {
		return // the last one stopped: the writers are done
	}
	slices.Sort(addrs)
	cl, err := fleethttp.NewClient(nil, addrs...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.client.Store(cl)
}

// leaders maps every star to the member leading it now.
func (c *churn) leaders() map[string]string {
	out := map[string]string{}
	for _, s := range c.stars {
		if m, _, ok := c.router.Leader(s); ok {
			out[s] = m.Name
		}
	}
	return out
}

// change runs do, waits until every star is led by the member placement
// gives it (among the live processes) and has been acked since, and
// returns the event with the stars whose leader changed.
func (c *churn) change(kind, what string, do func()) event {
	c.t.Helper()
	before := c.leaders()
	e := event{kind: kind, what: what, start: time.Now()}
	do()
	c.waitLed(what)
	settled := time.Now()
	e.end = c.waitAcked(what, settled)
	after := c.leaders()
	for _, s := range c.stars {
		if before[s] != after[s] {
			e.moved = append(e.moved, s)
		}
	}
	c.t.Logf("%s: %d stars moved, settled in %v", what, len(e.moved), settled.Sub(e.start).Round(time.Millisecond))
	return e
}

// waitLed waits until the live processes are the fleet's members and
// every star is led by its placed member alone.
func (c *churn) waitLed(what string) {
	c.t.Helper()
	for {
		changed := c.router.Changed()
		c.mu.Lock()
		var live []string
		for name := range c.procs {
			live = append(live, name)
		}
		c.mu.Unlock()
		if allLed(c.router, c.stars, live) && c.memberNames(live) {
			return
		}
		select {
		case <-changed:
		case <-hang.After(c.t):
			c.t.Fatalf("%s: stars not led by %v: placement %v, leaders %v", what, live, c.router.Placement(), c.leaders())
		}
	}
}

// waitRouter waits until the test's router satisfies cond.
func (c *churn) waitRouter(what string, cond func() bool) {
	c.t.Helper()
	for {
		changed := c.router.Changed()
		if cond() {
			return
		}
		select {
		case <-changed:
		case <-hang.After(c.t):
			c.t.Fatalf("%s: the router did not see it", what)
		}
	}
}

func (c *churn) memberNames(live []string) bool {
	for _, m := range c.router.Members() {
		if !slices.Contains(live, m.Name) {
			return false
		}
	}
	return true
}

// waitAcked waits until every star has an ack after since and returns the
// time of the last of those first acks. The writers' acks are the event
// here; the loop re-checks them on a short ticker (they come every few
// milliseconds), bounded by the test's deadline.
func (c *churn) waitAcked(what string, since time.Time) time.Time {
	c.t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := hang.After(c.t)
	for {
		c.mu.Lock()
		var last time.Time
		all := true
		for _, s := range c.stars {
			as := c.acks[s]
			i, _ := slices.BinarySearchFunc(as, since, func(a, t time.Time) int { return a.Compare(t) })
			if i == len(as) {
				all = false
				break
			}
			if as[i].After(last) {
				last = as[i]
			}
		}
		c.mu.Unlock()
		if all {
			return last
		}
		select {
		case <-tick.C:
		case <-deadline:
			c.t.Fatalf("%s: not every star acked an append since the fleet settled", what)
		}
	}
}

// window is the longest interval between two consecutive acks of star
// that overlaps [from, to].
func (c *churn) window(star string, from, to time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	as := c.acks[star]
	var w time.Duration
	for i := 1; i < len(as); i++ {
		if as[i].Before(from) || as[i-1].After(to) {
			continue
		}
		w = max(w, as[i].Sub(as[i-1]))
	}
	return w
}

// report logs the windows of the moved stars, by kind, and the gaps of
// the stars no event moved (the floor: the ack latency under this load),
// and asserts the bounds the configuration implies.
func (c *churn) report(events []event) {
	t := c.t
	byKind := map[string][]time.Duration{}
	handoffs := map[string][]time.Duration{}
	var floor []time.Duration
	c.mu.Lock()
	for _, h := range c.handoffs {
		for _, e := range events {
			if !h.placed.Before(e.start) && !h.placed.After(e.end) {
				handoffs[e.kind] = append(handoffs[e.kind], h.led.Sub(h.placed))
			}
		}
	}
	c.mu.Unlock()
	for _, e := range events {
		var ws []time.Duration
		for _, s := range c.stars {
			w := c.window(s, e.start, e.end)
			if slices.Contains(e.moved, s) {
				ws = append(ws, w)
				byKind[e.kind] = append(byKind[e.kind], w)
			} else {
				floor = append(floor, w)
			}
		}
		t.Logf("%-20s %-7s %2d stars moved: windows %s", e.what, e.kind, len(e.moved), quantiles(ws))
	}
	for _, k := range []string{"crash", "planned"} {
		t.Logf("unavailability per moved star, %-7s: %s (acks); placement change to lead, in etcd: %s", k, quantiles(byKind[k]), quantiles(handoffs[k]))
	}
	t.Logf("longest gap of the stars an event did not move (the floor): %s", quantiles(floor))

	// Safe bounds, never the goals: a crashed member's stars are led again
	// within its lease's TTL (etcd may expire it up to a second late),
	// the takeover (fence, recovery, open) and the route's update; a planned
	// move within the handoff wait (after which the new owner opens
	// anyway). The slack is for a busy 2-core machine under -race.
	const slack = 10 * time.Second
	if len(byKind["crash"]) == 0 {
		t.Error("the crash moved no star")
	}
	if m := slices.Max(append(byKind["crash"], 0)); m > churnTTL+time.Second+slack {
		t.Errorf("a star was unled for %v after the crash, over TTL %v + 1s + %v slack", m, churnTTL, slack)
	}
	if m := slices.Max(append(byKind["planned"], 0)); m > fleet.DefaultHandoffWait+slack {
		t.Errorf("a star was unavailable for %v in a planned move, over HandoffWait %v + %v slack", m, fleet.DefaultHandoffWait, slack)
	}
}

// quantiles formats p50/p99/max of ds.
func quantiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))].Round(time.Millisecond) }
	return fmt.Sprintf("n=%d p50=%v p99=%v max=%v", len(s), q(0.5), q(0.99), s[len(s)-1].Round(time.Millisecond))
}
