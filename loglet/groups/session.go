package groups

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore"
)

// Log is what a group session reads from and keeps its offsets in: a
// *loglet.Star (sessions woken by each release) or a *loglet.Reader
// (sessions that watch or poll the metastore). A Log that also has an
// Owner() string method (a *loglet.Star) names itself in the offsets it
// writes.
type Log interface {
	// Metastore is where the stream records are, and the offsets go.
	Metastore() metastore.Store
	// OpenReadSession opens a session that follows stream from q.Start
	// and reads only the incarnation it opened on
	// (loglet.ReadSession.Incarnation).
	OpenReadSession(ctx context.Context, stream string, q loglet.ReadQuery) (*loglet.ReadSession, error)
}

var (
	_ Log = (*loglet.Star)(nil)
	_ Log = (*loglet.Reader)(nil)
)

// ErrClosed: the session was closed (Session.Close).
var ErrClosed = errors.New("groups: session closed")

// Options configure a group session.
type Options struct {
	// Start is where a group that has committed nothing on the stream's
	// incarnation starts (the zero Position: AtSeq(0), the oldest record;
	// TailOffset(0) skips the history). A committed offset always wins.
	Start loglet.Position
	// MaxRecords and MaxBytes bound each Recv, as in loglet.ReadQuery.
	MaxRecords, MaxBytes int
}

// Session is a read session on behalf of a consumer group: it starts
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
// Recv must not be called concurrently with itself; Ack, Committed, Next
// and Close may be called from any goroutine.
type Session struct {
	group, stream string
	offsets       *Offsets
	// open opens a read session at seq on the incarnation inc, or fails
	// with loglet.ErrStreamNotFound if the stream no longer has it.
	open func(ctx context.Context, seq uint64, inc string) (*loglet.ReadSession, error)

	sess *loglet.ReadSession // used by Recv only

	// closed ends with Close: a blocked Recv returns, and every call
	// after fails with ErrClosed.
	closed      context.Context
	closeCancel context.CancelFunc

	ackMu sync.Mutex // serialises commits
	mu    sync.Mutex // guards the fields below; never held across I/O
	// committed is the group's offset as this session last learnt it.
	committed Offset
	// delivered is the next sequence number Recv would return: every
	// record below it has been delivered by this session (or skipped as
	// committed by the group).
	delivered uint64
}

// Open opens a session of group on stream, at the group's committed offset
// (or opts.Start if it has none), that follows the stream's tail as log's
// OpenReadSession does. See Session for the delivery guarantees.
func Open(ctx context.Context, log Log, group, stream string, opts Options) (*Session, error) {
	if ctx == nil {
		return nil, loglet.ErrNilContext
	}
	if log == nil {
		return nil, errors.New("groups: Open of a nil Log")
	}
	offsets := OffsetsOf(log)
	off, err := offsets.Get(ctx, group, stream)
	if err != nil {
		return nil, err
	}
	open := func(ctx context.Context, q loglet.ReadQuery, inc string) (*loglet.ReadSession, error) {
		sess, err := log.OpenReadSession(ctx, stream, q)
		if err != nil {
			return nil, err
		}
		// The session read the stream record after the offset did;
		// incarnations are never reused, and the session reads only the
		// one it opened on, so the same one now is the same throughout.
		if sess.Incarnation() != inc {
			return nil, fmt.Errorf("%w: %q was deleted (and created again) while its group session opened", loglet.ErrStreamNotFound, stream)
		}
		return sess, nil
	}
	g := &Session{group: group, stream: stream, offsets: offsets, committed: off}
	g.closed, g.closeCancel = context.WithCancel(context.Background())
	g.open = func(ctx context.Context, seq uint64, inc string) (*loglet.ReadSession, error) {
		return open(ctx, loglet.ReadQuery{Start: loglet.AtSeq(seq), MaxRecords: opts.MaxRecords, MaxBytes: opts.MaxBytes}, inc)
	}
	start := opts.Start
	if off.Committed() {
		start = loglet.AtSeq(off.Next)
	}
	g.sess, err = open(ctx, loglet.ReadQuery{Start: start, MaxRecords: opts.MaxRecords, MaxBytes: opts.MaxBytes}, off.Incarnation)
	if err != nil {
		return nil, err
	}
	g.delivered = g.sess.Next()
	return g, nil
}

// Close ends the session: a Recv blocked in it returns ErrClosed, and
// every Recv and Ack after it fails with ErrClosed. What was acknowledged
// stays committed; what was delivered and not acknowledged goes to the
// group's next session. Close holds no resources of the Log's, so it
// never fails, and closing twice is a no-op.
func (g *Session) Close() error {
	g.closeCancel()
	return nil
}

// bind returns ctx ended also by Close, and the function that releases it.
func (g *Session) bind(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(g.closed, cancel)
	return ctx, func() { stop(); cancel() }
}

// closedErr is ErrClosed once the session is closed, else err.
func (g *Session) closedErr(err error) error {
	if g.closed.Err() != nil {
		return ErrClosed
	}
	return err
}

// Recv returns the next records, blocking until at least one is readable
// or ctx ends, as loglet.ReadSession.Recv. Records come in order, once each per
// session; a record the group has committed meanwhile (another session of
// the group acknowledged it) is skipped. A stream deleted (and maybe
// created again) since the session opened ends it with loglet.ErrStreamNotFound.
func (g *Session) Recv(ctx context.Context) ([]loglet.SequencedRecord, error) {
	if ctx == nil {
		return nil, loglet.ErrNilContext
	}
	if g.closed.Err() != nil {
		return nil, ErrClosed
	}
	ctx, release := g.bind(ctx)
	defer release()
	for {
		g.mu.Lock()
		committed := g.committed
		g.mu.Unlock()
		if committed.Next > g.sess.Next() {
			// Another session of the group is ahead: skip to it.
			sess, err := g.open(ctx, committed.Next, committed.Incarnation)
			if err != nil {
				return nil, g.closedErr(err)
			}
			g.sess = sess
		}
		recs, err := g.sess.Recv(ctx)
		if err != nil {
			return nil, g.closedErr(err)
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
// is loglet.ErrStreamNotFound.
func (g *Session) Ack(ctx context.Context, seq uint64) error {
	if ctx == nil {
		return loglet.ErrNilContext
	}
	if g.closed.Err() != nil {
		return ErrClosed
	}
	g.ackMu.Lock()
	defer g.ackMu.Unlock()
	g.mu.Lock()
	cur, delivered := g.committed, g.delivered
	g.mu.Unlock()
	if seq >= delivered {
		return fmt.Errorf("groups: group %q on stream %q: ack of record %d, which this session has not delivered (next is %d)", g.group, g.stream, seq, delivered)
	}
	next := seq + 1
	for next > cur.Next {
		off, err := g.offsets.Commit(ctx, cur, next)
		var conflict *ConflictError
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
func (g *Session) Committed() Offset {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.committed
}

// Next is the sequence number of the next record Recv returns.
func (g *Session) Next() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return max(g.delivered, g.committed.Next)
}
