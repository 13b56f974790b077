package loglet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/internal/histogram"
	"github.com/flightlog/flightlog/internal/plant"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
	"github.com/flightlog/flightlog/pool"
	"github.com/flightlog/flightlog/sequencer"
)

// pending is one admitted batch, from admission to its outcome.
type pending struct {
	st           *streamState
	start        uint64
	count        int
	minTS, maxTS int64
	payload      []byte // the encoded records
	charge       int64  // bytes charged to the pool
	submitted    time.Time

	done chan struct{} // closed when ack or err is set
	ack  Ack
	err  error
}

// flight is a cut, claimed slot, kept until its release or failure. A halt
// recovery may move it to a slot of the next epoch (republish).
type flight struct {
	epoch   uint64 // the epoch it is written in (changes on republish)
	slot    uint64
	pos     uint64        // claim position: backlog tokens are keyed by it
	done    chan struct{} // closed when its current upload goroutine returns
	batches []*pending
	bytes   int64 // payload bytes
	claimed time.Time
	cancel  context.CancelFunc // ends the upload (set at claim)
	failed  bool               // its batches were failed by a halt
	key     string             // set by the upload, under the lane lock
	frames  []envelope.FrameInfo
}

// lane runs one chain (star, class): the pool, the flusher that cuts and
// claims in one loop, the uploads below the claim, and the release in slot
// order. Invariants 1 and 3 live here.
type lane struct {
	star    *Star
	class   Class
	cfg     ClassConfig
	epoch   uint64
	buckets []objstore.Store
	pool    *pool.Pool[*pending]
	log     *slog.Logger // set once; never replaced (uploads read it without the lock)
	writers sync.Pool    // *envelope.BundleWriter

	ctx    context.Context // ends uploads on Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the flusher and every upload
	flushr chan struct{}  // closed when the flusher exits
	closed chan struct{}  // closed when close (or crash) begins: wakes the flusher
	closeO sync.Once

	mu      sync.Mutex
	space   *sync.Cond // signalled on release, halt and close
	window  *sequencer.Window
	flights map[uint64]*flight
	haltErr error // the cause of the halt being recovered from (nil: not halted)
	closing bool  // no admission; flush what is pooled
	index   flightIndex

	recovering bool          // a halt recovery is running: no claims
	recovered  chan struct{} // closed when the current recovery ends
	dead       error         // deposed for good: every append fails not-committed
	claims     uint64        // claim positions handed out
	haltTimes  []time.Time   // recent halts, for the backoff before minting

	rec        chain.EpochRecord // this lane's epoch record and version
	recVer     metastore.Version
	startTails map[string]absorb.StreamTail // tails at Open (read-only)

	backlog  *absorb.Backlog
	absorber *absorber
	absorbQ  []*flight // released, not yet absorbed, in slot order (lane lock)

	// Outcomes (acks and failures) are decided under the lane lock and
	// delivered, outside it, in the order decided: doneQ holds what is
	// decided and not yet delivered; delivering says a goroutine is
	// draining it (see deliver).
	doneQ      []*pending
	delivering bool

	stats laneStats

	// onRelease, if set (tests only), is called under the lane lock for
	// each released slot, in release order.
	onRelease func(epoch, slot uint64)
}

type laneStats struct {
	flights, flightBytes, objBytes  atomic.Uint64
	acked, ackedRecords, ackedBytes atomic.Uint64
	failedUnknown, failedNotCommit  atomic.Uint64
	ghosts, foreign, underReplic    atomic.Uint64
	halts                           atomic.Uint64
	ackLatency, quorumLatency       histogram.H
	flightSize                      histogram.H
	putLatency                      []histogram.H // per bucket
	mu                              sync.Mutex
	underReplicated                 []uint64 // most recent slots with fewer than K copies
	haltCause                       string
}

const maxUnderReplicatedList = 1024

func newLane(s *Star, class Class, cfg ClassConfig, start chainStart) *lane {
	epoch := start.rec.Epoch
	ctx, cancel := context.WithCancel(context.Background())
	l := &lane{
		star: s, class: class, cfg: cfg, epoch: epoch, buckets: cfg.Buckets,
		pool: pool.New[*pending](int64(cfg.MemoryBufferMiB) << 20),
		log:  s.log.With("star", s.cfg.Star, "class", class.String()), // fixed: messages carry the epoch
		ctx:  ctx, cancel: cancel,
		flushr:  make(chan struct{}),
		closed:  make(chan struct{}),
		window:  sequencer.NewWindow(0, cfg.ParallelUploads),
		flights: map[uint64]*flight{},
	}
	l.space = sync.NewCond(&l.mu)
	l.rec, l.recVer, l.startTails = start.rec, start.ver, start.tails
	l.absorber = newAbsorber(l, start.cm, start.tails)
	l.absorber.prevSnapshot = start.snapshot
	l.absorber.cpEpoch.Store(start.cm.Checkpoint().Epoch)
	l.backlog = absorb.NewBacklog(cfg.ChainBacklogFlights, int64(cfg.ChainBacklogMiB)<<20, l.absorber.diagnose,
		func(cause absorb.StallCause, flights int, bytes int64) {
			l.log.Warn("backlog full: publishes blocked", "cause", cause.String(), "flights", flights, "bytes", bytes)
		})
	l.writers.New = func() any { return envelope.NewBundleWriter() }
	l.stats.putLatency = make([]histogram.H, len(cfg.Buckets))
	l.wg.Add(2)
	go l.flushLoop()
	go l.absorber.run()
	return l
}

// admit sequences p and pushes it to the pool; the caller reserved
// p.charge bytes. On error nothing was admitted and the reservation is
// returned.
func (l *lane) admit(p *pending, recs []Record, match *uint64, monotone bool) error {
	l.mu.Lock()
	if l.closing || l.dead != nil {
		err := ErrClosed
		if l.dead != nil {
			err = l.dead
			var nl *NotLeaderError
			if errors.As(err, &nl) {
				c := *nl
				c.Stream = p.st.name
				err = &c
			}
		}
		l.mu.Unlock()
		l.pool.Unreserve(p.charge)
		return notCommitted(err)
	}
	st := p.st
	start, err := st.seq.Assign(p.count, match)
	if err != nil {
		tail := Tail{Seq: st.seq.Next, Timestamp: st.seq.LastTimestamp}
		l.mu.Unlock()
		l.pool.Unreserve(p.charge)
		var me *sequencer.MismatchError
		errors.As(err, &me)
		return &SeqNumMismatchError{Stream: st.name, Expected: me.Expected, Tail: tail}
	}
	p.start = start
	if !monotone || p.minTS < st.seq.LastTimestamp {
		// Rare: timestamps would go backwards. Re-stamp and re-encode;
		// the charge covered the widest timestamp encoding.
		p.payload = p.payload[:0]
		p.minTS = 0
		for i, r := range recs {
			r.Timestamp = st.seq.Stamp(r.Timestamp, p.submitted.UnixMilli())
			if i == 0 {
				p.minTS = r.Timestamp
			}
			p.maxTS = r.Timestamp
			p.payload = envelope.AppendRecord(p.payload, r)
		}
	} else {
		st.seq.LastTimestamp = p.maxTS
	}
	l.pool.Push(p, p.charge, p.submitted)
	l.mu.Unlock()
	return nil
}

// flushLoop is the one loop that cuts flights and claims their slots, so cut
// order is slot order. It waits for a cut condition (FlightBytes pooled, the
// oldest byte's deadline, or close), then for window space, then cuts and
// claims under the lane lock and starts the upload.
func (l *lane) flushLoop() {
	defer l.wg.Done()
	defer close(l.flushr)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if !l.waitForCut(timer) {
			return
		}
		// The backlog bounds claimed-but-unabsorbed flights: at the bound
		// the flusher (and behind it, admission) waits for the absorb.
		if err := l.backlog.Acquire(l.ctx, int64(max(l.cfg.FlightBytes, l.star.cfg.MaxBatchBytes))); err != nil {
			return
		}
		l.mu.Lock()
		// While a halt is recovered from, nothing is claimed: batches wait
		// in the pool and go out in the next epoch.
		for l.dead == nil && (l.recovering || !l.window.CanClaim()) {
			l.space.Wait()
		}
		if l.dead != nil {
			// Deposed: nothing more is cut. What is pooled was never
			// claimed, so it is definitely not committed.
			items, _ := l.pool.Cut(1 << 62)
			l.decideBatchesLocked(items, notCommitted(l.dead))
			drain := l.startDeliveryLocked()
			closing := l.closing
			l.mu.Unlock()
			if drain {
				l.deliver()
			}
			if closing {
				if _, n := l.pool.Queued(); n == 0 {
					return
				}
			}
			continue
		}
		slot, _ := l.window.Claim()
		items, bytes := l.pool.Cut(int64(l.cfg.FlightBytes))
		l.claims++
		f := &flight{epoch: l.epoch, slot: slot, pos: l.claims, batches: items, bytes: bytes}
		l.flights[slot] = f
		l.backlog.Add(f.pos, bytes)
		l.startUpload(f)
		l.mu.Unlock()
	}
}

// waitForCut blocks until a flight should be cut; false means the lane is
// closing and the pool is empty.
func (l *lane) waitForCut(timer *time.Timer) bool {
	for {
		bytes, n := l.pool.Queued()
		l.mu.Lock()
		closing := l.closing
		halted := l.dead != nil
		l.mu.Unlock()
		if n > 0 && (closing || halted || bytes >= int64(l.cfg.FlightBytes)) {
			return true
		}
		if n == 0 && closing {
			return false
		}
		wait := time.Hour
		if n > 0 {
			oldest, _ := l.pool.Oldest()
			wait = time.Until(oldest.Add(l.cfg.FlushDeadline))
			if wait <= 0 {
				return true
			}
		}
		timer.Reset(wait)
		select {
		case <-l.pool.Ready():
		case <-timer.C:
		case <-l.closed:
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// render builds the flight's transit bundle: one frame per stream, holding
// that stream's batches of this flight (consecutive sequence numbers), frames
// in the order each stream first arrived.
func (l *lane) render(f *flight, nonce envelope.Nonce) ([]byte, error) {
	w := l.writers.Get().(*envelope.BundleWriter)
	defer l.writers.Put(w)
	type group struct {
		st    *streamState
		parts []*pending
	}
	var order []*group
	byStream := map[*streamState]*group{}
	for _, p := range f.batches {
		g := byStream[p.st]
		if g == nil {
			g = &group{st: p.st}
			byStream[p.st] = g
			order = append(order, g)
		}
		g.parts = append(g.parts, p)
	}
	var scratch []byte
	for _, g := range order {
		first := g.parts[0]
		recs, count := first.payload, first.count
		minTS, maxTS := first.minTS, first.maxTS
		if len(g.parts) > 1 {
			scratch = scratch[:0]
			count = 0
			for _, p := range g.parts {
				scratch = append(scratch, p.payload...)
				count += p.count
				maxTS = max(maxTS, p.maxTS)
			}
			recs = scratch
		}
		if err := w.AddFrame(g.st.name, first.start, count, minTS, maxTS, recs, l.cfg.codec()); err != nil {
			return nil, fmt.Errorf("loglet: render slot %d: %w", f.slot, err)
		}
	}
	obj, frames := w.Finish(f.epoch, f.slot, nonce)
	l.mu.Lock()
	f.frames = frames
	f.key = chain.SlotKey(l.star.cfg.Star, l.class, f.epoch, f.slot)
	l.mu.Unlock()
	return obj, nil
}

// upload renders f and writes it to every bucket, counting copies against W.
// It marks the slot durable at W, halts the epoch on a foreign occupant or a
// missed commit deadline, and lets stragglers finish (bounded by ctx).
func (l *lane) upload(ctx context.Context, f *flight, epoch, slot uint64, cancel context.CancelFunc, done chan struct{}) {
	defer l.wg.Done()
	defer close(done)
	defer cancel()
	nonce := envelope.NewNonce()
	obj, err := l.render(f, nonce)
	if err != nil {
		l.haltAt(epoch, slot, err)
		return
	}
	l.stats.flights.Add(1)
	var payload uint64
	for _, p := range f.batches {
		payload += uint64(len(p.payload))
	}
	l.stats.flightBytes.Add(payload)
	l.stats.objBytes.Add(uint64(len(obj)))
	l.stats.flightSize.Record(int64(len(obj)))

	key := chain.SlotKey(l.star.cfg.Star, l.class, epoch, slot)
	results := chain.WriteFlight(ctx, l.buckets, chain.Flight{Key: key, Obj: obj, Epoch: epoch, Slot: slot, Nonce: nonce}, l.cfg.Retry)
	// The commit deadline (and the quorum latency) run from the first
	// PUT, not the claim: compression time is CPU, not the store's.
	putStart := time.Now()
	deadline := time.NewTimer(l.cfg.CommitDeadline)
	defer deadline.Stop()
	tally := chain.Tally{K: len(l.buckets), W: l.cfg.W}
	decided := false // durable, or halted at this slot
	for results != nil {
		select {
		case r, ok := <-results:
			if !ok {
				results = nil
				continue
			}
			if r.Status == chain.CopyOurs {
				l.stats.putLatency[r.Bucket].RecordDuration(r.Latency)
				if r.Ghost {
					l.stats.ghosts.Add(1)
				}
			}
			if r.Status == chain.CopyForeign {
				l.stats.foreign.Add(1)
				l.log.Warn("foreign occupant in slot; halting the epoch", "epoch", epoch, "slot", slot, "bucket", l.cfg.BucketNames[r.Bucket], "err", r.Err)
				// Nothing past this slot may release. This slot itself
				// still counts if W copies are ours.
				l.haltAt(epoch, slot+1, r.Err)
			}
			if tally.Add(r) && !decided {
				decided = true
				l.stats.quorumLatency.RecordDuration(time.Since(putStart))
				l.durable(f, epoch, slot)
			}
			if !decided && !tally.Reachable() {
				decided = true
				l.haltAt(epoch, slot, fmt.Errorf("slot %d cannot reach W=%d: %d ours, %d foreign, %d failed", slot, tally.W, tally.Ours, tally.Foreign, tally.Failed))
			}
		case <-deadline.C:
			if !decided {
				decided = true
				l.haltAt(epoch, slot, fmt.Errorf("slot %d missed its commit deadline %v with %d of W=%d copies", slot, l.cfg.CommitDeadline, tally.Ours, tally.W))
			}
		}
	}
	if tally.Durable() && tally.Ours < tally.K {
		l.stats.underReplic.Add(1)
		l.stats.mu.Lock()
		if len(l.stats.underReplicated) >= maxUnderReplicatedList {
			l.stats.underReplicated = l.stats.underReplicated[1:]
		}
		l.stats.underReplicated = append(l.stats.underReplicated, slot)
		l.stats.mu.Unlock()
		l.log.Info("slot under-replicated", "epoch", epoch, "slot", slot, "copies", tally.Ours, "k", tally.K)
	}
}

// startUpload launches f's upload at its current (epoch, slot). Lane lock
// held.
func (l *lane) startUpload(f *flight) {
	ctx, cancel := context.WithTimeout(l.ctx, l.cfg.StragglerTimeout)
	f.cancel, f.done, f.claimed, f.failed = cancel, make(chan struct{}), time.Now(), false
	l.wg.Add(1)
	go l.upload(ctx, f, f.epoch, f.slot, cancel, f.done)
}

// durable marks (epoch, slot) durable and releases every flight that is now
// durable with all earlier slots released, in slot order. A report from an
// upload of an earlier epoch (its flight since republished) is ignored.
func (l *lane) durable(f *flight, epoch, slot uint64) {
	l.mu.Lock()
	if epoch != l.epoch || l.flights[slot] != f || f.failed {
		l.mu.Unlock()
		return
	}
	l.window.MarkDurable(slot)
	from, to := l.window.Release()
	var released []*flight
	if slot >= to && plant.ReleaseOutOfOrder.Load() {
		released = append(released, l.releaseLocked(slot)) // a planted bug, for the simulation's checker
	}
	for s := from; s < to; s++ {
		if l.flights[s] != nil { // nil only under the planted bug above
			released = append(released, l.releaseLocked(s))
		}
	}
	drain := l.decideLocked(released, nil)
	l.mu.Unlock()
	l.finishReleased(released, drain)
}

// releaseLocked releases the flight at slot of the current epoch: its
// batches get their acks and enter the flight index, and it joins the
// absorb queue. Lane lock held.
func (l *lane) releaseLocked(slot uint64) *flight {
	rf := l.flights[slot]
	delete(l.flights, slot)
	if l.onRelease != nil {
		l.onRelease(l.epoch, slot)
	}
	for _, p := range rf.batches {
		st := p.st
		st.durable = Tail{Seq: p.start + uint64(p.count), Timestamp: p.maxTS}
		l.index.add(st, p)
		if st.waiters != nil { // wake read sessions following st
			close(st.waiters)
			st.waiters = nil
		}
		p.ack = Ack{Start: p.start, End: p.start + uint64(p.count), Tail: st.durable}
	}
	l.absorbQ = append(l.absorbQ, rf)
	l.space.Broadcast()
	return rf
}

// finishReleased kicks the absorb for released flights and delivers their
// acks if decideLocked said so (lane lock not held).
func (l *lane) finishReleased(released []*flight, drain bool) {
	if len(released) > 0 {
		l.absorber.kick()
	}
	if drain {
		l.deliver()
	}
}

// decideLocked queues the outcome of every batch of flights (err nil: their
// acks, set by releaseLocked) for delivery, after everything decided
// before. It reports whether the caller must call deliver once it has
// released the lane lock. Lane lock held.
func (l *lane) decideLocked(flights []*flight, err error) bool {
	for _, f := range flights {
		l.decideBatchesLocked(f.batches, err)
	}
	return l.startDeliveryLocked()
}

// decideBatchesLocked queues ps with err (nil: acked) for delivery. The
// caller then calls startDeliveryLocked. Lane lock held.
func (l *lane) decideBatchesLocked(ps []*pending, err error) {
	for _, p := range ps {
		if err != nil {
			p.err = err
		}
		l.doneQ = append(l.doneQ, p)
	}
}

// startDeliveryLocked reports whether the caller must drain the queue: it
// holds something and nobody is draining it. Lane lock held.
func (l *lane) startDeliveryLocked() bool {
	if l.delivering || len(l.doneQ) == 0 {
		return false
	}
	l.delivering = true
	return true
}

// deliver drains doneQ in order, closing each batch's done channel outside
// the lane lock, until the queue is empty. One goroutine delivers at a
// time, so two releases racing to deliver can never hand a later slot's
// ack to its waiter before an earlier slot's (an AppendSession's futures
// complete in submit order; a producer never sees seq n+1 acked while n is
// still pending).
func (l *lane) deliver() {
	l.mu.Lock()
	for len(l.doneQ) > 0 {
		q := l.doneQ
		l.doneQ = nil
		l.mu.Unlock()
		now := time.Now()
		for _, p := range q {
			switch {
			case p.err == nil:
				l.stats.ackLatency.RecordDuration(now.Sub(p.submitted))
				l.stats.acked.Add(1)
				l.stats.ackedRecords.Add(uint64(p.count))
				l.stats.ackedBytes.Add(uint64(len(p.payload)))
			case errors.Is(p.err, ErrOutcomeUnknown):
				l.stats.failedUnknown.Add(1)
			default:
				l.stats.failedNotCommit.Add(1)
			}
			close(p.done)
		}
		l.mu.Lock()
	}
	l.delivering = false
	l.space.Broadcast() // close waits for delivery to finish
	l.mu.Unlock()
}

// haltAt halts the current epoch at slot (a report from an upload of an
// earlier epoch is ignored): no claim, and no release at or past slot, until
// a recovery has fenced the epoch and moved on. The first halt starts the
// recovery; a later one only lowers the halt slot.
func (l *lane) haltAt(epoch, slot uint64, cause error) {
	l.mu.Lock()
	if epoch != l.epoch || l.dead != nil {
		l.mu.Unlock()
		return
	}
	l.window.Halt(slot)
	start := !l.recovering
	if start {
		l.recovering = true
		l.haltErr = cause
		l.recovered = make(chan struct{})
		l.stats.halts.Add(1)
		l.stats.mu.Lock()
		l.stats.haltCause = cause.Error()
		l.stats.mu.Unlock()
		l.wg.Add(1)
		go l.recover()
	}
	bound, _ := l.window.Halted()
	l.space.Broadcast()
	l.mu.Unlock()
	if start {
		l.log.Warn("chain halted; recovering", "epoch", epoch, "slot", bound, "cause", cause)
	}
}

// halt halts the current epoch at slot.
func (l *lane) halt(slot uint64, cause error) {
	l.mu.Lock()
	e := l.epoch
	l.mu.Unlock()
	l.haltAt(e, slot, cause)
}

// close stops admission, lets the flusher cut everything pooled, waits until
// every claimed flight is released or failed, then ends stragglers and waits
// for every goroutine.
func (l *lane) close() {
	l.mu.Lock()
	l.closing = true
	l.space.Broadcast()
	l.mu.Unlock()
	l.closeCh()
	l.pool.Close()
	// Admission is over, so the backlog can grow by at most what is pooled
	// (already within the pool budget): lift its bound, so what was
	// admitted is flushed and acked even while the metastore is down
	// (acks never depend on it).
	l.backlog.Close()
	<-l.flushr
	// Wait for every claimed flight's outcome. A recovery that cannot
	// finish (the stores are down) is ended after a bound: its flights then
	// end outcome-unknown.
	stop := time.AfterFunc(l.cfg.StragglerTimeout+l.cfg.CommitDeadline, func() {
		l.log.Warn("close: flights still unresolved; cancelling")
		l.cancel()
		l.mu.Lock()
		l.space.Broadcast()
		l.mu.Unlock()
	})
	l.mu.Lock()
	for len(l.flights) > 0 || l.recovering || l.delivering {
		l.space.Wait()
	}
	l.mu.Unlock()
	stop.Stop()
	// Everything released is absorbed before the lane stops, so the next
	// owner finds the checkpoint at the release point.
	l.absorber.drain()
	l.cancel()
	l.wg.Wait()
}

// seal records a clean seal of the lane's epoch after close: every slot
// below the release point is committed and acked, and nothing at or past it
// was written (no halt), so the next owner can skip fencing. A halted or
// deposed lane records nothing: its successor fences.
func (l *lane) seal() {
	l.mu.Lock()
	halted := l.haltErr != nil || l.dead != nil || l.window.InFlight() > 0
	cut := l.window.Released()
	rec, ver := l.rec, l.recVer
	l.mu.Unlock()
	if halted {
		return
	}
	epochAttr := slog.Uint64("epoch", rec.Epoch)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := chain.SealEpoch(ctx, l.star.cfg.Meta, l.star.cfg.Star, l.class, rec, ver, cut); err != nil {
		l.log.Warn("clean seal not recorded; the next owner will fence", epochAttr, "cut", cut, "err", err)
		return
	}
	l.log.Info("epoch sealed cleanly", epochAttr, "cut", cut)
}

func (l *lane) closeCh() { l.closeO.Do(func() { close(l.closed) }) }
