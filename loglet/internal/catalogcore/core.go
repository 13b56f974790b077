package catalogcore

import (
	"errors"
	"fmt"
)

// Version is a metastore version as the core sees it: opaque, compared for
// equality. NoVersion is "no such key".
type Version string

// NoVersion is the version of a key that does not exist.
const NoVersion Version = ""

// Record is a stream record: one incarnation of a name.
type Record struct {
	Name string
	// Incarnation names this life of the stream ("" for records written
	// before incarnations existed).
	Incarnation string
	// Nonce is unique per create: it recognises a create's own record
	// after an ambiguous commit.
	Nonce string
	// Star is the star that leads the stream.
	Star string
	// TrimSeq is the trim point: records below it are unreadable.
	TrimSeq uint64
	// Version is the record's metastore version as read (NoVersion for a
	// record not yet written).
	Version Version
	// Data is the shell's own copy of the record (its encoding, class,
	// options). The core never reads it; it travels with the record so
	// the shell can execute a request without a lookup of its own.
	Data any
}

// ID is the record's stream ID: name and incarnation.
func (r Record) ID() string {
	if r.Incarnation == "" {
		return r.Name
	}
	return r.Name + "@" + r.Incarnation
}

func (r Record) String() string {
	s := r.ID()
	if r.Star != "" {
		s += " star=" + r.Star
	}
	if r.TrimSeq > 0 {
		s += fmt.Sprintf(" trim=%d", r.TrimSeq)
	}
	if r.Version != NoVersion {
		s += " v=" + string(r.Version)
	}
	return s
}

// Bounds of the retry loops.
const (
	// MaxCreateAttempts bounds the commits of one create that find the
	// name taken, then free again on the re-read (created and deleted
	// meanwhile).
	MaxCreateAttempts = 3
	// MaxTrimAttempts bounds the trim-point commits of one trim that lose
	// to another writer of the same incarnation's record.
	MaxTrimAttempts = 9
	// MaxOffsetAttempts bounds the commits of one offset that a trim's
	// rewrite of the stream record sends back to retry (each trim moves the
	// record once; a trim point only grows).
	MaxOffsetAttempts = 8
	// MaxLookupRereads bounds the re-reads of a lookup (or a create
	// offering its record to the cache) that finds another incarnation
	// cached since it last looked.
	MaxLookupRereads = 3
	// MaxConfigureAttempts bounds the commits of one configure that lose
	// to another writer of the same incarnation's record (a trim).
	MaxConfigureAttempts = 9
)

// Op is one catalogue operation in progress.
type Op interface {
	// Next returns the request the operation needs executed now, or nil
	// once it is over (see Outcome). It returns the same request until a
	// Step answers it.
	Next() Request
	// Step feeds the result of the request Next returned. A result of the
	// wrong type (not the pending request's) is an error, and so is a step
	// of an operation that is over; the operation is left as it was.
	Step(Result) error
	// Outcome is how the operation ended (Status Pending while it runs).
	Outcome() Outcome
}

// Status is how an operation ended.
type Status int

// Statuses.
const (
	// Pending: the operation still runs.
	Pending Status = iota
	// Served: a lookup found the record and the cache serves it.
	Served
	// Created: a create committed its record (Outcome.Record).
	Created
	// Exists: a create found the name taken by another record.
	Exists
	// NotFound: no record of the name, or not of the incarnation asked.
	NotFound
	// NotLeader: the record is another star's (Outcome.Record says which).
	NotLeader
	// Deleted: a delete's commit applied (whatever its cleanup did).
	Deleted
	// Finished: a deleted incarnation's cleanup ran (Outcome.Drained says
	// whether its marker went too).
	Finished
	// Trimmed: the trim point is at least the one asked (Outcome.Seq).
	Trimmed
	// Committed: an offset commit applied (Outcome.Offset).
	Committed
	// Conflict: the offset changed since it was read (Outcome.Offset is the
	// offset now).
	Conflict
	// Failed: a request failed and the operation cannot know more
	// (Outcome.Err; Outcome.Cause, if set, is why it could not resolve).
	Failed
	// Corrupt: a record that does not decode (Outcome.Err).
	Corrupt
	// Backwards: an offset commit below the offset it replaces; nothing
	// was written.
	Backwards
	// Configured: a configure wrote the record's new options (Wrote), or,
	// asked only to read, found the record (Outcome.Record).
	Configured
)

var statusNames = [...]string{"pending", "served", "created", "exists", "not-found", "not-leader", "deleted", "finished", "trimmed", "committed", "conflict", "failed", "corrupt", "backwards", "configured"}

func (s Status) String() string {
	if s >= 0 && int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("status(%d)", int(s))
}

// Outcome is how an operation ended.
type Outcome struct {
	Status Status
	// Record is the record served, created, deleted, trimmed, configured
	// or found on another star.
	Record Record
	// Seq is a trim's trim point.
	Seq uint64
	// Offset is a committed offset, or the offset that won a conflict.
	Offset Offset
	// Drained: a finished delete's chain will write no more of the
	// incarnation, and its marker was deleted.
	Drained bool
	// Wrote: the operation's own write applied (a trim point raised).
	Wrote bool
	// Exhausted: a retry loop reached its bound.
	Exhausted bool
	// Attempts is how many commits the operation made.
	Attempts int
	// Err is the error of the request that failed; Cause is the error of
	// the re-read that would have resolved it, if that failed too.
	Err, Cause error
}

func (o Outcome) String() string {
	s := o.Status.String()
	switch o.Status {
	case Served, Created, NotLeader, Deleted, Configured:
		s += " " + o.Record.String()
	case NotFound, Exists:
		if o.Record.Name != "" {
			s += " " + o.Record.String()
		}
	case Finished:
		s += fmt.Sprintf(" %s drained=%v", o.Record.ID(), o.Drained)
	case Trimmed:
		s += fmt.Sprintf(" %s seq=%d", o.Record.ID(), o.Seq)
	case Committed, Conflict:
		s += " " + o.Offset.String()
	}
	if o.Wrote {
		s += " wrote"
	}
	if o.Exhausted {
		s += " exhausted"
	}
	if o.Attempts > 1 {
		s += fmt.Sprintf(" attempts=%d", o.Attempts)
	}
	if o.Err != nil {
		s += fmt.Sprintf(" err=%q", o.Err.Error())
	}
	if o.Cause != nil {
		s += fmt.Sprintf(" cause=%q", o.Cause.Error())
	}
	return s
}

// errOver is the error of a Step on an operation that is over.
var errOver = errors.New("catalogcore: step of an operation that is over")

// mismatch is the error of a Step whose result does not answer the
// pending request.
func mismatch(req Request, res Result) error {
	return fmt.Errorf("catalogcore: result %T does not answer request %T", res, req)
}
