package work

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/loglet/internal/chaincore"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// chainRig is shared storage (K Mem buckets, one metastore) that the
// cores of successive owners of one chain run over, each driven in line
// with this package's workers on a virtual clock: no goroutine of the
// test's, no wall clock, so every run takes the same steps.
type chainRig struct {
	t       *testing.T
	ctx     context.Context
	now     time.Time
	buckets []*objstore.Mem
	faults  []*objstore.FaultStore // over buckets: what the cores use
	meta    metastore.Store
	cfg     chaincore.Config
	next    map[string]uint64 // each stream's acked tail
	owners  int
}

// rigProc is one owner's core.
type rigProc struct {
	r       *chainRig
	c       *chaincore.Core
	env     *Env
	opened  bool
	stopped bool
	// hold, if set, is asked about each request before it runs: false
	// keeps it back (the process died before doing it).
	hold func(chaincore.Request) bool
}

func newChainRig(t *testing.T, meta metastore.Store, tweak func(*chaincore.Config)) *chainRig {
	r := &chainRig{t: t, ctx: context.Background(), now: time.Unix(1000, 0), meta: meta, next: map[string]uint64{}}
	names := []string{"b0", "b1", "b2"}
	for i := range names {
		r.buckets = append(r.buckets, objstore.NewMem())
		r.faults = append(r.faults, objstore.WithFaults(r.buckets[i], uint64(i+1)))
	}
	// W is K: a write returns once every copy is there, so nothing lands
	// behind the test's back (a copy past W would, on its own goroutine).
	r.cfg = chaincore.Config{Star: "s", Class: chain.Standard, Buckets: names, W: 3, Window: 16,
		FlushDeadline: time.Millisecond, FlightBytes: 1 << 20, MaxBatchBytes: 1 << 20, Frames: chaincore.DefaultFrameLimits(4 << 20),
		CommitDeadline: time.Minute, StragglerTimeout: time.Minute, BacklogFlights: 1 << 20, BacklogBytes: 1 << 40,
		AbsorbInterval: 10 * time.Millisecond, AbsorbMaxSlots: 8}
	if tweak != nil {
		tweak(&r.cfg)
	}
	return r
}

func (r *chainRig) stores() []objstore.Store {
	out := make([]objstore.Store, len(r.faults))
	for i, f := range r.faults {
		out[i] = f
	}
	return out
}

// open starts the next owner's core and runs its opening (the first mint,
// or a takeover) to the end.
func (r *chainRig) open() *rigProc {
	r.owners++
	cfg := r.cfg
	cfg.Owner = fmt.Sprintf("p%d", r.owners)
	env := &Env{Star: cfg.Star, Class: cfg.Class, Owner: cfg.Owner, Stores: r.stores(), Names: cfg.Buckets, W: cfg.W,
		Meta: r.meta, Codec: envelope.CodecNone, Frames: cfg.Frames, Now: func() time.Time { return r.now },
		Retry: chain.RetryPolicy{MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond}}
	p := &rigProc{r: r, c: chaincore.New(cfg, r.now), env: env}
	p.until("opened", func() bool { return p.opened })
	return p
}

// step runs what the core asks for until it asks for nothing but a wake;
// it reports false when the process held a request back (it is dead).
func (p *rigProc) step() bool {
	for i := 0; i < 100000; i++ {
		rd := p.c.Ready()
		p.c.Advance(rd)
		if o := rd.Opened; o != nil {
			if o.Err != nil {
				p.r.t.Fatalf("%s: open: %v", p.env.Owner, o.Err)
			}
			p.opened = true
		}
		if rd.Dead != nil {
			p.r.t.Fatalf("%s: the chain stopped: %v", p.env.Owner, rd.Dead.Cause)
		}
		for _, b := range rd.Outcomes {
			if b.Fate.Kind != chaincore.Acked {
				p.r.t.Fatalf("%s: a batch failed: %v", p.env.Owner, b.Fate.Cause)
			}
		}
		p.stopped = p.stopped || rd.Stopped
		for _, req := range rd.Requests {
			if p.hold != nil && !p.hold(req) {
				return false
			}
			p.c.Step(p.r.now, p.env.Do(p.r.ctx, req))
		}
		if rd.Empty() {
			return true
		}
	}
	p.r.t.Fatalf("%s: the core never went quiet", p.env.Owner)
	return false
}

// until steps the core, and moves the clock to each wake it asks for,
// until cond holds.
func (p *rigProc) until(what string, cond func() bool) {
	p.r.t.Helper()
	for i := 0; i < 100000; i++ {
		if !p.step() {
			p.r.t.Fatalf("%s: died before %s", p.env.Owner, what)
		}
		if cond() {
			return
		}
		wake := p.c.Ready().WakeAt
		if wake.IsZero() {
			p.r.t.Fatalf("%s: stuck before %s", p.env.Owner, what)
		}
		p.r.now = maxTime(p.r.now, wake)
		p.c.Step(p.r.now, chaincore.Tick{})
	}
	p.r.t.Fatalf("%s: never %s", p.env.Owner, what)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// append admits one record to each stream, in flights of their own (the
// clock moves past the flush deadline after each), and waits for them to
// be acked.
func (p *rigProc) append(streams ...string) {
	p.r.t.Helper()
	for _, name := range streams {
		b := batch(p.c.Stream(name), 1, "x")
		if err := p.c.Admit(p.r.now, b, nil, nil, true); err != nil {
			p.r.t.Fatalf("%s: admit to %s: %v", p.env.Owner, name, err)
		}
		p.until("acked", func() bool { return b.Fate.Kind == chaincore.Acked })
		if b.Ack.Start != p.r.next[name] {
			p.r.t.Fatalf("%s: %s acked at %d, want %d", p.env.Owner, name, b.Ack.Start, p.r.next[name])
		}
		p.r.next[name]++
	}
}

// absorbed runs the core until everything released is absorbed.
func (p *rigProc) absorbed() {
	p.r.t.Helper()
	p.until("absorbed", func() bool {
		st := p.c.Stats(p.r.now)
		return st.Backlog.Flights == 0 && st.FlightIndexBytes == 0
	})
}

// close closes the core cleanly (the epoch sealed at its cut).
func (p *rigProc) close() {
	p.c.Close(p.r.now)
	p.until("stopped", func() bool { return p.stopped })
}

// checkpoint reads the chain's checkpoint.
func (r *chainRig) checkpoint() absorb.Checkpoint {
	r.t.Helper()
	cp, _, err := absorb.ReadCheckpoint(r.ctx, r.meta, r.cfg.Star, r.cfg.Class)
	if err != nil {
		r.t.Fatal(err)
	}
	return cp
}

// checkTails reads the tails the checkpoint names, as a reader does, and
// checks every stream's tail is its acked tail.
func (r *chainRig) checkTails(when string) {
	r.t.Helper()
	cp := r.checkpoint()
	t, err := absorb.ReadTails(r.ctx, r.stores(), cp.Tails)
	if err != nil {
		r.t.Fatalf("%s: the checkpoint's tails snapshot %s: %v", when, cp.Tails, err)
	}
	for name, next := range r.next {
		if got := t.Streams[name].Next; got != next {
			r.t.Fatalf("%s: tails snapshot %s has %s at %d, want %d", when, cp.Tails, name, got, next)
		}
	}
}

// manyStreams are enough streams that a full tails snapshot is large
// against a delta of a few: rounds then write deltas.
var manyStreams = func() []string {
	var out []string
	for i := 0; i < 150; i++ {
		out = append(out, fmt.Sprintf("a-stream-of-a-longer-name-%03d", i))
	}
	return out
}()

// snapshotKeys lists the tails snapshots in bucket i.
func (r *chainRig) snapshotKeys(i int) []string {
	r.t.Helper()
	keys, err := r.buckets[i].List(r.ctx, "snapshots/", "", 0)
	if err != nil {
		r.t.Fatal(err)
	}
	return keys
}

// TestHandoffsLeaveNoTailsSnapshotsBehind: owner after owner (each
// handing over with a clean Close, or dying; one of them unable to delete
// from a bucket all its life), the tails snapshots in every bucket are
// those the checkpoint accounts for (its snapshot, that one's base, and
// the doomed ones not yet deleted), and their number stays bounded.
// Before, the doomed list lived only in the leader's memory and a
// successor doomed only the checkpoint's snapshot and its base, so every
// handoff left some 17 superseded snapshots in every bucket for ever.
func TestHandoffsLeaveNoTailsSnapshotsBehind(t *testing.T) {
	r := newChainRig(t, metastore.NewMem(), nil)
	streams := []string{"a", "b", "c"}
	const handoffs, rounds = 6, 24
	const margin = 4 // far fewer than the rounds whose deletes were refused
	var p *rigProc
	var orphans []string // the snapshots of the rounds a crash stopped
	for h := 0; h <= handoffs; h++ {
		p = r.open()
		if h == 0 {
			p.append(manyStreams...) // a base deltas are small against
		}
		if h == 2 {
			// This owner's deletes fail in bucket 2: what it dooms stays
			// doomed, in the checkpoint too, for its successors to delete.
			r.faults[2].SetHook(func(call fault.Call) fault.Fault {
				op := call.Op
				if op == fault.Delete {
					return fault.Fault{Err: errors.New("test: delete refused")}
				}
				return fault.Fault{}
			})
		}
		for i := 0; i < rounds; i++ {
			p.append(streams[i%len(streams)])
			p.absorbed()
		}
		if h == 2 {
			r.faults[2].SetHook(nil)
			if n, m := len(r.snapshotKeys(2)), len(r.snapshotKeys(0)); n <= m+margin {
				t.Fatalf("deletes refused in bucket 2, yet it holds %d tails snapshots and bucket 0 %d", n, m)
			}
		}
		r.checkTails(fmt.Sprintf("owner %d", h+1))
		switch {
		case h == handoffs:
		case h%2 == 0:
			p.close()
		default:
			// Dies with a round of records released and not absorbed,
			// its snapshot written and its Commit never made: the
			// successor walks and absorbs them, and deletes that
			// snapshot, which no checkpoint names.
			p.append("a", "b")
			var orphan string
			p.hold = p.crashAfterSnapshot(&orphan)
			p.dies()
			orphans = append(orphans, orphan)
		}
	}
	// The checkpoint as stored (its doomed list read from the document).
	it, err := r.meta.Get(r.ctx, chain.CheckpointKey(r.cfg.Star, r.cfg.Class))
	if err != nil {
		t.Fatal(err)
	}
	var cp struct {
		Tails  string   `json:"tails"`
		Doomed []string `json:"doomed"`
	}
	if err := json.Unmarshal(it.Value, &cp); err != nil {
		t.Fatal(err)
	}
	base, err := absorb.ReadSnapshot(r.ctx, r.stores(), cp.Tails)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after %d handoffs: %d tails snapshots in bucket 0, %d doomed in the checkpoint, %d full snapshots by the last owner", handoffs, len(r.snapshotKeys(0)), len(cp.Doomed), p.c.Stats(r.now).TailsFullSnapshots)
	for _, k := range orphans {
		r.checkGone("a crashed round's tails snapshot", k)
	}
	known := append([]string{cp.Tails, base.Base}, cp.Doomed...)
	for i := range r.buckets {
		keys := r.snapshotKeys(i)
		for _, k := range keys {
			if !slices.Contains(known, k) {
				t.Errorf("bucket %d: tails snapshot %s is neither the checkpoint's, its base, nor doomed: left for ever", i, k)
			}
		}
		// The last owner's rounds deleted what it inherited, and what its
		// predecessors' crashed rounds wrote: what is left is what it
		// superseded in its last rounds (16 kept for readers, and the one
		// due at its next round), the current snapshot and its base.
		if len(keys) > 16+1+2 {
			t.Errorf("bucket %d: %d tails snapshots after %d handoffs (want at most 19): %s", i, len(keys), handoffs, strings.Join(keys, " "))
		}
	}
}

// tooLarge is a metastore whose Commits are refused as too large when
// they write a ref of more than maxExtents extents (as a request over
// etcd's size limit is), before anything is written.
type tooLarge struct {
	metastore.Store
	maxExtents int

	mu      sync.Mutex
	refused int
}

func (m *tooLarge) Commit(ctx context.Context, ops []metastore.Op) ([]metastore.Version, error) {
	for _, op := range ops {
		if !strings.HasPrefix(op.Key, "refs/") || op.Kind != metastore.OpPut {
			continue
		}
		if ref, err := absorb.DecodeRef(op.Value); err == nil && len(ref.Extents) > m.maxExtents {
			m.mu.Lock()
			m.refused++
			m.mu.Unlock()
			return nil, fmt.Errorf("test: ref %s of %d extents: %w", op.Key, len(ref.Extents), metastore.ErrTooLarge)
		}
	}
	return m.Store.Commit(ctx, ops)
}

// TestRefusedRoundReplannedWritesItsOwnSnapshot: a round the metastore
// refuses as too large is planned again in halves; the half that ends
// where the refused round did must write its own snapshot, not take the
// refused round's object (already written) for its own. Before, the key
// was the same, PutSnapshot took the object there as written, and when the
// refused round had been planned as a delta and its second half as the
// periodic full snapshot, the checkpoint named a delta the leader took for
// its base: every later delta built on a delta, and every tails read was
// corrupt until the next full snapshot (1,024 rounds later), falling back
// to ref scans. Refusals are made to land at every phase of the rotation
// of full snapshots; after each round the tails the checkpoint names read
// sound and exact, and a successor never rebuilds them from the refs.
func TestRefusedRoundReplannedWritesItsOwnSnapshot(t *testing.T) {
	const every = 4
	ms := &tooLarge{Store: metastore.NewMem(), maxExtents: 4}
	r := newChainRig(t, ms, func(c *chaincore.Config) {
		c.TailsFullEvery = every
		c.AbsorbInterval = time.Second // rounds wait for the test's flights
	})
	p := r.open()
	p.append(manyStreams...) // a base deltas are small against
	p.absorbed()
	for phase := 0; phase < 3*every; phase++ {
		// Rounds of one slot each, to move the rotation on...
		for i := 0; i < phase%every+1; i++ {
			p.append("a", "b")
			p.absorbed()
			r.checkTails(fmt.Sprintf("phase %d, round %d", phase, i))
		}
		// ...then 8 slots of stream a: one round of them is refused (a
		// ref of 8 extents), planned again as two of 4.
		before := ms.refused
		for i := 0; i < 8; i++ {
			p.append("a")
		}
		p.absorbed()
		if ms.refused == before {
			t.Fatalf("phase %d: no round refused", phase)
		}
		r.checkTails(fmt.Sprintf("phase %d, after the refused round", phase))
	}
	if ms.refused < 3*every {
		t.Fatalf("%d rounds refused, want one per phase", ms.refused)
	}
	st := p.c.Stats(r.now)
	t.Logf("%d rounds refused; %d rounds, %d full snapshots", ms.refused, st.AbsorbRounds, st.TailsFullSnapshots)
	p.close()
	q := r.open()
	if n := q.c.Stats(r.now).TailsRebuilds; n != 0 {
		t.Fatalf("the successor rebuilt the tails from the refs %d times: the snapshot was unreadable", n)
	}
	q.append("a", "b")
	q.absorbed()
	r.checkTails("the successor")
}
