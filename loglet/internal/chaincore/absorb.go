package chaincore

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	absorb "github.com/flightlog/flightlog/absorb/absorbval"
	chain "github.com/flightlog/flightlog/chain/chainval"
	"github.com/flightlog/flightlog/internal/invariants"
	metastore "github.com/flightlog/flightlog/metastore/metaval"
)

// absorbState is the absorb's part of the core: released flights waiting
// for a round, the tails as of the checkpoint, the round planned (a retry
// commits exactly it, never a re-plan), and the round's pacing.
type absorbState struct {
	queue []*flight // released, not yet absorbed, in release order
	tails tailMap   // persistent: a full snapshot freezes it (tails.go)

	planned     *plannedRound
	busy        bool      // a request of a round is out (PutSnapshot, CommitRound, DropSnapshots)
	commitStart time.Time // when it went out
	lastAt      time.Time // when the last round went out (pacing)
	retryAt     time.Time
	backoff     time.Duration
	lastFailed  bool  // the last commit attempt failed
	lastErr     error // its error

	cpEpoch, cpNext uint64 // the checkpoint: every slot before it is absorbed
	snapshot        string // the tails snapshot the checkpoint names
	indexBytes      int64  // payload bytes in every stream's flight index

	// The tails snapshots cost what changed: a round writes a delta of the
	// streams changed since the last full snapshot (base), and a full one
	// only once the delta outgrows its share of the base (deltaShare).
	base                 string              // the full snapshot deltas build on ("" before the first)
	baseBytes            int                 // its size
	baseStreams          int                 // the streams it holds
	baseRound            uint64              // the round that wrote it
	deltaBytes           int                 // the size of the last delta over it (0: none yet)
	dirty                map[string]struct{} // streams changed since base
	doomed               []doomedSnapshot    // snapshots no longer needed, deleted a while later (oldest first)
	roundNo              uint64              // rounds committed
	snapBytes, fullSnaps uint64
	// plan numbers this writer's plans of the round from the checkpoint
	// (absorb.TailsRoundKey): it moves on when a refused round is planned
	// again, so the new round's snapshot never takes the refused round's
	// object for its own, and starts again at 0 when the checkpoint moves.
	plan uint64

	rounds, refs, failures, requests uint64
	earlyRounds                      uint64 // rounds started before their interval: the backlog needed them
	roundLatency                     histogramH

	maxSlots   int       // > 0: rounds cover at most this many slots (after a refusal)
	verifiedAt time.Time // the seal was last found ours (a round, or a check)
	checkOut   bool      // a ReadCheckpoint is out
	sealChecks uint64
}

// plannedRound is a round planned (refs built, tails advanced) and not yet
// committed.
type plannedRound struct {
	flights []*flight // the released flights it absorbs (nil: a walk round)
	slots   int
	round   absorb.Round
	refs    []absorb.SpanRef
	snapKey string
	snap    TailsView                     // the snapshot's streams, which the executor encodes (PutSnapshot)
	base    string                        // the full snapshot a delta builds on ("" for a full one)
	bytes   int                           // its encoded size, once written
	written bool                          // snap is written at snapKey: the commit is next
	full    bool                          // snap is a full snapshot (else a delta over base)
	exact   bool                          // the checkpoint's pending round, replayed as it is
	undo    map[string]*absorb.StreamTail // tails before the plan (nil: none)
	doomed  []string                      // the doomed snapshots its checkpoint records
	drop    []string                      // doomed snapshots this round's commit deletes
	first   time.Time                     // the first attempt
	// A round too large for one metastore Commit is committed in steps:
	// marked pending, its refs in chunks, then the checkpoint advanced.
	split    []int // the chunks' ends (nil: one Commit, or not known yet)
	marked   bool  // the checkpoint records it as pending
	refsDone int   // its refs before this are written
	// vers: the versions of its refs before refsDone, while every chunk
	// reported them (settlement's known refs); nil once one did not.
	vers     []metastore.Version
	versLost bool
	tried    int // no chunk at or past this was sent: refs before it may exist
	// sealTried: its commit was sent carrying the close's clean seal
	// (lastRound); a retry goes without it, and the seal after it.
	sealTried bool
}

// doomedSnapshot is a tails snapshot no longer needed (superseded, or
// written by a round that never committed), deleted once the chain has
// committed round at: a reader that read the checkpoint before it moved
// may still be reading it (for keepSnapshots rounds, about a second and a
// half at the default pacing). Every round's checkpoint records the doomed
// snapshots (absorb.Checkpoint.Doomed) until a round has deleted them from
// every bucket, so a successor inherits what a handoff leaves undeleted.
type doomedSnapshot struct {
	key string
	at  uint64
}

// keepSnapshots is how many rounds a superseded snapshot is kept.
const keepSnapshots = 16

// maxDoomed bounds the doomed snapshots kept waiting: past it the oldest
// are deleted at the next round whatever their age (only handoffs in quick
// succession, each inheriting its predecessor's, get there).
const maxDoomed = absorb.MaxDoomedSnapshots / 2

// Round backoff after a failed commit.
const (
	minRoundBackoff = 10 * time.Millisecond
	maxRoundBackoff = 2 * time.Second
)

// wakeAt is when the absorb next wants to act.
func (a *absorbState) wakeAt(c *Core) time.Time {
	if a.busy || c.checkpointOut() || !c.holds || c.sealed != nil {
		return time.Time{}
	}
	if a.planned != nil {
		return a.retryAt
	}
	if len(a.queue) > 0 && (c.phase == phaseServing || c.phase == phaseRecovering) && !c.closing {
		if c.backlogNeedsRound() {
			// Due now: maybeRound has started it, so the round out ends
			// in an event, not at a time.
			return time.Time{}
		}
		return a.lastAt.Add(c.cfg.AbsorbInterval)
	}
	return time.Time{}
}

// backlogNeedsRound reports whether the backlog holds at least
// AbsorbEarlyPercent of its flight or byte bound: then a round is due at
// once, not on the interval (so the bound, not the interval, paces a busy
// chain: BacklogBytes over the interval capped its ingest before).
func (c *Core) backlogNeedsRound() bool {
	pct := c.cfg.AbsorbEarlyPercent
	if pct <= 0 {
		return false
	}
	flights, bytes := c.backlog.Len()
	return (c.cfg.BacklogFlights > 0 && int64(flights)*100 >= int64(c.cfg.BacklogFlights)*int64(pct)) ||
		(c.cfg.BacklogBytes > 0 && bytes*100 >= c.cfg.BacklogBytes*int64(pct))
}

// maybeRound starts the absorb's next round when its pace allows: woken by
// releases, at least AbsorbInterval apart, or at once when the backlog is
// past AbsorbEarlyPercent of its bound (an early round), or while closing
// (then every released flight is absorbed at once); one epoch per round,
// at most AbsorbMaxSlots slots, one round out at a time. A planned round
// whose commit failed is retried as it is, after a backoff.
func (c *Core) maybeRound() {
	a := &c.ab
	if (c.phase != phaseServing && c.phase != phaseRecovering) || c.checkpointOut() || !c.holds || a.busy || c.sealed != nil {
		return // (sealed by a successor: the absorb never commits again)
	}
	if a.planned == nil {
		if len(a.queue) == 0 {
			return
		}
		early := false
		if !c.closing && c.now.Before(a.lastAt.Add(c.cfg.AbsorbInterval)) {
			if !c.backlogNeedsRound() {
				return
			}
			early = true
		}
		if !c.planQueued() {
			return
		}
		if early {
			a.earlyRounds++
			c.logf(slog.LevelDebug, "absorb round early: the backlog is past its mark", attrI("percent", c.cfg.AbsorbEarlyPercent), attrI("slots", a.planned.slots))
		}
	}
	if c.now.Before(a.retryAt) {
		return
	}
	c.sendRound()
}

// planQueued plans a round over the longest prefix of the queue that is of
// one epoch, up to AbsorbMaxSlots slots. A plan that does not continue the
// tails is a bug upstream: the chain stops rather than record a gap.
func (c *Core) planQueued() bool {
	a := &c.ab
	n := min(len(a.queue), c.roundSlots())
	e := a.queue[0].epoch
	for i := 1; i < n; i++ {
		if a.queue[i].epoch != e {
			n = i
			break
		}
	}
	flights := append([]*flight(nil), a.queue[:n]...)
	slots := make([]absorb.Slot, n)
	for i, f := range flights {
		slots[i] = absorb.Slot{Epoch: e, Slot: f.slot, Key: f.key, Frames: f.frames, Producers: producerMarks(f.batches), Fences: fenceMarks(f.batches)}
	}
	if err := c.plan(e, slots, flights); err != nil {
		c.die(Fate{Kind: OutcomeUnknown, Cause: fmt.Errorf("%w: %v", ErrHalted, err)})
		return false
	}
	return true
}

// plan builds the round over slots (consecutive slots of epoch e) and
// advances the tails to its end.
func (c *Core) plan(e uint64, slots []absorb.Slot, flights []*flight) error {
	a := &c.ab
	round := absorb.Round{Epoch: e, From: slots[0].Slot, To: slots[len(slots)-1].Slot + 1}
	writer := fmt.Sprintf("%s/%d/%d", c.cfg.Owner, e, round.From)
	undo := map[string]*absorb.StreamTail{} // the tails before the plan, to undo it
	for _, s := range slots {
		for _, f := range s.Frames {
			if _, ok := undo[f.Stream]; !ok {
				if t, ok := a.tails.get(f.Stream); ok {
					undo[f.Stream] = &t
				} else {
					undo[f.Stream] = nil
				}
			}
		}
	}
	// Plan reads and advances the tails of the round's streams only.
	roundTails := make(map[string]absorb.StreamTail, len(undo))
	for id, t := range undo {
		if t != nil {
			roundTails[id] = *t
		}
	}
	refs, err := absorb.Plan(c.cfg.Class.String(), writer, slots, roundTails)
	if err != nil {
		return err
	}
	for id, t := range roundTails {
		a.tails.set(id, t)
	}
	c.foldProducers(slots)
	c.foldFences(slots)
	// Keyed by the checkpoint the round advances from, not by its end: a
	// successor finds the snapshot if a crash or its seal stops the round
	// between the snapshot's PUT and the Commit (absorb.UncommittedSnapshots).
	key := absorb.TailsRoundKey(c.cfg.Star, c.cfg.Class, a.cpEpoch, a.cpNext, c.rec.Epoch, a.plan)
	snap, base := c.snapshotOf(refs)
	a.planned = &plannedRound{flights: flights, slots: len(slots), round: round, refs: refs, snapKey: key, snap: snap, base: base, full: base == "", first: c.now, undo: undo}
	return nil
}

// unplan drops the planned round, which nothing has written (the committer
// refused it before writing), and puts the tails back as they were.
func (c *Core) unplan() {
	a := &c.ab
	for id, t := range a.planned.undo {
		if t == nil {
			a.tails.del(id)
		} else {
			a.tails.set(id, *t)
		}
	}
	a.planned = nil
}

// roundSlots is how many slots the next round may cover: AbsorbMaxSlots,
// or fewer after a round the metastore refused as too large.
func (c *Core) roundSlots() int {
	if n := c.ab.maxSlots; n > 0 {
		return min(n, c.cfg.AbsorbMaxSlots)
	}
	return c.cfg.AbsorbMaxSlots
}

// roundRefused handles a round the metastore refused for good (a request
// over its size limit, a key it does not take): nothing was written. A
// round of several slots is planned again with half as many, unless the
// checkpoint records it as pending (then only it may commit next); a
// refusal that splitting cannot cure is permanent, and the chain stops
// loudly with the cause, which its producers then see, rather than stall
// for ever.
func (c *Core) roundRefused(p *plannedRound, err error) {
	a := &c.ab
	if errors.Is(err, metastore.ErrTooLarge) && p.slots > 1 && !p.exact && !p.marked {
		c.unplan()
		// Its snapshot was written before the metastore refused the round:
		// nothing names it. The smaller round from the same checkpoint
		// takes the key of the next plan.
		a.doom(p.snapKey)
		a.plan++
		a.maxSlots = max(1, p.slots/2)
		a.retryAt, a.lastAt = time.Time{}, time.Time{} // the smaller round is due now
		if c.phase == phaseOpening && c.succ != nil && len(c.succ.walks) > 0 {
			c.succ.walks[0].from = p.round.From // walk the range again, in smaller rounds
		}
		c.logf(slog.LevelWarn, "absorb round too large for the metastore; splitting it", attrU("epoch", p.round.Epoch), attrU("from", p.round.From), attrU("to", p.round.To), attrI("slots", a.maxSlots), attrE(err))
		return
	}
	cause := fmt.Errorf("%w: the metastore refuses the absorb of epoch %d [%d, %d) for good: %v", ErrHalted, p.round.Epoch, p.round.From, p.round.To, err)
	c.logf(slog.LevelError, "absorb refused by the metastore; the chain stops", attrE(cause))
	if c.phase == phaseOpening {
		c.failOpen(cause)
		return
	}
	c.die(Fate{Kind: OutcomeUnknown, Cause: cause})
}

// permanentMetaError reports whether a metastore error will not go away by
// retrying the same request.
func permanentMetaError(err error) bool {
	return errors.Is(err, metastore.ErrTooLarge) || errors.Is(err, metastore.ErrInvalidKey)
}

// A full tails snapshot is written when a delta would hold more than
// 1/deltaShare of the base's streams, or the last delta written was over
// 1/deltaShare of the base's bytes (streams with long producer windows
// weigh more than the average), or fullEvery rounds after the last full
// one (Config.TailsFullEvery): so a round's snapshot costs about
// 1/deltaShare of a full one at most (plus a full one's 1/fullEvery,
// amortized), and a reader needs at most two objects. The core decides
// without encoding anything: the executor encodes the snapshot (off the
// core's loop: a full one of a million streams takes seconds) and reports
// its size.
const (
	deltaShare = 16
	fullEvery  = 1024
)

// snapshotOf is the tails snapshot of a planned round, frozen (the
// executor encodes it): a delta of the streams changed since the base
// (returned), or a full snapshot (base "": a view of every tail, which
// costs the loop no copy; see tailMap).
func (c *Core) snapshotOf(refs []absorb.SpanRef) (TailsView, string) {
	a := &c.ab
	if a.dirty == nil {
		a.dirty = map[string]struct{}{}
	}
	for _, r := range refs {
		a.dirty[r.Stream] = struct{}{}
	}
	every := uint64(fullEvery)
	if c.cfg.TailsFullEvery > 0 {
		every = uint64(c.cfg.TailsFullEvery)
	}
	// (A base inherited at a takeover has no known size: baseBytes 0,
	// and the streams alone decide until this owner writes its own.)
	if a.base != "" && a.roundNo-a.baseRound < every && len(a.dirty)*deltaShare <= a.baseStreams && (a.baseBytes == 0 || a.deltaBytes*deltaShare <= a.baseBytes) {
		delta := make([]tailEntry, 0, len(a.dirty))
		for id := range a.dirty {
			t, _ := a.tails.get(id)
			delta = append(delta, tailEntry{id, t})
		}
		return TailsView{flat: delta, n: len(delta)}, a.base
	}
	return a.tails.freeze(), ""
}

// doom schedules the deletion of a snapshot no longer needed.
func (a *absorbState) doom(key string) {
	if key == "" || a.isDoomed(key) {
		return
	}
	a.doomed = append(a.doomed, doomedSnapshot{key: key, at: a.roundNo + keepSnapshots})
}

func (a *absorbState) isDoomed(key string) bool {
	return slices.ContainsFunc(a.doomed, func(d doomedSnapshot) bool { return d.key == key })
}

// dueDrops lists the doomed snapshots a round committed now may delete:
// those kept keepSnapshots rounds, and the oldest past maxDoomed.
func (a *absorbState) dueDrops() []string {
	var out []string
	over := len(a.doomed) - maxDoomed
	for i, d := range a.doomed {
		if (d.at <= a.roundNo || i < over) && d.key != a.base && d.key != a.snapshot {
			out = append(out, d.key)
		}
	}
	return out
}

// superseded lists what round p supersedes once committed: the snapshot
// the checkpoint names now, unless it is the base p builds on, and the
// base too when p is a full snapshot.
func (a *absorbState) superseded(p *plannedRound) []string {
	var out []string
	if p.full && a.base != "" {
		out = append(out, a.base)
	}
	if a.snapshot != "" && (p.full || a.snapshot != a.base) && !slices.Contains(out, a.snapshot) {
		out = append(out, a.snapshot)
	}
	return out
}

// doomedList is what the checkpoint of round p records as doomed: every
// snapshot doomed now and those p supersedes. Past the checkpoint's bound
// (deletes failing for a long time) the oldest are forgotten, left behind
// for an operator's fsck: the checkpoint must stay writable.
func (c *Core) doomedList(p *plannedRound) []string {
	a := &c.ab
	var out []string
	for _, d := range a.doomed {
		out = append(out, d.key)
	}
	for _, k := range a.superseded(p) {
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	if n := len(out) - absorb.MaxDoomedSnapshots; n > 0 {
		c.logf(slog.LevelWarn, "tails snapshots left undeleted: too many doomed ones could not be deleted", attrI("forgotten", n), attrS("oldest", out[0]))
		forget := out[:n]
		a.doomed = slices.DeleteFunc(a.doomed, func(d doomedSnapshot) bool { return slices.Contains(forget, d.key) })
		out = out[n:]
	}
	return out
}

// snapshotCommitted moves the snapshot bookkeeping on after round p
// committed: the delta or full it wrote is the checkpoint's now, what it
// superseded is doomed (what it deletes afterwards is forgotten in
// onSnapshotsDropped).
func (a *absorbState) snapshotCommitted(p *plannedRound) {
	sup := a.superseded(p)
	a.snapshot = p.snapKey
	a.plan = 0 // the next round's checkpoint is another: its keys are new
	a.roundNo++
	a.snapBytes += uint64(p.bytes)
	if p.full {
		a.fullSnaps++
		a.base, a.baseBytes, a.baseStreams, a.baseRound, a.deltaBytes = p.snapKey, p.bytes, p.snap.Len(), a.roundNo, 0
		clear(a.dirty)
	} else {
		a.deltaBytes = p.bytes
	}
	p.snap = TailsView{} // the view is garbage once written
	for _, k := range sup {
		a.doom(k)
	}
}

// sendRound takes the planned round's next step: the snapshot's PUT, or,
// once the snapshot is written, the commit.
func (c *Core) sendRound() {
	a := &c.ab
	p := a.planned
	a.busy = true
	a.commitStart, a.lastAt = c.now, c.now
	if !p.written {
		c.emit(PutSnapshot{Round: p.round, Key: p.snapKey, Streams: p.snap, Base: p.base})
		return
	}
	c.commitPlanned()
}

// commitPlanned sends the planned round's commit: its refs and the
// checkpoint, which records the doomed snapshots, the ones the round
// deletes afterwards among them.
func (c *Core) commitPlanned() {
	a := &c.ab
	p := a.planned
	a.busy = true
	p.doomed = c.doomedList(p)
	p.drop = slices.DeleteFunc(a.dueDrops(), func(k string) bool { return k == p.snapKey })
	base := a.base
	if p.full {
		base = ""
	}
	switch {
	case p.split == nil:
		var seal SealEpoch
		if c.lastRound(p) {
			// A clean close's last round: the seal goes in its Commit.
			p.sealTried = true
			c.noteSealing()
			seal = SealEpoch{Record: c.rec, Version: c.ver, Cut: c.window.Released()}
		}
		c.emit(CommitRound{Held: c.held, Round: p.round, Refs: p.refs, SnapshotKey: p.snapKey, SnapshotBase: base, Doomed: p.doomed, Seal: seal})
	case !p.marked:
		c.emit(MarkRoundPending{Held: c.held, Round: p.round})
	case p.refsDone < len(p.refs):
		lo := p.refsDone
		hi := len(p.refs)
		for _, end := range p.split {
			if end > lo {
				hi = end
				break
			}
		}
		mayExist := lo < p.tried
		p.tried = max(p.tried, hi)
		c.emit(CommitRefs{Held: c.held, Round: p.round, Refs: p.refs[lo:hi], To: hi, MayExist: mayExist})
	default:
		c.emit(AdvanceRound{Held: c.held, Round: p.round, SnapshotKey: p.snapKey, SnapshotBase: base, Doomed: p.doomed})
	}
}

// splitRound starts the steps of round p, which the metastore cannot take
// in one Commit: split names its chunks' ends. A checkpoint that already
// records p as pending (a predecessor's round replayed, or this owner's
// earlier attempt) needs no marking, and any of p's refs may be there.
func (c *Core) splitRound(p *plannedRound, split []int) {
	p.split, p.refsDone = split, 0
	if pend := c.held.Checkpoint.Pending; pend != nil && *pend == p.round {
		p.marked, p.tried = true, len(p.refs)
	}
	c.logf(slog.LevelDebug, "absorb round too large for one commit; committing it in steps", attrU("epoch", p.round.Epoch), attrU("from", p.round.From), attrU("to", p.round.To), attrI("chunks", len(split)))
	c.commitPlanned()
}

// roundStepFailed handles a failed step of the planned round p's commit:
// a successor's seal, a refusal for good, or a failure to retry after a
// backoff (the same step, as it is).
func (c *Core) roundStepFailed(p *plannedRound, held absorb.Held, err error) {
	a := &c.ab
	if errors.Is(err, absorb.ErrDeposed) {
		// The snapshot written stays behind, named by no checkpoint: the
		// successor finds it by its key (absorb.UncommittedSnapshots).
		a.lastFailed, a.lastErr = true, err
		a.failures++
		c.sealedAway(err)
		return
	}
	if held.Version != "" {
		c.hold(held) // as re-read
	}
	if permanentMetaError(err) {
		a.lastFailed, a.lastErr = true, err
		a.failures++
		c.roundRefused(p, err)
		return
	}
	// The snapshot is written: the retry takes the same step again, and
	// writes the snapshot no more.
	c.roundFailed(p, err)
}

// onRoundMarked goes on to the split round's first chunk once the
// checkpoint records it as pending.
func (c *Core) onRoundMarked(ev RoundMarked) {
	a := &c.ab
	a.busy = false
	a.requests += ev.Requests
	p := c.plannedFor(ev.Round, "RoundMarked")
	if ev.Err != nil {
		c.roundStepFailed(p, ev.Held, ev.Err)
		return
	}
	c.hold(ev.Held)
	p.marked = true
	c.roundStepNext()
}

// onRefsCommitted goes on to the split round's next chunk, or to its
// advance after the last.
func (c *Core) onRefsCommitted(ev RefsCommitted) {
	a := &c.ab
	a.busy = false
	a.requests += ev.Requests
	p := c.plannedFor(ev.Round, "RefsCommitted")
	if ev.Err != nil {
		c.roundStepFailed(p, ev.Held, ev.Err)
		return
	}
	c.hold(ev.Held)
	if !p.versLost && len(p.vers) == p.refsDone && ev.To-p.refsDone == len(ev.RefVersions) {
		p.vers = append(p.vers, ev.RefVersions...)
	} else {
		p.vers, p.versLost = nil, true
	}
	p.refsDone = max(p.refsDone, ev.To)
	c.roundStepNext()
}

// roundStepNext sends the planned round's next step at once, unless the
// chain was deposed or died meanwhile.
func (c *Core) roundStepNext() {
	if c.sealed != nil || (c.phase != phaseServing && c.phase != phaseRecovering && c.phase != phaseOpening) {
		return
	}
	a := &c.ab
	a.lastFailed, a.lastErr, a.backoff, a.retryAt = false, nil, 0, time.Time{}
	c.commitPlanned()
}

// plannedFor returns the planned round a result is for.
func (c *Core) plannedFor(r absorb.Round, what string) *plannedRound {
	p := c.ab.planned
	if p == nil || r != p.round {
		panic(fmt.Sprintf("leader: %s for %+v, which was not planned", what, r))
	}
	return p
}

// onSnapshotPut commits the round once its snapshot is written (at once:
// the round keeps the checkpoint until it is done), or backs off to put it
// again.
func (c *Core) onSnapshotPut(ev SnapshotPut) {
	a := &c.ab
	a.busy = false
	p := c.plannedFor(ev.Round, "SnapshotPut")
	if ev.Err != nil {
		if errors.Is(ev.Err, absorb.ErrSnapshotTaken) {
			// The snapshot's key holds an object that is not this round's
			// snapshot (one damaged after an earlier attempt wrote it, say),
			// and a PutIfAbsent never replaces it: the round writes the same
			// snapshot under the next plan's key, and the object there is
			// doomed. Retrying the same key would fail for ever.
			a.doom(p.snapKey)
			a.plan++
			p.snapKey = absorb.TailsRoundKey(c.cfg.Star, c.cfg.Class, a.cpEpoch, a.cpNext, c.rec.Epoch, a.plan)
			c.logf(slog.LevelWarn, "tails snapshot key taken by another object; writing the snapshot under a new key", attrU("epoch", p.round.Epoch), attrU("from", p.round.From), attrU("to", p.round.To), slog.String("key", p.snapKey), attrE(ev.Err))
		}
		c.roundFailed(p, ev.Err)
		return
	}
	p.written, p.bytes = true, ev.Bytes
	if c.sealed != nil || (c.phase != phaseServing && c.phase != phaseRecovering && c.phase != phaseOpening) {
		return // deposed or dead meanwhile: the round never commits
	}
	c.commitPlanned()
}

// roundFailed backs off to retry a step of the planned round that failed
// for a while: the same step, as it is (a snapshot written stays written).
func (c *Core) roundFailed(p *plannedRound, err error) {
	a := &c.ab
	a.lastFailed, a.lastErr = true, err
	a.failures++
	if a.backoff == 0 {
		c.logf(slog.LevelWarn, "absorb round failed; retrying", attrU("epoch", p.round.Epoch), attrU("from", p.round.From), attrU("to", p.round.To), attrE(err))
	}
	a.backoff = min(max(2*a.backoff, minRoundBackoff), maxRoundBackoff)
	a.retryAt = c.now.Add(a.backoff)
	if c.succ != nil && c.phase == phaseOpening {
		c.succ.retryAt = a.retryAt
	}
}

// onRoundCommitted advances the checkpoint after a committed round (and
// deletes the doomed snapshots due), or backs off to commit it again; a
// round that finds the seal gone means a successor sealed the chain.
func (c *Core) onRoundCommitted(ev RoundCommitted) {
	a := &c.ab
	a.busy = false
	a.requests += ev.Requests
	p := c.plannedFor(ev.Round, "RoundCommitted")
	if ev.Err != nil {
		c.roundStepFailed(p, ev.Held, ev.Err)
		return
	}
	if ev.Split != nil {
		if c.sealed != nil || (c.phase != phaseServing && c.phase != phaseRecovering && c.phase != phaseOpening) {
			return
		}
		c.splitRound(p, ev.Split)
		return
	}
	a.lastFailed, a.lastErr, a.backoff, a.retryAt = false, nil, 0, time.Time{}
	if a.maxSlots > 0 { // grow back after a split
		if a.maxSlots *= 2; a.maxSlots >= c.cfg.AbsorbMaxSlots {
			a.maxSlots = 0
		}
	}
	a.verifiedAt = c.now
	a.planned = nil
	c.hold(ev.Held)
	if invariants.Enabled {
		invariants.Assert(a.cpEpoch == p.round.Epoch && a.cpNext == p.round.To, "round %+v committed, the checkpoint held is at %d/%d", p.round, a.cpEpoch, a.cpNext)
	}
	var held int64
	for _, f := range p.flights {
		held += f.objBytes * int64(c.K())
	}
	c.st.noteRound(chain.Position{Epoch: a.cpEpoch, Next: a.cpNext}, c.now, held)
	vers := ev.RefVersions
	if p.split != nil && !p.versLost {
		vers = p.vers // a split round's, chunk by chunk
	}
	c.st.noteRefs(p.round, p.refs, vers) // settle_known.go
	a.snapshotCommitted(p)
	a.rounds++
	a.refs += uint64(len(p.refs))
	a.roundLatency.RecordDuration(c.now.Sub(p.first))
	if p.flights != nil {
		// The round is in the metastore: its flights leave the flight
		// index and free their backlog tokens.
		for _, f := range p.flights {
			for _, b := range f.batches {
				c.dropIndexed(b)
			}
		}
		// Clear what the round absorbed before slicing it off: the
		// backing array would keep every absorbed flight's batches and
		// payloads reachable (found by BenchmarkManyStreams: 345 MB at
		// 1,000,000 streams with nothing left unabsorbed).
		clear(a.queue[:len(p.flights)])
		a.queue = a.queue[len(p.flights):]
		c.backlog.Release(p.flights[len(p.flights)-1].pos + 1)
	}
	if c.phase == phaseOpening && c.succ != nil {
		c.succ.walked += uint64(p.slots)
	}
	if ev.Sealed != "" {
		// The close's last round carried its seal: the close is done.
		// The snapshots it doomed are in the checkpoint, for the next
		// owner to delete.
		c.sealedCleanly(ev.Sealed, true)
		return
	}
	if len(p.drop) > 0 {
		// The round's last step; the next round waits for it. A delete
		// that fails is not the round's failure: the snapshot stays
		// doomed (in the checkpoint too), and a later round, or a
		// successor, tries again.
		a.busy = true
		c.emit(DropSnapshots{Keys: p.drop})
	}
}

// onSnapshotsDropped forgets the doomed snapshots deleted from every
// bucket.
func (c *Core) onSnapshotsDropped(ev SnapshotsDropped) {
	a := &c.ab
	a.busy = false
	if len(ev.Dropped) > 0 {
		a.doomed = slices.DeleteFunc(a.doomed, func(d doomedSnapshot) bool { return slices.Contains(ev.Dropped, d.key) })
	}
}

// sealCheckDue is when an idle leader next reads its checkpoint to learn
// whether a successor has sealed it (zero: not due). Rounds check the seal
// as they commit, so the check is only for a chain with none out.
func (c *Core) sealCheckDue() time.Time {
	a := &c.ab
	if c.cfg.SealCheckInterval <= 0 || c.phase != phaseServing || c.closing || !c.holds || c.sealed != nil || a.checkOut || c.checkpointOut() {
		return time.Time{}
	}
	if a.verifiedAt.IsZero() {
		a.verifiedAt = c.now
	}
	return a.verifiedAt.Add(c.cfg.SealCheckInterval)
}

// maybeCheckSeal sends the idle leader's seal check when it is due.
func (c *Core) maybeCheckSeal() {
	if due := c.sealCheckDue(); !due.IsZero() && !c.now.Before(due) {
		c.ab.checkOut = true
		c.ab.sealChecks++
		c.emit(ReadCheckpoint{Epoch: c.rec.Epoch})
	}
}

// onCheckpointRead: a checkpoint under another seal means a successor is
// taking over; a failed read is only tried again later. A check asked
// under an earlier epoch (a halt's recovery minted meanwhile) is dropped:
// it may have read the checkpoint before the mint moved this process's
// seal to the new epoch, and its old seal is no successor's. The mint
// checked the seal anyway, and the next check is of the new epoch.
func (c *Core) onCheckpointRead(ev CheckpointRead) {
	a := &c.ab
	a.checkOut = false
	if ev.Epoch != c.rec.Epoch {
		c.logf(slog.LevelDebug, "seal check of an earlier epoch dropped", attrU("check_epoch", ev.Epoch), attrU("epoch", c.rec.Epoch))
		return
	}
	a.verifiedAt = c.now
	if ev.Err != nil {
		return
	}
	cp := ev.Checkpoint
	if cp.Owner != c.cfg.Owner || cp.OwnerEpoch != c.rec.Epoch {
		c.sealedAway(&absorb.SealedError{Owner: cp.Owner, OwnerEpoch: cp.OwnerEpoch})
	}
}

// dropIndexed removes b, its stream's oldest index entry, once absorbed.
func (c *Core) dropIndexed(b *Batch) {
	st := b.Stream
	if len(st.entries) > 0 && st.entries[0] == b {
		st.entries[0] = nil
		st.entries = st.entries[1:]
		if len(st.entries) == 0 {
			st.entries = nil // let the emptied backing array go
		}
		st.bytes -= int64(len(b.Payload))
		c.ab.indexBytes -= int64(len(b.Payload))
	}
}

// sealedAway handles the news that the checkpoint carries another owner's
// seal: a successor is taking the chain over. The seal is binding: this
// process never mints again. Serving, it halts at its release point (the
// recovery fences its own epoch, acks below the cut, and stops); opening,
// it has lost the takeover.
func (c *Core) sealedAway(err error) {
	d := &Deposed{}
	var se *absorb.SealedError
	if errors.As(err, &se) {
		// The seal names the epoch its owner mints (with the seal, or
		// next): a route to this process is stale below it.
		d.Leader, d.Epoch = se.Owner, se.OwnerEpoch
	}
	c.sealed = d
	switch c.phase {
	case phaseServing:
		c.logf(slog.LevelWarn, "checkpoint sealed by another owner; halting", attrS("sealed_by", d.Leader), attrE(err))
		c.halt(c.window.Released(), err)
	case phaseOpening:
		c.failOpen(fmt.Errorf("%w: %v", ErrTakeoverLost, err))
	}
}
