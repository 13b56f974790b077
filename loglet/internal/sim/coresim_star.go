package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/loglet/internal/chaincore"
	"github.com/flightlog/flightlog/loglet/internal/starcore"
	"github.com/flightlog/flightlog/loglet/internal/work"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// The star-leadership run of the core simulation: two or three processes
// open one star at once, each through its own leadership core
// (loglet/internal/starcore) driving one chain core per enabled class
// (loglet/internal/chaincore), all stepped by the core simulation's loop in
// virtual time (the chain cores' requests executed in line by
// loglet/internal/work against objstore.Mem buckets and a metastore.Mem;
// the leadership's own reads with a drawn latency). Every choice comes
// from the seed, so a seed replays its exact trace. Before the rivals, the
// star is fresh, or was held by a process that crashed, or closed cleanly.
//
// The checker: a process whose opening failed runs no chain; at the end
// (once every opening ended and the deposed chains found out) one process
// serves the star and holds every chain (each epoch record names it at
// the epoch its chain core leads: never one chain each), no other process
// serves from any chain; the winner's Close seals every chain cleanly;
// a fresh process then opens the star.

// StarOptions configure one run of the star-leadership simulation.
type StarOptions struct {
	Seed uint64
	// Trace, if set, receives the run's trace as text.
	Trace io.Writer
	// BlindHoldChecks plants a bug in the shell: it answers the
	// leadership's reads of the first chain's epoch record and checkpoint
	// as if this process still held it, so no opening ever finds a rival
	// there, and it reports no chain lost while serving (whose take-back
	// would mend the split). The checker must then find a star split
	// between processes.
	BlindHoldChecks bool
}

// StarResult is what one star-leadership run found.
type StarResult struct {
	Seed       uint64
	Plan       string
	Trace      uint64 // a hash of the whole trace: equal runs, equal hashes
	Steps      int
	SimTime    time.Duration
	Violations []string

	Opens, Served, Failed int // star openings: started, served, failed
	Retakes               int // later chains taken again in an opening
	// Together: openings that took every chain over at once (each record
	// sealed cleanly, with RefuseLiveOwner: a planned handoff).
	Together int
	Winner   string
}

// Failed reports whether the run found a violation.
func (r *StarResult) failed() bool { return len(r.Violations) > 0 }

type starPlan struct {
	rivals  int
	startAt []time.Duration // each rival's start, from the rivals' start
	before  string          // "fresh", "crashed", "closed": the star's previous owner
	// refuseLive: every opening refuses a live owner (RefuseLiveOwner, as
	// the fleet's and the CLI's do), drawn for a star closed cleanly before
	// the rivals: their openings then take every chain over at once.
	refuseLive bool
	// allAtOnce: an opening with no rival (the previous owner's, the
	// final process's) takes every chain over at once
	// (starcore.Config.AllAtOnce: the host keeps rivals out). The rivals,
	// who open together, never set it: with the promise broken, acks stay
	// safe but two rivals may end with one chain each.
	allAtOnce  bool
	classes    []chain.Class
	putMedian  time.Duration
	metaMedian time.Duration
	metaErr    float64
}

func drawStarPlan(seed uint64) starPlan {
	r := rand.New(rand.NewPCG(seed, 0x57a2))
	p := starPlan{rivals: 2 + r.IntN(2), classes: []chain.Class{chain.Standard, chain.Express}}
	spread := []int{2_000, 40_000, 300_000}[r.IntN(3)] // µs: tight, close, loose
	for range p.rivals {
		p.startAt = append(p.startAt, time.Duration(r.IntN(spread))*time.Microsecond)
	}
	p.before = []string{"fresh", "crashed", "closed"}[r.IntN(3)]
	if r.IntN(6) == 0 {
		p.classes = []chain.Class{chain.Express} // Standard disabled
	}
	p.putMedian = time.Duration(500+r.IntN(9500)) * time.Microsecond
	p.metaMedian = time.Duration(200+r.IntN(4800)) * time.Microsecond
	if r.IntN(2) == 0 {
		p.metaErr = r.Float64() * 0.03
	}
	// Drawn from a generator of its own, so every other draw of a seed is
	// what it was before the draw existed.
	own := rand.New(rand.NewPCG(seed, 0x11fe))
	p.refuseLive = p.before == "closed" && own.IntN(2) == 0
	p.allAtOnce = own.IntN(3) == 0
	return p
}

func (p starPlan) String() string {
	return fmt.Sprintf("%d rivals starting at %v; before them: %s; classes %v; refuse live owners %v; all at once %v; put median %v, meta median %v, meta errors %.3f",
		p.rivals, p.startAt, p.before, p.classes, p.refuseLive, p.allAtOnce, p.putMedian, p.metaMedian, p.metaErr)
}

// starWorld is one star-leadership run on top of a coreWorld (its clock,
// trace, generator and chain-core loop).
type starWorld struct {
	cw      *coreWorld
	p       starPlan
	res     *StarResult
	buckets [2][]objstore.Store
	names   [2][]string
	w       [2]int
	stars   []*starProc
	blind   bool // StarOptions.BlindHoldChecks
}

// starProc is one process opening the star: its leadership core, its
// chain cores by class, and the leadership's reads out.
type starProc struct {
	n      int
	owner  string
	meta   metastore.Store
	lead   *starcore.Core
	chains [2]*coreProc
	// starting: a StartChain is out for the class; closing: a CloseChain.
	starting, closing [2]bool
	reads             []*starRead
	state             string // opening, serving, failed, closing, closed, crashed
	err               error
	retried           bool // its host opened the star again after it failed
	// refuse: its opening refuses a live owner (Config.RefuseLiveOwner);
	// alone: no rival opens the star meanwhile (openAlone).
	refuse, alone bool
}

type starRead struct {
	req starcore.Request
	id  uint64
	due time.Time
}

// RunCoreStar runs one seed of the star-leadership simulation.
func RunCoreStar(o StarOptions) *StarResult {
	p := drawStarPlan(o.Seed)
	cw := &coreWorld{o: CoreOptions{Seed: o.Seed}, p: corePlan{putMedian: p.putMedian, metaMedian: p.metaMedian},
		rng: rand.New(rand.NewPCG(o.Seed, 0x5ea7)), res: &CoreResult{Seed: o.Seed},
		trace: xxhash.New(), out: o.Trace, start: time.Unix(1_700_000_000, 0)}
	cw.now = cw.start
	cw.meta = metastore.NewMem()
	sw := &starWorld{cw: cw, p: p, blind: o.BlindHoldChecks, res: &StarResult{Seed: o.Seed, Plan: p.String()}}
	for _, c := range chain.Classes() {
		k, w := 3, 2
		if c == chain.Standard {
			k, w = 1, 1
		}
		sw.w[c] = w
		for i := range k {
			sw.buckets[c] = append(sw.buckets[c], objstore.NewMem())
			sw.names[c] = append(sw.names[c], fmt.Sprintf("%s-%d", c, i))
		}
	}
	sw.run()
	sw.res.Trace = cw.trace.Sum64()
	sw.res.Steps = cw.res.Steps
	sw.res.SimTime = cw.now.Sub(cw.start)
	sw.res.Violations = append(sw.res.Violations, cw.bad...)
	return sw.res
}

// run is the run: the previous owner, the rivals, settling, the checks,
// the winner's Close, a fresh process's opening.
func (sw *starWorld) run() {
	cw := sw.cw
	cw.tracef("plan: %s", sw.p)
	if sw.p.before != "fresh" {
		p0 := sw.openAlone()
		if p0.state != "serving" {
			cw.violation("the previous owner did not open: %v", p0.err)
			return
		}
		sw.runFor(300 * time.Millisecond)
		if sw.p.before == "crashed" {
			sw.crash(p0)
		} else {
			sw.close(p0)
			if !sw.runUntil(func() bool { return p0.state == "closed" }, time.Minute) {
				cw.violation("the previous owner did not close")
				return
			}
		}
	}
	// The rivals, each starting at its drawn time.
	t0 := cw.now
	starts := make([]time.Time, len(sw.p.startAt))
	for i, d := range sw.p.startAt {
		starts[i] = t0.Add(d)
	}
	var rivals []*starProc
	retries := 0
	for len(rivals) < len(starts) || slices.ContainsFunc(rivals, func(s *starProc) bool { return s.state == "opening" }) {
		if cw.now.Sub(t0) > 10*time.Minute || cw.res.Steps > 1_000_000 {
			cw.violation("the rivals' openings did not end within 10 virtual minutes")
			return
		}
		limit := cw.now.Add(time.Second)
		if len(rivals) < len(starts) {
			limit = starts[len(rivals)]
		}
		if !sw.stepOne(limit) {
			if limit.After(cw.now) {
				cw.now = limit
			}
			if len(rivals) < len(starts) && !cw.now.Before(starts[len(rivals)]) {
				rivals = append(rivals, sw.open(sw.p.refuseLive, false))
			}
		}
		// A host whose Open failed for another reason than a rival (the
		// metastore failed a read) opens the star again, as a new process.
		for _, r := range rivals {
			if r.state == "failed" && !r.retried && !errors.Is(r.err, starcore.ErrTakeoverLost) && retries < 4 {
				r.retried = true
				retries++
				cw.tracef("%s's host retries", r.owner)
				rivals = append(rivals, sw.open(false, false))
				starts = append(starts, cw.now)
			}
		}
	}
	// Let the deposed chains find out (each checks its checkpoint's seal
	// every SealCheckInterval), then check who holds what.
	sw.runFor(2 * time.Second)
	winner := sw.check()
	if winner == nil {
		return
	}
	sw.res.Winner = winner.owner
	prev := sw.epochs()
	sw.close(winner)
	if !sw.runUntil(func() bool { return winner.state == "closed" }, time.Minute) {
		cw.violation("%s did not close", winner.owner)
		return
	}
	if winner.err != nil {
		cw.violation("%s closed with %v", winner.owner, winner.err)
	}
	for _, c := range sw.p.classes {
		rec, _, err := chain.ReadEpoch(context.Background(), cw.meta, starName, c)
		if err != nil || rec.Seal == nil || rec.Seal.Epoch != rec.Epoch || !rec.Seal.Clean {
			cw.violation("%s: after %s's Close the epoch record is not sealed cleanly: %+v %v", c, winner.owner, rec.Seal, err)
		}
	}
	// A fresh process continues from the clean seals.
	final := sw.openAlone()
	if final.state != "serving" {
		cw.violation("the final process did not open: %v", final.err)
		return
	}
	for _, c := range sw.p.classes {
		if got := final.chains[c].core.Epoch(); got <= prev[c] {
			cw.violation("%s: the final process leads epoch %d, not past %d", c, got, prev[c])
		}
	}
	sw.check()
	sw.close(final)
	if !sw.runUntil(func() bool { return final.state == "closed" }, time.Minute) || final.err != nil {
		cw.violation("the final process did not close cleanly: %v", final.err)
	}
}

// openAlone opens the star with no rival and waits for the opening; a
// host whose Open failed for another reason than a rival (the metastore
// failed a read) opens it again, as a new process, up to 4 times.
func (sw *starWorld) openAlone() *starProc {
	refuse := sw.p.refuseLive
	for try := 1; ; try++ {
		s := sw.open(refuse, true)
		if !sw.runUntil(func() bool { return s.state != "opening" }, time.Minute) {
			return s
		}
		refuse = false
		if s.state != "failed" || errors.Is(s.err, starcore.ErrTakeoverLost) || try == 5 {
			return s
		}
		sw.cw.tracef("%s's host retries", s.owner)
	}
}

// A host whose opening failed opens the star again deposing a live owner
// (as a fleet member does after its HandoffWait, and the CLI with
// --takeover): the failed opening left the epochs it minted unsealed, which
// a refusing opening would refuse for ever.

// open starts a process opening the star, refusing a live owner if refuse,
// with no rival if alone.
func (sw *starWorld) open(refuse, alone bool) *starProc {
	cw := sw.cw
	n := len(sw.stars)
	s := &starProc{n: n, owner: fmt.Sprintf("star-%d", n), state: "opening", refuse: refuse, alone: alone}
	mf := metastore.WithFaults(cw.meta, cw.o.Seed*1000+500+uint64(n))
	mf.SetErrorRate(sw.p.metaErr)
	s.meta = mf
	classes := make([]starcore.Class, len(sw.p.classes))
	for i, c := range sw.p.classes {
		classes[i] = starcore.Class(c)
	}
	lead, err := starcore.New(starcore.Config{Star: starName, Owner: s.owner, Classes: classes, MaxTakeovers: 4, RefuseLiveOwner: refuse, AllAtOnce: alone && sw.p.allAtOnce})
	if err != nil {
		cw.violation("starcore.New: %v", err)
		s.state = "failed"
		return s
	}
	s.lead = lead
	sw.stars = append(sw.stars, s)
	sw.res.Opens++
	cw.tracef("%s opens (refusing a live owner: %v)", s.owner, refuse)
	if err := lead.Open(); err != nil {
		cw.violation("%s: Open: %v", s.owner, err)
	}
	sw.drainLead(s)
	return s
}

// openChain starts a chain core for class c of star s: it begins the
// chain's opening at once.
func (sw *starWorld) openChain(s *starProc, c chain.Class, refuseLive bool) *coreProc {
	cw := sw.cw
	n := len(cw.procs)
	mf := metastore.WithFaults(cw.meta, cw.o.Seed*1000+uint64(n))
	mf.SetErrorRate(sw.p.metaErr)
	retry := chain.RetryPolicy{MinBackoff: time.Microsecond, MaxBackoff: time.Microsecond, Jitter: fixedJitter}
	pr := &coreProc{n: n, owner: s.owner, streams: map[string]*chaincore.Stream{}}
	pr.env = &work.Env{Star: starName, Class: c, Owner: s.owner, Stores: sw.buckets[c], Names: sw.names[c], W: sw.w[c], Meta: mf,
		Codec: envelope.CodecNone, Retry: retry, Now: func() time.Time { return cw.now }, FenceParallel: 1}
	pr.putEnv = pr.env
	pr.core = chaincore.New(chaincore.Config{
		Star: starName, Class: c, Owner: s.owner, Buckets: sw.names[c], W: sw.w[c], Window: 4,
		FlushDeadline: 5 * time.Millisecond, FlightBytes: 4096, MaxBatchBytes: 512, CommitDeadline: time.Second, StragglerTimeout: 3 * time.Second,
		BacklogFlights: 8, BacklogBytes: 1 << 20, AbsorbInterval: 20 * time.Millisecond, AbsorbMaxSlots: 4,
		SealCheckInterval: 200 * time.Millisecond, RefuseLiveOwner: refuseLive,
	}, cw.now)
	cw.procs = append(cw.procs, pr)
	cw.tracef("%s starts its %s chain as p%d", s.owner, c, n)
	cw.drain(pr)
	return pr
}

// drainLead executes what s's leadership core asks for until it asks
// nothing more: reads go out with a latency; the rest is done at once.
func (sw *starWorld) drainLead(s *starProc) {
	cw := sw.cw
	for {
		rd := s.lead.Ready()
		if rd.Empty() {
			return
		}
		for _, l := range rd.Logs {
			cw.tracef("%s log %s", s.owner, l.Msg)
			switch l.Msg {
			case "lost a chain's takeover to a rival while holding the star's first chain; taking it again":
				sw.res.Retakes++
			case "taking every chain over at once":
				sw.res.Together++
			}
		}
		if r := rd.Opened; r != nil {
			s.err = r.Err
			if r.Err == nil {
				s.state = "serving"
				sw.res.Served++
			} else {
				s.state = "failed"
				sw.res.Failed++
			}
			cw.tracef("%s opened: %v", s.owner, r.Err)
			sw.checkServing(s)
		}
		if r := rd.Closed; r != nil {
			s.err = r.Err
			if s.state != "crashed" {
				s.state = "closed"
			}
			cw.tracef("%s closed: %v", s.owner, r.Err)
		}
		for _, r := range rd.Requests {
			sw.execLead(s, r)
		}
	}
}

// execLead executes one of s's leadership requests.
func (sw *starWorld) execLead(s *starProc, r starcore.Request) {
	cw := sw.cw
	step := func(ev starcore.Event) {
		if err := s.lead.Step(ev); err != nil {
			cw.violation("%s: %v", s.owner, err)
		}
	}
	switch r := r.(type) {
	case starcore.ReadEpoch, starcore.ReadCheckpoint:
		cw.issued++
		q := &starRead{req: r, id: cw.issued, due: cw.now.Add(cw.latency(chaincore.ReadCheckpoint{}))}
		s.reads = append(s.reads, q)
		cw.tracef("%s req#%d %s due +%v", s.owner, q.id, starcore.Describe(r), q.due.Sub(cw.now))
	case starcore.StartChain:
		c := chain.Class(r.Class)
		cw.tracef("%s %s", s.owner, starcore.Describe(r))
		s.chains[c] = sw.openChain(s, c, s.refuse && !r.Depose)
		s.starting[c] = true
	case starcore.Abandon:
		if pr := s.chains[r.Class]; pr != nil && !pr.stopped && !pr.crashed {
			pr.crashed, pr.pending = true, nil
		}
		cw.tracef("%s %s", s.owner, starcore.Describe(r))
		s.starting[r.Class] = false
		step(starcore.Abandoned{Class: r.Class})
	case starcore.CloseChain:
		pr := s.chains[r.Class]
		cw.tracef("%s %s (p%d)", s.owner, starcore.Describe(r), pr.n)
		pr.closing = true
		pr.core.Close(cw.now)
		s.closing[r.Class] = true
		cw.drain(pr)
	case starcore.ReleaseHost:
		step(starcore.HostReleased{})
	default:
		cw.violation("%s: unknown leadership request %T", s.owner, r)
	}
}

// completeRead executes a leadership read that came due.
func (sw *starWorld) completeRead(s *starProc, q *starRead) {
	cw := sw.cw
	s.reads = slices.DeleteFunc(s.reads, func(x *starRead) bool { return x == q })
	ctx := context.Background()
	var ev starcore.Event
	switch r := q.req.(type) {
	case starcore.ReadEpoch:
		rec, _, err := chain.ReadEpoch(ctx, s.meta, starName, chain.Class(r.Class))
		e := starcore.EpochRead{Class: r.Class, Err: err, Record: starcore.EpochRecord{Epoch: rec.Epoch, Owner: rec.Owner}}
		if errors.Is(err, metastore.ErrNotFound) {
			e = starcore.EpochRead{Class: r.Class, Missing: true}
		}
		if rec.Seal != nil {
			e.Record.Sealed, e.Record.SealEpoch = true, rec.Seal.Epoch
		}
		cw.tracef("%s done#%d epoch %s: %d of %q err=%v", s.owner, q.id, r.Class, rec.Epoch, rec.Owner, err)
		ev = e
	case starcore.ReadCheckpoint:
		cp, _, err := absorb.ReadCheckpoint(ctx, s.meta, starName, chain.Class(r.Class))
		cw.tracef("%s done#%d checkpoint %s: sealed by %q for %d err=%v", s.owner, q.id, r.Class, cp.Owner, cp.OwnerEpoch, err)
		ev = starcore.CheckpointRead{Class: r.Class, Owner: cp.Owner, OwnerEpoch: cp.OwnerEpoch, Err: err}
	}
	if sw.blind && s.lead.Phase() == "hold-check" {
		// The planted bug: whatever the store says, the first is ours (the
		// hold check's reads; the live check's, before any chain started,
		// are answered as they are).
		switch r := q.req.(type) {
		case starcore.ReadEpoch:
			ev = starcore.EpochRead{Class: r.Class, Record: starcore.EpochRecord{Epoch: s.chains[r.Class].core.Epoch(), Owner: s.owner}}
		case starcore.ReadCheckpoint:
			ev = starcore.CheckpointRead{Class: r.Class, Owner: s.owner, OwnerEpoch: s.chains[r.Class].core.Epoch()}
		}
	}
	if err := s.lead.Step(ev); err != nil {
		cw.violation("%s: %v", s.owner, err)
	}
	sw.drainLead(s)
}

// react steps every chain opening or close that ended into its star's
// leadership core.
func (sw *starWorld) react() {
	for changed := true; changed; {
		changed = false
		for _, s := range sw.stars {
			for _, c := range chain.Classes() {
				pr := s.chains[c]
				switch {
				case s.starting[c] && (pr.opened || pr.openErr != nil || pr.stopped):
					s.starting[c] = false
					ev := starcore.ChainOpened{Class: starcore.Class(c), Outcome: starcore.OutcomeOpened, Epoch: pr.core.Epoch()}
					if !pr.opened {
						ev.Outcome, ev.Err = starcore.OutcomeFailed, pr.openErr
						switch {
						case errors.Is(pr.openErr, chaincore.ErrTakeoverLost):
							ev.Outcome = starcore.OutcomeLost
						case errors.Is(pr.openErr, chaincore.ErrLiveOwner):
							ev.Outcome = starcore.OutcomeLiveOwner
						case pr.openErr == nil:
							ev.Err = errors.New("sim: the chain stopped before it opened")
						}
					}
					if err := s.lead.Step(ev); err != nil {
						sw.cw.violation("%s: %v", s.owner, err)
					}
				case sw.lostWhileServing(s, c):
					f := pr.core.Dead()
					sw.cw.tracef("%s lost its %s chain while serving (p%d): %v", s.owner, c, pr.n, f.Cause)
					if err := s.lead.ChainLost(starcore.Class(c), f.Cause); err != nil {
						sw.cw.violation("%s: %v", s.owner, err)
					}
				case s.closing[c] && pr.stopped:
					s.closing[c] = false
					if err := s.lead.Step(starcore.ChainClosed{Class: starcore.Class(c), Err: pr.core.CloseError()}); err != nil {
						sw.cw.violation("%s: %v", s.owner, err)
					}
				default:
					continue
				}
				changed = true
				sw.drainLead(s)
			}
		}
	}
	sw.checkAbandoned()
}

// lostWhileServing reports whether s serves the star from class c's
// chain by its leadership core's account while the chain core found a
// successor (deposed): the leadership is told (ChainLost), which takes a
// later chain back if s still holds the first. Reported only while the
// leadership serves (not during another retake: it is reported once that
// one ends).
func (sw *starWorld) lostWhileServing(s *starProc, c chain.Class) bool {
	pr := s.chains[c]
	if sw.blind {
		// The planted shell sees no rival anywhere: nor a chain lost
		// while serving (which would take the split it makes back).
		return false
	}
	if s.state != "serving" || s.lead.Phase() != "serving" || pr == nil || !pr.opened || pr.stopped || pr.crashed {
		return false
	}
	if _, held := s.lead.Holds(starcore.Class(c)); !held {
		return false
	}
	f := pr.core.Dead()
	return f != nil && (f.Deposed != nil || errors.Is(f.Cause, chaincore.ErrDeposed))
}

// stepOne executes the earliest thing due at or before limit: a chain
// core's event (the core simulation's loop) or a leadership read (a chain
// core's event first on a tie). It reports false when nothing is due.
func (sw *starWorld) stepOne(limit time.Time) bool {
	cw := sw.cw
	sw.react()
	var best *starRead
	var owner *starProc
	for _, s := range sw.stars {
		for _, q := range s.reads {
			if best == nil || q.due.Before(best.due) || (q.due.Equal(best.due) && q.id < best.id) {
				best, owner = q, s
			}
		}
	}
	lim := limit
	if best != nil && best.due.Before(lim) {
		lim = best.due
	}
	if cw.stepOne(lim) {
		sw.react()
		return true
	}
	if best == nil || best.due.After(limit) {
		return false
	}
	if best.due.After(cw.now) {
		cw.now = best.due
	}
	cw.res.Steps++
	sw.completeRead(owner, best)
	sw.react()
	return true
}

func (sw *starWorld) runUntil(cond func() bool, limit time.Duration) bool {
	end := sw.cw.now.Add(limit)
	for !cond() {
		if !sw.stepOne(end) {
			return cond()
		}
	}
	return true
}

// runFor steps everything due in the next d of virtual time.
func (sw *starWorld) runFor(d time.Duration) {
	end := sw.cw.now.Add(d)
	for sw.stepOne(end) {
	}
	sw.cw.now = end
}

func (sw *starWorld) close(s *starProc) {
	s.state = "closing"
	sw.cw.tracef("%s close", s.owner)
	if err := s.lead.Close(); err != nil {
		sw.cw.violation("%s: %v", s.owner, err)
	}
	sw.drainLead(s)
}

// crash stops s dead: its leadership core abandons every chain.
func (sw *starWorld) crash(s *starProc) {
	s.state = "crashed"
	sw.cw.tracef("%s crashes", s.owner)
	if err := s.lead.Crash(); err != nil {
		sw.cw.violation("%s: %v", s.owner, err)
	}
	sw.drainLead(s)
}

// serving reports whether chain core pr still serves: opened, not
// stopped, crashed or dead (deposed).
func serving(pr *coreProc) bool {
	return pr != nil && pr.opened && !pr.stopped && !pr.crashed && pr.core.Dead() == nil
}

// checkServing checks a star that just reported its opening: served, it
// holds every chain and each chain core serves; failed, it runs none.
func (sw *starWorld) checkServing(s *starProc) {
	for _, c := range sw.p.classes {
		_, held := s.lead.Holds(starcore.Class(c))
		switch {
		case s.state == "serving" && (!held || s.chains[c] == nil || !s.chains[c].opened):
			sw.cw.violation("%s serves the star but does not hold its %s chain", s.owner, c)
		case s.state == "failed" && held:
			sw.cw.violation("%s's opening failed but it still holds the %s chain", s.owner, c)
		}
	}
}

// checkAbandoned: a process whose opening failed (or that closed or
// crashed) serves from no chain.
func (sw *starWorld) checkAbandoned() {
	for _, s := range sw.stars {
		if s.state == "failed" || s.state == "closed" || s.state == "crashed" {
			for _, c := range chain.Classes() {
				if serving(s.chains[c]) {
					sw.cw.violation("%s (%s) still serves from its %s chain (p%d)", s.owner, s.state, c, s.chains[c].n)
				}
			}
		}
	}
}

// epochs reads each class's current epoch.
func (sw *starWorld) epochs() [2]uint64 {
	var out [2]uint64
	for _, c := range sw.p.classes {
		rec, _, _ := chain.ReadEpoch(context.Background(), sw.cw.meta, starName, c)
		out[c] = rec.Epoch
	}
	return out
}

// check is the end state's check: one process serves the star and holds
// every chain, as the epoch records say; no other serves from any chain.
// It returns the winner.
func (sw *starWorld) check() *starProc {
	cw := sw.cw
	// A process that served and was deposed since (a later rival took the
	// star over) keeps serving no chain: its chain cores found the
	// rival's seal. The winner is the one whose every chain serves.
	var winners []*starProc
	for _, s := range sw.stars {
		if s.state != "serving" {
			continue
		}
		n := 0
		for _, c := range sw.p.classes {
			if serving(s.chains[c]) {
				n++
			}
		}
		switch n {
		case len(sw.p.classes):
			winners = append(winners, s)
		case 0: // deposed
		default:
			cw.violation("%s serves the star from %d of its %d chains", s.owner, n, len(sw.p.classes))
		}
	}
	var owners []string
	for _, c := range sw.p.classes {
		rec, _, err := chain.ReadEpoch(context.Background(), cw.meta, starName, c)
		if err != nil {
			cw.violation("read the %s epoch record: %v", c, err)
		}
		owners = append(owners, fmt.Sprintf("%s=%s@%d", c, rec.Owner, rec.Epoch))
		for _, s := range sw.stars {
			pr := s.chains[c]
			if !serving(pr) {
				continue
			}
			if rec.Owner != s.owner || rec.Epoch != pr.core.Epoch() {
				cw.violation("%s serves from its %s chain at epoch %d (p%d), which it does not hold: the record names %s at %d", s.owner, c, pr.core.Epoch(), pr.n, rec.Owner, rec.Epoch)
			}
			if s.state != "serving" {
				cw.violation("%s (%s) serves from its %s chain", s.owner, s.state, c)
			}
		}
	}
	cw.tracef("end: %d serving; records %v", len(winners), owners)
	if len(winners) != 1 {
		cw.violation("%d processes hold every chain at the end, not one (records: %v)", len(winners), owners)
		return nil
	}
	return winners[0]
}
