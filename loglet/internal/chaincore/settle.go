package chaincore

import (
	"log/slog"
	"time"

	chain "github.com/flightlog/flightlog/chain/chainval"
	settle "github.com/flightlog/flightlog/settle/settleval"
)

// Settle asks for one settle pass over the absorbed slots from the trim
// cursor up to Upto: its steps are loglet/internal/settlecore's, each one
// I/O call of the executor's. → SettlePassed.
type Settle struct {
	Upto, Checkpoint chain.Position
	Cuts             []chain.Cut // the cuts of earlier epochs the epoch record carries
	Epoch            uint64
	// Known, KnownFrom, KnownOK and Prev: the refs the leader knows
	// (settle_known.go; settle.Pass's fields of the same names).
	Known     []settle.KnownRef
	KnownFrom chain.Position
	KnownOK   bool
	Prev      []settle.KnownRef
	// DoomedKnown, DoomedDue: when the first marker is due, as the
	// leader knows it (settle.Pass's fields of the same names).
	DoomedKnown bool
	DoomedDue   time.Time
	// Idle: the last settled refs of the streams found idle, whose small
	// settled objects at their tail the pass merges (settle_idle.go).
	Idle []settle.KnownRef
}

// SettlePassed is Settle's result.
type SettlePassed struct {
	Result settle.Result
	Err    error
}

func (Settle) isRequest()     {}
func (SettlePassed) isEvent() {}

// settleState is the core's side of settlement: pacing, and what the
// passes did. The passes themselves run on a worker; the core decides
// when one runs and how far it may go.
type settleState struct {
	out     bool
	lastAt  time.Time
	retryAt time.Time
	backoff time.Duration
	warned  bool
	// deleteWarned: the last pass's deletes failed and that was logged.
	deleteWarned bool

	known   bool // the cursor below is as the last pass left it
	at      chain.Position
	deleted chain.Position
	// doomedDue is when the first settled object the last pass left
	// doomed (waiting for its grace) may be deleted: a pass runs then even
	// with nothing new to settle (zero: none waits).
	doomedDue time.Time
	// doomedScanAt: when the last pass that scanned the markers began
	// (zero: none since a failure); doomedDue is known from then on, for
	// doomedRescan.
	doomedScanAt time.Time
	// retry: the last pass failed; the next runs at retryAt whether or
	// not anything looks left to do (a failed pass may have stopped
	// before its deletes, or before it learnt what waits).
	retry bool
	// rounds: when the checkpoint reached each position (committed absorb
	// rounds since this process began), for the settle lag.
	rounds []roundMark
	// heldBytes is the flight copies of those rounds: transit storage
	// that settlement has yet to free.
	heldBytes int64
	passLag   histogramH // Settle.PassLag
	passTime  map[string]time.Duration
	// paceUntil: no pass starts before it (the request budget: see
	// DefaultSettleRequestBudget).
	paceUntil time.Time
	// refs: the refs the leader knows (settle_known.go).
	refs knownRefs
	// tails: the streams it settled recently (settle_idle.go).
	tails idleTable

	passes, failures, merged               uint64
	retries, metaRequests, refScans        uint64
	settledRefs                            uint64
	objects, repointed, reclaimed, deletes uint64
	rawBytes, storedBytes, freedBytes      int64
	lastErr                                error
}

type roundMark struct {
	to    chain.Position
	at    time.Time
	bytes int64 // its flights' copies in the chain's buckets
}

// settleUpto is how far a pass may go: the checkpoint, but never past a
// slot whose copies are still uploading (a straggler landing after its
// slot was deleted would leave a copy nothing reclaims).
func (c *Core) settleUpto() chain.Position {
	upto := chain.Position{Epoch: c.ab.cpEpoch, Next: c.ab.cpNext}
	for _, up := range c.uploads {
		if up.puts > 0 {
			if p := (chain.Position{Epoch: up.id.Epoch, Next: up.id.Slot}); p.Less(upto) {
				upto = p
			}
		}
	}
	return upto
}

// maybeSettle starts a pass when one is due: serving, not closing, the
// interval since the last one passed, and something to settle.
func (c *Core) maybeSettle() {
	s := &c.st
	if c.cfg.SettleInterval <= 0 || s.out || c.phase != phaseServing || c.closing || c.sealed != nil {
		return
	}
	if s.lastAt.IsZero() {
		s.lastAt = c.now // the first pass comes an interval after serving begins
	}
	if c.now.Before(s.retryAt) || c.now.Before(s.lastAt.Add(c.cfg.SettleInterval)) || c.now.Before(s.paceUntil) {
		return
	}
	upto := c.settleUpto()
	idleDue := c.idleDue()
	if !s.retry && s.idle(upto) && (s.doomedDue.IsZero() || c.now.Before(s.doomedDue)) && (idleDue.IsZero() || c.now.Before(idleDue)) {
		return
	}
	s.out, s.lastAt = true, c.now
	in := Settle{Upto: upto, Checkpoint: chain.Position{Epoch: c.ab.cpEpoch, Next: c.ab.cpNext}, Cuts: c.rec.Cuts, Epoch: c.rec.Epoch}
	s.knownInput(&in)
	if !s.doomedScanAt.IsZero() && c.now.Sub(s.doomedScanAt) < doomedRescan {
		in.DoomedKnown, in.DoomedDue = true, s.doomedDue
	}
	in.Idle = s.tails.take(c.now, c.idleAfter())
	c.emit(in)
}

// settleWake is when the next pass is due (zero: none).
func (c *Core) settleWake() time.Time {
	s := &c.st
	if c.cfg.SettleInterval <= 0 || s.out || c.phase != phaseServing || c.closing {
		return time.Time{}
	}
	if s.lastAt.IsZero() {
		return time.Time{} // maybeSettle starts the clock
	}
	due := s.lastAt.Add(c.cfg.SettleInterval)
	if s.retryAt.After(due) {
		due = s.retryAt
	}
	if s.paceUntil.After(due) {
		due = s.paceUntil
	}
	if !s.retry && s.idle(c.settleUpto()) {
		next := s.doomedDue // only doomed objects to delete, once due
		if d := c.idleDue(); !d.IsZero() && (next.IsZero() || d.Before(next)) {
			next = d // or idle streams' tails to merge
		}
		if next.IsZero() {
			return time.Time{} // nothing to do until a round commits
		}
		if next.After(due) {
			due = next
		}
	}
	return due
}

// idle: the last pass settled and trimmed everything up to upto.
func (s *settleState) idle(upto chain.Position) bool {
	return s.known && !s.at.Less(upto) && !s.deleted.Less(s.at)
}

func (c *Core) onSettlePassed(ev SettlePassed) {
	s := &c.st
	s.out = false
	r := ev.Result
	s.paceUntil = c.settlePace(r.MetaRequests)
	s.settledKnown(r)
	s.tails.noteSettled(r, c.now)
	s.tails.passed(r, c.now, c.idleAfter())
	s.passes++
	s.objects += uint64(r.Objects)
	s.merged += uint64(r.Merged)
	s.retries += uint64(r.Retries)
	s.metaRequests += uint64(r.MetaRequests)
	s.refScans += uint64(r.RefScans)
	s.settledRefs += uint64(len(r.Settled))
	s.repointed += uint64(r.Repointed)
	s.reclaimed += uint64(r.Reclaimed)
	s.deletes += uint64(r.Deleted)
	s.rawBytes += r.RawBytes
	s.storedBytes += r.StoredBytes
	s.freedBytes += r.FreedBytes
	for ph, d := range r.Time {
		if s.passTime == nil {
			s.passTime = map[string]time.Duration{}
		}
		s.passTime[ph] += d
	}
	if ev.Err == nil || !r.DoomedDue.IsZero() {
		// A failed pass may have stopped before it looked at the doomed
		// objects: what the last pass learnt stands (the retry runs, idle
		// or not, and learns again).
		s.doomedDue = r.DoomedDue
	}
	switch {
	case ev.Err != nil:
		s.doomedScanAt = time.Time{} // the next pass scans
	case r.MarkersScanned:
		s.doomedScanAt = s.lastAt
	}
	s.retry = ev.Err != nil
	if r.Trim.At.Epoch > 0 {
		s.known, s.at, s.deleted = true, r.Trim.At, r.Trim.Deleted
		c.forgetUnderReplicated(s.at)
		if len(s.rounds) > 0 && !s.at.Less(s.rounds[0].to) {
			s.passLag.RecordDuration(c.now.Sub(s.rounds[0].at)) // the oldest round this pass settled
		}
		for len(s.rounds) > 0 && !s.at.Less(s.rounds[0].to) {
			s.heldBytes -= s.rounds[0].bytes
			s.rounds = s.rounds[1:]
		}
	}
	if ev.Err != nil {
		s.failures++
		s.lastErr = ev.Err
		s.backoff = min(max(2*s.backoff, 100*time.Millisecond), 30*time.Second)
		s.retryAt = c.now.Add(s.backoff)
		if !s.warned {
			s.warned = true
			c.logf(slog.LevelWarn, "settle pass failed; retrying", slog.Duration("backoff", s.backoff), attrE(ev.Err))
		}
		return
	}
	s.backoff, s.retryAt, s.warned, s.lastErr = 0, time.Time{}, false, r.DeleteErr
	if r.DeleteErr != nil && !s.deleteWarned {
		s.deleteWarned = true
		c.logf(slog.LevelWarn, "settled slots not deleted from every bucket; the deletes stay due", attrE(r.DeleteErr))
	} else if r.DeleteErr == nil {
		s.deleteWarned = false
	}
	if r.Objects > 0 || r.Deleted > 0 {
		c.logf(slog.LevelDebug, "settled", slog.String("result", r.Describe()), attrU("trim_epoch", s.at.Epoch), attrU("trim_next", s.at.Next))
	}
}

// doomedRescan is how long the leader trusts what it knows of the
// markers: a pass scans them at least this often even if nothing is due
// (a deposed leader's pass may have left pending markers since).
const doomedRescan = 10 * time.Minute

// DefaultSettleRequestBudget is Config.SettleRequestBudget's default:
// settlement makes at most this many metastore requests per second per
// chain on average. A pass costs about one request per MaxCommitOps ops of
// repoints (one Commit carries many streams'), plus a ref scan per stream;
// at many active streams one pass per interval would cost more, so the
// passes are paced by what each cost: the rate stays flat and the lag
// grows instead.
const DefaultSettleRequestBudget = 50

// settlePace is when the next pass may start after one that began at
// lastAt and made n metastore requests.
func (c *Core) settlePace(n int) time.Time {
	b := c.cfg.SettleRequestBudget
	if b == 0 {
		b = DefaultSettleRequestBudget
	}
	if b < 0 || n <= 0 {
		return time.Time{}
	}
	return c.st.lastAt.Add(time.Duration(float64(n) / b * float64(time.Second)))
}

// noteRound records that the checkpoint reached (epoch, next) now, with
// bytes of flight copies.
func (s *settleState) noteRound(to chain.Position, now time.Time, bytes int64) {
	s.heldBytes += bytes
	if n := len(s.rounds); n < 4096 {
		s.rounds = append(s.rounds, roundMark{to: to, at: now, bytes: bytes})
	} else {
		last := &s.rounds[n-1] // fold into the last mark: the lag is the oldest's
		last.to, last.bytes = to, last.bytes+bytes
	}
}

// lag is the age of the oldest absorbed round not yet settled.
func (s *settleState) lag(now time.Time) time.Duration {
	if len(s.rounds) == 0 {
		return 0
	}
	return now.Sub(s.rounds[0].at)
}

// cutFloor is the oldest epoch whose cut the next epoch record must keep:
// the checkpoint's (a walk needs it), or the trim cursor's deletes' if
// older (settle needs it). An unknown cursor keeps them all, settlement on
// or off: a star run with settlement off still has its cursor at the
// start, and turning settlement on later (the upgrade path) needs the cut
// of every epoch since (nextRecord bounds how many are kept).
func (c *Core) cutFloor(cpEpoch uint64) uint64 {
	if c.cfg.SettleInterval <= 0 || !c.st.known {
		return 0
	}
	return min(cpEpoch, c.st.deleted.Epoch)
}

// maxKeptCuts bounds the cuts an epoch record keeps for settlement (those
// a walk needs are kept whatever their number): about 40 KiB of record.
const maxKeptCuts = 1024
