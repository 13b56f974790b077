package loglet

import (
	"context"
	"errors"
	"fmt"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
)

// Record is one stream record: a timestamp in milliseconds since the Unix
// epoch (0: the leader stamps arrival time; a time later than arrival is
// capped at arrival, see Config.UncappedTimestamps), headers and a body.
type Record = envelope.Record

// Header is one record header.
type Header = envelope.Header

// Class is a stream's storage class.
type Class = chain.Class

// The classes: Standard (cheap, slower ack) and Express (K=3/W=2 across
// zones, fast ack).
const (
	Standard = chain.Standard
	Express  = chain.Express
)

// Batch is what one Append writes to one stream, all or nothing.
type Batch struct {
	Records []Record
	// MatchSeqNum, if set, makes the append conditional: it is admitted
	// only if the stream's next sequence number equals *MatchSeqNum. A
	// mismatch (*SeqNumMismatchError) says that someone's batch is at
	// that position, never that it is yours: to retry an append whose
	// outcome is unknown, set Producer and send the same identity again.
	MatchSeqNum *uint64
	// Producer, if set, is the batch's producer identity: a retry of the
	// batch carries the same one, and the stream commits it once. A retry
	// of a committed batch is answered with its original range
	// (Ack.Duplicate), a retry of one still in flight waits for its
	// outcome, and one past the stream's window is a *ProducerWindowError.
	// Producer.Next makes identities; Producer.Append retries for you.
	Producer ProducerID
	// FencingToken is the fencing token the batch presents: it must be the
	// stream's (Star.SetFencingToken), "" for a stream without one. A
	// mismatch is a *FencedError. At most 36 bytes
	// (envelope.MaxFencingTokenLen).
	FencingToken string
}

// ProducerID identifies a producer's batch: producer ID's batch number
// Seq. The zero value is no identity. ID is 1 to 256 bytes, unique among
// the producers of a stream that may be alive at once (a random one, from
// NewProducer, is).
type ProducerID struct {
	ID  string
	Seq uint64
}

// Tail is a position at the end of a stream.
type Tail struct {
	Seq       uint64 // the next sequence number
	Timestamp int64  // the timestamp of the record before Seq (0 if none)
	// Pending is how many records below Seq this process has admitted and
	// not yet acked (Star.CheckTail only; 0 everywhere else): Seq−Pending
	// is the durable tail. While it is non-zero, a MatchSeqNum of Seq
	// presumes every one of those appends succeeds.
	Pending uint64
}

// Ack acknowledges a durable batch: its records hold sequence numbers
// [Start, End), and W copies of the flight holding them are in object
// storage, as are all earlier flights of the chain.
type Ack struct {
	Start, End uint64
	// Tail is the stream's durable tail just after this batch (for a
	// duplicate, the stream's durable tail when the retry was answered).
	Tail Tail
	// Duplicate: the batch was committed by an earlier attempt with the
	// same Batch.Producer, and [Start, End) is that attempt's range.
	Duplicate bool
}

// SequencedRecord is a record read back with its sequence number.
type SequencedRecord struct {
	Seq uint64
	Record
}

// Position says where a read starts.
type Position struct {
	kind  posKind
	value uint64
	ts    int64
}

type posKind uint8

const (
	posSeq posKind = iota
	posTimestamp
	posTailOffset
)

// AtSeq starts a read at sequence number seq (a seq below the stream's
// trim point reads from the trim point).
func AtSeq(seq uint64) Position { return Position{kind: posSeq, value: seq} }

// AtTimestamp starts a read at the first record whose timestamp is >= ms
// (at the trim point if that is later).
func AtTimestamp(ms int64) Position { return Position{kind: posTimestamp, ts: ms} }

// TailOffset starts a read n records before the durable tail (clamped to
// the oldest readable record: the trim point, if the stream is trimmed).
func TailOffset(n uint64) Position { return Position{kind: posTailOffset, value: n} }

// ReadQuery says where a read starts and how much it returns at most.
type ReadQuery struct {
	Start Position
	// MaxRecords bounds the records returned (0: 1000).
	MaxRecords int
	// MaxBytes bounds the records' body and header bytes (0: 1 MiB); at
	// least one record is returned if any is readable.
	MaxBytes int
}

// ReadResult is what a read returns.
type ReadResult struct {
	Records []SequencedRecord
	// Next is the sequence number to read from next.
	Next uint64
	// Tail is the stream's durable tail when the read was served.
	Tail Tail
}

// Loglet is the public surface of flightlog: named streams to append to and
// read from. *Star implements it; code that only appends and reads can take
// a Loglet and be tested against a fake. Stream management (CreateStream,
// DeleteStream, ListStreams), consumer offsets and Stats are *Star's own.
//
// Every method is safe for concurrent use, and returns ErrNilContext (never
// panics) for a nil ctx, except Close, which takes it for
// context.Background() (a Star's Close(nil) closes the star). A stream that does not exist is ErrStreamNotFound
// (for appends unless Config.CreateOnAppend), a stream placed on a star
// this process does not lead is a *NotLeaderError (and so is an append once
// a successor has deposed it), and any call but Close after Close is
// ErrClosed.
type Loglet interface {
	// Append writes b to stream, all or nothing, and returns once it is
	// acknowledged: its records hold [Ack.Start, Ack.End), and W copies of
	// its flight and of every earlier flight of its chain are in object
	// storage. An error wraps exactly one of ErrNotCommitted (definitely
	// not written; safe to retry) or ErrOutcomeUnknown (may yet become
	// durable: retry with the same Batch.Producer, or read, to find out); a ctx that
	// ends after admission is ErrOutcomeUnknown. A MatchSeqNum miss is a
	// *SeqNumMismatchError carrying the tail. Append does not retain b's
	// slices after it returns.
	Append(ctx context.Context, stream string, b Batch) (Ack, error)
	// OpenAppendSession opens a pipelined session on stream: Submit
	// returns once a batch is admitted, acks complete in submit order, and
	// after one batch fails every later Submit fails (ErrSessionFailed), so
	// the producer never sees a gap. The stream must exist (or be
	// creatable on append). Close the session to wait for the outcomes.
	OpenAppendSession(ctx context.Context, stream string) (*AppendSession, error)
	// Read returns durable records of stream from q.Start on, in sequence
	// order, with no gap and no duplicate, at most q.MaxRecords and about
	// q.MaxBytes (at least one record if any is readable), and the tail.
	// Records or an error, never both. A start at or past the durable tail
	// returns no records; a start below the stream's trim point (Trim,
	// retention) reads from the trim point, the first readable record, and
	// no read returns a record below it; a start below the oldest record
	// otherwise readable is ErrHistoryTrimmed; damage is ErrCorrupt (a
	// *CorruptError naming the object). The caller owns the returned
	// records.
	Read(ctx context.Context, stream string, q ReadQuery) (ReadResult, error)
	// Trim makes the records of stream below seq unreadable: at once
	// through this process and every Reader, within 5 seconds through a
	// leader in another process. The trim point only grows (a seq at or
	// below it is a no-op) and is clamped to the durable tail. The data
	// behind it (refs and settled objects) is then reclaimed; a failed
	// reclaim is retried later and does not fail Trim.
	Trim(ctx context.Context, stream string, seq uint64) error
	// OpenReadSession starts a session at q.Start that catches up and then
	// follows the stream's tail: each Recv blocks until at least one record
	// is readable (q's limits apply to each Recv) and returns every record
	// once, in order. A session is not safe for concurrent use.
	OpenReadSession(ctx context.Context, stream string, q ReadQuery) (*ReadSession, error)
	// CheckTail returns the stream's tail: the sequence number the next
	// admitted record gets and the last timestamp. On a Star it counts
	// admitted batches not yet acked, in Tail.Pending (Seq−Pending is the
	// durable tail); take a MatchSeqNum from Seq when Pending is 0.
	CheckTail(ctx context.Context, stream string) (Tail, error)
	// Close stops admission, gives every admitted batch its outcome and
	// hands the streams over cleanly (a Star flushes, absorbs and seals its
	// chains, so the next owner continues without a takeover), within ctx
	// (a Star bounds a ctx without deadline by Config.CloseTimeout; a nil
	// ctx is context.Background()). It returns what failed, joined; later
	// calls return the first result.
	Close(ctx context.Context) error
}

// The two outcomes of a failed append. Every error Append (or an append
// session's Wait) returns wraps exactly one of them.
var (
	// ErrNotCommitted: the batch is definitely not committed and never
	// will be; retrying is safe. (A match_seq_num miss, a full or closed
	// star, a halted chain that never cut the batch, bad input, an unknown
	// stream, the caller's context ending before admission.)
	ErrNotCommitted = errors.New("loglet: not committed")
	// ErrOutcomeUnknown: the batch was admitted and may or may not become
	// durable (the caller's context ended while it was in flight, or its
	// chain halted at or before its slot). Retry with the same
	// Batch.Producer to have it committed once (Producer does it for you),
	// or read the stream to find out.
	ErrOutcomeUnknown = errors.New("loglet: outcome unknown")
)

// Errors that say why an append was not committed, or why another call
// failed. Each is matched with errors.Is; append errors also match
// ErrNotCommitted.
var (
	ErrClosed         = errors.New("loglet: closed")
	ErrStreamNotFound = errors.New("loglet: stream not found")
	ErrStreamExists   = errors.New("loglet: stream already exists")
	ErrInvalidBatch   = errors.New("loglet: invalid batch")
	ErrChainHalted    = errors.New("loglet: chain halted")
	ErrClassDisabled  = errors.New("loglet: class has no buckets configured")
	ErrHistoryTrimmed = errors.New("loglet: records below the start are no longer readable here")
	ErrSessionFailed  = errors.New("loglet: append session failed earlier")
)

// ErrInvalidStreamName: a name no stream can have: empty, not valid UTF-8,
// holding a control character, or too long for its keys to fit every
// backend (at most 463 bytes of [A-Za-z0-9._-]; every other byte is
// percent-escaped in keys and counts three). CreateStream refuses it, and
// every other call given it. The error also matches ErrInvalidBatch (which
// stood for it before) and chain.ErrInvalidName, and for an append
// ErrNotCommitted.
var ErrInvalidStreamName = errors.New("loglet: invalid stream name")

// ErrCorrupt: a read met damage, not absence: every copy of an object it
// needed that could be read failed its checksum or did not decode (or a
// metastore value did not parse). The error is a *CorruptError naming the
// object. Other records of the stream stay readable; fsck names every
// damaged object and repairs what another copy can repair.
var ErrCorrupt = errors.New("loglet: corrupt data")

// CorruptError says which object a read found damaged, and why, per copy.
// It matches ErrCorrupt, and unwraps to the underlying errors too
// (envelope.ErrCorrupt, absorb.ErrCorrupt, objstore.ErrNotFound for a
// copy that was missing beside the damaged ones).
type CorruptError struct {
	// Object names what is damaged: an object key with the byte range
	// read ("chains/s1/express/…/…[512+300)"), or a metastore key.
	Object string
	Err    error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("loglet: %s is corrupt: %v", e.Object, e.Err)
}

func (e *CorruptError) Unwrap() []error { return []error{ErrCorrupt, e.Err} }

// ErrNilContext: a method was given a nil context.Context. It is a
// programmer error, reported as an error (never a panic) by every method
// that takes a context; for an append it also matches ErrNotCommitted.
var ErrNilContext = errors.New("loglet: nil context")

// ErrNotLeader: this process does not (or no longer) lead the chain (a
// successor sealed it for a takeover, or minted a later epoch). Appends fail
// with a *NotLeaderError, which matches it and ErrNotCommitted and names the
// leader, so the host can route them.
var ErrNotLeader = errors.New("loglet: not the leader")

// ErrTakeoverLost: another process minted the chain's next epoch first (or
// sealed the chain for a takeover of its own after this one did). This
// process does not lead the star; the caller may retry Open later.
var ErrTakeoverLost = errors.New("loglet: another process took over the chain first")

// ErrLiveOwner: Open was told to refuse a live owner (Config.RefuseLiveOwner)
// and a chain's current epoch has one. The error names the owner and epoch.
var ErrLiveOwner = errors.New("loglet: the chain has a live owner")

// SeqNumMismatchError is returned when a batch's MatchSeqNum is not the
// stream's tail. The batch is not committed; Tail is the current tail.
type SeqNumMismatchError struct {
	Stream   string
	Expected uint64
	Tail     Tail
}

func (e *SeqNumMismatchError) Error() string {
	return fmt.Sprintf("loglet: stream %q: match_seq_num %d, tail is %d", e.Stream, e.Expected, e.Tail.Seq)
}

// Is makes a mismatch match ErrNotCommitted.
func (e *SeqNumMismatchError) Is(target error) bool { return target == ErrNotCommitted }

// FencedError is returned for a batch whose fencing token
// (Batch.FencingToken, or SetFencingToken's expectedOld) is not the
// stream's: another writer set a new token, fencing this one out, or the
// stream has none and the batch presents one. The batch is not committed.
// Fenced says whether the stream has a token; the token itself is not told.
type FencedError struct {
	Stream string
	Fenced bool
}

func (e *FencedError) Error() string {
	if !e.Fenced {
		return fmt.Sprintf("loglet: stream %q has no fencing token, and the batch presents one", e.Stream)
	}
	return fmt.Sprintf("loglet: stream %q: its fencing token changed (the batch's token is not the stream's): this writer is fenced out", e.Stream)
}

// Is makes it match ErrNotCommitted.
func (e *FencedError) Is(target error) bool { return target == ErrNotCommitted }

// NotLeaderError is returned for a stream whose star this process does not
// lead. The batch is not committed; the host routes it to Leader, the owner
// named by the star's epoch record ("" if the star has never been led).
type NotLeaderError struct {
	Stream, Star string
	Leader       string
	Epoch        uint64
	// Cause says how this process learnt it was deposed (nil when it never
	// led the star).
	Cause error
}

func (e *NotLeaderError) Error() string {
	if e.Stream == "" {
		return fmt.Sprintf("loglet: star %q is led by %q (epoch %d), not by this process", e.Star, e.Leader, e.Epoch)
	}
	return fmt.Sprintf("loglet: stream %q belongs to star %q, led by %q (epoch %d), not by this process", e.Stream, e.Star, e.Leader, e.Epoch)
}

// Is makes it match ErrNotCommitted and ErrNotLeader.
func (e *NotLeaderError) Is(target error) bool {
	return target == ErrNotCommitted || target == ErrNotLeader
}

// outcome wraps err so that it matches kind (ErrNotCommitted or
// ErrOutcomeUnknown) as well as err.
type outcome struct {
	kind error
	err  error
}

func (o *outcome) Error() string   { return o.err.Error() }
func (o *outcome) Unwrap() []error { return []error{o.kind, o.err} }

func notCommitted(err error) error {
	if errors.Is(err, ErrNotCommitted) {
		return err
	}
	return &outcome{ErrNotCommitted, err}
}

func outcomeUnknown(err error) error {
	if errors.Is(err, ErrOutcomeUnknown) {
		return err
	}
	return &outcome{ErrOutcomeUnknown, err}
}
