package catalogcore

import "fmt"

// Offset is a consumer group's offset in one incarnation of a stream, as
// last read or committed.
type Offset struct {
	Group, Stream, Incarnation string
	// Next is the first seq the group has not processed.
	Next uint64
	// Version is the offset's version (NoVersion: never committed).
	Version Version
	// RecordVersion is the stream record's version, of this incarnation,
	// as last read: a commit expects it.
	RecordVersion Version
}

func (o Offset) String() string {
	return fmt.Sprintf("%s/%s@%s next=%d v=%s rv=%s", o.Group, o.Stream, o.Incarnation, o.Next, o.Version, o.RecordVersion)
}

// CommitOffset commits a group's offset: one commit expecting the offset's
// version and the stream record's. A failure re-reads the offset: its own
// write (its nonce) means the commit applied. Else, unless it was a
// conflict, the error stands; after a conflict it re-reads the record:
// gone or another incarnation is NotFound (an offset never lands on the
// wrong incarnation); the record moved under the same incarnation with the
// offset unchanged (a trim) commits again against the version read, up to
// MaxOffsetAttempts commits; the offset changed is a Conflict, with the
// offset now. A commit below the offset it replaces is Backwards, and
// writes nothing.
type CommitOffset struct {
	op
	prev     Offset
	next     uint64
	err      error
	conflict bool
	nonce    string
	rv       Version // the record's version re-read
	attempts int
}

// NewCommitOffset starts a commit of next over prev.
func NewCommitOffset(prev Offset, next uint64) *CommitOffset {
	c := &CommitOffset{prev: prev, next: next}
	if next < prev.Next {
		c.end(Outcome{Status: Backwards, Offset: prev})
		return c
	}
	c.attempts = 1
	c.ask(CommitOffsetReq{Offset: prev, Next: next})
	return c
}

// Step implements Op.
func (c *CommitOffset) Step(res Result) error {
	if c.req == nil {
		return errOver
	}
	switch req := c.req.(type) {
	case CommitOffsetReq:
		r, ok := res.(OffsetCommitted)
		if !ok {
			return mismatch(req, res)
		}
		if r.Err == nil {
			c.committed(c.next, r.Version)
			return nil
		}
		c.err, c.conflict, c.nonce = r.Err, r.Conflict, r.Nonce
		c.ask(ReadOffset{Offset: c.prev})
	case ReadOffset:
		r, ok := res.(OffsetRead)
		if !ok {
			return mismatch(req, res)
		}
		if c.rv == NoVersion {
			c.resolveOwn(r)
			return nil
		}
		if r.Err != nil || r.Corrupt {
			c.fail(r.Err)
			return nil
		}
		cur := c.prev
		cur.Next, cur.Version, cur.RecordVersion = 0, NoVersion, c.rv
		if r.Found {
			cur.Next, cur.Version = r.Next, r.Version
		}
		switch {
		case cur.Version == c.prev.Version && c.rv != c.prev.RecordVersion:
			// Only the record moved: a trim, same incarnation.
			if c.attempts >= MaxOffsetAttempts {
				c.end(Outcome{Status: Failed, Err: c.err, Attempts: c.attempts, Exhausted: true})
				return nil
			}
			c.attempts++
			c.prev.RecordVersion, c.rv = c.rv, NoVersion
			c.ask(CommitOffsetReq{Offset: c.prev, Next: c.next})
		default:
			c.end(Outcome{Status: Conflict, Offset: cur, Attempts: c.attempts})
		}
	case ReadRecord:
		r, ok := res.(RecordRead)
		if !ok {
			return mismatch(req, res)
		}
		switch {
		case r.NotFound || r.Err == nil && !r.Corrupt && r.Record.Incarnation != c.prev.Incarnation:
			c.end(Outcome{Status: NotFound, Record: r.Record, Err: errRecreated, Attempts: c.attempts})
		case r.Err != nil:
			c.fail(r.Err)
		default:
			c.rv = r.Record.Version
			if c.rv == NoVersion {
				return fmt.Errorf("catalogcore: a record read without its version")
			}
			c.ask(ReadOffset{Offset: Offset{Group: c.prev.Group, Stream: c.prev.Stream, Incarnation: c.prev.Incarnation, RecordVersion: c.rv}})
		}
	default:
		return mismatch(c.req, res)
	}
	return nil
}

// resolveOwn learns from the offset re-read whether the failed commit was
// its own write that applied.
func (c *CommitOffset) resolveOwn(r OffsetRead) {
	switch {
	case r.Err == nil && r.Found && !r.Corrupt && r.Nonce == c.nonce && c.nonce != "":
		c.committed(r.Next, r.Version) // ours: the "failure" applied
	case r.Err != nil && !r.Corrupt:
		c.fail(r.Err)
	case !c.conflict:
		c.end(Outcome{Status: Failed, Err: c.err, Attempts: c.attempts})
	default:
		c.ask(ReadRecord{Name: c.prev.Stream})
	}
}

func (c *CommitOffset) committed(next uint64, v Version) {
	out := c.prev
	out.Next, out.Version = next, v
	c.end(Outcome{Status: Committed, Offset: out, Attempts: c.attempts})
}

// fail ends with the commit's error, a re-read having failed with cause.
func (c *CommitOffset) fail(cause error) {
	c.end(Outcome{Status: Failed, Err: c.err, Cause: cause, Attempts: c.attempts})
}
