package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/loglet/internal/chaincore"
	"github.com/flightlog/flightlog/loglet/internal/settlecore"
	"github.com/flightlog/flightlog/loglet/internal/work"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// The core-level simulation drives chain cores (loglet/internal/chaincore) directly:
// no goroutine of its own, no real clock. One loop picks the next thing to
// happen in virtual time — an I/O request completing (executed in line by
// loglet/internal/work against objstore.Mem buckets and a metastore.Mem), a
// core's wake-up, a producer's admit, a fault, a takeover, a crash — steps
// it into its core, and executes what the core's Ready asks. Every choice
// comes from one seeded generator in a fixed order, so a seed replays its
// exact trace every time (the trace hashes below compare equal), which the
// goroutine-based simulation (Run) cannot promise.
//
// Faults: request latency (log-normal), a zone down (its copies wait;
// other object-store work waits for it), the metastore down (its requests
// wait), ambiguous PUTs of flight copies (applied, reported failed: the
// writer recognises its nonce), metastore errors and applied-then-failed
// writes (resolved by re-reading), a live takeover (a second process opens
// while the first serves: a zombie), a crash (the leader stops dead; some
// of its in-flight PUTs land later). The checker: invariant 1 at every
// release (slot order; W copies stored), the seal checker, the observer's
// committed/dead flips and overwritten refs, bounds, and in the final
// state, walked from the bare buckets up to every recorded cut, each
// stream contiguous from 0 with no sequence number twice, every acked
// batch at its ack byte for byte, no not-committed batch anywhere.

// CoreOptions configure one run of the core-level simulation.
type CoreOptions struct {
	Seed   uint64
	Broken Broken
	// Trace, if set, receives the run's trace as text.
	Trace io.Writer
	// MetaErr, if positive, is the metastore's error rate (and half of
	// it its ambiguous rate) whatever the seed draws.
	MetaErr float64
	// Quiet bounds the quiet period at the end of the seed, in virtual
	// time (coresim_settle.go, quietPeriod): no new appends, faults off,
	// until settlement has caught up, then the quiet checker. 0: no quiet
	// period (the final process then settles with the seed's faults on).
	Quiet time.Duration
	// Soak, if positive, runs the seed's workload for this long in
	// virtual time as a soak (coresim_soak.go): streams active and idle by
	// turns, takeovers, trims, deletes and re-creates.
	Soak time.Duration

	// perturb wraps every bucket in a perturbedBucket: the replay tests
	// (coresim_test.go) shake goroutine scheduling inside executor calls.
	perturb bool
}

// DefaultCoreQuiet is the quiet period's bound TestCoreSim uses.
const DefaultCoreQuiet = 10 * time.Minute

// CoreResult is what one run found.
type CoreResult struct {
	Seed       uint64
	Plan       string
	Trace      uint64 // a hash of the whole trace: equal runs, equal hashes
	Steps      int
	SimTime    time.Duration
	Violations []string

	Batches, Acked, NotCommitted, Unknown int
	Orphaned                              int // admitted to a process that crashed before an outcome
	Halts, Takeovers, Crashes, Epochs     int
	// CleanSealMints: takeovers after a clean seal whose seal and mint were
	// one Commit (chaincore.SealMint) that applied.
	CleanSealMints int
	// Settlement (coresim_settle.go): passes run to their end, their
	// requests, settled objects at the end, repoints checked.
	SettlePasses, SettleSteps, SettledObjects, Repoints int
	// SplitRounds: absorb rounds too large for one metastore Commit (the
	// core committed them in steps); RefChunks: their chunks of refs
	// written; PendingReplays: split rounds a successor found pending and
	// replayed.
	SplitRounds, RefChunks, PendingReplays int
	// EarlyRounds: absorb rounds started before their interval because the
	// backlog was past its early mark (chaincore.Config.AbsorbEarlyPercent).
	EarlyRounds int
	// StragglerLeaks: flight copies a crashed process's late PUT landed
	// after settlement had deleted their slot: left for ever (a known
	// limit, counted).
	StragglerLeaks int
	// Producers (coresim_producers.go): retries answered as duplicates,
	// retries that waited for an attempt in flight, retries past the
	// window.
	Duplicates, InFlightRetries, PastWindow int
	// Fencing (coresim_fencing.go): fence batches issued, batches refused
	// for their token.
	Fences, FencedRefusals int
	// Soak (coresim_soak.go): streams deleted, trimmed and re-created, and
	// the most small settled objects an idle stream kept at the end.
	SoakDeletes, SoakTrims, SoakRecreates, SoakSmallMax int
}

// Failed reports whether the run found a violation.
func (r *CoreResult) Failed() bool { return len(r.Violations) > 0 }

type corePlan struct {
	class          chain.Class
	k, w           int
	window         int
	flight         int64
	flush, commit  time.Duration
	backlog        int
	absorbEvery    time.Duration
	maxSlots       int
	earlyPercent   int // chaincore.Config.AbsorbEarlyPercent (0: rounds on the interval only)
	streams        int
	ops            int
	gap            time.Duration // mean time between admits
	putMedian      time.Duration
	metaMedian     time.Duration
	ambiguousPuts  float64
	metaErr        float64
	metaAmbig      float64
	scenario       string // "none", "takeover", "crash"
	eventAt        time.Duration
	zombieFor      time.Duration
	zoneDowns      []coreWindow
	downZone       int
	metaDowns      []coreWindow
	commitLimit    int
	matchEvery     int // every n-th admit carries MatchSeqNum
	lateLandChance float64
}

type coreWindow struct{ at, dur time.Duration }

func drawCorePlan(o CoreOptions) corePlan {
	r := rand.New(rand.NewPCG(o.Seed, 0xc0de))
	p := corePlan{class: chain.Express, k: 3, w: 2}
	if r.IntN(3) == 0 {
		p.class, p.k, p.w = chain.Standard, 1, 1
	}
	p.window = 1 + r.IntN(8)
	p.flight = []int64{64, 512, 4096}[r.IntN(3)]
	p.flush = time.Duration(1+r.IntN(20)) * time.Millisecond
	p.commit = time.Duration(200+r.IntN(1800)) * time.Millisecond
	p.backlog = p.window + r.IntN(2*p.window+1)
	p.absorbEvery = time.Duration(r.IntN(50)) * time.Millisecond
	p.maxSlots = 1 + r.IntN(8)
	p.streams = 2 + r.IntN(4)
	p.ops = 60 + r.IntN(150)
	p.gap = time.Duration(500+r.IntN(9500)) * time.Microsecond
	p.putMedian = time.Duration(500+r.IntN(9500)) * time.Microsecond
	p.metaMedian = time.Duration(200+r.IntN(4800)) * time.Microsecond
	if r.IntN(2) == 0 {
		p.ambiguousPuts = r.Float64() * 0.05
	}
	if r.IntN(2) == 0 {
		p.metaErr, p.metaAmbig = r.Float64()*0.03, r.Float64()*0.03
	}
	p.scenario = []string{"none", "takeover", "crash"}[r.IntN(3)]
	p.eventAt = time.Duration(100+r.IntN(800)) * time.Millisecond
	p.zombieFor = time.Duration(r.IntN(500)) * time.Millisecond
	if p.k == 3 {
		p.downZone = r.IntN(3)
		for n := r.IntN(3); n > 0; n-- {
			p.zoneDowns = append(p.zoneDowns, coreWindow{time.Duration(r.IntN(1500)) * time.Millisecond, time.Duration(50+r.IntN(1500)) * time.Millisecond})
		}
	}
	for n := r.IntN(2); n > 0; n-- {
		p.metaDowns = append(p.metaDowns, coreWindow{time.Duration(r.IntN(1500)) * time.Millisecond, time.Duration(50+r.IntN(1000)) * time.Millisecond})
	}
	if r.IntN(4) == 0 {
		// At least what a settle pass needs, so that every seed settles
		// (a real star refuses fewer than metastore.MinCommitOps anyway).
		p.commitLimit = max(2+r.IntN(4), settlecore.MinCommitOps)
	}
	if o.Broken.CommitLimit > 0 {
		p.commitLimit = o.Broken.CommitLimit
	}
	if o.MetaErr > 0 {
		p.metaErr, p.metaAmbig = o.MetaErr, o.MetaErr/2
	}
	p.matchEvery = 3 + r.IntN(5)
	p.lateLandChance = r.Float64()
	drawAbsorbEarly(o.Seed, &p)
	return p
}

// drawAbsorbEarly draws the absorb's early trigger from a stream of its
// own, so the draws above (and the seeds that walk them) stay as they
// were: a third of the seeds keep rounds on the interval only, the others
// start a round early at 25-100% of the backlog's bound, and a quarter of
// those have a tight backlog (the window) and a slow interval, so that
// early rounds, not the interval, drain it.
func drawAbsorbEarly(seed uint64, p *corePlan) {
	r := rand.New(rand.NewPCG(seed, 0xea71))
	if r.IntN(3) == 0 {
		return
	}
	p.earlyPercent = 25 + r.IntN(76)
	if r.IntN(4) == 0 {
		p.backlog = p.window
		p.absorbEvery = time.Duration(100+r.IntN(400)) * time.Millisecond
	}
}

func (p corePlan) String() string {
	return fmt.Sprintf("%s K=%d W=%d; window %d, flight %dB, flush %v, commit %v, backlog %d, absorb every %v max %d early at %d%%; %d streams, %d ops every ~%v; put median %v, meta median %v; ambiguous puts %.3f, meta errors %.3f ambiguous %.3f; %s at %v (zombie for %v); zone %d down %v; meta down %v; commit limit %d",
		p.class, p.k, p.w, p.window, p.flight, p.flush, p.commit, p.backlog, p.absorbEvery, p.maxSlots, p.earlyPercent, p.streams, p.ops, p.gap, p.putMedian, p.metaMedian,
		p.ambiguousPuts, p.metaErr, p.metaAmbig, p.scenario, p.eventAt, p.zombieFor, p.downZone, p.zoneDowns, p.metaDowns, p.commitLimit)
}

// coreWorld is one run: the shared stores, the processes, the clock.
type coreWorld struct {
	o     CoreOptions
	p     corePlan
	rng   *rand.Rand
	res   *CoreResult
	start time.Time
	now   time.Time
	trace xxhashDigest
	out   io.Writer
	bad   []string
	// guard gives up a call that reads one key past walkGiveUpReads
	// times (a walk of a slot with no good copy would retry for ever).
	guard readGuard

	w       *world // what the observer needs (mems, quorum)
	obs     *observer
	mems    []*objstore.Mem
	buckets []objstore.Store // observed, and broken if planted
	meta    *metastore.Mem
	metaBkt metastore.Store

	procs          []*coreProc
	leader         *coreProc // where admits go
	takeAt         time.Time // when the last takeover's process opened
	successor      *coreProc // a takeover's process, until it opens
	successorTries int

	zoneDown bool
	metaDown bool
	issued   uint64 // request ids, in issue order
	late     []*coreReq

	streams []string
	batches []*coreBatch
	ops     int

	soak        *coreSoak            // the soak's workload (coresim_soak.go), or nil
	sp          coreSettlePlan       // settlement (coresim_settle.go)
	settled     []objstore.Store     // the settled bucket set
	settledMems []*objstore.Mem      // its buckets, when not the chain's own
	lateLanded  map[string]time.Time // slot key → when a crashed process's late copy landed
	deletedAt   map[string]time.Time // slot key → when settlement deleted it
	quiet       bool                 // the quiet period has begun: faults off

	// Producers (coresim_producers.go).
	producerSeq map[int]uint64
	fencing     coreFencing // coresim_fencing.go
	logicals    []*coreLogical
	byBatch     map[*chaincore.Batch]*coreBatch
	finalAdmits []*coreLogical
	finalPhase  bool
	walked      map[string][]envelope.Record
}

// xxhashDigest hashes the trace as it is written.
type xxhashDigest = *xxhash.Digest

// coreProc is one leader process: its core and the requests it has out.
type coreProc struct {
	n       int
	owner   string
	core    *chaincore.Core
	env     *work.Env // every request but PutCopy
	putEnv  *work.Env // PutCopy: the buckets with ambiguous PUTs
	pending []*coreReq
	opened  bool
	openErr error
	stopped bool
	crashed bool
	closing bool
	lastRel [2]uint64 // the last released (epoch, slot + 1)
	streams map[string]*chaincore.Stream
	// metaFaults and putFaults inject the seed's metastore errors and
	// ambiguous PUTs (the quiet period turns them off).
	metaFaults *metastore.FaultStore
	putFaults  []*objstore.FaultStore
}

type coreReq struct {
	p         *coreProc
	req       chaincore.Request
	settle    *coreSettle        // a settle pass's request (req nil)
	sreq      settlecore.Request // it (nil: the pass ended; step it in)
	id        uint64
	due       time.Time
	cancelled bool
}

type coreBatch struct {
	proc   *coreProc
	stream string
	b      *chaincore.Batch
	recs   []envelope.Record
	lg     *coreLogical // its producer batch
}

// RunCore runs one seed of the core-level simulation.
func RunCore(o CoreOptions) *CoreResult {
	p := drawCorePlan(o)
	sp := drawCoreSettlePlan(o.Seed, p)
	cw := &coreWorld{o: o, p: p, sp: sp, rng: rand.New(rand.NewPCG(o.Seed, 0x5eed)), res: &CoreResult{Seed: o.Seed, Plan: p.String() + "; " + sp.String()},
		trace: xxhash.New(), out: o.Trace, start: time.Unix(1_700_000_000, 0)}
	cw.now = cw.start
	cw.build()
	if o.Soak > 0 {
		cw.p.scenario = "takeover" // takeovers come every few hours
		cw.soak = &coreSoak{rng: rand.New(rand.NewPCG(o.Seed, 0x50a4)), streams: map[string]*soakStream{}}
		for _, id := range cw.streams {
			cw.soak.add(id, id, 0, cw.now)
		}
		cw.res.Plan += fmt.Sprintf("; soak of %v", o.Soak)
	}
	cw.runAll()
	cw.res.Trace = cw.trace.Sum64()
	cw.res.SimTime = cw.now.Sub(cw.start)
	cw.res.Violations = append(cw.res.Violations, cw.bad...)
	return cw.res
}

func (cw *coreWorld) build() {
	p := cw.p
	cw.w = &world{p: plan{stdK: p.k}}
	cw.obs = newObserver(cw.w)
	cw.w.obs = cw.obs
	for i := 0; i < p.k; i++ {
		m := objstore.NewMem()
		var s objstore.Store = observedBucket{m, cw.obs}
		if cw.o.Broken.OverwritingPut {
			s = overwritingBucket{s}
		}
		if cw.o.Broken.LostPut > 0 {
			s = &losingBucket{Store: s, draws: fault.NewDraws(cw.o.Seed ^ uint64(i)), p: cw.o.Broken.LostPut}
		}
		cw.mems = append(cw.mems, m)
		cw.w.mems[p.class] = append(cw.w.mems[p.class], m)
		cw.buckets = append(cw.buckets, s)
	}
	if cw.o.perturb {
		for i := range cw.buckets {
			cw.buckets[i] = perturbedBucket{cw.buckets[i]}
		}
	}
	if cw.o.Broken.MirrorFence {
		for i := range cw.buckets {
			cw.buckets[i] = mirroringBucket{Store: cw.buckets[i], mems: cw.mems, i: i, mu: &cw.w.mirrorMu, mirror: map[string][]byte{}}
		}
	}
	cw.meta = metastore.NewMem()
	cw.w.meta = cw.meta
	cw.metaBkt = observedMeta{cw.meta, cw.obs}
	if cw.o.Broken.CommitIgnoresExpect {
		cw.metaBkt = blindCommitStore{cw.metaBkt}
	}
	if p.commitLimit > 0 {
		cw.metaBkt = limitedMeta{Store: cw.metaBkt, n: p.commitLimit}
	}
	for i := 0; i < p.streams; i++ {
		cw.streams = append(cw.streams, fmt.Sprintf("st%d", i))
	}
}

// tracef adds a line to the trace.
func (cw *coreWorld) tracef(format string, args ...any) {
	line := fmt.Sprintf("%9.3fms ", float64(cw.now.Sub(cw.start))/float64(time.Millisecond)) + fmt.Sprintf(format, args...) + "\n"
	_, _ = cw.trace.WriteString(line)
	if cw.out != nil {
		_, _ = io.WriteString(cw.out, line)
	}
}

func (cw *coreWorld) violation(format string, args ...any) {
	if len(cw.bad) < 20 {
		cw.bad = append(cw.bad, fmt.Sprintf(format, args...))
	}
}

// open starts a new process: its core begins opening the chain.
func (cw *coreWorld) open() *coreProc {
	n := len(cw.procs)
	owner := fmt.Sprintf("proc-%d", n)
	mf := metastore.WithFaults(sealWatch{Store: cw.metaBkt, o: cw.obs, writer: owner}, cw.o.Seed*1000+uint64(n))
	pr := &coreProc{n: n, owner: owner, streams: map[string]*chaincore.Stream{}, metaFaults: mf}
	mf.SetErrorRate(cw.p.metaErr)
	mf.SetAmbiguousRate(cw.p.metaAmbig)
	retry := chain.RetryPolicy{MinBackoff: time.Microsecond, MaxBackoff: time.Microsecond, Jitter: fixedJitter}
	names := make([]string, cw.p.k)
	putBuckets := make([]objstore.Store, cw.p.k)
	for i := range names {
		names[i] = fmt.Sprintf("zone-%d", i)
		f := objstore.WithFaults(cw.buckets[i], cw.o.Seed*1000+uint64(n*10+i))
		f.SetAmbiguousRate(cw.p.ambiguousPuts, fault.Put)
		putBuckets[i] = f
		pr.putFaults = append(pr.putFaults, f)
	}
	if cw.quiet {
		pr.faultsOff()
	}
	// FenceParallel 1: a fence decides its slots one at a time and never
	// poisons past its cut. With more, the look-ahead's poisons past the
	// cut land or not as its goroutines race the cancel, and a zombie's
	// later copy there finds poison ("foreign") or not ("ours"): a seed
	// would not replay.
	pr.env = &work.Env{Star: starName, Class: cw.p.class, Owner: owner, Stores: guardStores(cw.buckets, &cw.guard), Names: names, W: cw.p.w, Meta: mf,
		Codec: envelope.CodecNone, Retry: retry, Now: func() time.Time { return cw.now }, FenceParallel: 1}
	pr.putEnv = &work.Env{Star: starName, Class: cw.p.class, Owner: owner, Stores: putBuckets, Names: names, W: cw.p.w, Meta: mf,
		Codec: envelope.CodecNone, Retry: retry, Now: func() time.Time { return cw.now }}
	cfg := chaincore.Config{
		Star: starName, Class: cw.p.class, Owner: owner, Buckets: names, W: cw.p.w, Window: cw.p.window,
		FlushDeadline: cw.p.flush, FlightBytes: cw.p.flight, MaxBatchBytes: 512, CommitDeadline: cw.p.commit, StragglerTimeout: 3 * cw.p.commit,
		BacklogFlights: cw.p.backlog, BacklogBytes: 1 << 20, AbsorbInterval: cw.p.absorbEvery, AbsorbMaxSlots: cw.p.maxSlots,
		AbsorbEarlyPercent: cw.p.earlyPercent, SealCheckInterval: 200 * time.Millisecond,
	}
	cw.settleConfigure(pr, &cfg)
	pr.core = chaincore.New(cfg, cw.now)
	cw.procs = append(cw.procs, pr)
	cw.tracef("p%d opens", n)
	cw.drain(pr)
	return pr
}

// drain executes pr's Ready until it asks for nothing more.
func (cw *coreWorld) drain(pr *coreProc) {
	for !pr.stopped && !pr.crashed {
		rd := pr.core.Ready()
		pr.core.Advance(rd)
		if rd.Empty() {
			return
		}
		cw.execute(pr, rd)
	}
}

// execute carries out one Ready, as the shell would: cancels, requests (as
// pending requests with a drawn latency), outcomes, logs.
func (cw *coreWorld) execute(pr *coreProc, rd chaincore.Ready) {
	for _, id := range rd.Cancels {
		cw.tracef("p%d cancel e=%d s=%d", pr.n, id.Epoch, id.Slot)
		for _, q := range pr.pending {
			if pc, ok := q.req.(chaincore.PutCopy); ok && pc.Upload == id {
				q.cancelled = true
			}
		}
	}
	for _, r := range rd.Requests {
		if s, ok := r.(chaincore.Settle); ok {
			cw.startSettle(pr, s) // its requests, one by one
			continue
		}
		cw.issued++
		q := &coreReq{p: pr, req: r, id: cw.issued, due: cw.now.Add(cw.latency(r))}
		pr.pending = append(pr.pending, q)
		cw.tracef("p%d req#%d %s due +%v", pr.n, q.id, describe(r), q.due.Sub(cw.now))
	}
	for _, b := range rd.Outcomes {
		if b.Fate.Kind == chaincore.Acked {
			cw.tracef("p%d ack %s[%d,%d)", pr.n, b.Stream.Name(), b.Start, b.End())
		} else {
			cw.tracef("p%d %s %s[%d,%d)", pr.n, b.Fate.Kind, b.Stream.Name(), b.Start, b.End())
		}
		if !cw.finalPhase {
			cw.producerOutcome(pr, b)
		}
	}
	for _, s := range rd.Slots {
		cw.checkRelease(pr, s.Epoch, s.Slot)
	}
	for _, lg := range rd.Logs {
		if lg.Level >= slog.LevelInfo {
			cw.tracef("p%d log %s", pr.n, lg.Msg)
		}
	}
	if o := rd.Opened; o != nil {
		pr.opened, pr.openErr = o.Err == nil, o.Err
		cw.tracef("p%d opened epoch=%d err=%v", pr.n, o.Epoch, o.Err)
	}
	if rd.Dead != nil {
		cw.tracef("p%d dead: %s", pr.n, rd.Dead.Kind)
	}
	if rd.Stopped {
		pr.stopped = true
		cw.tracef("p%d stopped (%v)", pr.n, pr.core.CloseError())
		pr.pending = nil
	}
	cw.checkBounds(pr)
}

// latency draws how long a request takes.
func (cw *coreWorld) latency(r chaincore.Request) time.Duration {
	ln := func(median time.Duration) time.Duration {
		return time.Duration(float64(median) * math.Exp(min(max(cw.rng.NormFloat64(), -4), 4)*0.8))
	}
	switch r.(type) {
	case chaincore.Render:
		return time.Duration(20+cw.rng.IntN(200)) * time.Microsecond
	case chaincore.PutCopy, chaincore.Probe, chaincore.ReadTails, chaincore.Walk, chaincore.PutSnapshot, chaincore.DropSnapshots:
		return ln(cw.p.putMedian)
	case chaincore.Fence:
		return 3 * ln(cw.p.putMedian)
	}
	return ln(cw.p.metaMedian)
}

// checkRelease checks invariant 1 as a slot releases: in order (an epoch's
// first slot after any slot of an earlier epoch), and W copies of its
// epoch's flight of one nonce stored.
func (cw *coreWorld) checkRelease(pr *coreProc, epoch, slot uint64) {
	cw.tracef("p%d released e=%d s=%d", pr.n, epoch, slot)
	if last := pr.lastRel; last != [2]uint64{} && !(epoch == last[0] && slot == last[1]) && !(epoch > last[0] && slot == 0) {
		cw.violation("p%d released %d/%d after %d/%d (invariant 1: slot order)", pr.n, epoch, slot, last[0], last[1]-1)
	}
	pr.lastRel = [2]uint64{epoch, slot + 1}
	key := chain.SlotKey(starName, cw.p.class, epoch, slot)
	nonces := map[envelope.Nonce]int{}
	best := 0
	for _, m := range cw.mems {
		head, err := m.Get(context.Background(), key, 0, envelope.EnvelopeSize)
		if err != nil {
			continue
		}
		if env, err := envelope.ParseEnvelope(head); err == nil && env.Kind == envelope.KindFlight && env.Epoch == epoch && env.Slot == slot {
			nonces[env.Nonce]++
			best = max(best, nonces[env.Nonce])
		}
	}
	if best < cw.p.w {
		cw.violation("p%d released %d/%d with %d copies < W=%d (invariant 1)", pr.n, epoch, slot, best, cw.p.w)
	}
}

func (cw *coreWorld) checkBounds(pr *coreProc) {
	st := pr.core.Bounds()
	if st.WindowInFlight > st.WindowSize {
		cw.violation("p%d: %d slots in flight over a window of %d", pr.n, st.WindowInFlight, st.WindowSize)
	}
	if st.BacklogFlights > st.BacklogMaxFlights && !pr.closing {
		cw.violation("p%d: backlog of %d flights over its bound %d", pr.n, st.BacklogFlights, st.BacklogMaxFlights)
	}
}

// runAll is the run: the workload with its faults and scenario, then
// healing, a clean close of every live process, a final takeover by a
// fresh process, and the checks.
func (cw *coreWorld) runAll() {
	cw.leader = cw.open()
	if !cw.runUntil(func() bool { return cw.leader.opened || cw.leader.stopped }, time.Minute) || !cw.leader.opened {
		cw.violation("the first process did not open: %v", cw.leader.openErr)
		return
	}
	// The workload: admits at drawn times; the scenario's event; faults.
	nextAdmit := cw.now
	var eventDone bool
	type toggle struct {
		at   time.Time
		zone bool
		down bool
	}
	var toggles []toggle
	for _, w := range cw.p.zoneDowns {
		toggles = append(toggles, toggle{cw.now.Add(w.at), true, true}, toggle{cw.now.Add(w.at + w.dur), true, false})
	}
	for _, w := range cw.p.metaDowns {
		toggles = append(toggles, toggle{cw.now.Add(w.at), false, true}, toggle{cw.now.Add(w.at + w.dur), false, false})
	}
	slices.SortStableFunc(toggles, func(a, b toggle) int { return a.at.Compare(b.at) })
	eventAt := cw.now.Add(cw.p.eventAt)
	if cw.soak != nil {
		cw.soakLoop()
	}
	for cw.soak == nil && (cw.ops < cw.p.ops || len(toggles) > 0 || (!eventDone && cw.p.scenario != "none") || cw.successor != nil || cw.nextRetry() != nil) {
		// The workload's next action, against the next core event.
		next, what := time.Time{}, ""
		consider := func(t time.Time, w string) {
			if next.IsZero() || t.Before(next) {
				next, what = t, w
			}
		}
		if cw.ops < cw.p.ops {
			consider(nextAdmit, "admit")
		}
		if len(toggles) > 0 {
			consider(toggles[0].at, "toggle")
		}
		if !eventDone && cw.p.scenario != "none" {
			consider(eventAt, "event")
		}
		lg := cw.nextRetry()
		if lg != nil {
			consider(lg.retryAt, "retry")
		}
		if next.IsZero() {
			// Only a successor's opening is left: let it run.
			if cw.now.Sub(cw.start) > time.Hour {
				cw.violation("a successor did not open within a virtual hour (at step %q)", cw.successor.core.Stats(cw.now).SuccessionStep)
				return
			}
			consider(cw.now.Add(100*time.Millisecond), "wait")
		}
		if !cw.stepCoresUntil(next) {
			return
		}
		cw.watchSuccessor()
		switch what {
		case "admit":
			cw.admit()
			nextAdmit = cw.now.Add(time.Duration(cw.rng.ExpFloat64() * float64(cw.p.gap)))
		case "toggle":
			t := toggles[0]
			toggles = toggles[1:]
			if t.zone {
				cw.zoneDown = t.down
				cw.tracef("zone %d down=%v", cw.p.downZone, t.down)
			} else {
				cw.metaDown = t.down
				cw.tracef("metastore down=%v", t.down)
			}
		case "event":
			eventDone = true
			cw.scenarioEvent()
		case "retry":
			cw.retry(lg, cw.leader, false)
		}
	}
	cw.zoneDown, cw.metaDown = false, false
	cw.tracef("healed")
	// Let everything settle, then close every live process cleanly.
	cw.stepCoresUntil(cw.now.Add(30 * time.Second))
	cw.quietPeriod()
	for _, pr := range cw.procs {
		if !pr.stopped && !pr.crashed && pr.opened {
			pr.closing = true
			pr.core.Close(cw.now)
			cw.tracef("p%d close", pr.n)
			cw.drain(pr)
		}
	}
	if !cw.runUntil(cw.allStopped, 2*time.Minute) {
		for _, pr := range cw.procs {
			if !pr.stopped && !pr.crashed {
				cw.violation("p%d: Close did not finish within 2 virtual minutes (at %s)", pr.n, pr.core.Stats(cw.now).SuccessionStep)
				pr.core.Abort(cw.now, errors.New("sim: close bound"))
				cw.drain(pr)
			}
		}
	}
	// A fresh process takes the chain over: after the clean close it finds
	// the seal and serves at once.
	final := cw.open()
	if !cw.runUntil(func() bool { return final.opened || final.stopped }, time.Minute) || !final.opened {
		cw.violation("the final process did not open: %v", final.openErr)
		return
	}
	cw.settleFinal(final)
	cw.checkFinal(final)
	cw.finalPhase = true
	cw.retryAllFinal(final)
	cw.checkProducers(cw.walked)
	cw.checkFencing(cw.walked)
	final.core.Close(cw.now)
	final.closing = true
	cw.drain(final)
	if !cw.runUntil(func() bool { return final.stopped }, time.Minute) {
		cw.violation("the final process did not close")
	}
	cw.summarize()
}

func (cw *coreWorld) allStopped() bool {
	for _, pr := range cw.procs {
		if !pr.stopped && !pr.crashed {
			return false
		}
	}
	return true
}

// runUntil steps the cores until cond holds or limit of virtual time has
// passed with nothing left to do.
func (cw *coreWorld) runUntil(cond func() bool, limit time.Duration) bool {
	end := cw.now.Add(limit)
	for !cond() {
		if !cw.stepOne(end) {
			return cond()
		}
	}
	return true
}

// stepCoresUntil steps every core event due before t, then moves the clock
// to t. It reports false if the run must stop (too many steps).
func (cw *coreWorld) stepCoresUntil(t time.Time) bool {
	for cw.stepOne(t) {
	}
	if t.After(cw.now) {
		cw.now = t
	}
	limit := 2_000_000
	if cw.soak != nil {
		limit = 100_000_000
	}
	return cw.res.Steps < limit
}

// stepOne executes the earliest core event due at or before limit: a
// request completing, a core's wake-up, or a crashed process's late PUT
// landing. Ties go to requests before wake-ups, then to the earlier issued
// request or the lower process. It reports false when nothing is due.
func (cw *coreWorld) stepOne(limit time.Time) bool {
	type cand struct {
		at   time.Time
		kind int // 0: a request, 1: a wake-up
		id   uint64
		q    *coreReq
		wake *coreProc
	}
	var best *cand
	better := func(c cand) {
		if c.at.After(limit) {
			return
		}
		if best == nil || c.at.Before(best.at) || (c.at.Equal(best.at) && (c.kind < best.kind || (c.kind == best.kind && c.id < best.id))) {
			best = &c
		}
	}
	due := func(q *coreReq) time.Time {
		if q.due.Before(cw.now) {
			return cw.now
		}
		return q.due
	}
	for _, pr := range cw.procs {
		if pr.stopped || pr.crashed {
			continue
		}
		for _, q := range pr.pending {
			if cw.executable(q) {
				better(cand{at: due(q), kind: 0, id: q.id, q: q})
			}
		}
		if w := pr.core.Ready().WakeAt; !w.IsZero() {
			better(cand{at: w, kind: 1, id: uint64(pr.n), wake: pr})
		}
	}
	for _, q := range cw.late {
		if cw.executable(q) {
			better(cand{at: due(q), kind: 0, id: q.id, q: q})
		}
	}
	if best == nil {
		return false
	}
	if best.at.After(cw.now) {
		cw.now = best.at
	}
	cw.res.Steps++
	if best.wake != nil {
		cw.tracef("p%d tick", best.wake.n)
		best.wake.core.Step(cw.now, chaincore.Tick{})
		cw.drain(best.wake)
		return true
	}
	cw.complete(best.q)
	return true
}

// executable reports whether a request can complete now: a copy needs its
// zone up (unless cancelled: then it fails now), other object-store work
// every zone, metastore work the metastore.
func (cw *coreWorld) executable(q *coreReq) bool {
	if q.settle != nil {
		return q.sreq == nil || cw.settleExecutable(q)
	}
	switch r := q.req.(type) {
	case chaincore.Render:
		return true
	case chaincore.PutCopy:
		return q.cancelled || !(cw.zoneDown && r.Bucket == cw.p.downZone)
	case chaincore.Fence, chaincore.Probe, chaincore.Walk, chaincore.ReadTails, chaincore.PutSnapshot, chaincore.DropSnapshots:
		return !cw.zoneDown
	}
	return !cw.metaDown
}

// complete executes q and steps its event into its core (a late PUT of a
// crashed process only lands).
func (cw *coreWorld) complete(q *coreReq) {
	pr := q.p
	if i := slices.Index(cw.late, q); i >= 0 {
		cw.late = slices.Delete(cw.late, i, i+1)
		ev := pr.putEnv.Do(context.Background(), q.req)
		cw.noteLate(q)
		cw.tracef("p%d (crashed) late req#%d %s", pr.n, q.id, describeEvent(ev))
		return
	}
	pr.pending = slices.DeleteFunc(pr.pending, func(x *coreReq) bool { return x == q })
	if q.settle != nil {
		cw.completeSettle(q)
		return
	}
	var ev chaincore.Event
	if pc, ok := q.req.(chaincore.PutCopy); ok && q.cancelled {
		ev = chaincore.CopyDone{Upload: pc.Upload, Result: chain.CopyResult{Bucket: pc.Bucket, Status: chain.CopyFailed, Err: context.Canceled}}
	} else if _, ok := q.req.(chaincore.PutCopy); ok {
		ev = pr.putEnv.Do(context.Background(), q.req)
	} else {
		ev = pr.env.Do(cw.guard.begin(context.Background()), q.req)
		cw.guard.end()
	}
	cw.tracef("p%d done#%d %s", pr.n, q.id, describeEvent(ev))
	cw.noteSplit(q.req, ev)
	pr.core.Step(cw.now, ev)
	cw.drain(pr)
}

// noteSplit counts the steps of split rounds.
func (cw *coreWorld) noteSplit(req chaincore.Request, ev chaincore.Event) {
	switch ev := ev.(type) {
	case chaincore.RoundCommitted:
		if ev.Split != nil {
			cw.res.SplitRounds++
			if p := ev.Held.Checkpoint.Pending; p != nil && *p == ev.Round {
				cw.res.PendingReplays++
			}
		}
	case chaincore.RefsCommitted:
		if ev.Err == nil {
			cw.res.RefChunks++
		}
	case chaincore.SealMinted:
		if ev.Err == nil {
			cw.res.CleanSealMints++
		}
	}
}

// admit submits one batch to the process producers use now.
func (cw *coreWorld) admit() {
	pr := cw.leader
	if cw.p.scenario == "takeover" && len(cw.procs) > 1 && cw.rng.IntN(2) == 0 && cw.now.Sub(cw.takeAt) < cw.p.zombieFor {
		pr = cw.procs[len(cw.procs)-2] // a producer still on the zombie
	}
	cw.ops++
	if pr.stopped || pr.crashed || !pr.opened {
		return
	}
	name := cw.streams[cw.rng.IntN(len(cw.streams))]
	if cw.soak != nil && cw.soak.pick != "" {
		name = cw.soak.pick
	}
	st := pr.streams[name]
	if st == nil {
		st = pr.core.Stream(name)
		pr.streams[name] = st
	}
	n := 1 + cw.rng.IntN(4)
	recs := make([]envelope.Record, n)
	var payload []byte
	ts := cw.now.UnixMilli()
	fencing, tag := cw.fencingFor(name)
	for i := range recs {
		body := tag + fmt.Sprintf("p%d.op%d.r%d|%s", pr.n, cw.ops, i, strings.Repeat("x", cw.rng.IntN(40)))
		recs[i] = envelope.Record{Timestamp: ts, Body: []byte(body)}
		payload = envelope.AppendRecord(payload, recs[i])
	}
	lg := cw.newLogical(name, recs, append([]byte(nil), payload...), ts)
	lg.fencing = fencing
	cw.noteFence(lg)
	b := &chaincore.Batch{Stream: st, Count: n, Payload: payload, Charge: int64(len(payload)), Submitted: cw.now, MinTS: ts, MaxTS: ts, Producer: lg.id, Fencing: fencing}
	if cw.ops%3 == 0 {
		// As the shell does for a large batch: compressed at admission, a
		// frame of its own (stored as is when compressing does not pay).
		// Decided by the op count, not the seed's draws, so every seed's
		// other choices are what they were.
		stored, used := envelope.CompressFrame(nil, payload, []envelope.Codec{envelope.CodecS2, envelope.CodecZstd}[cw.ops/3%2])
		b.Stored, b.StoredCodec, b.StoredCRC = stored, used, envelope.Checksum(stored)
	}
	var match *uint64
	if cw.ops%cw.p.matchEvery == 0 {
		m := st.Assigned().Seq
		if cw.rng.IntN(4) == 0 {
			m++ // a miss
		}
		match = &m
	}
	err := pr.core.Admit(cw.now, b, recs, match, true)
	if err != nil {
		cw.tracef("p%d admit %s n=%d refused: %v", pr.n, name, n, err)
		var me *chaincore.MismatchError
		var fe *chaincore.FencedError
		if errors.As(err, &fe) {
			lg.fenced = true
			cw.res.FencedRefusals++
			return
		}
		if match != nil && !errors.As(err, &me) && pr.core.Dead() == nil && !pr.closing {
			cw.violation("p%d: admit refused with %v", pr.n, err)
		}
		if match == nil {
			cw.scheduleRetry(lg, time.Duration(20+cw.rng.IntN(300))*time.Millisecond)
		}
		return
	}
	lg.attempts++
	cw.addBatch(&coreBatch{proc: pr, stream: name, b: b, recs: recs, lg: lg})
	if cw.rng.IntN(8) == 0 { // its producer gives up waiting, and retries
		cw.scheduleRetry(lg, time.Duration(cw.rng.IntN(50))*time.Millisecond)
	}
	cw.tracef("p%d admit %s[%d,%d)", pr.n, name, b.Start, b.End())
	cw.drain(pr)
}

// scenarioEvent is the run's takeover (a second process opens while the
// first serves) or crash (the leader stops dead, and a new process opens).
func (cw *coreWorld) scenarioEvent() {
	old := cw.leader
	switch cw.p.scenario {
	case "crash":
		old.crashed = true
		cw.res.Crashes++
		cw.tracef("p%d crashes", old.n)
		// Some of its PUTs still land, later.
		for _, q := range old.pending {
			if _, ok := q.req.(chaincore.PutCopy); ok && !q.cancelled && cw.rng.Float64() < cw.p.lateLandChance {
				q.due = cw.now.Add(time.Duration(cw.rng.IntN(2000)) * time.Millisecond)
				cw.late = append(cw.late, q)
			}
		}
		old.pending = nil
		cw.orphaned(old)
	case "takeover":
		cw.tracef("takeover")
	}
	cw.successor = cw.open()
	cw.successorTries = 1
}

// watchSuccessor moves producers to a successor once it opens, and opens
// another if it lost the takeover (as a host retries Open).
func (cw *coreWorld) watchSuccessor() {
	nw := cw.successor
	if nw == nil || (!nw.opened && !nw.stopped) {
		return
	}
	cw.successor = nil
	if nw.opened {
		cw.res.Takeovers++
		cw.leader, cw.takeAt = nw, cw.now
		return
	}
	cw.tracef("p%d did not open: %v", nw.n, nw.openErr)
	if !errors.Is(nw.openErr, chaincore.ErrTakeoverLost) || cw.successorTries >= 5 {
		cw.violation("a successor's open failed (attempt %d): %v", cw.successorTries, nw.openErr)
		return
	}
	cw.successor = cw.open()
	cw.successorTries++
}

// checkFinal checks the final state: the chain walked from the bare
// buckets, epoch by epoch up to every recorded cut, against every batch's
// outcome; and the final process's tails against the walk.
func (cw *coreWorld) checkFinal(final *coreProc) {
	ctx := context.Background()
	rec, _, err := chain.ReadEpoch(ctx, cw.meta, starName, cw.p.class)
	if err != nil {
		cw.violation("read the epoch record: %v", err)
		return
	}
	cw.res.Epochs = int(rec.Epoch)
	// The final walk's buckets never heal: a slot with no good copy
	// cancels the walk (readGuard), a violation rather than a hang.
	var guard readGuard
	wctx := guard.begin(ctx)
	defer guard.end()
	set := chain.BucketSet{Stores: guardStores(cw.walkStores(), &guard), W: cw.p.w,
		Retry: chain.RetryPolicy{MinBackoff: time.Microsecond, MaxBackoff: time.Microsecond, Jitter: func(time.Duration) time.Duration { return 0 }}}
	walked := map[string][]envelope.Record{}
	for e := uint64(1); e < rec.Epoch; e++ {
		k, ok := cw.obs.cutOf(cw.p.class, e)
		if !ok {
			cw.violation("no cut was ever recorded for epoch %d (the chain is at %d)", e, rec.Epoch)
			continue
		}
		cw.obs.mu.Lock()
		for slot := uint64(0); slot < k.Slot; slot++ {
			if d := cw.decideFinal(slotID{cw.p.class, e, slot}); d != chain.Committed {
				cw.violation("slot %d of epoch %d is below the recorded cut %d but decides %v", slot, e, k.Slot, d)
			}
		}
		if !k.Clean {
			if d := cw.decideFinal(slotID{cw.p.class, e, k.Slot}); d != chain.Dead {
				cw.violation("the fenced cut %d of epoch %d decides %v, not dead", k.Slot, e, d)
			}
		}
		cw.obs.mu.Unlock()
		err := chain.Walk(wctx, set, starName, cw.p.class, e, 0, k.Slot, func(slot uint64, obj []byte, frames []envelope.FrameInfo) error {
			for _, f := range frames {
				recs, err := envelope.DecodeFrame(f, obj[f.Offset:f.End()])
				if err != nil {
					return err
				}
				if got := uint64(len(walked[f.Stream])); f.FirstSeq != got {
					cw.violation("stream %s: epoch %d slot %d holds seq %d, the chain so far ends at %d (a gap or a seq twice)", f.Stream, e, slot, f.FirstSeq, got)
				}
				walked[f.Stream] = append(walked[f.Stream], recs...)
			}
			return nil
		})
		if err != nil {
			cw.violation("walk epoch %d: %v", e, err)
		}
	}
	cw.walked = walked
	bodies := map[string]bool{}
	for _, recs := range walked {
		for _, r := range recs {
			bodies[string(r.Body)] = true
		}
	}
	for _, cb := range cw.batches {
		b := cb.b
		got := walked[cb.stream]
		switch {
		case b.Fate.Kind == chaincore.Acked:
			cw.res.Acked++
			for i, r := range cb.recs {
				seq := b.Start + uint64(i)
				if seq >= uint64(len(got)) || string(got[seq].Body) != string(r.Body) {
					cw.violation("acked %s[%d,%d) by p%d is not in the chain at its seqs", cb.stream, b.Start, b.End(), cb.proc.n)
					break
				}
			}
		case b.Fate.Kind == chaincore.NotCommitted:
			cw.res.NotCommitted++
			for i, r := range cb.recs {
				// Another attempt of the same producer batch may hold it
				// (checkProducers checks it is there once): this attempt
				// must not be at its own seqs.
				if seq := b.Start + uint64(i); (cb.lg.attempts <= 1 && bodies[string(r.Body)]) || (seq < uint64(len(got)) && string(got[seq].Body) == string(r.Body) && !cw.otherAttemptAt(cb)) {
					cw.violation("not-committed %s[%d,%d) by p%d is in the chain (%v)", cb.stream, b.Start, b.End(), cb.proc.n, b.Fate.Cause)
					break
				}
			}
		case b.Fate.Kind == chaincore.Pending:
			cw.res.Orphaned++
			if !cb.proc.crashed {
				cw.violation("%s[%d,%d) by p%d never got an outcome", cb.stream, b.Start, b.End(), cb.proc.n)
			}
		default:
			cw.res.Unknown++
		}
	}
	for name, recs := range walked {
		if cw.soakDead(name) {
			continue // deleted: its refs reclaimed, nothing serves it
		}
		if got := final.core.Stream(name).Assigned().Seq; got != uint64(len(recs)) {
			cw.violation("the final process starts %s at %d; the chain holds %d records", name, got, len(recs))
		}
	}
	cw.obs.mu.Lock()
	for _, f := range cw.obs.flips {
		// Past a cut nothing counts: the garbage probe deletes flight
		// copies there (a late PUT may have landed first).
		if k, ok := cw.obs.cuts[epochID{f.id.c, f.id.epoch}]; ok && f.id.slot < k.Slot {
			cw.violation("slot %d of epoch %d, below its cut %d, flipped from %v to %v", f.id.slot, f.id.epoch, k.Slot, f.from, f.to)
		}
	}
	cw.bad = append(cw.bad, cw.obs.bad...)
	cw.obs.mu.Unlock()
	cw.obs.sealMu.Lock()
	cw.bad = append(cw.bad, cw.obs.sealBad...)
	cw.obs.sealMu.Unlock()
}

func (cw *coreWorld) summarize() {
	cw.res.Batches = len(cw.batches)
	for _, pr := range cw.procs {
		st := pr.core.Stats(cw.now)
		cw.res.Halts += int(st.Halts)
		cw.res.EarlyRounds += int(st.AbsorbEarlyRounds)
	}
}

func memStores(ms []*objstore.Mem) []objstore.Store {
	out := make([]objstore.Store, len(ms))
	for i, m := range ms {
		out[i] = m
	}
	return out
}

func describe(r chaincore.Request) string {
	switch r := r.(type) {
	case chaincore.Render:
		n := 0
		for _, st := range r.Streams {
			n += len(st.Parts)
		}
		return fmt.Sprintf("render e=%d s=%d (%d batches)", r.Upload.Epoch, r.Upload.Slot, n)
	case chaincore.PutCopy:
		return fmt.Sprintf("put e=%d s=%d b=%d", r.Upload.Epoch, r.Upload.Slot, r.Bucket)
	case chaincore.Fence:
		return fmt.Sprintf("fence e=%d from=%d", r.Epoch, r.From)
	case chaincore.Mint:
		return fmt.Sprintf("mint e=%d", r.Prev.Epoch+1)
	case chaincore.Probe:
		return fmt.Sprintf("probe e=%d cut=%d", r.Epoch, r.Cut)
	case chaincore.Walk:
		return fmt.Sprintf("walk e=%d [%d,%d)", r.Epoch, r.From, r.To)
	case chaincore.PutSnapshot:
		return fmt.Sprintf("put-snapshot e=%d [%d,%d)", r.Round.Epoch, r.Round.From, r.Round.To)
	case chaincore.CommitRound:
		return fmt.Sprintf("commit-round e=%d [%d,%d) refs=%d", r.Round.Epoch, r.Round.From, r.Round.To, len(r.Refs))
	case chaincore.MarkRoundPending:
		return fmt.Sprintf("mark-round-pending e=%d [%d,%d)", r.Round.Epoch, r.Round.From, r.Round.To)
	case chaincore.CommitRefs:
		return fmt.Sprintf("commit-refs e=%d [%d,%d) refs=%d to=%d may-exist=%v", r.Round.Epoch, r.Round.From, r.Round.To, len(r.Refs), r.To, r.MayExist)
	case chaincore.AdvanceRound:
		return fmt.Sprintf("advance-round e=%d [%d,%d)", r.Round.Epoch, r.Round.From, r.Round.To)
	case chaincore.DropSnapshots:
		return fmt.Sprintf("drop-snapshots %d", len(r.Keys))
	case chaincore.ReadTrimCursor:
		return "read-trim-cursor"
	case chaincore.CreateCheckpoint:
		return fmt.Sprintf("create-checkpoint e=%d", r.Epoch)
	case chaincore.SealEpoch:
		return fmt.Sprintf("seal-epoch e=%d cut=%d", r.Record.Epoch, r.Cut)
	case chaincore.Seal:
		return fmt.Sprintf("seal for=%d", r.Epoch+1)
	case chaincore.SealMint:
		return fmt.Sprintf("seal-mint e=%d", r.Prev.Epoch+1)
	case chaincore.ReadCheckpoint:
		return "read-checkpoint"
	}
	return fmt.Sprintf("%T", r)
}

func describeEvent(ev chaincore.Event) string {
	errs := func(err error) string {
		if err == nil {
			return "ok"
		}
		return "err"
	}
	switch ev := ev.(type) {
	case chaincore.Rendered:
		return fmt.Sprintf("rendered e=%d s=%d frames=%d %s", ev.Upload.Epoch, ev.Upload.Slot, len(ev.Frames), errs(ev.Err))
	case chaincore.CopyDone:
		return fmt.Sprintf("copy e=%d s=%d b=%d %s ghost=%v", ev.Upload.Epoch, ev.Upload.Slot, ev.Result.Bucket, ev.Result.Status, ev.Result.Ghost)
	case chaincore.EpochRead:
		return fmt.Sprintf("epoch-read e=%d %s", ev.Record.Epoch, errs(ev.Err))
	case chaincore.FirstMinted:
		return fmt.Sprintf("first-minted %s", errs(ev.Err))
	case chaincore.Sealed:
		return fmt.Sprintf("sealed cp=%d/%d %s", ev.Checkpoint.Epoch, ev.Checkpoint.Next, errs(ev.Err))
	case chaincore.SealMinted:
		kind := errs(ev.Err)
		switch {
		case errors.Is(ev.Err, absorb.ErrEpochMoved):
			kind = "moved"
		case errors.Is(ev.Err, absorb.ErrSealRaced):
			kind = "raced"
		}
		return fmt.Sprintf("seal-minted e=%d %s", ev.Record.Epoch, kind)
	case chaincore.Fenced:
		return fmt.Sprintf("fenced e=%d cut=%d poisoned=%d ahead=%d %s", ev.Epoch, ev.Result.Cut, ev.Result.Poisoned, ev.Result.PoisonedAhead, errs(ev.Err))
	case chaincore.Minted:
		kind := errs(ev.Err)
		switch {
		case errors.Is(ev.Err, chain.ErrMintLost):
			kind = "lost"
		case errors.Is(ev.Err, absorb.ErrDeposed):
			kind = "sealed-by-" + ev.SealedBy
		}
		return fmt.Sprintf("minted e=%d %s", ev.Record.Epoch, kind)
	case chaincore.Probed:
		return fmt.Sprintf("probed e=%d", ev.Epoch)
	case chaincore.TailsRead:
		return fmt.Sprintf("tails-read %d %s", ev.Streams.Len(), errs(ev.Err))
	case chaincore.Walked:
		return fmt.Sprintf("walked e=%d slots=%d next=%d %s", ev.Epoch, len(ev.Slots), ev.Next, errs(ev.Err))
	case chaincore.SnapshotPut:
		return fmt.Sprintf("snapshot-put [%d,%d) %s", ev.Round.From, ev.Round.To, errs(ev.Err))
	case chaincore.RoundCommitted:
		kind := errs(ev.Err)
		if errors.Is(ev.Err, absorb.ErrDeposed) {
			kind = "deposed"
		}
		if ev.Split != nil {
			kind = fmt.Sprintf("split=%v", ev.Split)
		}
		return fmt.Sprintf("round-committed [%d,%d) %s", ev.Round.From, ev.Round.To, kind)
	case chaincore.RoundMarked:
		return fmt.Sprintf("round-marked [%d,%d) %s", ev.Round.From, ev.Round.To, errs(ev.Err))
	case chaincore.RefsCommitted:
		return fmt.Sprintf("refs-committed [%d,%d) to=%d %s", ev.Round.From, ev.Round.To, ev.To, errs(ev.Err))
	case chaincore.SnapshotsDropped:
		return fmt.Sprintf("snapshots-dropped %d", len(ev.Dropped))
	case chaincore.TrimCursorRead:
		return fmt.Sprintf("trim-cursor-read %d/%d %s", ev.Cursor.At.Epoch, ev.Cursor.At.Next, errs(ev.Err))
	case chaincore.CheckpointCreated:
		return fmt.Sprintf("checkpoint-created %s", errs(ev.Err))
	case chaincore.EpochSealed:
		return fmt.Sprintf("epoch-sealed %s", errs(ev.Err))
	case chaincore.CheckpointRead:
		return fmt.Sprintf("checkpoint-read sealed-by=%s/%d %s", ev.Checkpoint.Owner, ev.Checkpoint.OwnerEpoch, errs(ev.Err))
	}
	return fmt.Sprintf("%T", ev)
}

// walkGiveUpReads is how often one call may read one key before the
// simulation gives up on it. A good copy is read once or twice (the walk's
// read-ahead reads heads first); chain.Walk retries a slot with no good
// copy until its context ends, and inside one simulated call virtual time
// stands still, so no outage or damage heals during the call: this many
// reads mean it never will, and the call is cancelled instead of hanging.
const walkGiveUpReads = 64

// readGuard counts the reads of each key within one call and cancels the
// call once a key passes walkGiveUpReads.
type readGuard struct {
	mu     sync.Mutex
	reads  map[string]int
	cancel context.CancelFunc
}

// begin starts a guarded call: reads through guarded stores count until end.
func (g *readGuard) begin(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	g.mu.Lock()
	g.reads, g.cancel = map[string]int{}, cancel
	g.mu.Unlock()
	return ctx
}

// end stops counting. It does not cancel the call's context: a call may
// leave work behind it (a fence's look-ahead), and cancelling that at a
// moment the goroutines decide would make a seed's trace depend on them.
func (g *readGuard) end() {
	g.mu.Lock()
	g.reads, g.cancel = nil, nil
	g.mu.Unlock()
}

// read counts one read of key and reports whether the call may go on.
func (g *readGuard) read(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.reads == nil {
		return true
	}
	g.reads[key]++
	if g.reads[key] > walkGiveUpReads {
		g.cancel()
		return false
	}
	return true
}

// guardStores wraps stores so that their reads count against g.
func guardStores(stores []objstore.Store, g *readGuard) []objstore.Store {
	out := make([]objstore.Store, len(stores))
	for i, s := range stores {
		out[i] = guardedStore{Store: s, g: g}
	}
	return out
}

type guardedStore struct {
	objstore.Store
	g *readGuard
}

func (s guardedStore) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if !s.g.read(key) {
		return nil, context.Canceled
	}
	return s.Store.Get(ctx, key, off, n)
}
