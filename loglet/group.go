package loglet

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/flightlog/flightlog/chain"
)

// GroupOptions configure a group session.
type GroupOptions struct {
	// Start is where a group that has committed nothing on the stream's
	// incarnation starts (the zero Position: AtSeq(0), the oldest record;
	// TailOffset(0) skips the history). A committed offset always wins.
	Start Position
	// MaxRecords and MaxBytes bound each Recv, as in ReadQuery.
	MaxRecords, MaxBytes int
}

// GroupSession is a read session on behalf of a consumer group: it starts
// at the group's committed offset and commits as the consumer acknowledges
// (Ack), so that whoever opens the group's session next (this process after
// a restart, or another) resumes after the last acknowledged record.
//
// Delivery is at least once. A record is committed only when the consumer
// acknowledges it, after processing it; a crash (or a failed Ack) between
// processing and commit re-delivers it, and everything after it, to the
// group's next session. Processing must therefore be idempotent, or the
// consumer must dedupe (the sequence number identifies a record within an
// incarnation). Nothing acknowledged is ever re-delivered to a session
// opened after the Ack returned nil.
//
// Several sessions of one group may follow the same stream at once (say,
// one per replica of a service): each reads on its own, and their commits
// merge by maximum (a session that finds the group committed past it skips
// ahead to there). Each record below the group's offset has then been
// acknowledged by some session, but a record may be processed by more than
// one: at least once still, not a partitioning of the work.
//
// Recv must not be called concurrently with itself; Ack, Committed and
// Next may be called from any goroutine.
type GroupSession struct {
	group, stream string
	offsets       *Offsets
	// open opens a read session at seq on the incarnation inc, or fails
	// with ErrStreamNotFound if the stream no longer has it.
	open func(ctx context.Context, seq uint64, inc string) (*ReadSession, error)

	sess *ReadSession // used by Recv only

	ackMu sync.Mutex // serialises commits
	mu    sync.Mutex // guards the fields below; never held across I/O
	// committed is the group's offset as this session last learnt it.
	committed Offset
	// delivered is the next sequence number Recv would return: every
	// record below it has been delivered by this session (or skipped as
	// committed by the group).
	delivered uint64
}

// OpenGroupSession opens a session of group on stream, at the group's
// committed offset (or opts.Start if it has none), that follows the
// stream's tail as OpenReadSession does. See GroupSession for the
// delivery guarantees.
func (s *Star) OpenGroupSession(ctx context.Context, group, stream string, opts GroupOptions) (*GroupSession, error) {
	return openGroupSession(ctx, s.Offsets(), group, stream, opts, func(ctx context.Context, q ReadQuery, inc string) (*ReadSession, error) {
		sess, err := s.OpenReadSession(ctx, stream, q)
		if err != nil {
			return nil, err
		}
		return s.incarnationBound(sess, stream, chain.StreamID(stream, inc))
	})
}

// incarnationBound returns sess bound to the incarnation id of stream: its
// reads fail with ErrStreamNotFound once the star's stream is another
// incarnation (or gone), and its waits end every ReaderPollInterval to
// read (and so check) again. (A star's read session reads by name, so on
// its own it would go on reading a stream deleted and created again in
// this process as the new incarnation.)
func (s *Star) incarnationBound(sess *ReadSession, stream, id string) (*ReadSession, error) {
	check := func(ctx context.Context) error {
		st, err := s.stream(ctx, stream)
		if err != nil {
			return err
		}
		if st.id != id {
			_, inc := chain.SplitStreamID(id)
			return fmt.Errorf("%w: %q: incarnation %q was deleted (and the name created again) after its group session opened", ErrStreamNotFound, stream, inc)
		}
		return nil
	}
	if err := check(context.Background()); err != nil {
		return nil, err
	}
	read, wait := sess.read, sess.wait
	bound := &ReadSession{next: sess.next}
	bound.read = func(ctx context.Context, from uint64) ([]SequencedRecord, error) {
		// Incarnations are never reused: the same one before and after
		// the read is the same one throughout.
		if err := check(ctx); err != nil {
			return nil, err
		}
		recs, err := read(ctx, from)
		if cerr := check(ctx); cerr != nil {
			return nil, cerr
		}
		return recs, err
	}
	bound.wait = func(ctx context.Context, next uint64) error {
		wctx, cancel := context.WithTimeout(ctx, s.cfg.ReaderPollInterval)
		defer cancel()
		err := wait(wctx, next)
		if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return nil // time to check the incarnation again
		}
		return err
	}
	return bound, nil
}

// OpenGroupSession opens a session of group on stream, at the group's
// committed offset (or opts.Start if it has none), that polls for new
// records as Reader.OpenReadSession does. See GroupSession for the
// delivery guarantees.
func (r *Reader) OpenGroupSession(ctx context.Context, group, stream string, opts GroupOptions) (*GroupSession, error) {
	return openGroupSession(ctx, r.Offsets(), group, stream, opts, func(ctx context.Context, q ReadQuery, inc string) (*ReadSession, error) {
		sess, err := r.OpenReadSession(ctx, stream, q)
		if err != nil {
			return nil, err
		}
		// The session read the record after the offset did; incarnations
		// are never reused, so the same one after it is the same one
		// throughout.
		rec, _, err := r.record(ctx, stream)
		if err != nil {
			return nil, err
		}
		if rec.Incarnation != inc {
			return nil, fmt.Errorf("%w: %q was deleted (and created again) while its group session opened", ErrStreamNotFound, stream)
		}
		return sess, nil
	})
}

func openGroupSession(ctx context.Context, offsets *Offsets, group, stream string, opts GroupOptions,
	open func(ctx context.Context, q ReadQuery, inc string) (*ReadSession, error)) (*GroupSession, error) {
	if ctx == nil {
		return nil, ErrNilContext
	}
	off, err := offsets.Get(ctx, group, stream)
	if err != nil {
		return nil, err
	}
	g := &GroupSession{group: group, stream: stream, offsets: offsets, committed: off}
	g.open = func(ctx context.Context, seq uint64, inc string) (*ReadSession, error) {
		return open(ctx, ReadQuery{Start: AtSeq(seq), MaxRecords: opts.MaxRecords, MaxBytes: opts.MaxBytes}, inc)
	}
	start := opts.Start
	if off.Committed() {
		start = AtSeq(off.Next)
	}
	g.sess, err = open(ctx, ReadQuery{Start: start, MaxRecords: opts.MaxRecords, MaxBytes: opts.MaxBytes}, off.Incarnation)
	if err != nil {
		return nil, err
	}
	g.delivered = g.sess.Next()
	return g, nil
}

// Recv returns the next records, blocking until at least one is readable
// or ctx ends, as ReadSession.Recv. Records come in order, once each per
// session; a record the group has committed meanwhile (another session of
// the group acknowledged it) is skipped. A stream deleted (and maybe
// created again) since the session opened ends it with ErrStreamNotFound.
func (g *GroupSession) Recv(ctx context.Context) ([]SequencedRecord, error) {
	if ctx == nil {
		return nil, ErrNilContext
	}
	for {
		g.mu.Lock()
		committed := g.committed
		g.mu.Unlock()
		if committed.Next > g.sess.Next() {
			// Another session of the group is ahead: skip to it.
			sess, err := g.open(ctx, committed.Next, committed.Incarnation)
			if err != nil {
				return nil, err
			}
			g.sess = sess
		}
		recs, err := g.sess.Recv(ctx)
		if err != nil {
			return nil, err
		}
		g.mu.Lock()
		floor := g.committed.Next
		g.delivered = max(g.delivered, g.sess.Next())
		g.mu.Unlock()
		for len(recs) > 0 && recs[0].Seq < floor {
			recs = recs[1:]
		}
		if len(recs) > 0 {
			return recs, nil
		}
	}
}

// Ack acknowledges every record up to and including seq as processed, and
// commits the group's offset past it (seq+1) before it returns: a session
// opened afterwards starts there. Acknowledging a record at or below what
// the group has already committed is a no-op (the offset never goes back);
// acknowledging one this session has not delivered is an error. When another
// session of the group committed meanwhile, the commits merge by maximum.
// An error leaves the offset where it was (or, if ambiguous, maybe moved),
// and the records stay unacknowledged: they are re-delivered to the group's
// next session, as after a crash. A stream deleted since the session opened
// is ErrStreamNotFound.
func (g *GroupSession) Ack(ctx context.Context, seq uint64) error {
	if ctx == nil {
		return ErrNilContext
	}
	g.ackMu.Lock()
	defer g.ackMu.Unlock()
	g.mu.Lock()
	cur, delivered := g.committed, g.delivered
	g.mu.Unlock()
	if seq >= delivered {
		return fmt.Errorf("loglet: group %q on stream %q: ack of record %d, which this session has not delivered (next is %d)", g.group, g.stream, seq, delivered)
	}
	next := seq + 1
	for next > cur.Next {
		off, err := g.offsets.Commit(ctx, cur, next)
		var conflict *OffsetConflictError
		switch {
		case err == nil:
			cur = off
		case errors.As(err, &conflict):
			cur = conflict.Current // another session committed: merge
		default:
			return err
		}
		g.mu.Lock()
		if cur.Next >= g.committed.Next {
			g.committed = cur
		}
		g.mu.Unlock()
		if err := ctx.Err(); err != nil && next > cur.Next {
			return err
		}
	}
	return nil
}

// Committed returns the group's offset as this session last committed or
// learnt it.
func (g *GroupSession) Committed() Offset {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.committed
}

// Next is the sequence number of the next record Recv returns.
func (g *GroupSession) Next() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return max(g.delivered, g.committed.Next)
}
