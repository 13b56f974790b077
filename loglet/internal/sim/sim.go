package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

const starName = "s1"

// neighbourName is the second star of the deployment (plan.neighbour): a
// fault-free process leads it, and lifers re-create their names there too.
const neighbourName = "s2"

// Result is what one run found.
type Result struct {
	Seed       uint64
	Plan       string
	Violations []string
	// What happened, for soak reports.
	SimTime                      time.Duration
	Appends, Acked, NotCommitted int
	Unknown, UnknownPresent      int
	Reads, ReadErrors, Records   int
	Halts                        uint64
	Injected                     fault.Counters
	MetaInjected                 fault.Counters
	ZoneDowns, Corrupted, Fences int
	Outages, Takeovers, Crashes  int
	OpenRetries                  int // successor Opens that failed (e.g. ErrTakeoverLost) and were retried
	OpenLost                     int // of which failed with ErrTakeoverLost
	Seals, SealViolations        int // seals written; checkpoint writes that broke the binding seal (sealwatch.go)
	MetaConflicts                int // applied-then-conflict writes injected
	Epochs                       int // epochs minted, both classes
	SlotsDecided, Flips          int // slots below a cut checked committed; committed<->dead flips below a cut
	BeyondCut                    int // (stream, seq) found in flight copies at or past a cut, checked never read
	ZombieAppends                int // appends sent to a deposed or crashed process after the takeover
	CrowdStreams                 int // streams created mid-run and appended once
	Incarnations, Deletes        int // lifers' streams created and deleted
	PreludeOpens                 int // processes that opened and closed the star with settlement off before the main run
	DeleteRaces, RaceAppends     int // deletes raced by cache-miss appends, and those appends
	GroupAcks, GroupTrimmedAcks  int // consumer-group Acks that committed, and of those, after a trim of their stream
	BareReads, BareReadErrors    int // calls of the Reader over the healthy stores, and how many failed
	SnapshotsDamaged             int // tails snapshots damaged in every copy
	// Settlement and trim.
	Trims                                int    // Star.Trim calls that returned nil
	RetentionTrims                       int    // trims retention passes wrote (observed in the stream records)
	SettlePasses, SettleFailures         uint64 // every process's passes, both classes (the neighbour's too)
	SettledObjects, Repointed, Reclaimed uint64
	DeletedCopies                        uint64 // slot copies deleted by settlement's trim
	SlotsTrimmed                         int    // slots below the trim cursors' Deleted at the end (star s1)
	SettledRefs, RefsChecked             int    // refs checked at the end (every extent read back), of which settled
	Repoints                             int    // ref overwrites the observer checked (records equal)
	ReclaimRaces                         int    // refs settle merged away whose objects a Trim or DeleteStream had reclaimed (records unreadable anyway)
	UnderReplicated                      int    // settled objects with fewer than K copies at the end
	LeakedObjects                        int    // settled objects no ref points at and no marker names, at the end
	LeftoverCopies                       int    // copies of committed slots still present below the trim cursors' Deleted
	Linearizability                      string // "ok", "skipped", "inconclusive (timeout)" or the failure
	linOps                               []porcupine.Operation
}

// Failed reports whether the run found a violation.
func (r *Result) Failed() bool { return len(r.Violations) > 0 }

// Run runs one simulated seed inside a synctest bubble (virtual time) and
// returns what the checker found. It does not fail t itself.
func Run(t *testing.T, o Options) (res *Result) {
	defer func() {
		// A bubble whose goroutines stay blocked after the run (a Close
		// that never returned) panics in synctest; that is a finding, not
		// a crash of the whole soak.
		if p := recover(); p != nil {
			if res == nil {
				res = &Result{Seed: o.Seed}
			}
			res.Violations = append(res.Violations, fmt.Sprintf("the simulation did not wind down: %v", p))
		}
	}()
	synctest.Test(t, func(t *testing.T) { res = run(o) })
	if res.linOps != nil {
		var bad []string
		res.Linearizability, bad = linearizable(res.linOps, 30*time.Second)
		res.Violations = append(res.Violations, bad...)
		res.linOps = nil
	}
	return res
}

// closeStar closes s, recording a violation if Close has not returned
// after ten virtual minutes.
func (w *world) closeStar(s *loglet.Star, name string) {
	done := make(chan struct{})
	go func() {
		_ = s.Close(context.Background())
		close(done)
	}()
	t := time.NewTimer(10 * time.Minute)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		w.h.violation("%s: Close did not return within 10 virtual minutes", name)
	}
}

// world is the simulated deployment: buckets and metastore shared by every
// process, and the processes (each with its own network: fault wrappers).
type world struct {
	o    Options
	p    plan
	h    *history
	res  *Result
	obs  *observer
	rng  *rand.Rand // harness-only draws (not the workload's)
	rngM sync.Mutex

	mems     [2][]*objstore.Mem
	buckets  [2][]objstore.Store // the buckets as they behave (planted bugs live here)
	meta     *metastore.Mem
	metaBkt  metastore.Store // the metastore as it behaves
	mirrorMu sync.Mutex

	pmu     sync.Mutex
	procs   []*process
	leader  *process  // where producers and readers go (after takeover: the successor)
	takenAt time.Time // Fence: when the successor's Open returned

	zmu       sync.Mutex
	zoneDowns [3]int // outages in force per zone (ZoneDown, Outage)

	streams   [2][]string
	exclusive map[int]string
	// retainedNames are the streams created with retention: the trim
	// points its passes write are observed in the stream records.
	retainedNames map[string]bool

	smu    sync.Mutex // crowd and the life counters of res
	crowd  []string   // crowd streams created (their appends are history)
	lifers []*lifer
	nb     *loglet.Star // the neighbour star's process (plan.neighbour)
	// lifeLock (a channel, so that a goroutine waiting for it is durably
	// blocked and the bubble's clock runs): lifers delete holding it, and
	// a takeover holds it while it Opens its successor and makes it the
	// leader (see lifer.delete).
	lifeLock chan struct{}
	// settleOff: processes opened now do not settle (the prelude).
	settleOff bool
	// preludeEpoch: each chain's epoch when the prelude ended (0: no
	// prelude); settlement must get past it.
	preludeEpoch [2]uint64
	fenced       *fenceRecord
	trimCursor   [2]chain.TrimCursor // each chain's trim cursor at the end (checkChains)
	stale        metastore.Store     // StaleReader: the frozen view every Reader uses
	corrupted    map[string]bool     // slot keys with a corrupted copy (at most one each)
	present      map[uint32]uint64   // op -> seq of its first record in the final state
}

// process is one leader process: its view of the stores (fault wrappers)
// and its star.
type process struct {
	n    int
	fs   [2][]*objstore.FaultStore
	cm   *conflictingMeta
	mf   *metastore.FaultStore
	star *loglet.Star

	crashed   bool
	deposedAt int64 // history clock when a successor had taken over (0: never)

	rmu       sync.Mutex
	readStop  context.CancelFunc
	readersWG sync.WaitGroup
}

// stopReaders ends this process's readers and waits for them.
func (pr *process) stopReaders() {
	pr.rmu.Lock()
	stop := pr.readStop
	pr.rmu.Unlock()
	if stop != nil {
		stop()
	}
	pr.readersWG.Wait()
}

// fenceRecord is the FenceOnly scenario's fence.
type fenceRecord struct {
	class loglet.Class
	epoch uint64
	cut   uint64
	from  uint64
}

func (w *world) intn(n int) int {
	w.rngM.Lock()
	defer w.rngM.Unlock()
	return w.rng.IntN(n)
}

func run(o Options) *Result {
	p := drawPlan(o)
	h := newHistory()
	w := &world{o: o, p: p, h: h, res: &Result{Seed: o.Seed, Plan: p.String() + "; " + o.Scenarios.String()},
		rng: rand.New(rand.NewPCG(o.Seed, 0xfa17)), meta: metastore.NewMem(), exclusive: map[int]string{}, retainedNames: map[string]bool{}, corrupted: map[string]bool{}, lifeLock: make(chan struct{}, 1)}
	w.obs = newObserver(w)
	start := time.Now()
	w.build()
	ctx := context.Background()
	if !w.prelude(ctx) {
		return w.res
	}
	proc, err := w.open(ctx)
	if err != nil {
		w.res.Violations = append(w.res.Violations, fmt.Sprintf("open: %v", err))
		return w.res
	}
	w.leader = proc
	if w.p.preludeOpens == 0 {
		w.createStreams(ctx, proc)
	}
	w.setFaults(proc, true)
	if p.neighbour {
		if err := w.openNeighbour(ctx); err != nil {
			w.res.Violations = append(w.res.Violations, fmt.Sprintf("open the neighbour star: %v", err))
			return w.res
		}
	}
	stopLifers, crowdDone := w.startLife(ctx)

	runCtx, stopRun := context.WithCancel(ctx)
	var bg sync.WaitGroup // fault schedulers and scenarios
	w.schedule(runCtx, &bg)
	bg.Add(1)
	go func() {
		defer bg.Done()
		w.trimmer(runCtx)
	}()
	w.startReaders(proc)
	for i := 0; i < p.groups; i++ {
		bg.Add(1)
		go func() {
			defer bg.Done()
			w.grouper(runCtx, i)
		}()
	}

	prods := make([]*producer, p.producers)
	for i := range prods {
		prods[i] = w.newProducer(i)
	}
	w.runProducers(ctx, prods, p.ops, p.crashAt)
	if o.Scenarios.CrashRestart {
		w.crashAndRestart(ctx, prods)
	}
	<-crowdDone
	stopLifers()
	stopRun()
	bg.Wait()
	for _, pr := range w.allProcs() {
		pr.stopReaders()
	}

	// Heal, let every in-flight batch reach its outcome, then read back.
	w.zmu.Lock()
	w.zoneDowns = [3]int{}
	w.zmu.Unlock()
	for _, pr := range w.liveProcs() {
		w.setFaults(pr, false)
	}
	time.Sleep(90 * time.Second)
	healedAt := time.Now()
	leader := w.currentLeader()
	final := w.finalLeaderReads(ctx, leader)
	st := leader.star.Stats()
	for _, pr := range w.liveProcs() {
		w.noLatency(pr)
	}
	// Zombies first, so the leader's clean seal is the last word.
	for _, pr := range w.liveProcs() {
		if pr != leader {
			w.closeStar(pr.star, fmt.Sprintf("proc-%d (deposed)", pr.n))
		}
	}
	w.closeStar(leader.star, fmt.Sprintf("proc-%d", leader.n))
	if w.nb != nil {
		w.closeStar(w.nb, "the neighbour")
	}
	after := leader.star.Stats()
	w.check(ctx, leader, final, st, after)
	w.checkLifers(ctx)
	w.checkSettledLeaks(ctx, healedAt)
	w.res.SimTime = time.Since(start)
	w.summarize(after)
	w.settleSummary()
	// Only now, with the checker done, dispose of crashed processes: revive
	// their stores so their goroutines can end (nothing they do now is
	// checked; a revived zombie's writes are the zombie scenario's job).
	for _, pr := range w.allProcs() {
		if pr.crashed {
			w.setFaults(pr, false)
			pr.mf.SetDown(false)
			w.noLatency(pr)
			done := make(chan struct{})
			go func() { _ = pr.star.Close(context.Background()); close(done) }()
			t := time.NewTimer(10 * time.Minute)
			select {
			case <-done:
			case <-t.C:
				w.res.Violations = append(w.res.Violations, fmt.Sprintf("proc-%d (crashed, revived after the checks): Close did not return within 10 virtual minutes", pr.n))
			}
			t.Stop()
		}
	}
	return w.res
}

func (w *world) allProcs() []*process {
	w.pmu.Lock()
	defer w.pmu.Unlock()
	return append([]*process(nil), w.procs...)
}

// liveProcs are the processes that have not crashed (the leader and any
// zombie).
func (w *world) liveProcs() []*process {
	var out []*process
	for _, pr := range w.allProcs() {
		if !pr.crashed {
			out = append(out, pr)
		}
	}
	return out
}

// crashedNow reports that pr has crashed, as a goroutine racing the
// crash sees it.
func (w *world) crashedNow(pr *process) bool {
	w.pmu.Lock()
	defer w.pmu.Unlock()
	return pr.crashed
}

func (w *world) currentLeader() *process {
	w.pmu.Lock()
	defer w.pmu.Unlock()
	return w.leader
}

// build makes the buckets (Mem under the observer, wrapped in a planted
// bug if any) and the metastore (likewise).
func (w *world) build() {
	b := w.o.Broken
	for c, k := range [2]int{w.p.stdK, 3} {
		for i := 0; i < k; i++ {
			m := objstore.NewMem()
			var s objstore.Store = observedBucket{m, w.obs}
			if b.OverwritingPut {
				s = overwritingBucket{s}
			}
			if b.LostPut > 0 {
				s = &losingBucket{Store: s, draws: fault.NewDraws(w.o.Seed*100 + uint64(c*10+i)), p: b.LostPut}
			}
			w.mems[c] = append(w.mems[c], m)
			w.buckets[c] = append(w.buckets[c], s)
		}
		if b.MirrorFence {
			for i := range w.buckets[c] {
				w.buckets[c][i] = mirroringBucket{Store: w.buckets[c][i], mems: w.mems[c], i: i, mu: &w.mirrorMu, mirror: map[string][]byte{}}
			}
		}
	}
	w.metaBkt = observedMeta{w.meta, w.obs}
	if b.CommitIgnoresExpect {
		w.metaBkt = blindCommitStore{w.metaBkt}
	}
	if w.p.commitLimit > 0 || w.p.commitBytes > 0 {
		w.metaBkt = limitedMeta{Store: w.metaBkt, n: w.p.commitLimit, bytes: w.p.commitBytes}
	}
}

// open starts a new leader process over the shared stores.
func (w *world) open(ctx context.Context) (*process, error) {
	w.pmu.Lock()
	n := len(w.procs)
	w.pmu.Unlock()
	pr := &process{n: n}
	for c := range w.buckets {
		for i, b := range w.buckets[c] {
			f := objstore.WithFaults(b, w.o.Seed*1000+uint64(n*100+c*10+i))
			put, get := w.p.putLat, w.p.getLat
			if w.p.faults.SlowZone && i == w.p.slowZone {
				put = fault.Mixture(0.6, put, fault.LogNormal(80*time.Millisecond, 600*time.Millisecond))
				get = fault.Mixture(0.6, get, fault.LogNormal(40*time.Millisecond, 300*time.Millisecond))
			}
			f.SetLatency(put, fault.Put)
			f.SetLatency(get, fault.Get)
			f.SetLatency(w.p.getLat, fault.Delete)
			pr.fs[c] = append(pr.fs[c], f)
		}
	}
	pr.cm = &conflictingMeta{Store: sealWatch{Store: w.metaBkt, o: w.obs, writer: fmt.Sprintf("proc-%d", n)}, draws: fault.NewDraws(w.o.Seed*1000 + uint64(n) + 0xc0f1)}
	var inner metastore.Store = pr.cm
	if w.p.deleteRaces {
		inner = &lateReplies{Store: pr.cm, max: 4*w.p.metaLat + 3*time.Millisecond, draws: fault.NewDraws(w.o.Seed*1000 + uint64(n) + 0x1a7e)}
	}
	pr.mf = metastore.WithFaults(inner, w.o.Seed*1000+uint64(n))
	if w.p.metaLat > 0 {
		med, p99 := w.p.metaLat, 8*w.p.metaLat
		ln := fault.LogNormal(med, p99)
		pr.mf.SetLatency(ln)
	}
	cfg := w.starConfig(starName, fmt.Sprintf("proc-%d", n), pr.mf, pr.fs)
	if w.o.Log != nil {
		cfg.Logger = slog.New(logWatch{w: w, inner: slog.NewTextHandler(w.o.Log, &slog.HandlerOptions{Level: slog.LevelInfo})}).With("proc", n)
	}
	s, err := loglet.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	pr.star = s
	w.pmu.Lock()
	w.procs = append(w.procs, pr)
	w.pmu.Unlock()
	w.applyZones()
	return pr, nil
}

// starConfig is a process's loglet configuration over meta and the bucket
// views fs, as the plan sets it.
func (w *world) starConfig(star, owner string, meta metastore.Store, fs [2][]*objstore.FaultStore) loglet.Config {
	cfg := loglet.Config{
		Star: star, Stars: []string{starName, neighbourName}, Owner: owner, Meta: meta,
		MaxRecordBytes: 16 << 10, MaxBatchBytes: 64 << 10, MaxBatchRecords: 1000,
		AbsorbInterval: w.p.absorbEvery, AbsorbMaxSlots: w.p.absorbMaxSlots,
		SettleInterval:     w.p.settleEvery,
		ReaderPollInterval: 50 * time.Millisecond,
		// The retention pass runs every few seconds of virtual time, so
		// each seed's retained streams are trimmed several times.
		RetentionInterval: 2 * time.Second,
		Logger:            slog.New(logWatch{w: w}),
		CoarseWakeups:     true, // a bubble's clock stops while a goroutine is in nanosleep
	}
	if w.settleOff {
		cfg.SettleInterval = -1 // off (0 is the default interval)
	}
	for c := range fs {
		cc := loglet.ClassConfig{
			MemoryBufferMiB: 1, ParallelUploads: w.p.window, FlushDeadline: 2 * time.Millisecond,
			FlightBytes: w.p.flightBytes, FrameBytes: w.p.frameBytes, CommitDeadline: w.p.commitDeadline, StragglerTimeout: 20 * time.Second,
			ChainBacklogFlights: w.p.backlogFlights, ChainBacklogMiB: 1, Codec: []envelope.Codec{loglet.CodecNone, envelope.CodecS2}[c],
			Retry:     chain.RetryPolicy{MinBackoff: 2 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, Jitter: fixedJitter},
			ReadAhead: w.p.readAhead,
		}
		for _, f := range fs[c] {
			cc.Stores = append(cc.Stores, f)
		}
		if c == int(loglet.Express) {
			cfg.Express = cc
		} else {
			cfg.Standard = cc
		}
	}
	return cfg
}

// openSuccessor opens a new process over the star (a takeover), retrying
// with backoff as a host would: a live incumbent's halt recovery may win the
// mint (ErrTakeoverLost), and a failed Open may have taken over one chain
// already (a retry takes it over again).
func (w *world) openSuccessor(ctx context.Context, why string) *process {
	var last error
	for attempt := 0; attempt < 20; attempt++ {
		octx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		pr, err := w.open(octx)
		cancel()
		if err == nil {
			w.res.Takeovers++
			return pr
		}
		last = err
		w.res.OpenRetries++
		if errors.Is(err, loglet.ErrTakeoverLost) {
			w.res.OpenLost++
		}
		time.Sleep(time.Duration(100*(attempt+1)) * time.Millisecond)
	}
	w.h.violation("%s: loglet.Open of the successor failed 20 times: %v", why, last)
	return nil
}

// setFaults switches a process's injected errors on (as planned) or off;
// latency stays. Zone outages are applyZones'.
func (w *world) setFaults(pr *process, on bool) {
	p := w.p
	x := func(v float64) float64 {
		if on {
			return v
		}
		return 0
	}
	for c := range pr.fs {
		for _, f := range pr.fs[c] {
			f.SetErrorRate(x(p.putErr), fault.Put)
			f.SetErrorRate(x(p.getErr), fault.Get)
			f.SetAmbiguousRate(x(p.ambiguous), fault.Put)
			if !on {
				f.SetDown(false)
			}
		}
	}
	pr.mf.SetErrorRate(x(p.metaErr))
	pr.mf.SetAmbiguousRate(x(p.metaAmbig))
	pr.cm.set(x(p.metaConflict))
}

func (w *world) noLatency(pr *process) {
	for c := range pr.fs {
		for _, f := range pr.fs[c] {
			for _, op := range []fault.Op{fault.Put, fault.Get, fault.Delete, fault.List} {
				f.SetLatency(nil, op)
			}
		}
	}
	pr.mf.SetLatency(nil)
}

func (w *world) createStreams(ctx context.Context, pr *process) {
	create := func(name string, c loglet.Class, ret loglet.Retention) {
		for attempt := 0; attempt < 20; attempt++ {
			_, err := pr.star.CreateStream(ctx, name, loglet.StreamOptions{Class: c, Star: starName, Retention: ret})
			if err == nil || errors.Is(err, loglet.ErrStreamExists) {
				return
			}
		}
		w.h.violation("create stream %s: failed 20 times", name)
	}
	for _, c := range chain.Classes() {
		for i := 0; i < w.p.streams; i++ {
			name := fmt.Sprintf("%s-%d", c, i)
			var ret loglet.Retention
			if i < w.p.retained {
				ret = loglet.Retention{MaxAge: w.p.retainAge, MaxBytes: w.p.retainBytes}
				w.retainedNames[name] = true
			}
			create(name, c, ret)
			w.streams[c] = append(w.streams[c], name)
		}
	}
	for i := 0; i < w.p.producers; i++ {
		if i%3 == 0 {
			c := chain.Classes()[(i/3)%2]
			name := fmt.Sprintf("%s-x%d", c, i)
			create(name, c, loglet.Retention{})
			w.exclusive[i] = name
		}
	}
}

// schedule starts the fault schedulers: zone downs, outages, corruption,
// the fence scenarios.
func (w *world) schedule(ctx context.Context, bg *sync.WaitGroup) {
	sleep := func(d time.Duration) bool { return sleepCtx(ctx, d) }
	if w.p.faults.ZoneDown {
		bg.Add(1)
		go func() {
			defer bg.Done()
			var elapsed time.Duration
			for _, d := range w.p.downs {
				if !sleep(d.at - elapsed) {
					return
				}
				w.zones(1, w.p.downZone)
				w.res.ZoneDowns++
				ok := sleep(d.dur)
				w.zones(-1, w.p.downZone)
				if !ok {
					return
				}
				elapsed = d.at + d.dur
			}
		}()
	}
	if w.p.faults.Outage {
		bg.Add(1)
		go func() {
			defer bg.Done()
			if !sleep(w.p.outage.at) {
				return
			}
			w.zones(1, w.p.outageZones[:]...)
			w.res.Outages++
			sleep(w.p.outage.dur)
			w.zones(-1, w.p.outageZones[:]...)
		}()
	}
	if w.p.faults.Corrupt {
		bg.Add(1)
		go func() {
			defer bg.Done()
			for sleep(w.p.corruptEvery) {
				if w.intn(8) == 0 {
					w.damageSnapshot(ctx)
					continue
				}
				w.corruptOne(ctx)
			}
		}()
	}
	if w.o.Scenarios.FenceOnly {
		bg.Add(1)
		go func() {
			defer bg.Done()
			if sleep(w.p.fenceAt) {
				w.fence(ctx)
				// The sealer died: the chain is left to whoever opens it
				// next. A host retries Open (at the latest when the
				// workload ends).
				if w.fenced != nil {
					sleep(w.p.reopenAfter)
					w.takeOver(context.Background())
				}
			}
		}()
	}
	if w.o.Scenarios.Fence {
		bg.Add(1)
		go func() {
			defer bg.Done()
			if sleep(w.p.fenceAt) {
				w.takeOver(context.Background())
			}
		}()
	}
}

// zones adds d to the outage count of each zone and applies the result.
func (w *world) zones(d int, zs ...int) {
	w.zmu.Lock()
	for _, z := range zs {
		w.zoneDowns[z] += d
	}
	w.zmu.Unlock()
	w.applyZones()
}

// applyZones makes every live process's view of each zone down or up as
// the outages in force say (a crashed process's stores stay down).
func (w *world) applyZones() {
	w.zmu.Lock()
	defer w.zmu.Unlock()
	for _, pr := range w.liveProcs() {
		for c := range pr.fs {
			for i, f := range pr.fs[c] {
				f.SetDown(w.zoneDowns[i] > 0)
			}
		}
	}
}

// fixedJitter is the simulation's retry jitter: none (half the range), so
// a retry's wait does not come from a random source shared by goroutines
// (whose draw order depends on scheduling) and a seed replays.
func fixedJitter(d time.Duration) time.Duration { return d / 2 }

// corruptOne flips a byte of one copy of a released slot, only in a class
// with K > W and only when every copy of the slot is present, so at most
// K−W copies of any slot are bad and the data stays recoverable.
func (w *world) corruptOne(ctx context.Context) {
	c := loglet.Express
	if w.p.stdK == 3 && w.intn(2) == 0 {
		c = loglet.Standard
	}
	st := w.currentLeader().star.Stats()
	cs := classStats(st, c)
	if cs == nil || cs.ReleasePoint == 0 {
		return
	}
	slot := uint64(w.intn(int(cs.ReleasePoint)))
	key := chain.SlotKey(starName, c, cs.Epoch, slot)
	if w.corrupted[key] {
		return // one bad copy per slot: K−W = 1
	}
	var size int
	for _, m := range w.mems[c] {
		obj, err := m.Get(ctx, key, 0, -1)
		if err != nil {
			return // a missing copy: leave this slot alone
		}
		if envelope.IsCorruption(func() error { _, _, err := envelope.ParseBundle(obj); return err }()) {
			return // already corrupted once
		}
		size = len(obj)
	}
	b := w.intn(len(w.mems[c]))
	w.obs.mu.Lock()
	defer w.obs.mu.Unlock()
	if err := w.mems[c][b].Corrupt(key, int64(w.intn(size))); err == nil {
		w.corrupted[key] = true
		w.res.Corrupted++
		w.obs.redecide(slotID{c, cs.Epoch, slot})
	}
}

// damageSnapshot flips a byte in every copy of the tails snapshot a
// chain's checkpoint names now: the snapshot is only a summary of the
// refs, so readers must read tails from the refs instead and the next
// owner must rebuild them (nothing may fail, nothing may be lost).
func (w *world) damageSnapshot(ctx context.Context) {
	c := chain.Classes()[w.intn(2)]
	cp, _, err := absorb.ReadCheckpoint(ctx, w.meta, starName, c)
	if err != nil || cp.Tails == "" {
		return
	}
	damaged := false
	for _, m := range w.mems[c] {
		obj, err := m.Get(ctx, cp.Tails, 0, -1)
		if err != nil || len(obj) == 0 {
			continue
		}
		if m.Corrupt(cp.Tails, int64(w.intn(len(obj)))) == nil {
			damaged = true
		}
	}
	if damaged {
		w.res.SnapshotsDamaged++
	}
}

// fence is the FenceOnly scenario: seal the checkpoint as a successor
// would, then fence the incumbent's live epoch from the checkpoint's slot,
// and die before minting.
func (w *world) fence(ctx context.Context) {
	c := loglet.Standard
	if w.p.fenceClassExpress {
		c = loglet.Express
	}
	owner := "sim-successor"
	var cp absorb.Checkpoint
	for {
		got, ver, err := absorb.ReadCheckpoint(ctx, w.meta, starName, c)
		if err != nil {
			w.h.violation("fence scenario: read checkpoint: %v", err)
			return
		}
		cp = got
		seal := got
		seal.Owner, seal.OwnerEpoch, seal.Counter = owner, got.OwnerEpoch+1, got.Counter+1
		val, _ := jsonMarshal(seal)
		if _, err := w.meta.Put(ctx, chain.CheckpointKey(starName, c), val, ver); err == nil {
			break
		} else if !errors.Is(err, metastore.ErrConflict) {
			w.h.violation("fence scenario: seal: %v", err)
			return
		}
	}
	set := chain.BucketSet{Stores: w.buckets[c], W: w.quorum(c), Retry: chain.RetryPolicy{MinBackoff: 2 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, Jitter: fixedJitter}}
	fctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := chain.Fence(fctx, set, starName, c, cp.Epoch, cp.Next, envelope.NewNonce(), chain.FenceOptions{})
	if err != nil {
		w.h.violation("fence scenario: fence of %s epoch %d from %d: %v", c, cp.Epoch, cp.Next, err)
		return
	}
	w.fenced = &fenceRecord{class: c, epoch: cp.Epoch, cut: res.Cut, from: cp.Next}
	w.res.Fences++
}

// takeOver is the Fence scenario: a second process Opens the star while the
// leader runs. The incumbent is deposed (a zombie): its readers stop (its
// tails are no longer the star's), and producers move over (some at once,
// the rest after zombieFor).
func (w *world) takeOver(ctx context.Context) {
	w.lifeLock <- struct{}{}
	defer func() { <-w.lifeLock }()
	old := w.currentLeader()
	nproc := w.openSuccessor(ctx, "fence scenario")
	if nproc == nil {
		return
	}
	old.deposedAt = w.h.tick()
	old.stopReaders()
	w.setFaults(nproc, true)
	w.pmu.Lock()
	w.leader, w.takenAt = nproc, time.Now()
	w.pmu.Unlock()
	w.startReaders(nproc)
}

func classStats(s loglet.Stats, c loglet.Class) *loglet.ClassStats {
	if c == loglet.Express {
		return s.Express
	}
	return s.Standard
}

// crashAndRestart kills the leader process (its stores go down under it,
// its producers are gone, it is never Closed) and opens a successor over
// the same stores, then runs the rest of the workload against it.
func (w *world) crashAndRestart(ctx context.Context, prods []*producer) {
	old := w.currentLeader()
	old.stopReaders()
	w.pmu.Lock()
	old.crashed = true // under pmu: the crowd asks (crashedNow)
	w.pmu.Unlock()
	old.deposedAt = w.h.tick()
	for c := range old.fs {
		for _, f := range old.fs[c] {
			f.SetDown(true)
		}
	}
	old.mf.SetDown(true)
	w.res.Crashes++
	w.lifeLock <- struct{}{}
	nproc := w.openSuccessor(ctx, "crash-restart")
	if nproc == nil {
		<-w.lifeLock
		return
	}
	w.setFaults(nproc, true)
	w.pmu.Lock()
	w.leader = nproc
	w.pmu.Unlock()
	<-w.lifeLock
	w.startReaders(nproc)
	w.runProducers(ctx, prods, w.p.ops, 0)
}

// procFor is the process producer p appends to now: the leader, except
// that after a takeover odd producers stay on the zombie for zombieFor.
func (w *world) procFor(p *producer) *process {
	w.pmu.Lock()
	defer w.pmu.Unlock()
	pr := w.leader
	if (w.o.Scenarios.Fence || w.o.Scenarios.FenceOnly) && len(w.procs) > 1 && p.id%2 == 1 && time.Since(w.takenAt) < w.p.zombieFor {
		pr = w.procs[len(w.procs)-2]
	}
	return pr
}

// runProducers runs every producer for n operations, or until crashAt (0:
// no crash) of virtual time has passed.
func (w *world) runProducers(ctx context.Context, prods []*producer, n int, crashAt time.Duration) {
	pctx := ctx
	if crashAt > 0 && w.o.Scenarios.CrashRestart {
		var cancel context.CancelFunc
		pctx, cancel = context.WithTimeout(ctx, crashAt)
		defer cancel()
	}
	var wg sync.WaitGroup
	for _, p := range prods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.run(pctx, n)
		}()
	}
	// Stats sampler: the pool and backlog bounds of invariant 5.
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(25 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				for _, pr := range w.liveProcs() {
					w.checkBounds(pr.star.Stats())
				}
			}
		}
	}()
	wg.Wait()
	close(done)
	<-sampled
}

func (w *world) checkBounds(s loglet.Stats) {
	for _, cs := range []*loglet.ClassStats{s.Standard, s.Express} {
		if cs == nil {
			continue
		}
		if cs.Pool.ReservedBytes > cs.Pool.BudgetBytes {
			w.h.violation("pool: %d bytes reserved over a budget of %d", cs.Pool.ReservedBytes, cs.Pool.BudgetBytes)
		}
		if cs.Backlog.Flights > cs.Backlog.MaxFlights {
			w.h.violation("backlog: %d flights over a bound of %d", cs.Backlog.Flights, cs.Backlog.MaxFlights)
		}
		if cs.Backlog.Bytes > cs.Backlog.MaxBytes {
			w.h.violation("backlog: %d bytes over a bound of %d", cs.Backlog.Bytes, cs.Backlog.MaxBytes)
		}
		if cs.WindowInFlight > cs.WindowSize {
			w.h.violation("window: %d slots in flight over a window of %d", cs.WindowInFlight, cs.WindowSize)
		}
		// Every memory part within its bound (the pool's and the
		// backlog's are checked above).
		if m := cs.Memory; m.Stragglers > m.StragglersBound {
			w.h.violation("memory over a bound: %+v", m)
		}
		if cs.FlightIndexBytes > cs.Backlog.MaxBytes {
			w.h.violation("flight index: %d bytes over the backlog's bound of %d", cs.FlightIndexBytes, cs.Backlog.MaxBytes)
		}
	}
	if s.ReadCacheBytes > s.ReadCacheBoundBytes {
		w.h.violation("read cache: %d bytes over its bound of %d", s.ReadCacheBytes, s.ReadCacheBoundBytes)
	}
}

// selectDone waits until one of chans is closed or timeout passes; it
// returns the index, or -1 on timeout.
func selectDone(chans []<-chan struct{}, timeout <-chan time.Time) int {
	cases := make([]reflect.SelectCase, 0, len(chans)+1)
	for _, ch := range chans {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
	}
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timeout)})
	i, _, _ := reflect.Select(cases)
	if i == len(chans) {
		return -1
	}
	return i
}

// prelude is the upgrade path (plan.preludeOpens): before the main run,
// processes open the star one after another with settlement off, append to
// the shared streams and close cleanly, so the main run's processes, which
// settle, switch settlement on for a star with several epochs of history
// behind its trim cursor. Its appends are history like any other: every
// check of the final state covers them. It reports false (with a
// violation) if a prelude process could not open.
func (w *world) prelude(ctx context.Context) bool {
	if w.p.preludeOpens == 0 {
		return true
	}
	rng := rand.New(rand.NewPCG(w.o.Seed, 0x9e1d))
	w.settleOff = true
	defer func() { w.settleOff = false }()
	for i := 0; i < w.p.preludeOpens; i++ {
		pr, err := w.open(ctx)
		if err != nil {
			w.res.Violations = append(w.res.Violations, fmt.Sprintf("prelude open %d: %v", i, err))
			return false
		}
		if i == 0 {
			w.createStreams(ctx, pr)
		}
		for _, c := range chain.Classes() {
			for _, stream := range w.streams[c] {
				for b, n := 0, 1+rng.IntN(3); b < n; b++ {
					recs := []loglet.Record{{Body: fmt.Appendf(nil, "prelude%d.%s.%d", i, stream, b)}}
					op := w.h.newAppend(20000+i, pr.n, stream, recs, nil)
					actx, cancel := context.WithTimeout(ctx, time.Minute)
					ack, err := pr.star.Append(actx, stream, loglet.Batch{Records: op.recs})
					cancel()
					w.h.finish(op, ack, err)
				}
			}
		}
		w.closeStar(pr.star, fmt.Sprintf("proc-%d (prelude)", pr.n))
		w.smu.Lock()
		w.res.PreludeOpens++
		w.smu.Unlock()
	}
	for _, c := range chain.Classes() {
		rec, _, err := chain.ReadEpoch(ctx, w.meta, starName, c)
		if err != nil {
			w.res.Violations = append(w.res.Violations, fmt.Sprintf("prelude: read the %s epoch record: %v", c, err))
			return false
		}
		w.preludeEpoch[c] = rec.Epoch
	}
	return true
}
