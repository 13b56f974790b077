package absorbval

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/flightlog/flightlog/chain/chainval"
	"github.com/flightlog/flightlog/envelope"
)

// ErrCorrupt is wrapped by decode failures of refs, checkpoints and
// snapshots.
var ErrCorrupt = errors.New("absorb: corrupt value")

// Extent is one frame run a ref points at: object-absolute coordinates in
// an object of the stream's class's bucket set.
type Extent struct {
	Key          string         `json:"k"`  // object key (a chain slot, later a settled object)
	Offset       uint64         `json:"o"`  // object-absolute offset of the stored frame
	Length       uint32         `json:"l"`  // stored length
	RawLength    uint32         `json:"rl"` // decoded length
	Codec        envelope.Codec `json:"c"`
	CRC          uint32         `json:"crc"` // CRC-32C of the stored bytes: a read verifies it
	FirstSeq     uint64         `json:"s"`
	Count        uint32         `json:"n"`
	MinTimestamp int64          `json:"t0"`
	MaxTimestamp int64          `json:"t1"`
}

// FrameInfo returns the envelope frame description of the extent.
func (e Extent) FrameInfo(stream string) envelope.FrameInfo {
	return envelope.FrameInfo{Stream: stream, FirstSeq: e.FirstSeq, Count: e.Count, MinTimestamp: e.MinTimestamp,
		MaxTimestamp: e.MaxTimestamp, Offset: e.Offset, Length: e.Length, RawLength: e.RawLength, Codec: e.Codec, CRC: e.CRC}
}

// SpanRef is the value at refs/<stream-key>/<End>: where records
// [Start, End) of one stream live. Extents tile [Start, End) in order.
type SpanRef struct {
	Stream  string   `json:"stream"`
	Class   string   `json:"class"`
	Start   uint64   `json:"start"`
	End     uint64   `json:"end"`
	MinTS   int64    `json:"min_ts"`
	MaxTS   int64    `json:"max_ts"`
	Extents []Extent `json:"extents"`
	// Writer identifies the write: "<owner>/<epoch>/<round start>", or
	// "settle/<owner>/<epoch>" for a ref settle repointed.
	Writer string `json:"writer"`
	// Star is the star whose chain the records were written through. Set
	// on settled refs, whose extents (settled objects, in the Standard
	// bucket set) no longer name a chain slot.
	Star string `json:"star,omitempty"`
}

// Settled reports whether every extent of the ref is in a settled object.
func (r *SpanRef) Settled() bool {
	for _, e := range r.Extents {
		if !chainval.IsSettledKey(e.Key) {
			return false
		}
	}
	return len(r.Extents) > 0
}

// Key is the ref's metastore key.
func (r *SpanRef) Key() string { return chainval.RefKey(r.Stream, r.End) }

// Validate checks the ref's internal consistency: extents tile [Start, End).
func (r *SpanRef) Validate() error {
	if r.Start >= r.End || len(r.Extents) == 0 {
		return fmt.Errorf("%w: ref of %q covers [%d, %d) with %d extents", ErrCorrupt, r.Stream, r.Start, r.End, len(r.Extents))
	}
	next := r.Start
	for i, e := range r.Extents {
		if e.FirstSeq != next || e.Count == 0 || e.Length == 0 || e.Key == "" {
			return fmt.Errorf("%w: ref of %q [%d, %d): extent %d starts at %d (want %d), %d records, %d bytes", ErrCorrupt, r.Stream, r.Start, r.End, i, e.FirstSeq, next, e.Count, e.Length)
		}
		next += uint64(e.Count)
	}
	if next != r.End {
		return fmt.Errorf("%w: ref of %q: extents end at %d, ref at %d", ErrCorrupt, r.Stream, next, r.End)
	}
	return nil
}

// DecodeRef parses and validates a ref value.
func DecodeRef(b []byte) (SpanRef, error) {
	var r SpanRef
	if err := json.Unmarshal(b, &r); err != nil {
		return SpanRef{}, fmt.Errorf("%w: ref: %v", ErrCorrupt, err)
	}
	return r, r.Validate()
}

// Round is a pending round: slots [From, To) of Epoch.
type Round struct {
	Epoch uint64 `json:"epoch"`
	From  uint64 `json:"from"`
	To    uint64 `json:"to"`
}

// Checkpoint is the value at stars/<star>/<class>/checkpoint.
type Checkpoint struct {
	// Epoch and Next: every slot before (Epoch, Next) is absorbed.
	Epoch uint64 `json:"epoch"`
	Next  uint64 `json:"next"`
	// Owner and OwnerEpoch seal the checkpoint: only that owner's absorb
	// may advance it. A successor takes the seal first.
	Owner      string `json:"owner"`
	OwnerEpoch uint64 `json:"owner_epoch"`
	// Pending is a round whose refs may be partly written: a successor
	// replays exactly it before anything else.
	Pending *Round `json:"pending,omitempty"`
	// Tails is the object key of the snapshot of stream tails as of
	// (Epoch, Next), in the class's bucket set; "" if no stream has a tail.
	Tails string `json:"tails,omitempty"`
	// TailsBase is the key of the full snapshot Tails is a delta over (""
	// if Tails is a full snapshot, or the checkpoint was written by a
	// version that did not record it): a successor that cannot read Tails,
	// and so never learns its base, still deletes that base once it has
	// written a full snapshot of its own.
	TailsBase string `json:"tails_base,omitempty"`
	// Doomed lists tails snapshots no longer needed (superseded, or
	// written by a round that never committed) and not yet known deleted
	// from every bucket: the owner deletes them a while later, and a
	// successor inherits the list, so none is left behind by a handoff.
	// At most MaxDoomedSnapshots.
	Doomed []string `json:"doomed,omitempty"`
	// Counter bumps on every write, so a writer recognises its own.
	Counter uint64 `json:"counter"`
}

// DecodeCheckpoint parses a checkpoint value.
func DecodeCheckpoint(b []byte) (Checkpoint, error) {
	var c Checkpoint
	if err := json.Unmarshal(b, &c); err != nil {
		return Checkpoint{}, fmt.Errorf("%w: checkpoint: %v", ErrCorrupt, err)
	}
	if c.Pending != nil && (c.Pending.From > c.Pending.To) {
		return Checkpoint{}, fmt.Errorf("%w: checkpoint: pending round [%d, %d)", ErrCorrupt, c.Pending.From, c.Pending.To)
	}
	return c, nil
}

// StreamTail is one stream's tail in a tails snapshot.
type StreamTail struct {
	Next      uint64 `json:"next"`
	Timestamp int64  `json:"ts"`
	// Producers is the stream's producer window as of the tail: the last
	// batches of identified producers that are committed below Next, so a
	// successor still recognises their retries (docs/design.md,
	// "Producers: exactly once across retries"). The leader bounds it.
	Producers []ProducerTail `json:"producers,omitempty"`
	// FencingToken is the stream's fencing token as of the tail: the one
	// the last fence batch below Next set ("" for none; docs/design.md,
	// "Fencing tokens").
	FencingToken string `json:"fence,omitempty"`
}

// ProducerTail is one committed producer batch a tail remembers: producer
// ID's batch Seq holds records [Start, End); At is when the leader learned
// it was committed (ms since the Unix epoch), for the window's age bound.
type ProducerTail struct {
	ID    string `json:"id"`
	Seq   uint64 `json:"seq"`
	Start uint64 `json:"start"`
	End   uint64 `json:"end"`
	At    int64  `json:"at"`
}

// Tails is the content of a tails snapshot as of (Epoch, Next). A full
// snapshot (Base "") holds every stream of the chain that has records, with
// its next sequence number and last timestamp, keyed by stream ID. A delta
// (Base set) holds only the streams changed since the full snapshot at
// Base, which it is read over (absorb.ReadTails): so a round writes the tails it
// changed, not every stream's, and a reader needs at most two objects.
type Tails struct {
	Epoch   uint64                `json:"epoch"`
	Next    uint64                `json:"next"`
	Streams map[string]StreamTail `json:"streams"`
	Base    string                `json:"base,omitempty"`
}

// TailsKey is the object key of the tails snapshot as of (epoch, next),
// written by the leader of epoch writer. The writer is part of the key
// because a snapshot's content is the writer's, not only its position's: a
// delta builds on its writer's own full snapshot. A successor replaying its
// predecessor's pending round (the same position) writes its own full
// snapshot beside the predecessor's delta, never adopts that delta as its
// base (absorb.PutSnapshot takes an existing object of the same content as its
// own). It is TailsPlanKey's plan 0. This is the layout of older
// versions, still read (a checkpoint names its snapshot's key in full);
// rounds now write under TailsRoundKey.
func TailsKey(star string, c chainval.Class, epoch, next, writer uint64) string {
	return TailsPlanKey(star, c, epoch, next, writer, 0)
}

// TailsPlanKey is TailsKey for a writer's plan-th plan of rounds: a writer
// whose round the metastore refused, and which plans the range again in
// smaller rounds, takes a new plan number, so a re-planned round ending
// where the refused one did gets a key of its own and never takes the
// refused round's object (a delta where it wrote a full snapshot, or over
// another base) for its own. Plan 0 is TailsKey's key; a later plan's adds
// ".r<plan>" after the writer (the position, before the first dot, reads
// the same).
func TailsPlanKey(star string, c chainval.Class, epoch, next, writer, plan uint64) string {
	if plan == 0 {
		return fmt.Sprintf("snapshots/%s/%s/%020d/%020d.%d", star, c, epoch, next, writer)
	}
	return fmt.Sprintf("snapshots/%s/%s/%020d/%020d.%d.r%d", star, c, epoch, next, writer, plan)
}

// TailsRoundKey is the object key of the tails snapshot a round writes,
// keyed by what a successor knows, not by where the round ends: the
// checkpoint the round advances from, (fromEpoch, fromNext), the epoch of
// the writer that planned it, and the plan-th plan of a round from that
// checkpoint (0 first; a round the metastore refused is planned again, in
// fewer slots, under the next plan, so its replacement never takes the
// refused round's object for its own). A writer that crashes, or is
// sealed, between the snapshot's PUT and its round's Commit leaves an
// object no checkpoint names: its successor, knowing the checkpoint and
// the writer's epoch, finds it by point lookups (plan 0, 1, ... while
// there is one) and deletes it; no listing is needed.
//
// The key does not name the snapshot's own position (the round's end,
// which only the Commit records): the snapshot holds it (Tails.Epoch,
// Tails.Next). Keys of the older layout (TailsKey, TailsPlanKey) are
// still read: a checkpoint names its snapshot's key, and a delta its
// base's, in full.
func TailsRoundKey(star string, c chainval.Class, fromEpoch, fromNext, writer, plan uint64) string {
	return fmt.Sprintf("snapshots/%s/%s/from/%020d/%020d.%d.p%d", star, c, fromEpoch, fromNext, writer, plan)
}

// MaxDoomedSnapshots bounds Checkpoint.Doomed: the checkpoint is written
// by every round, so what it carries must stay small whatever happens to
// the deletes.
const MaxDoomedSnapshots = 64
