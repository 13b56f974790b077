package chaincore

import (
	"errors"
	"fmt"
	"time"

	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/sequencer"
)

// Tail is a position at the end of a stream: the next sequence number and
// the timestamp of the record before it.
type Tail struct {
	Seq       uint64
	Timestamp int64
}

// Ack is an acknowledged batch: records [Start, End), and the stream's
// durable tail just after it.
type Ack struct {
	Start, End uint64
	Tail       Tail
}

// Batch is one admitted batch, from admission to its outcome. The shell
// fills in the fields above Start before Admit; the core owns the rest
// until the batch appears in Ready.Outcomes, after which they do not
// change.
type Batch struct {
	Stream    *Stream
	Count     int
	Headers   int    // record headers in all (the frame's header limit)
	Payload   []byte // the encoded records; immutable once admitted
	Charge    int64  // bytes reserved in the pool budget
	Submitted time.Time
	MinTS     int64
	MaxTS     int64
	// Stored, if set, is Payload as one frame's stored bytes, made ahead
	// of the cut (the shell compresses a large batch on the producer's
	// goroutine, so a claimed flight only has to be assembled): codec
	// StoredCodec, CRC-32C StoredCRC. Such a batch is a frame of its own.
	// Admit drops it if it re-stamps Payload. Immutable once admitted.
	Stored      []byte
	StoredCodec envelope.Codec
	StoredCRC   uint32
	// Producer is the batch's producer identity (zero: none): a retry of
	// a batch the stream's window holds is not admitted again
	// (producers.go).
	Producer ProducerID
	// Fencing is the token the batch presents, and for a fence batch the
	// token it sets (fencing.go).
	Fencing Fencing
	// Done belongs to the shell: it closes it once it has delivered the
	// outcome. The core never touches it.
	Done chan struct{}

	// Start is the first sequence number, assigned at admission.
	Start uint64
	// Ack or Fate is the outcome (Fate.Kind == Acked: Ack holds).
	Ack  Ack
	Fate Fate
	// Flight is when the batch's flight passed each stage of the write
	// path, shared by its batches; set at the claim (nil before).
	Flight *FlightTrace
}

// FlightTrace is when one flight passed each stage of the write path, on
// the core's clock: what the benchmarks' stage breakdown is made of. The
// core writes it as the stages happen; read it once the batch's outcome is
// delivered.
type FlightTrace struct {
	Epoch, Slot uint64 // as first claimed
	// Oldest is when the oldest batch pooled at the cut was submitted: the
	// flush deadline runs from it.
	Oldest time.Time
	// BySize: the flight was cut because the pool held FlightBytes, not
	// because the deadline passed.
	BySize   bool
	Claimed  time.Time     // the cut and claim
	PutStart time.Time     // rendered; its copies' PUTs asked for
	Durable  time.Time     // the W-th copy of ours confirmed
	StoreW   time.Duration // that copy's PUT as the store took it
	Released time.Time     // acked, in slot order
}

// End is the sequence number after the batch's last record.
func (b *Batch) End() uint64 { return b.Start + uint64(b.Count) }

// FateKind is which of the three outcomes a batch had.
type FateKind uint8

const (
	// Pending: no outcome yet.
	Pending FateKind = iota
	// Acked: durable at W copies, as is every earlier slot.
	Acked
	// NotCommitted: definitely not committed, now or ever.
	NotCommitted
	// OutcomeUnknown: may or may not be committed.
	OutcomeUnknown
)

// String names the kind.
func (k FateKind) String() string {
	switch k {
	case Pending:
		return "pending"
	case Acked:
		return "acked"
	case NotCommitted:
		return "not-committed"
	case OutcomeUnknown:
		return "unknown"
	}
	return fmt.Sprintf("FateKind(%d)", uint8(k))
}

// Fate is a batch's outcome, or why a chain stopped serving.
type Fate struct {
	Kind FateKind
	// Cause says what happened (nil when acked).
	Cause error
	// Deposed is set when a successor exists (or has sealed the chain for
	// a takeover): the batch is not committed, and the host should route
	// it to Deposed.Leader.
	Deposed *Deposed
}

// Deposed names who took the chain over, as far as this process knows.
type Deposed struct {
	// Leader is the owner of the successor epoch, or of the seal that
	// deposed this process ("" if unknown).
	Leader string
	// Epoch is the successor's epoch (0 if it has only sealed).
	Epoch uint64
}

// Errors the core reports. Admission errors are returned by Admit; the
// others appear as Fate causes.
var (
	// ErrClosed: the chain is closing; nothing more is admitted.
	ErrClosed = errors.New("leader: closed")
	// ErrRetired: the stream was retired (Core.Retire: its incarnation
	// was deleted); nothing more of it is admitted.
	ErrRetired = errors.New("leader: stream retired")
	// ErrDeposed: a successor has sealed the checkpoint or minted a later
	// epoch; this process no longer leads the chain.
	ErrDeposed = errors.New("leader: deposed")
	// ErrHalted: the chain halted and this batch could not be decided.
	ErrHalted = errors.New("leader: chain halted")
	// ErrAborted: Close gave up before the batch's outcome was known.
	ErrAborted = errors.New("leader: close gave up waiting")
)

// MismatchError: a batch's MatchSeqNum was not the stream's tail. Nothing
// was admitted; Tail is the stream's assigned tail.
type MismatchError struct {
	Expected uint64
	Tail     Tail
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("leader: match_seq_num %d, tail is %d", e.Expected, e.Tail.Seq)
}

// DeadError is what Admit returns once the chain no longer serves. Its
// Fate is the refused batch's: not committed (nothing was admitted), with
// the cause, and the successor if the chain was deposed.
type DeadError struct{ Fate Fate }

func (e *DeadError) Error() string {
	return fmt.Sprintf("leader: chain no longer serves: %v", e.Fate.Cause)
}

// Unwrap returns the cause.
func (e *DeadError) Unwrap() error { return e.Fate.Cause }

// Stream is one stream's state in the core: its sequencer, its durable
// (released) tail, and its flight index (released, unabsorbed batches).
// The shell reads it through the Core's accessors, under the same lock it
// steps the core with.
type Stream struct {
	name    string
	seq     sequencer.Stream
	durable Tail
	entries []*Batch   // the flight index, in sequence order
	bytes   int64      // payload bytes in entries
	noted   bool       // in the current Ready's Released
	retired bool       // Core.Retire: admission refuses it for good
	prod    *producers // the producer window (nil until a producer writes)
	token   string     // the fencing token as of admission (fencing.go)
	// renderIdx is scratch for renderOf: 1 + the stream's index among
	// the streams of the flight being rendered (0 outside renderOf).
	renderIdx int
}

// Name is the stream's name.
func (st *Stream) Name() string { return st.name }

// Assigned is the tail admission has reached: the next sequence number and
// the last admitted timestamp (it counts batches not yet acked).
func (st *Stream) Assigned() Tail {
	return Tail{Seq: st.seq.Next, Timestamp: st.seq.LastTimestamp}
}

// Durable is the released tail: every record below it is acked.
func (st *Stream) Durable() Tail { return st.durable }

// Index returns the flight index: the released, unabsorbed batches, in
// sequence order. The slice is the caller's; the batches' payloads are
// immutable, so they may be decoded without the lock.
func (st *Stream) Index() []*Batch { return append([]*Batch(nil), st.entries...) }

// Drained reports whether nothing admitted to the stream is left for this
// chain to write: every batch is released and absorbed (none waits for its
// outcome, none is in the flight index). Once a retired stream is drained,
// this chain's absorb writes no more of its refs.
func (st *Stream) Drained() bool { return st.seq.Next == st.IndexStart() }

// Retired reports whether the stream was retired (Core.Retire).
func (st *Stream) Retired() bool { return st.retired }

// IndexStart is the first sequence number the flight index serves: below
// it, records are read from history (refs).
func (st *Stream) IndexStart() uint64 {
	if len(st.entries) > 0 {
		return st.entries[0].Start
	}
	return st.durable.Seq
}
