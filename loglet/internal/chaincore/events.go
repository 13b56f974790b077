package chaincore

import (
	"log/slog"
	"time"

	absorb "github.com/flightlog/flightlog/absorb/absorbval"
	chain "github.com/flightlog/flightlog/chain/chainval"
	"github.com/flightlog/flightlog/envelope"
	metastore "github.com/flightlog/flightlog/metastore/metaval"
)

// UploadID names one upload: a flight's write to one slot of one epoch. A
// flight republished after a halt gets a new one.
type UploadID struct{ Epoch, Slot uint64 }

// A Request is one piece of work the core hands the shell in Ready: the
// shell runs each on a worker, which makes the I/O call it names and steps
// exactly one Event back (the one named in the request's doc). Requests
// carry everything the worker needs; the worker shares nothing else with
// the core.
type Request interface{ isRequest() }

// Render asks for a flight's transit bundle: for each of Streams, in
// order, that stream's parts (consecutive sequence numbers) in frames
// split greedily within the frame limits, with a fresh nonce. → Rendered.
// It carries values the core built for it (renderOf), not the core's
// batches: the worker shares nothing with the core but the payload bytes,
// which are immutable once admitted.
type Render struct {
	Upload  UploadID
	Streams []RenderStream
}

// RenderStream is one stream's batches of a flight, in sequence order.
type RenderStream struct {
	Name  string
	Parts []RenderPart
}

// RenderPart is one batch as a render needs it: the fields of Batch of the
// same names. Payload and Stored are the batch's bytes, immutable once
// admitted (the worker only reads them).
type RenderPart struct {
	Start        uint64
	Count        int
	Headers      int
	MinTS, MaxTS int64
	Payload      []byte
	Stored       []byte
	StoredCodec  envelope.Codec
	StoredCRC    uint32
	// Producer is the batch's producer identity (zero: none): the render
	// marks its records with it (envelope.ProducerMark).
	Producer ProducerID
	// Fence says the batch is a fence batch setting the stream's token to
	// SetToken: the render marks its first record (envelope.FenceMark).
	Fence    bool
	SetToken string
}

// PutCopy asks for one bucket's copy of a rendered flight (chain.WriteCopy:
// PutIfAbsent, ghost PUTs resolved by nonce). The worker's context is
// cancelled when the core cancels the upload. → CopyDone.
type PutCopy struct {
	Upload UploadID
	Bucket int
	Flight chain.Flight
}

// ReadEpoch asks for the chain's epoch record (chain.ReadEpoch): a
// takeover's first step, and the fence's look for a cut a successor
// recorded. → EpochRead.
type ReadEpoch struct {
	// Checkpoint asks for the checkpoint too (absorb.ReadCheckpoint), read
	// at the same time: a takeover's, so that after a clean seal the seal
	// and the mint are one Commit (SealMint) with nothing read between.
	Checkpoint bool
}

// ReadTrimCursor asks for the chain's trim cursor (chain.ReadTrimCursor):
// the fence never reads below it, and takes a cut it records. →
// TrimCursorRead.
type ReadTrimCursor struct{}

// MintFirst asks to mint epoch 1 of a chain that has none
// (chain.MintFirst). → FirstMinted.
type MintFirst struct {
	Record chain.EpochRecord
}

// CreateCheckpoint asks to create the checkpoint of a chain whose first
// epoch, Epoch, this owner minted: sealed by it, at (Epoch, 0)
// (absorb.InitCheckpoint). → CheckpointCreated.
type CreateCheckpoint struct {
	Epoch uint64
}

// Seal asks to seal the checkpoint for a takeover of epoch Epoch+1,
// conditioned on the epoch record still being at EpochVersion: one attempt
// (absorb.SealCheckpointOnce). → Sealed.
type Seal struct {
	Epoch        uint64
	EpochVersion metastore.Version
}

// SealMint asks for a clean takeover's seal and mint in one Commit
// (absorb.SealMint): Next put at PrevVersion, and the checkpoint, read as
// Checkpoint at CheckpointVersion, sealed by this owner for the new epoch
// at that version. Prev carries a clean seal of its epoch, so there is no
// cut to fence between the two. → SealMinted.
type SealMint struct {
	Prev              chain.EpochRecord
	PrevVersion       metastore.Version
	Next              chain.EpochRecord
	Checkpoint        absorb.Checkpoint
	CheckpointVersion metastore.Version
}

// Fence asks to fence Epoch from slot From (chain.Fence, looking ahead at
// most Window slots): the buckets only. Where the fence starts, and whether
// a recorded cut makes it needless, the core decides from the trim cursor
// and the epoch record (ReadTrimCursor, ReadEpoch). → Fenced.
type Fence struct {
	Epoch, From uint64
	Window      int
	// MaxSlots bounds the slots the fence may find committed (0: the
	// chain default).
	MaxSlots uint64
	// Patience bounds the request (0: none): past it the fence returns
	// the *chain.UndecidedError naming the slot it is blocked at.
	Patience time.Duration
	// Override is the operator override the fence applies.
	Override FenceOverride
}

// FenceOverride is an operator override of the fence's decision rule, for
// a slot that damage or lost buckets leave undecidable (see
// chain.FenceOptions).
type FenceOverride uint8

const (
	// FenceStrict decides by the rule alone: an undecidable slot blocks.
	FenceStrict FenceOverride = iota
	// FenceAcceptReadable decides committed an undecidable slot that holds
	// a readable flight copy (chain.FenceOptions.AcceptReadableFlight).
	FenceAcceptReadable
	// FenceDiscardUnreadable also decides dead an undecidable slot whose
	// copies are all unreadable, losing its records and every later slot's
	// of the epoch (chain.FenceOptions.DiscardUnreadable).
	FenceDiscardUnreadable
)

func (o FenceOverride) String() string {
	return [...]string{"strict", "accept-readable", "discard-unreadable"}[o]
}

// Mint asks to mint the successor of Prev (read at PrevVersion) as Next,
// in one metastore Commit that also checks the checkpoint is still Held
// (so still carries this owner's seal) and moves the seal to the new epoch
// (absorb.Committer.MintNext, over absorb.Resume(Held)). → Minted.
type Mint struct {
	Held        absorb.Held
	Prev        chain.EpochRecord
	PrevVersion metastore.Version
	Next        chain.EpochRecord
}

// ReadCheckpoint asks for the chain's checkpoint (absorb.ReadCheckpoint):
// an idle leader's check that nobody has sealed the chain for a takeover.
// → CheckpointRead.
type ReadCheckpoint struct {
	// Epoch is the epoch this process led when it asked: the check is of
	// that epoch's seal, and its result is echoed back with it.
	Epoch uint64
}

// Probe asks for the garbage probe of Epoch over [Cut, Cut+Window)
// (chain.GarbageProbe). → Probed.
type Probe struct {
	Epoch, Cut uint64
	Window     int
}

// ReadTails asks for the tails as of the snapshot at Key, a delta read over
// its base if it is one (absorb.ReadTails); with Rebuild, for the tails as
// of Checkpoint computed from the refs instead (absorb.RebuildTails: the
// snapshot is damaged or missing). → TailsRead.
// Either way it also looks up the snapshots the round after Checkpoint (a
// predecessor's, as found at the seal) may have written and never
// committed (absorb.UncommittedSnapshots), and reports them in
// TailsRead.Orphans.
type ReadTails struct {
	Key        string
	Rebuild    bool
	Checkpoint absorb.Checkpoint
}

// Walk asks for the committed slots of Epoch in [From, To), by point
// lookups (chain.Walk), stopping after Max slots (0: all of them).
// → Walked.
type Walk struct {
	Epoch, From, To uint64
	Max             int
}

// An absorb round is three requests, in this order: PutSnapshot, then
// CommitRound, then (if it deletes any) DropSnapshots. The core sequences
// them and decides what a failure of each means. A round too large for one
// metastore Commit is split: CommitRound writes nothing and names the
// chunks its refs split into (RoundCommitted.Split), and the core commits
// it in steps instead, each one Commit: MarkRoundPending, CommitRefs per
// chunk, then AdvanceRound.

// PutSnapshot asks to encode Round's tails snapshot (Encode) and write it at Key to the buckets, returning once W
// copies are there (absorb.PutSnapshotTracked). Streams are the tails it
// holds, frozen; Base is the full snapshot a delta builds on ("" for a
// full snapshot). The executor encodes, not the core: a full snapshot of a
// million streams takes seconds to encode, which the core's loop must not
// spend. → SnapshotPut.
type PutSnapshot struct {
	Round   absorb.Round
	Key     string
	Streams TailsView
	Base    string
}

// Snapshot is the snapshot's content, as of the round's end.
func (r PutSnapshot) Snapshot() absorb.Tails {
	return absorb.Tails{Epoch: r.Round.Epoch, Next: r.Round.To, Streams: r.Streams.Map(), Base: r.Base}
}

// Encode renders the snapshot object (absorb's binary format), straight
// from the frozen view: no map of the streams is built.
func (r PutSnapshot) Encode() ([]byte, error) {
	return r.Streams.Encode(r.Round.Epoch, r.Round.To, r.Base)
}

// CommitRound asks to write an absorb round's refs and the checkpoint in
// one Commit (absorb.Committer.CommitAtomic over absorb.Resume(Held): the
// checkpoint names the snapshot at SnapshotKey, records SnapshotBase, and
// Doomed, the snapshots no longer needed and not yet deleted). A round the
// backend cannot take in one Commit is not written: the result names its
// chunks instead (RoundCommitted.Split). → RoundCommitted.
type CommitRound struct {
	Held         absorb.Held
	Round        absorb.Round
	Refs         []absorb.SpanRef
	SnapshotKey  string
	SnapshotBase string
	Doomed       []string
	// Seal, when its Record has an epoch (else none), is a clean close's
	// seal (its Held unused), written in the round's Commit
	// (absorb.Committer.CommitAtomicSealing): the close's last round.
	// RoundCommitted.Sealed says whether it was.
	Seal SealEpoch
}

// MarkRoundPending asks to record Round as pending in the checkpoint, a
// split round's first step, so that a successor replays exactly it
// (absorb.Committer.MarkPending over absorb.Resume(Held)). → RoundMarked.
type MarkRoundPending struct {
	Held  absorb.Held
	Round absorb.Round
}

// CommitRefs asks to write one chunk of a split round's refs, Refs (those
// before To of the round's refs, from the previous chunk's end), in one
// Commit that checks the seal (absorb.Committer.CommitRefs over
// absorb.Resume(Held)). MayExist: some may be there already (an earlier
// attempt sent them, or the round is a predecessor's pending round), so
// the worker leaves out those that exist. → RefsCommitted.
type CommitRefs struct {
	Held     absorb.Held
	Round    absorb.Round
	Refs     []absorb.SpanRef
	To       int
	MayExist bool
}

// AdvanceRound asks to advance the checkpoint past a split round whose
// refs are all written, as CommitRound would have (absorb.Committer.Advance
// over absorb.Resume(Held)). → RoundCommitted.
type AdvanceRound struct {
	Held         absorb.Held
	Round        absorb.Round
	SnapshotKey  string
	SnapshotBase string
	Doomed       []string
}

// DropSnapshots asks to delete the tails snapshots Keys from every bucket.
// → SnapshotsDropped.
type DropSnapshots struct {
	Keys []string
}

// SealEpoch asks to record a clean seal of Record's epoch at Cut, in one
// Commit that also checks the checkpoint is still Held
// (absorb.Committer.SealEpoch over absorb.Resume(Held)). → EpochSealed.
type SealEpoch struct {
	Held    absorb.Held
	Record  chain.EpochRecord
	Version metastore.Version
	Cut     uint64
}

func (Render) isRequest()           {}
func (PutCopy) isRequest()          {}
func (ReadEpoch) isRequest()        {}
func (ReadTrimCursor) isRequest()   {}
func (MintFirst) isRequest()        {}
func (CreateCheckpoint) isRequest() {}
func (Seal) isRequest()             {}
func (SealMint) isRequest()         {}
func (Fence) isRequest()            {}
func (Mint) isRequest()             {}
func (Probe) isRequest()            {}
func (ReadCheckpoint) isRequest()   {}
func (ReadTails) isRequest()        {}
func (Walk) isRequest()             {}
func (PutSnapshot) isRequest()      {}
func (CommitRound) isRequest()      {}
func (MarkRoundPending) isRequest() {}
func (CommitRefs) isRequest()       {}
func (AdvanceRound) isRequest()     {}
func (DropSnapshots) isRequest()    {}
func (SealEpoch) isRequest()        {}

// An Event is what the shell steps into the core: time passing, or the
// result of one request.
type Event interface{ isEvent() }

// Tick: time passed (the wake-up Ready asked for, or any other moment).
type Tick struct{}

// Rendered is Render's result.
type Rendered struct {
	Upload UploadID
	Obj    []byte
	Frames []envelope.FrameInfo
	Nonce  envelope.Nonce
	Err    error // the flight cannot be rendered (a bug of the cut)
}

// CopyDone is PutCopy's result.
type CopyDone struct {
	Upload UploadID
	Result chain.CopyResult // Result.Bucket names the bucket
}

// EpochRead is ReadEpoch's result (Err wraps metastore.ErrNotFound for a
// chain never opened).
type EpochRead struct {
	Record  chain.EpochRecord
	Version metastore.Version
	Err     error
	// The checkpoint, when the request asked for it (CheckpointRead: it was
	// read; a chain with none reads as absorb.Checkpoint{Epoch: 1} at
	// metastore.NoVersion, as a seal creates it) or CheckpointErr.
	CheckpointRead    bool
	Checkpoint        absorb.Checkpoint
	CheckpointVersion metastore.Version
	CheckpointErr     error
}

// TrimCursorRead is ReadTrimCursor's result.
type TrimCursorRead struct {
	Cursor chain.TrimCursor
	Err    error
}

// FirstMinted is MintFirst's result (Err wraps chain.ErrEpochTaken if the
// chain already has an epoch).
type FirstMinted struct {
	Record  chain.EpochRecord
	Version metastore.Version
	Err     error
}

// CheckpointCreated is CreateCheckpoint's result: the checkpoint created,
// sealed by this owner (Err wraps absorb.ErrCheckpointExists if the chain
// has another one). Requests counts the metastore requests it took.
type CheckpointCreated struct {
	Held     absorb.Held
	Requests uint64
	Err      error
}

// Sealed is Seal's result: the checkpoint holding the seal (Held), and the
// checkpoint as found before sealing (the walk starts there). Err wraps
// absorb.ErrEpochMoved if the epoch record moved, absorb.ErrSealRaced if
// the checkpoint moved under the attempt.
type Sealed struct {
	Held       absorb.Held
	Checkpoint absorb.Checkpoint
	Requests   uint64
	Err        error
}

// SealMinted is SealMint's result: the record minted and its version, and
// the checkpoint held after it (sealed for the new epoch). Err wraps
// absorb.ErrEpochMoved if the epoch record moved (a rival minted),
// absorb.ErrSealRaced if only the checkpoint moved (a rival sealed it), or
// absorb.ErrDeposed if the Commit applied but a rival sealed the checkpoint
// since.
type SealMinted struct {
	Record   chain.EpochRecord
	Version  metastore.Version
	Held     absorb.Held
	Requests uint64
	Err      error
}

// Fenced is Fence's result: chain.Fence's, from the request's From.
type Fenced struct {
	Epoch  uint64
	Result chain.FenceResult
	Err    error
}

// Minted is Mint's result, and the checkpoint held after it (the seal
// moved to the new epoch). Err wraps chain.ErrMintLost (Record is then the
// winner's) or absorb.ErrDeposed (the checkpoint carries another seal:
// SealedBy names it).
type Minted struct {
	Record   chain.EpochRecord
	Version  metastore.Version
	Held     absorb.Held
	Requests uint64
	SealedBy string
	Err      error
}

// CheckpointRead is ReadCheckpoint's result.
type CheckpointRead struct {
	// Epoch is the request's: the epoch whose seal was checked.
	Epoch      uint64
	Checkpoint absorb.Checkpoint
	Err        error
}

// Probed is Probe's result.
type Probed struct {
	Epoch  uint64
	Result chain.ProbeResult
	Err    error
}

// TailsRead is ReadTails' result.
//
// Streams are the tails read, frozen: the executor decodes the snapshot
// into a view (TailsBuilder) and the core adopts it whole, so a million
// streams cost the core's loop nothing to take in. Base is the full
// snapshot a delta read builds on ("" for a full one, or a rebuild).
// For a snapshot read (not rebuilt), BaseStreams is the number of streams
// of the full snapshot the tails build on (the snapshot itself, or the
// delta's base), and Changed, for a delta, the streams the delta holds:
// what changed since that base. A successor builds its deltas on the same
// base, so its Open writes no full snapshot.
type TailsRead struct {
	Streams     TailsView
	Base        string
	Rebuilt     bool     // computed from the refs (ReadTails.Rebuild)
	Orphans     []string // snapshots written by a round never committed
	BaseStreams int
	Changed     []string
	Err         error
}

// Walked is Walk's result: the committed slots read, in order, and where
// the next walk of the range starts (Next == the request's To: done).
type Walked struct {
	Epoch uint64
	Slots []absorb.Slot
	Next  uint64
	Err   error
}

// SnapshotPut is PutSnapshot's result: the snapshot's encoded size
// (Bytes). Err wraps absorb.ErrSnapshotTaken if the key holds another
// object.
type SnapshotPut struct {
	Round absorb.Round
	Bytes int
	Err   error
}

// RoundCommitted is CommitRound's or AdvanceRound's result, and the
// checkpoint held after it (the round's, or, after a failure, as re-read).
// Split, for a CommitRound whose round the backend cannot take in one
// Commit, lists the ends of the chunks its refs split into: nothing was
// written. Err wraps absorb.ErrDeposed if the checkpoint's seal is no
// longer ours.
type RoundCommitted struct {
	Round    absorb.Round
	Held     absorb.Held
	Split    []int
	Requests uint64 // the metastore requests it took
	// RefVersions are the round's refs' versions, in order, when one
	// Commit wrote them all (nil otherwise): settlement's known refs.
	RefVersions []metastore.Version
	// Sealed is the epoch record's version when the round's Commit
	// recorded CommitRound.Seal too ("": not recorded, or not asked).
	Sealed metastore.Version
	Err    error
}

// RoundMarked is MarkRoundPending's result, and the checkpoint held after
// it (recording the round as pending, or, after a failure, as re-read).
type RoundMarked struct {
	Round    absorb.Round
	Held     absorb.Held
	Requests uint64
	Err      error
}

// RefsCommitted is CommitRefs' result: the round's refs before To are
// written (Err nil), and the checkpoint held (as re-read after a failure).
type RefsCommitted struct {
	Round    absorb.Round
	To       int
	Held     absorb.Held
	Requests uint64
	// RefVersions are the chunk's refs' versions, in order, when its one
	// Commit wrote them all at its first attempt (nil otherwise).
	RefVersions []metastore.Version
	Err         error
}

// SnapshotsDropped is DropSnapshots' result: the snapshots deleted from
// every bucket (the rest stay doomed, and are tried again).
type SnapshotsDropped struct {
	Dropped []string
}

// EpochSealed is SealEpoch's result, and the checkpoint held after it.
type EpochSealed struct {
	Version  metastore.Version
	Held     absorb.Held
	Requests uint64
	Err      error
}

func (Tick) isEvent()              {}
func (Rendered) isEvent()          {}
func (CopyDone) isEvent()          {}
func (EpochRead) isEvent()         {}
func (TrimCursorRead) isEvent()    {}
func (FirstMinted) isEvent()       {}
func (CheckpointCreated) isEvent() {}
func (Sealed) isEvent()            {}
func (SealMinted) isEvent()        {}
func (Fenced) isEvent()            {}
func (Minted) isEvent()            {}
func (Probed) isEvent()            {}
func (CheckpointRead) isEvent()    {}
func (TailsRead) isEvent()         {}
func (Walked) isEvent()            {}
func (SnapshotPut) isEvent()       {}
func (RoundCommitted) isEvent()    {}
func (RoundMarked) isEvent()       {}
func (RefsCommitted) isEvent()     {}
func (SnapshotsDropped) isEvent()  {}
func (EpochSealed) isEvent()       {}

// Log is an event the shell should log.
type Log struct {
	Level slog.Level
	Msg   string
	Attrs []slog.Attr
}

// Opened reports how the chain's opening ended: it serves (Err nil), or it
// could not be opened.
type Opened struct {
	Err error
	// What the opening found and did (for Stats and logs).
	Epoch      uint64        // the epoch this process leads
	FencedCut  uint64        // the previous epoch's cut
	Clean      bool          // the previous epoch was sealed cleanly (no fence)
	Walked     uint64        // committed slots walked and absorbed
	Took       time.Duration // from New to serving
	TakeOver   bool          // the chain had an epoch before
	PrevOwner  string        // its owner
	PrevEpoch  uint64
	PrevSealed bool // the checkpoint carried the previous owner's seal
	// Steps is the time the opening spent in each step of the succession
	// that took any (in protocol order), for the logs: where an opening's
	// time went.
	Steps []StepTook
}

// StepTook is the time an opening spent in one succession step.
type StepTook struct {
	Step string
	Took time.Duration
}

// Ready is what the core asks of the shell, accumulated since the last
// Advance: the shell executes all of it, then calls Advance(rd).
type Ready struct {
	// Requests to start, one worker each.
	Requests []Request
	// Cancels ends the workers of these uploads (their PutCopy contexts).
	Cancels []UploadID
	// Outcomes to deliver, in this order: each batch's Ack or Fate is set.
	Outcomes []*Batch
	// Released lists the streams whose durable tail moved (wake their
	// readers), after the outcomes are delivered.
	Released []*Stream
	// Slots lists the slots released since the last Ready, in release
	// order: each was durable at W copies when it released, and every
	// slot before it had released (invariant 1). The shell logs them at
	// debug level; simulators check the invariant on them.
	Slots []ReleasedSlot
	// PoolFreed is pool budget to return (bytes that left the FIFO).
	PoolFreed int64
	// Logs to emit.
	Logs []Log
	// Opened is set once, when the chain's opening ends.
	Opened *Opened
	// Dead is set once, when the chain stops serving for good (deposed, or
	// a failure it cannot recover from): readers should stop waiting for
	// releases from this process.
	Dead *Fate
	// Stopped: the core is done (closed, aborted, or opening failed); the
	// shell cancels every worker and stops.
	Stopped bool
	// WakeAt is when the core next needs a Tick (zero: no need).
	WakeAt time.Time
}

// ReleasedSlot names a released slot of the chain.
type ReleasedSlot struct{ Epoch, Slot uint64 }

// Empty reports whether rd asks for nothing but (maybe) a wake-up.
func (rd *Ready) Empty() bool {
	return len(rd.Requests) == 0 && len(rd.Cancels) == 0 && len(rd.Outcomes) == 0 && len(rd.Released) == 0 && len(rd.Slots) == 0 &&
		rd.PoolFreed == 0 && len(rd.Logs) == 0 && rd.Opened == nil && rd.Dead == nil && !rd.Stopped
}
