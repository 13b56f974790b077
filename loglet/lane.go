package loglet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/loglet/internal/chaincore"
	"github.com/flightlog/flightlog/loglet/internal/work"
	"github.com/flightlog/flightlog/pool"
)

// lane is the shell of one chain (star, class), after CockroachDB driving
// raft's RawNode under one mutex: the chain's pure core (loglet/internal/chaincore)
// under one lock, one goroutine that executes each Ready, and one worker
// per request (one I/O call, one event back). The shell makes no decision:
// admission, the cut, the claim, the release order, halts, succession (the
// fence's steps among them), absorb pacing and each round's steps, and the
// close are all the core's. Nor do the workers, which share nothing with
// the core: each request carries the values its worker needs (the
// checkpoint the core holds among them), and its event the results.
type lane struct {
	star   *Star
	class  Class
	cfg    ClassConfig
	log    *slog.Logger
	env    *work.Env
	budget *pool.Budget // the pool's byte budget: admission blocks here
	slab   slab         // producers carve batches' payloads and stored forms from it
	// precompressSkipped counts batches compressed at the claim because
	// the budget had no room for their compressed copy at admission.
	precompressSkipped atomic.Uint64

	mu      sync.Mutex
	core    *chaincore.Core
	wake    time.Time                           // the loop's armed wake-up
	dead    *chaincore.Fate                     // the chain stopped serving (Ready.Dead)
	waiters map[*chaincore.Stream]chan struct{} // closed at the stream's next release

	kick    chan struct{} // capacity 1: the core has something for the loop
	events  chan chaincore.Event
	ctx     context.Context // the workers' context, cancelled when the loop stops
	cancel  context.CancelFunc
	stopped chan struct{}         // closed when the loop exits
	opened  chan chaincore.Opened // the opening's result, once
	workers sync.WaitGroup
	// background counts the writes workers leave running past their
	// events (work.Env.Background): waited for at stop, after the workers.
	background sync.WaitGroup

	// Loop goroutine only: the cancel functions of each upload's copies.
	copies map[chaincore.UploadID]*copyWorkers

	// Loop goroutine only: the wake-ups precise sleepers are out for.
	sleepers []time.Time
	wakes    chan time.Time // capacity maxSleepers: each sleeper sends its wake-up
}

type copyWorkers struct {
	n      int
	cancel []context.CancelFunc
	obj    []byte // the flight object they PUT: recycled once all return
}

// newLane starts the shell of chain class: its core begins the opening (a
// first mint or a takeover) at once, refusing a live owner if refuseLive,
// from found (the chain's first read, made already) if set; awaitOpen
// waits for it.
func newLane(s *Star, class Class, cfg ClassConfig, refuseLive bool, found *chaincore.EpochRead) *lane {
	ctx, cancel := context.WithCancel(context.Background())
	l := &lane{
		star: s, class: class, cfg: cfg,
		log:    s.log.With("star", s.cfg.Star, "class", class.String()),
		budget: pool.NewBudget(int64(cfg.MemoryBufferMiB) << 20),
		env: &work.Env{Star: s.cfg.Star, Class: class, Owner: s.cfg.Owner, Stores: cfg.Stores, Names: cfg.BucketNames,
			W: cfg.W, Meta: s.cfg.Meta, Codec: cfg.codec(), Retry: cfg.Retry, ReadAhead: cfg.ReadAhead, Frames: chaincore.DefaultFrameLimits(int64(cfg.FrameBytes)),
			Settled: s.cfg.Standard.Stores, Liveness: s.streamLiveness, SettleTimeout: settlePassTimeout, SettleGrace: s.cfg.doomedGrace},
		waiters: map[*chaincore.Stream]chan struct{}{},
		kick:    make(chan struct{}, 1),
		wakes:   make(chan time.Time, maxSleepers),
		events:  make(chan chaincore.Event, 256),
		ctx:     ctx, cancel: cancel,
		stopped: make(chan struct{}),
		opened:  make(chan chaincore.Opened, 1),
		copies:  map[chaincore.UploadID]*copyWorkers{},
	}
	l.env.Background = &l.background
	l.env.PassMemory = &work.PassMemory{Budget: l.budget}
	l.core = chaincore.New(chaincore.Config{
		Star: s.cfg.Star, Class: class, Owner: s.cfg.Owner, Buckets: cfg.BucketNames, W: cfg.W,
		Window: cfg.ParallelUploads, FlushDeadline: cfg.FlushDeadline, FlightBytes: int64(cfg.FlightBytes),
		Frames:        chaincore.DefaultFrameLimits(int64(cfg.FrameBytes)),
		MaxBatchBytes: int64(s.cfg.MaxBatchBytes), CommitDeadline: cfg.CommitDeadline, StragglerTimeout: cfg.StragglerTimeout,
		BacklogFlights: cfg.ChainBacklogFlights, BacklogBytes: int64(cfg.ChainBacklogMiB) << 20,
		AbsorbInterval: s.cfg.AbsorbInterval, AbsorbMaxSlots: s.cfg.AbsorbMaxSlots, AbsorbEarlyPercent: max(0, s.cfg.AbsorbEarlyPercent),
		RefuseLiveOwner:   refuseLive,
		Found:             found,
		StragglerBytes:    int64(cfg.StragglerMiB) << 20,
		SealCheckInterval: s.cfg.SealCheckInterval,
		FencePatience:     max(0, s.cfg.FencePatience),
		FenceOverride:     chaincore.FenceOverride(cfg.FenceOverride),
		SettleInterval:    s.settleInterval(),
		ProducerWindow:    chaincore.ProducerWindow(s.cfg.ProducerWindow),
	}, time.Now())
	go l.run()
	return l
}

// settlePassTimeout bounds one settle pass (a slot no copy of which reads
// would otherwise hold it forever); the core retries with backoff.
const settlePassTimeout = time.Minute

// awaitOpen waits until the chain serves or its opening fails; if ctx ends
// first the opening is abandoned.
func (l *lane) awaitOpen(ctx context.Context) (chaincore.Opened, error) {
	select {
	case o := <-l.opened:
		return o, o.Err
	case <-ctx.Done():
		l.abort(ctx.Err())
		o := <-l.opened
		if o.Err == nil {
			// It opened just as ctx ended: the caller gives up anyway.
			return o, ctx.Err()
		}
		return o, o.Err
	}
}

// run is the shell's one loop: step in what arrived and take the core's
// Ready under one lock hold (it used to take three per turn: to step, to
// take the Ready, to wake readers), execute it, wait for the next event or
// wake-up.
func (l *lane) run() {
	defer close(l.stopped)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var next chaincore.Event     // what the wait brought, stepped at the next turn
	var inline []chaincore.Event // events of renders done on this goroutine
	for {
		l.mu.Lock()
		l.stepLocked(inline, next)
		rd := l.core.Ready()
		l.core.Advance(rd)
		l.wake = rd.WakeAt
		stopped := rd.Dead != nil && l.dead == nil
		if rd.Dead != nil {
			l.dead = rd.Dead
		}
		readers := l.releasedLocked(rd)
		l.mu.Unlock()
		if stopped {
			// A successor may have deposed it: the star's leadership
			// takes a later chain back (watchChains).
			l.star.chainStopped()
		}
		inline, next = l.execute(rd, readers), nil
		if rd.Stopped {
			l.cancel()
			return
		}
		if len(inline) > 0 {
			// A flight rendered here: its copies start at once, with no
			// worker's hand-off to wait for.
			continue
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		if !rd.WakeAt.IsZero() {
			d := time.Until(rd.WakeAt)
			timer.Reset(d)
			l.wakePrecisely(rd.WakeAt, d)
		}
		select {
		case next = <-l.events:
		case at := <-l.wakes:
			l.sleepers = slices.DeleteFunc(l.sleepers, func(t time.Time) bool { return t.Equal(at) })
			next = chaincore.Tick{}
		case <-timer.C:
			next = chaincore.Tick{}
		case <-l.kick:
		}
	}
}

// releasedLocked takes the channels of the readers waiting on the streams
// rd released (all of them once the chain stopped serving), for execute to
// close after the outcomes. Lane lock held.
func (l *lane) releasedLocked(rd chaincore.Ready) []chan struct{} {
	var out []chan struct{}
	for _, st := range rd.Released {
		if ch := l.waiters[st]; ch != nil {
			out = append(out, ch)
			delete(l.waiters, st)
		}
	}
	if rd.Dead != nil {
		// Readers following this process's releases wait no more: they
		// go on from history, as a Reader does.
		for st, ch := range l.waiters {
			out = append(out, ch)
			delete(l.waiters, st)
		}
	}
	return out
}

// preciseBelow is the longest wake-up a precise sleeper is sent out for:
// the runtime's timers wake up to a millisecond late on Linux (its poller
// waits in whole milliseconds), which was a third of an Express flush
// deadline (issue 16: "the cut wakes on time"); a sleeper in nanosleep
// overshoots by the kernel's timer slack, about 60-90 µs here. Beyond
// it the overshoot is small beside the wait.
const preciseBelow = 30 * time.Millisecond

// maxSleepers bounds the precise sleepers out at once (each holds an OS
// thread in nanosleep); past it the runtime's timer alone wakes the loop.
const maxSleepers = 4

// wakePrecisely sends a precise sleeper out for the wake-up at (d from
// now), unless one is out for it or for an earlier one. A sleeper whose
// wake-up is no longer wanted only makes the loop step a spare Tick.
func (l *lane) wakePrecisely(at time.Time, d time.Duration) {
	if d <= 0 || d > preciseBelow || len(l.sleepers) >= maxSleepers || l.star.cfg.CoarseWakeups {
		return
	}
	for _, t := range l.sleepers {
		if !t.After(at) {
			return
		}
	}
	l.sleepers = append(l.sleepers, at)
	l.workers.Add(1)
	go func() {
		defer l.workers.Done()
		// Yield first (issue 26, item 4): a new goroutine runs next on
		// the loop's processor, ahead of the producers the same turn's
		// acks made runnable, and a thread in nanosleep keeps its
		// processor, with them queued on it, until the runtime's monitor
		// takes it back (20 µs to 10 ms later). The sleep is measured from
		// the wake-up itself, so the yield costs it no precision.
		runtime.Gosched()
		if d := time.Until(at); d > 0 {
			preciseSleep(d)
		}
		l.wakes <- at // buffered for every sleeper out
	}()
}

// maxStepBatch bounds the events stepped in one turn before the loop
// takes the core's Ready again.
const maxStepBatch = 64

// stepLocked applies the inline renders' events, then ev and every event
// already waiting (up to maxStepBatch), to the core. Lane lock held.
func (l *lane) stepLocked(inline []chaincore.Event, ev chaincore.Event) {
	if len(inline) == 0 && ev == nil {
		return
	}
	now := time.Now()
	for _, e := range inline {
		l.core.Step(now, e)
	}
	for n := 0; ev != nil; n++ {
		l.forgetCopy(ev)
		l.core.Step(now, ev)
		if n == maxStepBatch {
			return
		}
		select {
		case ev = <-l.events:
		default:
			ev = nil
		}
	}
}

// forgetCopy releases a returned copy worker's context once all of its
// upload's copies have returned.
func (l *lane) forgetCopy(ev chaincore.Event) {
	cd, ok := ev.(chaincore.CopyDone)
	if !ok {
		return
	}
	if w := l.copies[cd.Upload]; w != nil {
		if w.n--; w.n == 0 {
			for _, c := range w.cancel {
				c()
			}
			delete(l.copies, cd.Upload)
			l.env.Recycle(w.obj)
		}
	}
}

// execute carries out one Ready: cancels, workers, the pool budget,
// outcomes in order, readers' wake-ups, logs, the opening's result. A
// render that only assembles (renderInline) is done here, last, and its
// event returned for the loop to step.
func (l *lane) execute(rd chaincore.Ready, readers []chan struct{}) (inline []chaincore.Event) {
	for _, id := range rd.Cancels {
		if w := l.copies[id]; w != nil {
			for _, c := range w.cancel {
				c()
			}
		}
	}
	var renders []chaincore.Render
	for _, req := range rd.Requests {
		if r, ok := req.(chaincore.Render); ok && l.renderInline(r) {
			renders = append(renders, r)
			continue
		}
		l.spawn(req)
	}

	l.budget.Free(rd.PoolFreed)
	// The core's events are logged before the outcomes they explain are
	// delivered: a "slot released" record (what the tests' release watch
	// checks) precedes the ack a producer sees, never follows it.
	if len(rd.Slots) > 0 && l.log.Enabled(context.Background(), slog.LevelDebug) {
		for _, s := range rd.Slots {
			l.log.LogAttrs(context.Background(), slog.LevelDebug, "slot released", slog.Uint64("epoch", s.Epoch), slog.Uint64("slot", s.Slot))
		}
	}
	for _, lg := range rd.Logs {
		l.log.LogAttrs(context.Background(), lg.Level, lg.Msg, lg.Attrs...)
	}
	for _, b := range rd.Outcomes {
		close(b.Done)
	}
	for _, ch := range readers {
		close(ch)
	}
	if rd.Opened != nil {
		l.opened <- *rd.Opened
	}
	for _, r := range renders {
		inline = append(inline, l.env.Do(l.ctx, r))
	}
	return inline
}

// inlineRenderBytes bounds a flight the loop renders itself: assembling
// it is a copy of at most this many bytes (about 100-250 µs on the 2-core
// machines the benchmarks ran on), cheaper than two goroutine hand-offs
// under load; a larger one, or one with frames to compress, is rendered
// by a worker so the loop goes on.
const inlineRenderBytes = 1 << 20

// renderInline reports whether r only assembles: nothing to compress (the
// codec is none, or every batch was compressed at admission) and at most
// inlineRenderBytes.
func (l *lane) renderInline(r chaincore.Render) bool {
	n := 0
	for _, st := range r.Streams {
		for i := range st.Parts {
			p := &st.Parts[i]
			if p.Stored != nil {
				n += len(p.Stored)
				continue
			}
			if l.env.Codec != envelope.CodecNone {
				return false
			}
			n += len(p.Payload)
		}
	}
	return n <= inlineRenderBytes
}

// spawn starts one worker: one request, one event back.
func (l *lane) spawn(req chaincore.Request) {
	ctx := l.ctx
	if pc, ok := req.(chaincore.PutCopy); ok {
		c, cancel := context.WithCancel(l.ctx)
		w := l.copies[pc.Upload]
		if w == nil {
			w = &copyWorkers{}
			l.copies[pc.Upload] = w
		}
		w.n++
		w.cancel = append(w.cancel, cancel)
		w.obj = pc.Flight.Obj
		ctx = c
	}
	l.workers.Add(1)
	go func() {
		defer l.workers.Done()
		ev := l.env.Do(ctx, req)
		select {
		case l.events <- ev:
		case <-l.stopped:
		}
	}()
}

// poke wakes the loop if the core has something for it. Lane lock held.
func (l *lane) pokeLocked() {
	if l.core.NeedsLoop(l.wake) {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
}

func (l *lane) poke() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// reserve takes a batch's bytes from the pool budget, blocking at the
// budget (honouring ctx). stream names the batch's stream in errors.
func (l *lane) reserve(ctx context.Context, stream string, charge int64) error {
	if err := l.budget.Reserve(ctx, charge); err != nil {
		if errors.Is(err, pool.ErrClosed) {
			if f := l.deadFate(); f != nil && f.Deposed != nil {
				// A lane a successor deposed, then stopped (its chain is
				// being taken back): not the star's close.
				return l.fateError(stream, *f)
			}
			return notCommitted(ErrClosed)
		}
		return notCommitted(fmt.Errorf("loglet: admission to the %s pool: %w", l.class, err))
	}
	return nil
}

// compressScratch holds the compressor's worst-case output buffers.
var compressScratch = sync.Pool{New: func() any { return new([]byte) }}

// precompress compresses b's payload on the caller's goroutine when the
// class compresses and b has PrecompressBytes or more (issue 16:
// compressing a 100 KiB flight at the claim cost an Express ack over a
// millisecond, and the next cut waited behind it): b.Stored is then the
// frame's stored bytes, exactly sized, and b.Charge counts them (they are
// held as long as the payload). The extra charge is taken only if the
// budget has it now: a producer that waited for it while holding the
// payload's charge could wait for ever (a batch whose two parts exceed
// what is left of the budget, or producers at the budget each holding a
// payload). Without it the batch is compressed at the claim, as a small
// one is.
func (l *lane) precompress(b *chaincore.Batch) {
	c := l.env.Codec
	if c == envelope.CodecNone || l.cfg.PrecompressBytes < 0 || len(b.Payload) < l.cfg.PrecompressBytes {
		return
	}
	buf := compressScratch.Get().(*[]byte)
	defer compressScratch.Put(buf)
	enc, used := envelope.CompressFrame((*buf)[:0], b.Payload, c)
	*buf = enc[:0]
	if used == envelope.CodecNone {
		b.Stored = b.Payload // incompressible: stored as is, no copy held
	} else {
		if !l.budget.TryReserve(int64(len(enc))) {
			l.precompressSkipped.Add(1)
			return
		}
		b.Stored = append(l.slab.alloc(len(enc)), enc...)
		b.Charge += int64(len(enc))
	}
	b.StoredCodec, b.StoredCRC = used, envelope.Checksum(b.Stored)
}

// slab carves the small buffers every batch needs (its encoded payload,
// its stored form) out of shared chunks, so that a batch costs the heap
// one allocation for them per slabChunk bytes instead of one or two each.
// A chunk lives as long as any batch carved from it: batches leave the
// flight index in about the order they arrive, so that is about one chunk
// per lane more than the batches' own bytes (outside the pool's budget).
//
// Carving takes no lock (issue 26, item 4): a producer claims its bytes
// with one atomic add, and the one that finds the chunk full allocates the
// next outside any lock. It used to take a mutex held across the next
// chunk's make (zeroing 256 KiB): on 2 cores with 64 producers woken by
// one release, the others queued behind it and were handed the lock one
// wake-up at a time.
//
// A producer that loses the race to install the next chunk keeps the
// chunk it made as the spare the next refill takes (issue 26: on 2 cores
// with 64 producers, every producer that found the chunk full while one
// was zeroing the next made a chunk of its own and dropped it, a third
// more heap bytes than the batches' own, each zeroed and collected).
type slab struct {
	cur   atomic.Pointer[slabChunkState]
	spare atomic.Pointer[slabChunkState] // a chunk never handed out, or nil
}

// slabChunkState is one chunk and how much of it is claimed (off may run
// past len(buf): a claim that does not fit leaves the chunk to the next).
type slabChunkState struct {
	buf []byte
	off atomic.Int64
}

const slabChunk = 256 << 10

// alloc returns an empty slice of capacity n, n > slabChunk/8 from a
// make of its own. Safe for concurrent use.
func (s *slab) alloc(n int) []byte {
	if n > slabChunk/8 {
		return make([]byte, 0, n)
	}
	for {
		c := s.cur.Load()
		if c != nil {
			if end := c.off.Add(int64(n)); end <= int64(len(c.buf)) {
				off := int(end) - n
				return c.buf[off:off:int(end)]
			}
		}
		// Full (or none yet): install a fresh chunk with this claim in
		// it. If another producer installed one first, claim from that.
		next := s.spare.Swap(nil)
		if next == nil {
			next = &slabChunkState{buf: make([]byte, slabChunk)}
		}
		next.off.Store(int64(n))
		if s.cur.CompareAndSwap(c, next) {
			return next.buf[0:0:n]
		}
		// Nothing of next was handed out: it is the spare (or garbage
		// if another loser left one first).
		s.spare.CompareAndSwap(nil, next)
	}
}

// admit admits b, whose Charge the caller reserved, to the core. On error
// nothing was admitted and the reservation is returned.
func (l *lane) admit(ctx context.Context, b *chaincore.Batch, recs []Record, match *uint64, monotone bool) error {
	// The clock is read before the lock (issue 26: on this machine a
	// clock read is about 100 ns, a third of the time the lock was held
	// per batch while 64 producers queued for it).
	now := time.Now()
	l.mu.Lock()
	err := l.core.Admit(now, b, recs, match, monotone)
	if err == nil {
		l.pokeLocked()
	}
	l.mu.Unlock()
	if err != nil {
		l.budget.Unreserve(b.Charge)
		return l.admitError(nameOfID(b.Stream.Name()), err)
	}
	return nil
}

// admitError turns the core's admission refusal into the loglet's error;
// stream is the stream's name (the core knows the stream by its ID, name
// and incarnation: errors name it as the caller does).
func (l *lane) admitError(stream string, err error) error {
	var me *chaincore.MismatchError
	var de *chaincore.DeadError
	var fe *chaincore.FencedError
	switch {
	case errors.As(err, &me):
		return &SeqNumMismatchError{Stream: stream, Expected: me.Expected, Tail: durableTail(me.Tail)}
	case errors.As(err, &fe):
		return &FencedError{Stream: stream, Fenced: fe.Fenced}
	case errors.As(err, &de):
		return l.fateError(stream, de.Fate)
	case isProducerAnswer(err):
		return l.producerAdmitError(stream, err)
	case errors.Is(err, chaincore.ErrClosed):
		return notCommitted(ErrClosed)
	case errors.Is(err, chaincore.ErrRetired):
		return notCommitted(fmt.Errorf("%w: %q (this incarnation was deleted)", ErrStreamNotFound, nameOfID(stream)))
	}
	return notCommitted(err)
}

// fateError is the error a batch's fate is reported as (nil when acked).
func (l *lane) fateError(stream string, f chaincore.Fate) error {
	switch f.Kind {
	case chaincore.Acked:
		return nil
	case chaincore.NotCommitted:
		if d := f.Deposed; d != nil {
			return &NotLeaderError{Stream: stream, Star: l.star.cfg.Star, Leader: d.Leader, Epoch: d.Epoch, Cause: f.Cause}
		}
		if errors.Is(f.Cause, chaincore.ErrClosed) {
			return notCommitted(fmt.Errorf("%w: %v", ErrClosed, f.Cause))
		}
		return notCommitted(fmt.Errorf("%w: %w", ErrChainHalted, f.Cause))
	}
	if errors.Is(f.Cause, chaincore.ErrAborted) {
		return outcomeUnknown(fmt.Errorf("loglet: %s: %v", l.class, f.Cause))
	}
	// The cause is wrapped, not only printed: a producer can ask
	// errors.Is(err, objstore.ErrPermanent) of a bucket that refuses.
	return outcomeUnknown(fmt.Errorf("%w: %w", ErrChainHalted, f.Cause))
}

// outcome returns a delivered batch's ack or error.
func (l *lane) outcome(b *chaincore.Batch) (Ack, error) {
	if b.Fate.Kind == chaincore.Acked {
		return Ack{Start: b.Ack.Start, End: b.Ack.End, Tail: durableTail(b.Ack.Tail)}, nil
	}
	return Ack{}, l.fateError(nameOfID(b.Stream.Name()), b.Fate)
}

// changed returns a channel closed at st's next release (or when the chain
// stops serving), or nil if records at or past next are readable now.
func (l *lane) changed(st *chaincore.Stream, next uint64) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if st.Durable().Seq > next || l.dead != nil {
		return nil
	}
	ch := l.waiters[st]
	if ch == nil {
		ch = make(chan struct{})
		l.waiters[st] = ch
	}
	return ch
}

// deadFate returns why the chain stopped serving (nil while it serves).
func (l *lane) deadFate() *chaincore.Fate {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dead
}

// abort ends the core now (Close's or Open's context ended).
func (l *lane) abort(cause error) {
	l.mu.Lock()
	l.core.Abort(time.Now(), cause)
	l.mu.Unlock()
	l.poke()
}

// closeGrace is how long an aborted close still waits for its cancelled
// workers to return, so that a well-behaved store leaves no goroutine.
const closeGrace = 100 * time.Millisecond

// close runs the core's clean close (flush, acks, absorb, clean seal) and
// ends within ctx whatever the state: when ctx ends first the core aborts
// (every batch still without an outcome gets one) and the workers are
// cancelled. It returns what the close could not finish.
func (l *lane) close(ctx context.Context) error {
	l.budget.Close() // producers blocked at the budget give up now
	if err := ctx.Err(); err != nil {
		// No time to flush: what is pooled was never written (not
		// committed); only what is in flight is unknown.
		l.abort(fmt.Errorf("close: %w", err))
	} else {
		l.mu.Lock()
		l.core.Close(time.Now())
		l.mu.Unlock()
		l.poke()
	}
	select {
	case <-l.stopped:
	case <-ctx.Done():
		l.abort(fmt.Errorf("close: %w", ctx.Err()))
		<-l.stopped
	}
	l.cancel()
	done := make(chan struct{})
	go func() { l.workers.Wait(); l.background.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		t := time.NewTimer(closeGrace)
		select {
		case <-done:
		case <-t.C:
		}
		t.Stop()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.core.CloseError()
}

// crash stops the lane the way a dying process does, for tests: no flush,
// no absorb, no seal; batches without an outcome end outcome-unknown (or
// not committed, if never cut).
func (l *lane) crash() {
	l.budget.Close()
	l.cancel()
	l.abort(errors.New("crashed"))
	<-l.stopped
	l.workers.Wait()
	l.background.Wait()
}

// snapshot returns the chain's figures.
func (l *lane) snapshot() *ClassStats {
	l.mu.Lock()
	cs := l.core.Stats(time.Now())
	l.mu.Unlock()
	// The core fills every figure it keeps; the shell owns the pool's
	// budget and the precompress count.
	ps := l.budget.Stats()
	ps.QueuedBytes, ps.QueuedBatches = cs.Pool.QueuedBytes, cs.Pool.QueuedBatches
	// A settle pass reserves its slots from the same budget: they are
	// Memory.Settle, not the pool's.
	held, reserved := l.env.PassMemory.Held()
	ps.ReservedBytes = max(ps.ReservedBytes-reserved, 0)
	cs.Pool = ps
	cs.Memory.Settle, cs.Memory.SettleBound = held, l.env.PassMemory.Bound()
	cs.PrecompressSkipped = l.precompressSkipped.Load()
	return &cs
}
