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

// ErrTakeoverLost: another process minted the chain's next epoch first, or
// sealed it for a takeover of its own after this one did.
var ErrTakeoverLost = errors.New("leader: another process took over the chain first")

// ErrLiveOwner: the opening was told to refuse a live owner, and the
// chain's current epoch has one.
var ErrLiveOwner = errors.New("leader: the chain has a live owner")

// LiveOwner reports whether rec, a chain's current epoch record, has a live
// owner other than owner: it names another owner and carries no clean seal
// of its epoch. That owner is running, or crashed without a clean Close;
// the metastore cannot tell which, so both count as live.
func LiveOwner(rec chain.EpochRecord, owner string) bool {
	return rec.Owner != owner && (rec.Seal == nil || rec.Seal.Epoch != rec.Epoch)
}

// The succession protocol (docs/design.md, "Opening a star" and "Halt and
// recovery on the incumbent") is one sub-machine for both of its uses:
//
//	takeover (opening):  read epoch (and checkpoint) → [first mint → create checkpoint → serve]
//	                     seal → fence → mint → probe → tails → walk → serve
//	                     after a clean seal: seal and mint in one Commit → tails → serve
//	recovery (a halt):   drain own uploads → backoff → fence own epoch → ack below the cut
//	                     → mint (only while holding the seal) → probe → republish → serve
//
// The fence is five requests (fenceStage): read the trim cursor, read the
// epoch record (a cut recorded in either is the cut: no fence), fence the
// buckets from the cursor or the fence's start, whichever is later, then
// read both again (settlement may have passed the cut found meanwhile: the
// recorded cut wins, or the fence runs again, at most maxFenceRuns times
// in a row).
//
// After a clean seal (the predecessor's Close recorded its cut in the
// epoch record) there is nothing to fence, so nothing has to happen between
// the seal and the mint: the takeover reads the epoch record and the
// checkpoint at once and writes both in one Commit (SealMint), each at the
// version read. Anything that could come between the two-step seal and
// mint (a rival's seal, a rival's mint) moves one of the two versions and
// fails it: two requests on the path instead of four.
//
// The mint is binding: one metastore Commit puts the next epoch record at
// the version it was read at and checks that the checkpoint still carries
// this process's seal (moving it to the new epoch). An incumbent that finds
// itself sealed fences and acks below the cut, but never mints: it fails
// the rest not-committed and stops leading. One whose fence finds its epoch
// settled away by a successor, the cut recorded nowhere any more, cannot
// know that cut: it stops leading with the rest outcome unknown (cutLost).

type succKind uint8

const (
	takeover succKind = iota
	recovery
)

type step uint8

const (
	stepReadEpoch        step = iota // takeover
	stepMintFirst                    // takeover of a chain with no epoch
	stepCreateCheckpoint             // takeover of a chain with no epoch: the first epoch is minted
	stepSeal                         // takeover
	stepSealMint                     // takeover after a clean seal: seal and mint in one Commit
	stepDrain                        // recovery: wait for own uploads to return
	stepBackoff                      // recovery: after repeated halts
	stepFence
	stepMint
	stepReadTails // takeover
	stepWalk      // takeover
)

func (s step) String() string {
	return [...]string{"read epoch", "first mint", "create checkpoint", "seal", "seal and mint", "drain uploads", "backoff", "fence", "mint", "read tails", "walk"}[s]
}

// fenceStage is where the fence (stepFence) is: one request each.
type fenceStage uint8

const (
	fenceReadCursor   fenceStage = iota // ReadTrimCursor
	fenceReadRecord                     // ReadEpoch: a cut a successor recorded?
	fenceSlots                          // Fence: the buckets
	fenceRereadCursor                   // ReadTrimCursor: did settlement pass the cut found?
	fenceRereadRecord                   // ReadEpoch: was the cut recorded meanwhile?
)

// maxFenceRuns bounds the fence's runs in a row that settlement overtakes
// (the trim cursor passed the cut found): past it the fence backs off.
const maxFenceRuns = 4

type succession struct {
	kind    succKind
	step    step
	out     bool      // this step's request is out
	retryAt time.Time // do not retry the step before
	backoff time.Duration
	warned  time.Time // last WARN about a step that keeps failing
	warnGap time.Duration
	// failures counts the current step's failed attempts since
	// failingSince; lastErr is the last one's cause (Stats, and the error
	// of an opening abandoned meanwhile).
	failures     int
	failingSince time.Time
	lastErr      error

	attempts int // takeover restarts after the epoch moved
	// sealRaces counts the seal's attempts in a row that the incumbent's
	// absorb raced (the checkpoint moved under them).
	sealRaces int
	// found is the epoch record the takeover first read (foundAny: one
	// existed). A restart that finds another candidate's newer epoch has
	// lost the race instead of taking the chain from the winner.
	found    chain.EpochRecord
	foundAny bool
	cause    error // recovery: the halt

	prev    chain.EpochRecord // the epoch being succeeded
	prevVer metastore.Version
	cp      absorb.Checkpoint // takeover: the checkpoint as found at the seal
	cpVer   metastore.Version // a clean takeover: the version cp was read at
	from    uint64            // the fence's start
	// The fence under way: its stage, the trim cursor it read, where its
	// run of the buckets started (past from if the cursor is), what that
	// found, and its runs that settlement overtook.
	fstage    fenceStage
	cursor    chain.TrimCursor
	fenceFrom uint64
	result    chain.FenceResult
	fenceRuns int
	cut       uint64
	fenced    bool // the cut is known (fenced, or from a clean seal)
	clean     bool

	rebuild       bool // the checkpoint's tails snapshot is damaged: rebuild from refs
	walks         []walkRange
	walked        uint64
	inheritedBase string // the base of the predecessor's last snapshot
	// adopt is the full snapshot this owner's deltas build on, inherited
	// ("": none, the first round writes a full one): adoptStreams its
	// streams, adoptChanged the streams changed since it.
	adopt        string
	adoptStreams int
	adoptChanged []string
	orphans      []string // snapshots of a round the predecessor never committed

	// entered is when the current step began; took is the time spent in
	// each step so far (Opened.Steps: where an opening's time went).
	entered time.Time
	took    [stepWalk + 1]time.Duration
}

type walkRange struct {
	epoch, from, to uint64
	exact           bool // the checkpoint's pending round: replayed as one round
}

// Succession retry pacing.
const (
	minSuccBackoff = 10 * time.Millisecond
	maxSuccBackoff = 2 * time.Second
	// warnEvery is the first gap between the WARNs a step that keeps
	// failing logs; the gap doubles up to maxWarnEvery.
	warnEvery    = 5 * time.Second
	maxWarnEvery = 5 * time.Minute
	maxTakeovers = 5 // restarts when the epoch moves under a takeover
	// maxSealRaces bounds the seal's attempts in a row the incumbent's
	// absorb may race before the seal backs off.
	maxSealRaces = 20
)

func (c *Core) startTakeover() {
	c.phase = phaseOpening
	c.succ = &succession{kind: takeover, step: stepReadEpoch, entered: c.now}
	if f := c.cfg.Found; f != nil {
		// The host read them already: go on from there.
		c.succ.out = true
		c.succ.onEpochRead(c, *f)
	}
}

// startRecovery begins the recovery of a halt: every unreleased upload is
// cancelled (the fence must see every copy this process will ever write in
// the epoch), and the fence waits for them to return.
func (c *Core) startRecovery(cause error) {
	c.phase = phaseRecovering
	c.succ = &succession{kind: recovery, step: stepDrain, cause: cause, prev: c.rec, prevVer: c.ver, entered: c.now}
	for _, f := range c.flights {
		if f.up != nil {
			c.cancel(f.up)
		}
	}
	cutoff := c.now.Add(-time.Minute)
	c.halts = slices.DeleteFunc(c.halts, func(t time.Time) bool { return t.Before(cutoff) })
	c.halts = append(c.halts, c.now)
}

// retry backs a failing step off (and logs at WARN, paced): the step is
// issued again at retryAt.
func (s *succession) retry(c *Core, what string, err error, attrs ...slog.Attr) {
	s.out = false
	s.backoff = min(max(2*s.backoff, minSuccBackoff), maxSuccBackoff)
	s.retryAt = c.now.Add(s.backoff)
	if s.failures == 0 {
		s.failingSince = c.now
	}
	s.failures++
	s.lastErr = fmt.Errorf("%s: %w", what, err)
	if s.warned.IsZero() || c.now.Sub(s.warned) >= s.warnGap {
		s.warned = c.now
		s.warnGap = min(max(2*s.warnGap, warnEvery), maxWarnEvery)
		c.logf(slog.LevelWarn, what+"; retrying", append(attrs, slog.String("step", s.step.String()), attrU("epoch", s.prev.Epoch),
			attrI("attempts", s.failures), slog.Duration("failing_for", c.now.Sub(s.failingSince)), slog.Duration("backoff", s.backoff), attrE(err))...)
	}
}

// advance moves to step st.
func (s *succession) advance(c *Core, st step) {
	s.took[s.step] += c.now.Sub(s.entered)
	s.entered = c.now
	s.step, s.out, s.backoff, s.retryAt, s.warned, s.warnGap = st, false, 0, time.Time{}, time.Time{}, 0
	s.failures, s.failingSince, s.lastErr = 0, time.Time{}, nil
}

// next issues the current step's request, if it is not out and its
// backoff has passed.
func (s *succession) next(c *Core) {
	for !s.out && !c.now.Before(s.retryAt) && c.succ == s {
		switch s.step {
		case stepReadEpoch:
			s.out = true
			c.emit(ReadEpoch{Checkpoint: true})
		case stepMintFirst:
			s.out = true
			c.emit(MintFirst{Record: chain.EpochRecord{Owner: c.cfg.Owner, Window: c.cfg.Window, K: c.K(), W: c.cfg.W, Buckets: c.cfg.Buckets}})
		case stepCreateCheckpoint:
			s.out = true
			c.emit(CreateCheckpoint{Epoch: c.rec.Epoch})
		case stepSeal:
			s.out = true
			c.emit(Seal{Epoch: s.prev.Epoch, EpochVersion: s.prevVer})
		case stepSealMint:
			s.out = true
			c.emit(SealMint{Prev: s.prev, PrevVersion: s.prevVer, Next: c.nextRecord(s), Checkpoint: s.cp, CheckpointVersion: s.cpVer})
		case stepDrain:
			if !c.uploadsDrained() {
				return
			}
			s.advance(c, stepBackoff)
			if n := len(c.halts); n > 1 {
				wait := min(100*time.Millisecond<<min(n-2, 6), 5*time.Second)
				s.retryAt = c.now.Add(wait)
				c.logf(slog.LevelWarn, "repeated halts; backing off before recovering", attrI("halts_last_minute", n), slog.Duration("wait", wait))
			}
		case stepBackoff:
			s.from = c.window.Released()
			s.startFence(c)
		case stepFence:
			s.out = true
			switch s.fstage {
			case fenceReadCursor, fenceRereadCursor:
				c.emit(ReadTrimCursor{})
			case fenceReadRecord, fenceRereadRecord:
				c.emit(ReadEpoch{})
			case fenceSlots:
				c.emit(Fence{Epoch: s.prev.Epoch, From: s.fenceFrom, Window: s.prev.Window, MaxSlots: c.cfg.FenceMaxSlots,
					Patience: c.cfg.FencePatience, Override: c.cfg.FenceOverride})
			}
		case stepMint:
			if c.sealed != nil && !invariants.MintIgnoresSeal.On() {
				c.die(c.deposedFate(fmt.Errorf("%w: the checkpoint is sealed by %q for a takeover; fenced own epoch %d at %d", ErrDeposed, c.sealed.Leader, s.prev.Epoch, s.cut), c.sealed))
				return
			}
			if c.checkpointOut() {
				return // a round is out: the mint checks the checkpoint it moves
			}
			s.out = true
			c.emit(Mint{Held: c.held, Prev: s.prev, PrevVersion: s.prevVer, Next: c.nextRecord(s)})
		case stepReadTails:
			s.out = true
			c.emit(ReadTails{Key: s.cp.Tails, Rebuild: s.rebuild, Checkpoint: s.cp})
		case stepWalk:
			if !c.walkNext(s) {
				return
			}
		}
	}
}

// uploadsDrained reports whether every unreleased flight's upload has
// returned all its workers.
func (c *Core) uploadsDrained() bool {
	for _, f := range c.flights {
		if up := f.up; up != nil && (up.renderOut || up.puts > 0) {
			return false
		}
	}
	return true
}

// deposedCuts is how many of the latest epochs' cuts an epoch record keeps
// even once settlement has passed them (nextRecord): a leader deposed at
// most that many epochs ago still learns its cut when it fences its own
// epoch, and so which of its unreleased flights are not committed.
const deposedCuts = 16

// nextRecord is the epoch record the mint writes: this owner's, with the
// cuts a walk from the checkpoint still needs and the cut just found.
func (c *Core) nextRecord(s *succession) chain.EpochRecord {
	cpEpoch := c.ab.cpEpoch
	if s.kind == takeover {
		cpEpoch = s.cp.Epoch
	}
	var cuts []chain.Cut
	floor := c.cutFloor(cpEpoch)
	for _, k := range s.prev.Cuts {
		// The cuts of the last deposedCuts epochs stay whatever the floor:
		// a deposed leader that comes back (a partition heals) fences its
		// own epoch from the records, and with its cut there it knows which
		// of its flights are committed; without, they end outcome unknown.
		if k.Epoch >= floor || k.Epoch+deposedCuts > s.prev.Epoch {
			cuts = append(cuts, k)
		}
	}
	// Bounded: with settlement off the cursor never moves, so without a
	// bound the record would grow with every open. The oldest cuts past
	// the bound that no walk needs go; a settle pass re-derives a lost cut
	// from the chain's slots (package settle), so this costs a fence of
	// the epoch then, never a wrong cut.
	for len(cuts) >= maxKeptCuts && cuts[0].Epoch < cpEpoch {
		cuts = cuts[1:]
	}
	cuts = append(cuts, chain.Cut{Epoch: s.prev.Epoch, Slot: s.cut, Clean: s.clean})
	return chain.EpochRecord{Owner: c.cfg.Owner, Window: c.cfg.Window, K: c.K(), W: c.cfg.W, Buckets: c.cfg.Buckets, Cuts: cuts}
}

// onEvent dispatches a succession event to its step's handler.
func (s *succession) onEvent(c *Core, ev Event) {
	switch ev := ev.(type) {
	case EpochRead:
		if s.step == stepFence {
			s.onFenceRecord(c, ev)
			return
		}
		s.onEpochRead(c, ev)
	case TrimCursorRead:
		s.onTrimCursorRead(c, ev)
	case FirstMinted:
		s.onFirstMinted(c, ev)
	case CheckpointCreated:
		s.onCheckpointCreated(c, ev)
	case Sealed:
		s.onSealed(c, ev)
	case SealMinted:
		s.onSealMinted(c, ev)
	case Fenced:
		s.onFenced(c, ev)
	case Minted:
		s.onMinted(c, ev)
	case TailsRead:
		s.onTailsRead(c, ev)
	case Walked:
		s.onWalked(c, ev)
	}
}

func (s *succession) onEpochRead(c *Core, ev EpochRead) {
	s.out = false
	switch {
	case errors.Is(ev.Err, metastore.ErrNotFound):
		s.advance(c, stepMintFirst)
	case ev.Err != nil:
		s.retry(c, "read epoch record failed", ev.Err)
	default:
		rec := ev.Record
		if rec.K != c.K() || rec.W != c.cfg.W || !slices.Equal(rec.Buckets, c.cfg.Buckets) {
			c.failOpen(fmt.Errorf("leader: %s/%s: epoch %d was written to buckets %v (K=%d, W=%d); this process is configured with %v (K=%d, W=%d): changing a chain's bucket set is not supported",
				c.cfg.Star, c.cfg.Class, rec.Epoch, rec.Buckets, rec.K, rec.W, c.cfg.Buckets, c.K(), c.cfg.W))
			return
		}
		if c.cfg.RefuseLiveOwner && LiveOwner(rec, c.cfg.Owner) {
			c.failOpen(fmt.Errorf("%w: %s/%s is at epoch %d, owned by %q and not sealed cleanly", ErrLiveOwner, c.cfg.Star, c.cfg.Class, rec.Epoch, rec.Owner))
			return
		}
		if s.attempts > 0 && s.rivalMinted(c, rec) {
			c.failOpen(fmt.Errorf("%w: %s/%s moved to epoch %d owned by %q during the takeover", ErrTakeoverLost, c.cfg.Star, c.cfg.Class, rec.Epoch, rec.Owner))
			return
		}
		if !s.foundAny {
			s.found, s.foundAny = rec, true
		}
		s.prev, s.prevVer = rec, ev.Version
		if seal := rec.Seal; seal != nil && seal.Epoch == rec.Epoch && ev.CheckpointRead {
			// A clean seal: the cut is the seal's, so the seal and the mint
			// are one Commit at the versions just read. (A checkpoint that
			// could not be read leaves the two-step seal to read it again.)
			if s.checkpointPast(c, ev.Checkpoint) {
				return
			}
			s.cp, s.cpVer = ev.Checkpoint, ev.CheckpointVersion
			s.clean, s.cut, s.fenced = true, seal.Slot, true
			s.advance(c, stepSealMint)
			return
		}
		s.advance(c, stepSeal)
	}
}

// checkpointPast fails the opening if cp, the checkpoint found, is past
// the epoch being succeeded: the records contradict each other.
func (s *succession) checkpointPast(c *Core, cp absorb.Checkpoint) bool {
	if cp.Epoch > s.prev.Epoch {
		c.failOpen(fmt.Errorf("leader: %s/%s: checkpoint at epoch %d is past the epoch record's %d", c.cfg.Star, c.cfg.Class, cp.Epoch, s.prev.Epoch))
		return true
	}
	return false
}

// onSealMinted: a clean takeover's seal and mint. The epoch record moved:
// start over (a rival minted: rivalMinted ends the opening). Only the
// checkpoint moved (a rival sealed it): read both again and retry, backing
// off after maxSealRaces in a row. A failure that left the outcome open is
// retried with the same request, which finds its own write if it applied.
func (s *succession) onSealMinted(c *Core, ev SealMinted) {
	s.out = false
	c.ab.requests += ev.Requests
	switch {
	case errors.Is(ev.Err, absorb.ErrEpochMoved):
		s.sealRaces = 0
		s.restart(c, ev.Err)
		return
	case errors.Is(ev.Err, absorb.ErrSealRaced):
		s.sealRaces++
		c.logf(slog.LevelInfo, "checkpoint moved while sealing; reading it again", attrU("epoch", s.prev.Epoch), attrI("attempts", s.sealRaces))
		s.advance(c, stepReadEpoch)
		if s.sealRaces >= maxSealRaces {
			s.sealRaces = 0
			s.retry(c, "seal and mint raced", ev.Err)
		}
		return
	case errors.Is(ev.Err, absorb.ErrDeposed):
		c.failOpen(fmt.Errorf("%w: %s/%s: another candidate sealed the checkpoint after our mint of epoch %d: %v", ErrTakeoverLost, c.cfg.Star, c.cfg.Class, s.prev.Epoch+1, ev.Err))
		return
	case ev.Err != nil:
		s.retry(c, "seal and mint failed", ev.Err, attrU("next_epoch", s.prev.Epoch+1))
		return
	}
	s.sealRaces = 0
	c.hold(ev.Held)
	s.minted(c, ev.Record, ev.Version)
}

func (s *succession) onFirstMinted(c *Core, ev FirstMinted) {
	s.out = false
	switch {
	case errors.Is(ev.Err, chain.ErrEpochTaken):
		s.restart(c, ev.Err) // someone minted first: it won (see rivalMinted)
	case ev.Err != nil:
		s.retry(c, "mint of the first epoch failed", ev.Err)
	default:
		c.rec, c.ver = ev.Record, ev.Version
		s.advance(c, stepCreateCheckpoint)
	}
}

// onCheckpointCreated serves once the first epoch's checkpoint exists. The
// epoch is minted whatever happened to the checkpoint: a failed creation
// is tried again, never the mint. A checkpoint that someone else created
// meanwhile is a candidate's seal for a takeover of the epoch just minted:
// the opening starts again from the epoch record, as a takeover of its own
// epoch.
func (s *succession) onCheckpointCreated(c *Core, ev CheckpointCreated) {
	s.out = false
	c.ab.requests += ev.Requests
	switch {
	case errors.Is(ev.Err, absorb.ErrCheckpointExists):
		s.restart(c, ev.Err)
	case ev.Err != nil:
		s.retry(c, "creation of the checkpoint failed", ev.Err)
	default:
		c.hold(ev.Held)
		c.serve()
	}
}

// rivalMinted reports whether rec, read on a restart, is a newer epoch
// minted by another candidate rather than by the owner this takeover
// found (who recovered, or sealed cleanly) or by this process. Chasing it
// would take the chain from the process that just won it, and two
// candidates opening one star would split its chains between them.
func (s *succession) rivalMinted(c *Core, rec chain.EpochRecord) bool {
	if rec.Owner == c.cfg.Owner {
		return false
	}
	if !s.foundAny {
		return true // the chain had no epoch, and someone minted the first
	}
	return rec.Epoch > s.found.Epoch && rec.Owner != s.found.Owner
}

// restart begins the takeover again from the epoch record, which moved.
func (s *succession) restart(c *Core, err error) {
	s.attempts++
	if s.attempts >= maxTakeovers {
		c.failOpen(fmt.Errorf("leader: %s/%s: the epoch kept moving during takeover: %w", c.cfg.Star, c.cfg.Class, err))
		return
	}
	s.advance(c, stepReadEpoch)
}

func (s *succession) onSealed(c *Core, ev Sealed) {
	s.out = false
	switch {
	case errors.Is(ev.Err, absorb.ErrEpochMoved):
		s.restart(c, ev.Err)
		return
	case errors.Is(ev.Err, absorb.ErrSealRaced) && s.sealRaces+1 < maxSealRaces:
		// The incumbent's absorb advanced the checkpoint between the
		// attempt's read and its Commit: a live incumbent does so every
		// round, so seal again at once, a bounded number of times.
		s.sealRaces++
		c.logf(slog.LevelInfo, "checkpoint moved while sealing; sealing again", attrU("epoch", s.prev.Epoch), attrI("attempts", s.sealRaces))
		return
	case ev.Err != nil:
		s.sealRaces = 0
		s.retry(c, "seal of the checkpoint failed", ev.Err)
		return
	}
	s.sealRaces = 0
	c.ab.requests += ev.Requests
	c.hold(ev.Held)
	s.cp = ev.Checkpoint
	e := s.prev.Epoch
	if s.checkpointPast(c, s.cp) {
		return
	}
	if seal := s.prev.Seal; seal != nil && seal.Epoch == e {
		s.clean, s.cut, s.fenced = true, seal.Slot, true
		s.advance(c, stepMint)
		return
	}
	if s.cp.Epoch == e {
		s.from = s.cp.Next
	}
	s.startFence(c)
}

// startFence begins the fence of s.prev's epoch from s.from.
func (s *succession) startFence(c *Core) {
	s.advance(c, stepFence)
	s.fstage, s.fenceRuns = fenceReadCursor, 0
}

// fenceAgain backs the fence off after a failure: it starts again from the
// trim cursor.
func (s *succession) fenceAgain(c *Core, what string, err error) {
	s.retry(c, what, err, attrU("from", s.from))
	s.fstage = fenceReadCursor
}

// onTrimCursorRead: the fence needs the cursor (fencing below it is the one
// thing a fence must not do: its slots are deleted, and a fence would read
// them as absent), so a failed read backs the fence off.
func (s *succession) onTrimCursorRead(c *Core, ev TrimCursorRead) {
	s.out = false
	if s.step != stepFence || (s.fstage != fenceReadCursor && s.fstage != fenceRereadCursor) {
		panic(fmt.Sprintf("leader: TrimCursorRead at step %s, fence stage %d", s.step, s.fstage))
	}
	if ev.Err != nil {
		s.fenceAgain(c, "read of the trim cursor failed", ev.Err)
		return
	}
	s.cursor = ev.Cursor
	s.fstage++ // the epoch record next
}

// onFenceRecord decides the fence from the trim cursor just read and the
// epoch record: a cut recorded in either wins (a successor decided it, and
// a deposed incumbent fencing its own epoch takes it from there); an epoch
// settled away with its cut recorded nowhere is a lost cut; otherwise the
// fence runs from the cursor (if it is past the fence's start), and, after
// it ran, stands if the cursor did not pass the cut it found. An
// unreadable epoch record only loses the shortcut: a halted incumbent
// fences with the buckets alone (its mint waits for the metastore anyway).
func (s *succession) onFenceRecord(c *Core, ev EpochRead) {
	s.out = false
	e, t := s.prev.Epoch, s.cursor
	if cut, ok, lost := recordedCut(e, t, ev); lost != nil {
		s.cutLost(c, lost)
		return
	} else if ok {
		// A recorded cut below the fence's start (an operator's fence
		// override discarded slots this process had released): nothing
		// here is below it, and every flight from the start on is past it.
		cut = max(cut, s.from)
		c.logf(slog.LevelInfo, "fence: the cut is recorded", attrU("epoch", e), attrU("cut", cut), attrU("cursor_epoch", t.At.Epoch), attrU("cursor_next", t.At.Next))
		s.fenceDone(c, chain.FenceResult{Cut: cut, Committed: cut - s.from})
		return
	}
	switch s.fstage {
	case fenceReadRecord:
		s.fenceFrom = s.from
		if t.At.Epoch == e && t.At.Next > s.fenceFrom {
			s.fenceFrom = t.At.Next // settled and deleted below: committed
		}
		s.fstage = fenceSlots
	case fenceRereadRecord:
		if !(chain.Position{Epoch: e, Next: s.result.Cut}).Less(t.At) {
			res := s.result
			res.Committed += s.fenceFrom - s.from // the settled slots skipped are committed
			s.fenceDone(c, res)
			return
		}
		s.fenceRuns++
		if s.fenceRuns >= maxFenceRuns {
			s.fenceRuns = 0
			s.fenceAgain(c, "fence overtaken", fmt.Errorf("leader: fence of %s/%s epoch %d: settlement kept moving the trim cursor (%d/%d) past the cut found (%d), %d runs in a row",
				c.cfg.Star, c.cfg.Class, e, t.At.Epoch, t.At.Next, s.result.Cut, maxFenceRuns))
			return
		}
		c.logf(slog.LevelInfo, "fence overtaken by settlement; fencing again from the trim cursor", attrU("epoch", e), attrU("cut", s.result.Cut),
			attrU("cursor_epoch", t.At.Epoch), attrU("cursor_next", t.At.Next), attrI("runs", s.fenceRuns))
		s.fstage = fenceReadCursor
	default:
		panic(fmt.Sprintf("leader: EpochRead at fence stage %d", s.fstage))
	}
}

// recordedCut returns epoch e's cut if the epoch record (ev, if it was
// read) or the trim cursor t has it, or, if settlement passed e and its
// cut is recorded nowhere, who deposed the fencing process.
func recordedCut(e uint64, t chain.TrimCursor, ev EpochRead) (uint64, bool, *Deposed) {
	if ev.Err == nil && ev.Record.Epoch > e {
		if cut, ok := ev.Record.CutOf(e); ok {
			return cut.Slot, true, nil
		}
	}
	if cut, ok := t.CutOf(e); ok && t.At.Epoch > e {
		return cut, true, nil
	}
	if t.At.Epoch > e {
		// The cursor never passes the checkpoint, and the checkpoint
		// reaches an epoch only once it is minted: a later epoch exists.
		d := &Deposed{Leader: t.Owner, Epoch: t.At.Epoch}
		if ev.Err == nil && ev.Record.Epoch >= d.Epoch {
			d.Leader, d.Epoch = ev.Record.Owner, ev.Record.Epoch
		}
		return 0, false, d
	}
	return 0, false, nil
}

// onFenced takes the buckets' fence: the cursor and the record are read
// again before it stands.
func (s *succession) onFenced(c *Core, ev Fenced) {
	s.out = false
	if s.refusedForGood(c, "the fence", ev.Err) { // see refused.go
		return
	}
	if ev.Err != nil {
		s.fenceAgain(c, "fence blocked", ev.Err)
		return
	}
	s.result = ev.Result
	s.fstage = fenceRereadCursor
}

// fenceDone ends the fence at the cut of r.
func (s *succession) fenceDone(c *Core, r chain.FenceResult) {
	s.cut, s.fenced = r.Cut, true
	if r.Overridden > 0 || r.Discarded > 0 {
		c.logf(slog.LevelWarn, "the fence override decided slots the rule could not", slog.String("override", c.cfg.FenceOverride.String()),
			attrU("epoch", s.prev.Epoch), attrU("cut", s.cut), attrU("accepted_readable", r.Overridden), attrI("discarded_unreadable", r.Discarded))
	}
	c.logf(slog.LevelInfo, "fenced", attrU("epoch", s.prev.Epoch), attrU("from", s.from), attrU("cut", s.cut),
		attrI("poisoned", r.Poisoned), attrI("poisoned_ahead", r.PoisonedAhead))
	if s.kind == recovery {
		c.ackBelowCut(s)
		if c.phase != phaseRecovering {
			return
		}
	}
	s.advance(c, stepMint)
}

// cutLost ends a succession whose fence found the epoch it fences
// succeeded and settled away, its cut recorded nowhere any more (a
// successor's later mint and the trim cursor's deletes both dropped it, as
// they may once the epoch's slots are gone). The answer is definite: a
// later epoch exists, so this process is deposed, and a takeover has lost
// (a rival minted after its seal). What a deposed incumbent still holds is
// decided from what is still knowable. The cut was the first dead slot:
// every slot below it was committed (and settled: settlement only moves
// committed slots), every slot from it on dead. The flights this process
// released, below the fence's start, are acked already. Its unreleased
// flights start at the fence's start, at or below the cut, and any of
// them may be below it (a copy that landed late, which the successor's
// fence found): none can be called not committed, and none committed, so
// they end outcome unknown. Pooled batches were never cut: not committed.
func (s *succession) cutLost(c *Core, d *Deposed) {
	if s.kind == takeover {
		c.failOpen(fmt.Errorf("%w: %s/%s moved to epoch %d owned by %q, which settled epoch %d away during the takeover", ErrTakeoverLost, c.cfg.Star, c.cfg.Class, d.Epoch, d.Leader, s.prev.Epoch))
		return
	}
	c.sealed = d // never mint again
	c.die(Fate{Kind: OutcomeUnknown, Deposed: d,
		Cause: fmt.Errorf("%w: %s/%s is at epoch %d owned by %q, which settled epoch %d away: its cut is recorded nowhere any more, so whether slots from %d were committed cannot be known",
			ErrDeposed, c.cfg.Star, c.cfg.Class, d.Epoch, d.Leader, s.prev.Epoch, s.from)})
}

// ackBelowCut acks every flight below the cut, in order, whatever happens
// next: the fence decided them committed (the halted slot itself may be:
// a late copy can land). A flight at or past the cut that can never be
// rendered stops the chain: republishing it would halt again forever.
func (c *Core) ackBelowCut(s *succession) {
	late := 0
	for len(c.flights) > 0 && c.flights[0].slot < s.cut {
		f := c.flights[0]
		c.flights[0] = nil
		c.flights = c.flights[1:]
		if !f.released {
			c.releaseFlight(f)
		}
		late++
	}
	if invariants.Enabled && len(c.flights) > 0 {
		invariants.Assert(c.flights[0].slot == s.cut, "the fence's cut %d is not the first unreleased slot %d", s.cut, c.flights[0].slot)
	}
	c.logf(slog.LevelInfo, "fenced own epoch", attrU("epoch", s.prev.Epoch), attrU("from", s.from), attrU("cut", s.cut), attrI("acked_late", late))
	for _, f := range c.flights {
		if f.renderErr != nil {
			c.die(Fate{Kind: NotCommitted, Cause: fmt.Errorf("%w: slot %d of epoch %d cannot be rendered (%v); fenced at %d", ErrHalted, f.slot, f.epoch, f.renderErr, s.cut)})
			return
		}
	}
}

func (s *succession) onMinted(c *Core, ev Minted) {
	s.out = false
	c.ab.requests += ev.Requests
	if ev.Held.Version != "" && !errors.Is(ev.Err, absorb.ErrDeposed) {
		c.hold(ev.Held) // the seal moved to the new epoch (or, failed, as re-read)
	}
	switch {
	case errors.Is(ev.Err, chain.ErrMintLost):
		d := &Deposed{Leader: ev.Record.Owner, Epoch: ev.Record.Epoch}
		if s.kind == takeover {
			c.failOpen(fmt.Errorf("%w: %s/%s is at epoch %d owned by %q", ErrTakeoverLost, c.cfg.Star, c.cfg.Class, ev.Record.Epoch, ev.Record.Owner))
			return
		}
		c.die(c.deposedFate(fmt.Errorf("%w: a successor minted epoch %d", ErrDeposed, ev.Record.Epoch), d))
		return
	case errors.Is(ev.Err, absorb.ErrDeposed):
		if s.kind == takeover {
			c.failOpen(fmt.Errorf("%w: another candidate sealed the checkpoint after us (%q): %v", ErrTakeoverLost, ev.SealedBy, ev.Err))
			return
		}
		c.sealed = &Deposed{Leader: ev.SealedBy}
		var se *absorb.SealedError
		if errors.As(ev.Err, &se) {
			// The seal names the epoch its owner mints: a route to this
			// process is stale below it (as sealedAway says).
			c.sealed.Epoch = se.OwnerEpoch
		}
		c.die(c.deposedFate(fmt.Errorf("%w: the checkpoint is sealed by %q for a takeover", ErrDeposed, ev.SealedBy), c.sealed))
		return
	case ev.Err != nil:
		s.retry(c, "mint failed", ev.Err, attrU("next_epoch", s.prev.Epoch+1))
		return
	}
	s.minted(c, ev.Record, ev.Version)
}

// minted goes on from the new epoch rec (at ver): probe a fenced epoch,
// then republish (a recovery) or read the tails (a takeover).
func (s *succession) minted(c *Core, rec chain.EpochRecord, ver metastore.Version) {
	e := s.prev.Epoch
	c.rec, c.ver = rec, ver
	c.logf(slog.LevelInfo, "minted", attrU("epoch", c.rec.Epoch), attrU("from_epoch", e), attrU("cut", s.cut))
	if !s.clean {
		// Poison the fenced epoch's window past the cut so a zombie's
		// delayed PUT halts it, and reclaim copies there. Safety rests on
		// the recorded cut, so nothing waits for it.
		c.emit(Probe{Epoch: e, Cut: s.cut, Window: s.prev.Window})
		c.probeWindow = s.prev.Window
	}
	if s.kind == recovery {
		c.republish(s)
		return
	}
	// The tails read also finds what the predecessor's last round wrote
	// and never committed: even a chain whose checkpoint names no snapshot
	// yet may have one.
	s.advance(c, stepReadTails)
}

// deposedFate is the fate of what a deposed incumbent still holds: past the
// cut it fenced (or never written), definitely not committed.
func (c *Core) deposedFate(cause error, d *Deposed) Fate {
	return Fate{Kind: NotCommitted, Cause: cause, Deposed: d}
}

// republish moves every flight at or past the cut into the new epoch's
// first slots, same sequence numbers, same order, and serves.
func (c *Core) republish(s *succession) {
	c.window = sequencerWindow(c.cfg.Window)
	for _, f := range c.flights {
		slot, err := c.window.Claim()
		if err != nil {
			panic("leader: republish overflows the window: " + err.Error())
		}
		f.epoch, f.slot, f.key, f.frames = c.rec.Epoch, slot, "", nil
		c.startUpload(f)
	}
	c.logf(slog.LevelInfo, "recovered from halt", attrU("from_epoch", s.prev.Epoch), attrU("epoch", c.rec.Epoch), attrU("cut", s.cut), attrI("republished", len(c.flights)))
	c.serve()
}

func (c *Core) onProbed(ev Probed) {
	if ev.Err != nil {
		c.logf(slog.LevelWarn, "garbage probe incomplete (safety rests on the cut)", attrU("epoch", ev.Epoch), attrE(ev.Err))
		return
	}
	c.logf(slog.LevelInfo, "garbage probe", attrU("epoch", ev.Epoch), attrI("window", c.probeWindow), attrI("poisoned", ev.Result.Poisoned), attrI("deleted", ev.Result.DeletedFlights), attrI("unreachable", ev.Result.Unreachable))
}

func (s *succession) onTailsRead(c *Core, ev TailsRead) {
	s.out = false
	for _, k := range ev.Orphans {
		if !slices.Contains(s.orphans, k) {
			s.orphans = append(s.orphans, k)
		}
	}
	if s.refusedForGood(c, "the tails read", ev.Err) {
		return
	}
	if ev.Err != nil && !s.rebuild && (absorb.IsSnapshotDamaged(ev.Err) || absorb.IsSnapshotGone(ev.Err)) {
		// The snapshot is only a summary of the refs: rebuild it from
		// them (a scan of the ref keyspace) rather than never opening.
		s.rebuild = true
		c.stats.tailsRebuilds++
		c.logf(slog.LevelWarn, "tails snapshot damaged or missing; rebuilding the tails from the refs", attrS("key", s.cp.Tails), attrE(ev.Err))
		return
	}
	if ev.Err != nil {
		what := "read of the tails snapshot failed"
		if s.rebuild {
			what = "rebuilding the tails from the refs failed"
		}
		s.retry(c, what, ev.Err, attrS("key", s.cp.Tails))
		return
	}
	if ev.Rebuilt {
		c.logf(slog.LevelWarn, "tails rebuilt from the refs", attrS("damaged_key", s.cp.Tails), attrI("streams", ev.Streams.Len()))
	}
	c.ab.tails.adopt(ev.Streams)
	s.inheritedBase = ev.Base
	switch {
	case ev.Rebuilt || s.cp.Tails == "":
	case ev.Base != "": // a delta: build on its base
		s.adopt, s.adoptStreams, s.adoptChanged = ev.Base, ev.BaseStreams, ev.Changed
	case s.cp.TailsBase == "": // the snapshot read is full
		s.adopt, s.adoptStreams, s.adoptChanged = s.cp.Tails, ev.BaseStreams, nil
	}
	s.startWalk(c)
}

// startWalk lists what the successor absorbs before serving: the
// checkpoint's pending round exactly (a replay), then every committed slot
// from the checkpoint up to each earlier epoch's cut.
func (s *succession) startWalk(c *Core) {
	cp := s.cp
	c.ab.snapshot = cp.Tails // the position is the held checkpoint's (sealed at it)
	// What its predecessors doomed and had not deleted is this owner's to
	// delete (oldest first: past the bound, the oldest go first), and the
	// predecessor's snapshots are superseded once this owner commits its
	// own (a full one first: it has no base of its own yet): the base the
	// checkpoint records too, which a damaged delta cannot name. What the
	// predecessor's last round wrote and never committed is named by
	// nothing: doomed as well.
	for _, k := range cp.Doomed {
		c.ab.doom(k)
	}
	c.ab.doom(cp.Tails)
	c.ab.doom(cp.TailsBase)
	c.ab.doom(s.inheritedBase)
	for _, k := range s.orphans {
		c.ab.doom(k)
	}
	if s.adopt != "" {
		// The predecessor's base is this owner's too: its first round
		// writes a delta over it (a full snapshot of a million streams
		// takes seconds, which the opening would wait for). It is doomed
		// once this owner's own full snapshot supersedes it, and never
		// deleted while it is the base (dueDrops). The predecessor never
		// deletes it either: it is its base, or the checkpoint would not
		// name it.
		a := &c.ab
		a.doomed = slices.DeleteFunc(a.doomed, func(d doomedSnapshot) bool { return d.key == s.adopt })
		a.base, a.baseBytes, a.baseStreams, a.baseRound, a.deltaBytes = s.adopt, 0, s.adoptStreams, a.roundNo, 0
		clear(a.dirty)
		if a.dirty == nil {
			a.dirty = map[string]struct{}{}
		}
		for _, id := range s.adoptChanged {
			a.dirty[id] = struct{}{}
		}
	}
	pos := struct{ epoch, next uint64 }{cp.Epoch, cp.Next}
	if p := cp.Pending; p != nil {
		s.walks = append(s.walks, walkRange{epoch: p.Epoch, from: p.From, to: p.To, exact: true})
		pos.epoch, pos.next = p.Epoch, p.To
	}
	for e := pos.epoch; e < c.rec.Epoch; e++ {
		k, ok := c.rec.CutOf(e)
		if !ok {
			continue // an epoch that never wrote (e.g. a lost takeover)
		}
		from := uint64(0)
		if e == pos.epoch {
			from = pos.next
		}
		if from < k.Slot {
			s.walks = append(s.walks, walkRange{epoch: e, from: from, to: k.Slot})
		}
	}
	s.advance(c, stepWalk)
}

// walkNext issues the walk's next request (a planned round's commit, or the
// next slots of the current range); it reports false while one is out. An
// empty walk list means the takeover is done.
func (c *Core) walkNext(s *succession) bool {
	a := &c.ab
	if a.planned != nil {
		if a.busy || c.checkpointOut() || c.now.Before(a.retryAt) {
			return false
		}
		c.sendRound()
		return false
	}
	if a.busy {
		return false
	}
	for len(s.walks) > 0 && s.walks[0].from >= s.walks[0].to {
		s.walks = s.walks[1:]
	}
	if len(s.walks) == 0 {
		c.logf(slog.LevelInfo, "took over", attrU("from_epoch", s.prev.Epoch), attrU("epoch", c.rec.Epoch), attrU("cut", s.cut), slog.Bool("clean", s.clean), attrU("walked_slots", s.walked), attrI("streams", c.ab.tails.len()))
		c.serve()
		return false
	}
	w := s.walks[0]
	max := c.roundSlots()
	if w.exact {
		max = 0
	}
	s.out = true
	c.emit(Walk{Epoch: w.epoch, From: w.from, To: w.to, Max: max})
	return false
}

func (s *succession) onWalked(c *Core, ev Walked) {
	s.out = false
	if s.refusedForGood(c, "the walk", ev.Err) {
		return
	}
	if ev.Err != nil {
		s.retry(c, "walk failed", ev.Err, attrU("walk_epoch", ev.Epoch), attrU("from", s.walks[0].from))
		return
	}
	w := &s.walks[0]
	if len(ev.Slots) > 0 {
		if err := c.plan(ev.Epoch, ev.Slots, nil); err != nil {
			c.failOpen(fmt.Errorf("leader: walk %s/%s epoch %d: %w", c.cfg.Star, c.cfg.Class, ev.Epoch, err))
			return
		}
		c.ab.planned.exact = w.exact
	}
	w.from = ev.Next
	s.backoff, s.retryAt = 0, time.Time{}
}

// serve ends a succession: the chain serves (again).
func (c *Core) serve() {
	s := c.succ
	c.succ = nil
	c.phase = phaseServing
	if c.opened {
		return
	}
	c.opened = true
	o := &Opened{Epoch: c.rec.Epoch, Took: c.now.Sub(c.born)}
	if s != nil && s.prevVer != "" {
		o.TakeOver, o.PrevOwner, o.PrevEpoch = true, s.prev.Owner, s.prev.Epoch
		o.FencedCut, o.Clean, o.Walked = s.cut, s.clean, s.walked
		o.PrevSealed = s.cp.Owner == s.prev.Owner
	}
	if s != nil {
		s.took[s.step] += c.now.Sub(s.entered)
		for st, d := range s.took {
			if d > 0 {
				o.Steps = append(o.Steps, StepTook{Step: step(st).String(), Took: d})
			}
		}
	}
	c.rd.Opened = o
}

// failOpen ends an opening that cannot succeed.
func (c *Core) failOpen(err error) {
	if !c.opened {
		c.opened = true
		c.rd.Opened = &Opened{Err: err, Took: c.now.Sub(c.born)}
	}
	c.succ = nil
	c.stop()
}
