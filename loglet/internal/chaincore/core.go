package chaincore

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

	absorb "github.com/flightlog/flightlog/absorb/absorbval"
	chain "github.com/flightlog/flightlog/chain/chainval"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/internal/invariants"
	metastore "github.com/flightlog/flightlog/metastore/metaval"
	"github.com/flightlog/flightlog/pool"
	"github.com/flightlog/flightlog/sequencer"
)

// Config is one chain's settings. The loglet validates them; the core
// trusts them.
type Config struct {
	Star  string
	Class chain.Class
	Owner string
	// Buckets names the bucket set (K = len(Buckets)); W is the quorum.
	Buckets []string
	W       int
	// Window is the pipeline window (slots claimed and not yet released).
	Window int
	// FlushDeadline: the oldest pooled byte waits at most this long for a
	// cut. FlightBytes: a cut takes at most this many pooled bytes (at least
	// one batch).
	FlushDeadline time.Duration
	FlightBytes   int64
	// Frames bound each frame of a flight (the format's limits and the
	// frame-size cap): the cut keeps every flight renderable within them.
	Frames FrameLimits
	// MaxBatchBytes is the largest batch's charge, for the backlog's fit.
	MaxBatchBytes int64
	// CommitDeadline: a flight that misses W copies this long after its
	// first PUT halts the epoch. StragglerTimeout: copies past W are
	// cancelled this long after the first PUT.
	CommitDeadline, StragglerTimeout time.Duration
	// BacklogFlights and BacklogBytes bound claimed-but-unabsorbed flights.
	BacklogFlights int
	BacklogBytes   int64
	// AbsorbInterval paces rounds; AbsorbMaxSlots bounds one round.
	AbsorbInterval time.Duration
	AbsorbMaxSlots int
	// AbsorbEarlyPercent: a round starts before AbsorbInterval has passed
	// once the backlog holds at least this percent of BacklogFlights or of
	// BacklogBytes, so the backlog drains at the metastore's pace instead
	// of stalling at its bound over the interval (0: on the interval
	// only). The loglet's default is 50. Below it (low ingest) rounds run
	// on the interval alone, so metastore requests per second stay as
	// they were; one round is out at a time either way.
	AbsorbEarlyPercent int
	// TailsFullEvery: a full tails snapshot is written at least every
	// this many rounds, deltas in between (0: 1024).
	TailsFullEvery int
	// FenceMaxSlots bounds a fence (0: the chain default).
	FenceMaxSlots uint64
	// FencePatience bounds one fence request (0: until the shell's
	// context ends): a fence that cannot decide a slot for this long
	// returns what blocks it, so that the succession logs it at WARN and
	// shows it in Stats, then fences again.
	FencePatience time.Duration
	// FenceOverride is the operator's way past a slot no fence can decide
	// (chain.FenceOptions): FenceAcceptReadable or FenceDiscardUnreadable.
	FenceOverride FenceOverride
	// StragglerBytes bounds the rendered objects held by copies still out
	// after their flight was acked (0: no bound): past it the oldest
	// stragglers are abandoned to the under-replicated list.
	StragglerBytes int64
	// SealCheckInterval is how often an idle leader reads its checkpoint to
	// learn whether a successor has sealed it (0: never). A busy leader
	// learns it from its absorb rounds, which check the seal.
	SealCheckInterval time.Duration
	// SettleInterval paces settle passes (0: settlement off). A pass runs
	// at most this often, while serving, and only when the checkpoint has
	// moved past the trim cursor.
	SettleInterval time.Duration
	// SettleRequestBudget bounds the metastore requests per second
	// settlement makes on average: a pass that made N delays the next
	// until N/budget seconds after it began (0: DefaultSettleRequestBudget;
	// negative: no bound). See settle.go.
	SettleRequestBudget float64
	// ProducerWindow bounds each stream's producer window (producers.go).
	ProducerWindow ProducerWindow
	// RefuseLiveOwner fails the opening with ErrLiveOwner when the chain's
	// current epoch has a live owner other than this one (LiveOwner).
	RefuseLiveOwner bool
	// Found, if set, is the takeover's first read (the epoch record and the
	// checkpoint) as the host made it just before (the star's live-owner
	// check): the opening starts from it instead of asking ReadEpoch. It
	// may be stale by then; the seal's and the mint's compare-and-swaps on
	// the versions read refuse anything that moved since, and the takeover
	// reads again.
	Found *EpochRead
}

// phase is where a chain is in its life.
type phase uint8

const (
	// opening: the first mint or a takeover (succession) runs; no
	// admission yet.
	phaseOpening phase = iota
	// serving: admission, cut, claim, release, absorb.
	phaseServing
	// recovering: a halt's succession runs (fence, late acks, mint,
	// republish); admission goes on into the pool, nothing is claimed.
	phaseRecovering
	// dead: deposed, or a failure the chain cannot recover from; nothing
	// is admitted, nothing written.
	phaseDead
	// stopped: Ready.Stopped was reported; the core does nothing more.
	phaseStopped
)

func (p phase) String() string {
	return [...]string{"opening", "serving", "recovering", "dead", "stopped"}[p]
}

// Core is the pure state machine of one chain (star, class): the decision
// maker of its lane (docs/design.md, "The lane: a pure core and a thin
// shell"). It does no I/O, starts no goroutine and reads no clock: every
// method takes the time, I/O results arrive as Events, and Ready says what
// to do. It is not safe for concurrent use: the shell serialises every call
// (one mutex).
type Core struct {
	cfg   Config
	now   time.Time
	born  time.Time
	phase phase

	closing     bool // Close was called: no admission; flush, absorb, seal
	aborted     bool // Abort was called
	opened      bool // Opened was reported
	sealedClean bool // the clean seal was recorded
	// Where a clean close's time went (the "epoch sealed cleanly" log):
	// when Close was called, when the last flight was acked, when the
	// seal was sent.
	closeAt, flushedAt, sealAt time.Time

	// The epoch this process leads (or is taking over), and the checkpoint
	// carrying this process's seal as it last wrote it (held: it holds
	// one). Every request that writes the checkpoint carries held and
	// returns the next value; one is out at a time (checkpointOut).
	rec   chain.EpochRecord
	ver   metastore.Version
	held  absorb.Held
	holds bool
	// sealOut: the clean close's SealEpoch is out.
	sealOut bool

	streams map[string]*Stream
	pool    pool.Queue[*Batch]

	window  *sequencer.Window
	flights []*flight // claimed, unreleased, in slot order
	claims  uint64    // claim positions handed out (backlog tokens are keyed by them)
	uploads map[UploadID]*upload
	backlog *absorb.Backlog

	ab     absorbState
	st     settleState
	succ   *succession
	halts  []time.Time // recent halts, for the backoff before minting again
	fate   Fate        // why the chain is dead
	sealed *Deposed    // a successor's seal was seen: never mint again
	// probeWindow is the window of the last garbage probe sent (for its log).
	probeWindow int

	rd    Ready
	stats counters
	// Straggling copies: their uploads, and the objects they hold.
	stragglers     int
	stragglerBytes int64
	closeEr        []error
}

// New returns the core of a chain that is about to open: its first Ready
// asks for the epoch record, and the opening (a first mint or a takeover)
// runs from there. Tails start empty; a takeover learns them.
func New(cfg Config, now time.Time) *Core {
	c := &Core{
		cfg: cfg, now: now, born: now,
		streams: map[string]*Stream{},
		window:  sequencer.NewWindow(0, cfg.Window),
		uploads: map[UploadID]*upload{},
		backlog: absorb.NewBacklog(cfg.BacklogFlights, cfg.BacklogBytes),
	}
	c.stats.putLatency = make([]histogramH, len(cfg.Buckets))
	c.startTakeover()
	c.decideAll()
	return c
}

// K is the bucket set's size.
func (c *Core) K() int { return len(c.cfg.Buckets) }

// Epoch is the epoch this process leads (0 before the opening mints).
func (c *Core) Epoch() uint64 { return c.rec.Epoch }

// Stream returns the core's state of stream name, creating it at its
// absorbed tail (the tails snapshot and walk, then every absorb round,
// keep those) if the core has not seen it.
func (c *Core) Stream(name string) *Stream {
	st := c.streams[name]
	if st == nil {
		st = &Stream{name: name}
		if t, ok := c.ab.tails.get(name); ok {
			st.seq.Next, st.seq.LastTimestamp = t.Next, t.Timestamp
			st.durable = Tail{Seq: t.Next, Timestamp: t.Timestamp}
			c.loadProducers(st, t.Producers)
			st.token = t.FencingToken
		}
		c.streams[name] = st
	}
	return st
}

// Retire ends admission to stream name for good: its incarnation was
// deleted, and an ack must never go to it after the deletion. Every later
// Admit of it fails with ErrRetired. Batches admitted before keep their
// course (acked when durable, like any), and are absorbed; Drained on the
// stream returned says when that is done. Retiring twice is a no-op.
func (c *Core) Retire(name string) *Stream {
	st := c.Stream(name)
	st.retired = true
	return st
}

// Dead returns why the chain no longer serves, or nil while it does (or is
// still opening).
func (c *Core) Dead() *Fate {
	if c.phase == phaseDead || (c.phase == phaseStopped && c.fate.Kind != Pending) {
		f := c.fate
		return &f
	}
	return nil
}

// Admit sequences b (whose Stream, Count, Payload, Charge, Submitted,
// MinTS and MaxTS the shell set; the shell reserved Charge in the pool
// budget) and pushes it to the pool. recs are its records, needed only if
// their timestamps must be re-stamped to keep the stream's order
// (monotone false, or the first timestamp below the stream's last). On
// error nothing was admitted: a *MismatchError, ErrClosed, ErrRetired, a
// *DeadError, or for a batch with a producer identity (Batch.Producer) a
// *DuplicateError, an *InFlightError or a *ProducerWindowError, or for a
// batch whose fencing token is not the stream's a *FencedError.
func (c *Core) Admit(now time.Time, b *Batch, recs []envelope.Record, match *uint64, monotone bool) error {
	c.advanceClock(now)
	switch {
	case c.phase == phaseDead || c.phase == phaseStopped:
		if c.fate.Kind != Pending {
			// The chain's fate may be outcome unknown (what it held when it
			// died); a batch refused now is definitely not committed.
			return &DeadError{Fate: Fate{Kind: NotCommitted, Cause: c.fate.Cause, Deposed: c.fate.Deposed}}
		}
		return ErrClosed
	case c.closing:
		return ErrClosed
	case c.phase == phaseOpening:
		return fmt.Errorf("%w: the chain is still opening", ErrClosed)
	}
	st := b.Stream
	if st.retired {
		return ErrRetired
	}
	if b.Producer.ID != "" && !invariants.DedupeOff.On() {
		if err := c.admitProducer(st, b); err != nil {
			return err
		}
	}
	if err := c.admitFencing(st, b); err != nil {
		return err
	}
	start, err := st.seq.Assign(b.Count, match)
	if err != nil {
		return &MismatchError{Expected: *match, Tail: st.Assigned()}
	}
	b.Start = start
	fenceAdmitted(st, b)
	if b.Producer.ID != "" {
		st.window().inflight[b.Producer] = b
	}
	if !monotone || b.MinTS < st.seq.LastTimestamp {
		// Rare: timestamps would go backwards. Re-stamp and re-encode; the
		// charge covered the widest timestamp encoding. A stored form made
		// of the old encoding is void.
		b.Stored, b.StoredCodec, b.StoredCRC = nil, 0, 0
		b.Payload = b.Payload[:0]
		for i, r := range recs {
			r.Timestamp = st.seq.Stamp(r.Timestamp, b.Submitted.UnixMilli())
			if i == 0 {
				b.MinTS = r.Timestamp
			}
			b.MaxTS = r.Timestamp
			b.Payload = envelope.AppendRecord(b.Payload, r)
		}
	} else {
		st.seq.LastTimestamp = b.MaxTS
	}
	// The core's clock, not now: a shell may read its clock before it
	// takes its lock, so a later admission can bring an earlier now, and
	// the pool's oldest arrival must stay its first.
	c.pool.Push(b, b.Charge, c.now)
	c.decideAll()
	return nil
}

// NeedsLoop reports whether the shell's loop must look at Ready now (after
// an Admit): there is output, or the wake-up moved earlier than wake.
func (c *Core) NeedsLoop(wake time.Time) bool {
	if !c.rd.Empty() {
		return true
	}
	w := c.wakeAt()
	return !w.IsZero() && (wake.IsZero() || w.Before(wake))
}

// Step applies one event at time now.
func (c *Core) Step(now time.Time, ev Event) {
	c.advanceClock(now)
	switch ev := ev.(type) {
	case Tick:
		c.onTick()
	case Rendered:
		c.onRendered(ev)
	case CopyDone:
		c.onCopyDone(ev)
	case EpochRead, TrimCursorRead, FirstMinted, CheckpointCreated, Sealed, SealMinted, Fenced, Minted, TailsRead, Walked:
		if c.succ == nil {
			// The succession that asked for it ended meanwhile (the chain
			// died, or the opening was abandoned): nothing to do with it.
			break
		}
		c.succ.onEvent(c, ev)
	case Probed:
		c.onProbed(ev)
	case CheckpointRead:
		c.onCheckpointRead(ev)
	case SnapshotPut:
		c.onSnapshotPut(ev)
	case RoundCommitted:
		c.onRoundCommitted(ev)
	case RoundMarked:
		c.onRoundMarked(ev)
	case RefsCommitted:
		c.onRefsCommitted(ev)
	case SnapshotsDropped:
		c.onSnapshotsDropped(ev)
	case EpochSealed:
		c.sealOut = false
		c.onEpochSealed(ev)
	case SettlePassed:
		c.onSettlePassed(ev)
	default:
		panic(fmt.Sprintf("leader: unknown event %T", ev))
	}
	c.decideAll()
}

// checkpointOut reports whether a request that writes the checkpoint (a
// round, a mint, the clean seal) is out: each carries the checkpoint held
// and its version, so the next waits for its result.
func (c *Core) checkpointOut() bool {
	return c.ab.busy || c.sealOut || (c.succ != nil && c.succ.step == stepMint && c.succ.out)
}

// hold takes h as the checkpoint held (a request that wrote it returned),
// and the absorb's position from it.
func (c *Core) hold(h absorb.Held) {
	c.held, c.holds = h, true
	c.ab.cpEpoch, c.ab.cpNext = h.Checkpoint.Epoch, h.Checkpoint.Next
}

// advanceClock moves the core's clock to now (never backwards: a shell
// reading a coarse clock may pass an earlier time).
func (c *Core) advanceClock(now time.Time) {
	if now.After(c.now) {
		c.now = now
	}
}

// decideAll runs every decision the new state allows, in a fixed order: the
// succession's next step, cuts and claims, the absorb's next round, and
// the close's next step.
func (c *Core) decideAll() {
	if c.phase == phaseStopped {
		return
	}
	if c.succ != nil {
		c.succ.next(c)
	}
	c.cutAndClaim()
	c.maybeRound()
	c.maybeSettle()
	c.maybeCheckSeal()
	c.maybeFinishClose()
}

// Ready returns what the core asks of the shell since the last Advance.
// It does not change the core.
func (c *Core) Ready() Ready {
	rd := c.rd
	if c.phase != phaseStopped {
		rd.WakeAt = c.wakeAt()
	}
	return rd
}

// Advance confirms that the shell has taken rd (from the last Ready) and
// will execute all of it.
func (c *Core) Advance(rd Ready) {
	if len(rd.Requests) != len(c.rd.Requests) || len(rd.Outcomes) != len(c.rd.Outcomes) {
		panic("leader: Advance with a Ready that is not the last one")
	}
	for _, st := range c.rd.Released {
		st.noted = false
	}
	c.rd = Ready{}
}

// emit queues a request.
func (c *Core) emit(r Request) { c.rd.Requests = append(c.rd.Requests, r) }

// logf queues a log event.
func (c *Core) logf(level slog.Level, msg string, attrs ...slog.Attr) {
	c.rd.Logs = append(c.rd.Logs, Log{Level: level, Msg: msg, Attrs: attrs})
}

// decide records b's outcome and queues it for delivery, after every
// outcome decided before it.
func (c *Core) decide(b *Batch, f Fate) {
	if invariants.Enabled {
		invariants.Assert(b.Fate.Kind == Pending, "batch %s[%d,%d) decided twice (%v, then %v)", b.Stream.name, b.Start, b.End(), b.Fate.Kind, f.Kind)
	}
	b.Fate = f
	c.rd.Outcomes = append(c.rd.Outcomes, b)
	if b.Producer.ID != "" {
		c.producerDecided(b, f)
	}
	switch f.Kind {
	case Acked:
		if t := b.Flight; t != nil && t.Released.IsZero() {
			t.Released = c.now
		}
		c.stats.acked++
		c.stats.ackedRecords += uint64(b.Count)
		c.stats.ackedBytes += uint64(len(b.Payload))
		c.stats.ackLatency.RecordDuration(c.now.Sub(b.Submitted))
	case OutcomeUnknown:
		c.stats.failedUnknown++
	default:
		c.stats.failedNotCommitted++
	}
}

// wakeAt is the earliest time the core needs a Tick.
func (c *Core) wakeAt() time.Time {
	// Only the future counts: whatever was due by now was acted on in
	// settle, or waits for an event, not for time (a past wake-up would
	// spin the shell's loop).
	var w time.Time
	at := func(t time.Time) {
		if t.After(c.now) && (w.IsZero() || t.Before(w)) {
			w = t
		}
	}
	if c.phase == phaseServing || c.phase == phaseRecovering {
		// The flush deadline wakes the core whether or not the backlog has
		// room: at its bound, the cut that comes due is a stall, which
		// begins (and is timed from) then, not at whatever event comes
		// next. Once passed, the deadline is not in the future, so a
		// stall asks for no wake-up here (rediagnose's below).
		if c.phase == phaseServing && !c.closing && c.window.CanClaim() {
			if oldest, ok := c.pool.Oldest(); ok {
				at(oldest.Add(c.cfg.FlushDeadline))
			}
		}
		for _, f := range c.flights {
			if up := f.up; up != nil && up.rendered && !up.durable && !up.cancelled && f.epoch == c.rec.Epoch {
				at(up.deadline)
			}
		}
	}
	for _, up := range c.uploads {
		if up.puts > 0 && !up.cancelled {
			at(up.straggle)
		}
	}
	at(c.ab.wakeAt(c))
	at(c.settleWake())
	at(c.sealCheckDue())
	if c.closing && c.phase == phaseServing && !c.checkpointOut() {
		at(c.ab.retryAt) // a clean seal to retry
	}
	if c.succ != nil {
		at(c.succ.retryAt)
	}
	if c.backlog.Stalling() {
		at(c.now.Add(rediagnose))
	}
	return w
}

// onTick checks the deadlines that may have passed.
func (c *Core) onTick() {
	c.checkDeadlines()
	if c.backlog.Stalling() {
		c.backlog.Stall(c.diagnose(), c.now)
	}
}

// sortedUploads returns the uploads in (epoch, slot) order, so that what
// the core does for each is in an order that replays.
func (c *Core) sortedUploads() []*upload {
	ups := make([]*upload, 0, len(c.uploads))
	for _, up := range c.uploads {
		ups = append(ups, up)
	}
	slices.SortFunc(ups, func(a, b *upload) int {
		if a.id.Epoch != b.id.Epoch {
			return cmpU64(a.id.Epoch, b.id.Epoch)
		}
		return cmpU64(a.id.Slot, b.id.Slot)
	})
	return ups
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func attrU(k string, v uint64) slog.Attr { return slog.Uint64(k, v) }
func attrS(k, v string) slog.Attr        { return slog.String(k, v) }
func attrI(k string, v int) slog.Attr    { return slog.Int(k, v) }
func attrE(err error) slog.Attr          { return slog.Any("err", err) }
