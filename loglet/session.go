package loglet

import (
	"context"
	"fmt"
	"sync"
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

	mu     sync.Mutex
	failed error
	last   *pending
	closed bool
}

// AckFuture is the outcome of one submitted batch.
type AckFuture struct {
	p    *pending
	sess *AppendSession
}

// OpenAppendSession opens a session on stream (which must exist, or be
// creatable on append).
func (s *Star) OpenAppendSession(ctx context.Context, stream string) (*AppendSession, error) {
	if _, err := s.stream(ctx, stream); err != nil {
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
	if a.failed == nil && a.last != nil {
		select {
		case <-a.last.done:
			if a.last.err != nil {
				a.failed = a.last.err
			}
		default:
		}
	}
	if a.failed != nil {
		return nil, notCommitted(fmt.Errorf("%w: %v", ErrSessionFailed, a.failed))
	}
	p, err := a.s.submit(ctx, a.stream, b)
	if err != nil {
		a.failed = err
		return nil, err
	}
	a.last = p
	return &AckFuture{p: p, sess: a}, nil
}

// Wait returns the batch's ack or error. If ctx ends first it returns an
// error wrapping ErrOutcomeUnknown; the batch goes on, and Wait may be
// called again.
func (f *AckFuture) Wait(ctx context.Context) (Ack, error) {
	select {
	case <-f.p.done:
		if f.p.err != nil {
			f.sess.mu.Lock()
			if f.sess.failed == nil {
				f.sess.failed = f.p.err
			}
			f.sess.mu.Unlock()
		}
		return f.p.ack, f.p.err
	case <-ctx.Done():
		return Ack{}, outcomeUnknown(fmt.Errorf("loglet: gave up waiting for the ack: %w", ctx.Err()))
	}
}

// Done is closed when the outcome is known.
func (f *AckFuture) Done() <-chan struct{} { return f.p.done }

// Close waits for the outcome of every submitted batch (or ctx) and closes
// the session. It returns the session's first failure, if any.
func (a *AppendSession) Close(ctx context.Context) error {
	a.mu.Lock()
	a.closed = true
	last := a.last
	a.mu.Unlock()
	if last != nil {
		select {
		case <-last.done:
		case <-ctx.Done():
			return outcomeUnknown(fmt.Errorf("loglet: closing append session: %w", ctx.Err()))
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.failed == nil && last != nil && last.err != nil {
		a.failed = last.err
	}
	return a.failed
}

// ReadSession catches up on a stream and then follows its tail, woken by
// each release (no polling).
type ReadSession struct {
	s      *Star
	st     *streamState
	stream string
	next   uint64
	q      ReadQuery
}

// OpenReadSession starts a session at q.Start; q's limits apply to each
// Recv.
func (s *Star) OpenReadSession(ctx context.Context, stream string, q ReadQuery) (*ReadSession, error) {
	st, err := s.stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	st.lane.mu.Lock()
	next := st.resolve(q.Start)
	st.lane.mu.Unlock()
	return &ReadSession{s: s, st: st, stream: stream, next: next, q: q}, nil
}

// Recv returns the next records, blocking until at least one is released or
// ctx ends (then it returns ctx's error). Records come once each, in order.
func (r *ReadSession) Recv(ctx context.Context) ([]SequencedRecord, error) {
	for {
		res, err := r.s.Read(ctx, r.stream, ReadQuery{Start: AtSeq(r.next), MaxRecords: r.q.MaxRecords, MaxBytes: r.q.MaxBytes})
		if err != nil {
			return nil, err
		}
		if len(res.Records) > 0 {
			r.next = res.Next
			return res.Records, nil
		}
		l := r.st.lane
		l.mu.Lock()
		var wait <-chan struct{}
		if r.st.durable.Seq <= r.next {
			wait = r.st.changed()
		}
		l.mu.Unlock()
		if wait == nil {
			continue
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-r.s.closing:
			return nil, ErrClosed
		}
	}
}

// Next is the sequence number the next Recv starts at.
func (r *ReadSession) Next() uint64 { return r.next }
