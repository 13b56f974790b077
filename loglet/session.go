package loglet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/loglet/internal/chaincore"
)

// AppendSession pipelines appends to one stream: Submit returns as soon as
// a batch is admitted, and acks complete in submit order. Once a batch
// fails, every later Submit fails with ErrSessionFailed, so a producer never
// sees a gap: the batches admitted after a failed one share its fate (they
// sit at or past the same halted slot). Safe for concurrent use, though
// submit order is then the order Submit calls are admitted.
type AppendSession struct {
	s      *Star
	stream string

	mu     sync.Mutex // serialises Submit and Close
	last   *chaincore.Batch
	lane   *lane // the lane of last
	closed bool

	fmu    sync.Mutex // guards failed; never held while blocking
	failed error
}

func (a *AppendSession) fail(err error) {
	a.fmu.Lock()
	if a.failed == nil {
		a.failed = err
	}
	a.fmu.Unlock()
}

func (a *AppendSession) failure() error {
	a.fmu.Lock()
	defer a.fmu.Unlock()
	return a.failed
}

// AckFuture is the outcome of one submitted batch.
type AckFuture struct {
	p    *chaincore.Batch
	lane *lane
	sess *AppendSession
}

// OpenAppendSession opens a session on stream (which must exist, or be
// creatable on append).
func (s *Star) OpenAppendSession(ctx context.Context, stream string) (*AppendSession, error) {
	if ctx == nil {
		return nil, ErrNilContext
	}
	if _, err := s.streamForAppend(ctx, stream); err != nil {
		return nil, err
	}
	return &AppendSession{s: s, stream: stream}, nil
}

// Submit admits b, blocking while the pool is full (honouring ctx), and
// returns its future. An error means b was not admitted and is not
// committed; it also fails the session.
func (a *AppendSession) Submit(ctx context.Context, b Batch) (*AckFuture, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, notCommitted(fmt.Errorf("%w: append session closed", ErrClosed))
	}
	if a.last != nil {
		select {
		case <-a.last.Done:
			if _, err := a.lane.outcome(a.last); err != nil {
				a.fail(err)
			}
		default:
		}
	}
	if err := a.failure(); err != nil {
		return nil, notCommitted(fmt.Errorf("%w: %v", ErrSessionFailed, err))
	}
	if b.Producer != (ProducerID{}) {
		// A retry's answer (a duplicate's range, an earlier attempt's
		// outcome) has no place in a session's order: use a Producer.
		return nil, notCommitted(fmt.Errorf("%w: an append session's batches take no producer identity (Star.NewProducer retries with one)", ErrInvalidBatch))
	}
	ad, l, err := a.s.submit(ctx, a.stream, b)
	if err != nil {
		a.fail(err)
		return nil, err
	}
	a.last, a.lane = &ad.b, l
	ad.f = AckFuture{p: &ad.b, lane: l, sess: a}
	return &ad.f, nil
}

// Wait returns the batch's ack or error. If ctx ends first it returns an
// error wrapping ErrOutcomeUnknown; the batch goes on, and Wait may be
// called again.
func (f *AckFuture) Wait(ctx context.Context) (Ack, error) {
	if ctx == nil {
		return Ack{}, ErrNilContext
	}
	select {
	case <-f.p.Done:
	case <-ctx.Done():
		select {
		case <-f.p.Done: // a known outcome beats "unknown"
		default:
			return Ack{}, outcomeUnknown(fmt.Errorf("loglet: gave up waiting for the ack: %w", ctx.Err()))
		}
	}
	ack, err := f.lane.outcome(f.p)
	if err != nil {
		f.sess.fail(err)
	}
	return ack, err
}

// Done is closed when the outcome is known.
func (f *AckFuture) Done() <-chan struct{} { return f.p.Done }

// Close waits for the outcome of every submitted batch (or ctx) and closes
// the session. It returns the session's first failure, if any.
func (a *AppendSession) Close(ctx context.Context) error {
	if ctx == nil {
		return ErrNilContext
	}
	a.mu.Lock()
	a.closed = true
	last, l := a.last, a.lane
	a.mu.Unlock()
	if last != nil {
		select {
		case <-last.Done:
		case <-ctx.Done():
		}
	}
	if last != nil {
		select {
		case <-last.Done:
		default:
			return outcomeUnknown(fmt.Errorf("loglet: closing append session: %w", ctx.Err()))
		}
		if _, err := l.outcome(last); err != nil {
			a.fail(err)
		}
	}
	return a.failure()
}

// ReadSession catches up on a stream and then follows its tail. On the
// leader it is woken by each release (no polling); on a Reader it waits on a
// watch of the stream's refs when the metastore is a metastore.Watcher, and
// otherwise polls every ReaderConfig.PollInterval. Not safe for concurrent
// use, except Close, which may be called from any goroutine.
type ReadSession struct {
	next uint64
	// inc is the incarnation the session reads ("" for a stream that has
	// none): it never reads another.
	inc  string
	read func(ctx context.Context, from uint64) ([]SequencedRecord, error)
	// wait blocks until records at or past next may have become readable.
	wait func(ctx context.Context, next uint64) error
	// closed ends with Close (newReadSession makes it).
	closed      context.Context
	closeCancel context.CancelFunc
}

// newReadSession returns a session reading incarnation inc from next.
func newReadSession(next uint64, inc string, read func(ctx context.Context, from uint64) ([]SequencedRecord, error), wait func(ctx context.Context, next uint64) error) *ReadSession {
	r := &ReadSession{next: next, inc: inc, read: read, wait: wait}
	r.closed, r.closeCancel = context.WithCancel(context.Background())
	return r
}

// OpenReadSession starts a session at q.Start; q's limits apply to each
// Recv. A start below the stream's trim point starts at it (the stream
// record is re-read as the session opens), and a trim while the session
// runs makes it skip to the trim point: at once for a trim through this
// Star, within 5 seconds for one another process wrote.
func (s *Star) OpenReadSession(ctx context.Context, stream string, q ReadQuery) (*ReadSession, error) {
	if ctx == nil {
		return nil, ErrNilContext
	}
	st, err := s.stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	next, err := s.resolve(ctx, st, q.Start)
	if err != nil {
		return nil, err
	}
	// Below a trim, from the first readable record; the record is re-read
	// now, so a trim another process wrote is honoured from the start (and
	// later within trimRefresh, by readStream).
	next = max(next, s.trimFloor(ctx, st, true))
	// The session follows the incarnation the stream has now: once it is
	// deleted (and maybe created again), the session ends with
	// ErrStreamNotFound, never reading the new incarnation.
	read := func(ctx context.Context, from uint64) ([]SequencedRecord, error) {
		cur, err := s.stream(ctx, stream)
		var nl *NotLeaderError
		if errors.As(err, &nl) {
			// The name now belongs to another star: a new incarnation
			// (a stream never changes stars), so this one is gone.
			return nil, fmt.Errorf("%w: %q was deleted (and created again on star %q) after this session opened", ErrStreamNotFound, stream, nl.Star)
		}
		if err != nil {
			return nil, err
		}
		if cur.id != st.id {
			return nil, fmt.Errorf("%w: %q was deleted (and created again) after this session opened", ErrStreamNotFound, stream)
		}
		// The same incarnation, maybe re-cached (a delete whose Commit
		// failed drops the cache too): follow the live state, whose gone
		// channel is open.
		st = cur
		res, err := s.readStream(ctx, st, ReadQuery{Start: AtSeq(from), MaxRecords: q.MaxRecords, MaxBytes: q.MaxBytes})
		return res.Records, err
	}
	wait := func(ctx context.Context, next uint64) error {
		select {
		case <-st.gone:
			return nil // the next read says it is gone
		default:
		}
		if st.lane.deadFate() != nil {
			// Deposed: the successor's releases do not wake us; poll its
			// refs as a Reader does.
			return pollWait(ctx, s.cfg.ReaderPollInterval, s.closing)
		}
		// Below a trim point the reads return nothing until the stream
		// grows past it: wait from there (waiting from next, whose records
		// are durable but trimmed, would return at once, forever).
		ch := st.lane.changed(st.core, max(next, s.trimFloor(ctx, st, false)))
		if ch == nil {
			return nil
		}
		select {
		case <-ch:
			return nil
		case <-st.gone:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-s.closing:
			return ErrClosed
		}
	}
	_, inc := chain.SplitStreamID(st.id)
	return newReadSession(next, inc, read, wait), nil
}

// pollWait waits d, or until ctx ends or closing is closed.
func pollWait(ctx context.Context, d time.Duration, closing <-chan struct{}) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-closing:
		return ErrClosed
	}
}

// Recv returns the next records, blocking until at least one is readable or
// ctx ends (then it returns ctx's error). Records come once each, in order.
// After Close (and in a Recv that Close interrupts) it fails with ErrClosed.
func (r *ReadSession) Recv(ctx context.Context) ([]SequencedRecord, error) {
	if ctx == nil {
		return nil, ErrNilContext
	}
	if r.closed.Err() != nil {
		return nil, ErrClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(r.closed, cancel)
	defer func() { stop(); cancel() }()
	recs, err := r.recv(ctx)
	if err != nil && r.closed.Err() != nil {
		return nil, ErrClosed
	}
	return recs, err
}

// Close ends the session: a Recv blocked in it returns ErrClosed, and so
// does every Recv after. It holds nothing else (a Reader's watch lives for
// one wait), so it never fails; closing twice is a no-op.
func (r *ReadSession) Close() error {
	r.closeCancel()
	return nil
}

// recv is Recv's loop, under a ctx that Close ends.
func (r *ReadSession) recv(ctx context.Context) ([]SequencedRecord, error) {
	for {
		recs, err := r.read(ctx, r.next)
		if len(recs) > 0 {
			// Records read before an error are returned; the next Recv
			// meets the error again (or not, if it was transient).
			r.next = recs[len(recs)-1].Seq + 1
			return recs, nil
		}
		if err != nil {
			return nil, err
		}
		if err := r.wait(ctx, r.next); err != nil {
			return nil, err
		}
	}
}

// Next is the sequence number the next Recv starts at.
func (r *ReadSession) Next() uint64 { return r.next }

// Incarnation is the incarnation of the stream the session reads, as it
// was when the session opened ("" for a stream created before
// incarnations existed). The session reads no other: once the stream is
// deleted (and maybe created again), Recv fails with ErrStreamNotFound.
func (r *ReadSession) Incarnation() string { return r.inc }
