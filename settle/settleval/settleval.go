package settleval

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/flightlog/flightlog/absorb/absorbval"
	"github.com/flightlog/flightlog/chain/chainval"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/metastore/metaval"
)

// Defaults.
const (
	// DefaultTargetBytes is the raw size a settled object grows to before
	// settle starts the next one for the stream.
	DefaultTargetBytes = 8 << 20
	// DefaultFrameBytes is the raw size of one frame of a settled object:
	// what one ranged GET of a read fetches and decodes.
	DefaultFrameBytes = 256 << 10
	// DefaultCodec compresses settled frames. S2 decodes in about 75% of
	// zstd's CPU time and scans from settled objects outrun scans from
	// transit; zstd stores about 26% fewer bytes (docs/benchmarks.md:
	// BenchmarkSettledFrames). Objects rendered with another codec or frame
	// size stay readable: every frame's ref names its own.
	DefaultCodec = envelope.CodecS2
	// DefaultMaxSlots bounds the slots one pass reads. A pass's cost is
	// mostly per stream (an object, its marks and repoint), not per slot:
	// at 10,000 active streams 64 slots were ~1 s of ingest for a pass of
	// ~10 s, so the cursor fell behind; the memory a pass holds is bounded
	// by MaxPassBytes and the star's budget, not by this.
	DefaultMaxSlots = 1024
	// (MaxPassBytes bounds the bytes those slots may take.)
)

// Pass is what one pass is asked to do.
type Pass struct {
	Trim        chainval.TrimCursor
	TrimVersion metaval.Version
	// Upto is where the pass stops: at most the checkpoint, and before
	// any slot whose copies are still uploading or missing.
	Upto chainval.Position
	// Checkpoint is the chain's checkpoint: refs may straddle Upto, and
	// are settled whole when every extent lies before the checkpoint.
	Checkpoint chainval.Position
	// Cuts are the cuts of every epoch from Trim.Deleted's to Upto's
	// (exclusive) the leader knows; the cursor's own are used too.
	Cuts     []chainval.Cut
	MaxSlots int
	// Known are the refs the leader's absorb rounds wrote from KnownFrom
	// on, in chain order, with their versions (KnownOK: from KnownFrom on
	// it knows every one): a pass whose cursor is at KnownFrom or past it
	// settles from them instead of scanning each stream's refs. Prev are
	// streams' last settled refs as passes wrote or read them (a merge's
	// candidates, walked back without a read). Both are hints: a ref that moved since fails its
	// compare-and-swap, and the stream is settled again from a scan.
	Known     []KnownRef
	KnownFrom chainval.Position
	KnownOK   bool
	Prev      []KnownRef
	// DoomedKnown: the leader knows the first doomed or pending marker is
	// due at DoomedDue (zero: none waits), from a recent pass's scan of
	// the markers and the passes since (Result.DoomedDue): a pass before
	// then does not scan them.
	DoomedKnown bool
	DoomedDue   time.Time
	// Idle are the last settled refs of streams the leader found idle
	// (nothing settled for a while, small objects at their tail): the pass
	// merges each one's small settled objects at its tail into one (at
	// most MaxIdlePerPass of them a pass; a hint like Prev).
	Idle []KnownRef
}

// SmallObject reports whether a settled object of raw record bytes is
// small, of a target size of target raw bytes (0: DefaultTargetBytes): an
// idle stream's small objects at its tail are merged into one.
func SmallObject(raw, target int) bool {
	if target <= 0 {
		target = DefaultTargetBytes
	}
	return raw < target/4
}

// MaxIdlePerPass bounds the idle streams one pass merges the tails of.
const MaxIdlePerPass = 16

// KnownRef is a ref as its writer left it: its key, version and value.
type KnownRef struct {
	Key     string
	Version metaval.Version
	Ref     absorbval.SpanRef
}

// Result is what a pass did.
type Result struct {
	Trim        chainval.TrimCursor // the cursor as the pass left it
	TrimVersion metaval.Version
	Slots       int   // slots read
	Objects     int   // settled objects written (or adopted)
	RawBytes    int64 // raw record bytes settled
	StoredBytes int64 // bytes of the settled objects
	Repointed   int   // refs replaced by settled refs
	Merged      int   // small settled objects absorbed into larger ones
	// DeletedObjects is settled objects deleted once merged away (or
	// left unreferenced by a pass that lost its repoint).
	DeletedObjects int
	// DoomedWaiting is the doomed objects left waiting for their grace,
	// and DoomedDue when the first of them is due: a pass should run then
	// even if nothing new is absorbed (zero: none waits).
	DoomedWaiting int
	DoomedDue     time.Time
	// MarkersScanned: the pass scanned the markers (DoomedWaiting is
	// theirs); else it relied on Pass.DoomedDue.
	MarkersScanned bool
	Reclaimed      int // refs of deleted incarnations or trimmed records deleted
	// Retries is the requests the pass asked again after a transient
	// failure (on its own backoff, inside the pass).
	Retries int
	// MetaRequests is the metastore requests the pass made (the leader
	// paces passes by them), and RefScans those that scanned a stream's
	// refs (a stream the leader's known refs did not cover).
	MetaRequests, RefScans int
	// Settled are the settled refs the pass wrote, as it wrote them, and
	// Seen the settled refs it read to decide a merge (the leader's Prev
	// for the next passes).
	Settled []KnownRef
	Seen    []KnownRef
	// IdleMerges is the idle streams' tails merged into one object, and
	// IdleLooked the streams of Pass.Idle whose tail the pass looked at
	// (merged, or found nothing to merge); the others failed.
	IdleMerges int
	IdleLooked []string
	Deleted    int   // slot deletes that succeeded (per bucket)
	FreedBytes int64 // transit bytes of the slots deleted (as read by this pass)
	// DeleteErr is why the deletes behind the cursor are not all done (a
	// bucket down): they stay due for the next pass; the pass itself
	// succeeded.
	DeleteErr error
	// Time is how long the pass spent, by the phase it was at
	// (settlecore.Pass.Phase) while its executor made a request, and under
	// "core" in the core's own steps (rendering, mostly), by the
	// executor's clock; nil if the executor did not measure.
	Time map[string]time.Duration
}

// ErrCutUnknown: the pass needed the cut of an epoch that neither the
// cursor nor the leader knows.
var ErrCutUnknown = errors.New("settle: the cut of an epoch is unknown")

// ErrDeposed is wrapped by a pass's error when the chain's checkpoint is no
// longer sealed by the pass's leader (settle.Config.Owner, settle.Config.Epoch): a
// successor sealed it to take the chain over, and no metastore mutation of
// the pass applies from then on.
var ErrDeposed = errors.New("settle: deposed: a successor sealed the checkpoint")

// GuardRetries bounds how often a Commit of a pass is retried because
// this leader's own absorb moved the checkpoint under it.
const GuardRetries = 8

// Slot is one slot object a pass read, with its frames.
type Slot struct {
	Pos    chainval.Position
	Object []byte
	Frames []envelope.FrameInfo
}

// SlotsPass is what settling the slots read is asked: settle the refs with records in
// Slots, the slots a pass read in chain order, which end at Upto.
type SlotsPass struct {
	Upto, Checkpoint chainval.Position
	// Cuts are the cuts of every epoch the pass knows (the cursor's, the
	// leader's, and those it re-derived).
	Cuts  []chainval.Cut
	Slots []Slot
	// Streams, if not nil, are the only streams to settle (a retry of the
	// streams an earlier try failed); nil: every stream in Slots.
	Streams []string
}

// SlotsResult is what settling the slots read did.
type SlotsResult struct {
	// Objects, RawBytes, StoredBytes, Repointed, Merged and Reclaimed are
	// as in Result.
	Objects, Repointed, Merged, Reclaimed int
	RawBytes, StoredBytes                 int64
	// DoomedNew: a committed merge marked objects doomed.
	DoomedNew bool
	// Failed is the streams whose settling failed (sorted), to try again:
	// every step is idempotent, so a retry of only these finishes the job.
	Failed []string
}

// Segments returns the committed slot ranges [from, to) of each epoch
// between a and b, in chain order, by the cuts given (epoch → cut). It
// fails, with the segments before it, on the first epoch before b's whose
// cut is unknown.
func Segments(cuts map[uint64]uint64, a, b chainval.Position) ([][3]uint64, error) {
	var out [][3]uint64
	for e := a.Epoch; e <= b.Epoch; e++ {
		from := uint64(0)
		if e == a.Epoch {
			from = a.Next
		}
		to := b.Next
		if e < b.Epoch {
			cut, ok := cuts[e]
			if !ok {
				return out, fmt.Errorf("%w: epoch %d", ErrCutUnknown, e)
			}
			to = cut
		}
		if from < to {
			out = append(out, [3]uint64{e, from, to})
		}
	}
	return out, nil
}

// MaxPassBytes bounds the slot objects one pass holds in memory.
const MaxPassBytes = 64 << 20

// MarkerPrefix is where a chain's settle marks settled objects to delete
// (metastore keys: an object key may be longer than a metastore key, so
// the marker is keyed by its hash and holds it).
func MarkerPrefix(star string, c chainval.Class) string {
	return "stars/" + star + "/" + c.String() + "/doomed/"
}

// MarkerKey is the key of the marker of the settled object at objKey
// (one object's marker, as versions before chunk markers wrote them for
// pending objects, and still write for the reclaim's own state).
func MarkerKey(star string, c chainval.Class, objKey string) string {
	return fmt.Sprintf("%s%016x", MarkerPrefix(star, c), xxhash.Sum64String(objKey))
}

// ChunkMarkerKey is the key of a chunk marker naming the settled objects
// at objKeys (in that order): "c" and a hash of them all, so it never
// meets a one-object marker, and a pass that writes the same chunk again
// (a retry) writes the same key with the same names.
func ChunkMarkerKey(star string, c chainval.Class, objKeys []string) string {
	d := xxhash.New()
	for _, k := range objKeys {
		_, _ = d.WriteString(k)
		_, _ = d.WriteString("\n")
	}
	return fmt.Sprintf("%sc%016x", MarkerPrefix(star, c), d.Sum64())
}

// Marker is a doomed marker's value: the settled object at Key (or, a
// chunk marker, each object of Objects) is to be deleted once no reader
// may still hold a ref to it.
type Marker struct {
	Key string `json:"key,omitempty"`
	At  int64  `json:"at_ms"` // when the merge that doomed it committed
	// Ref is set on a pending marker: one written before the object, whose
	// repoint onto it (the ref at Ref) deletes the marker in its Commit.
	Ref string `json:"ref,omitempty"`
	// Deleting: a pass decided to delete the object and may have begun;
	// whichever pass finds the marker finishes, whatever the grace.
	Deleting bool `json:"deleting,omitempty"`
	// Objects makes it a chunk marker (Key and Ref empty): one marker for
	// the objects a pass writes together (each pending, with the ref that
	// will point at it) or for those one Commit of repoints merged away
	// (each doomed, no Ref).
	Objects []Named `json:"objects,omitempty"`
}

// Named is one object a chunk marker names: pending if Ref is set (the
// ref that will point at it), doomed if not.
type Named struct {
	Key string `json:"key"`
	Ref string `json:"ref,omitempty"`
}

// Names is every object the marker names, with its ref if pending.
func (m Marker) Names() []Named {
	if len(m.Objects) > 0 {
		return m.Objects
	}
	return []Named{{Key: m.Key, Ref: m.Ref}}
}

// Encode is the marker's stored form.
func (m Marker) Encode() []byte {
	b, _ := json.Marshal(m) // a struct of strings, ints and bools
	return b
}

// NamedBytes is about what one more object adds to a chunk marker's
// stored form (its key, its ref and the JSON around them).
func NamedBytes(n Named) int { return len(n.Key) + len(n.Ref) + 24 }

// DecodeMarker parses a marker's stored form; it fails on one that does not
// name settled objects only (and at least one).
func DecodeMarker(b []byte) (Marker, error) {
	var m Marker
	if err := json.Unmarshal(b, &m); err != nil || (len(m.Objects) > 0) == (m.Key != "") {
		return Marker{}, fmt.Errorf("settle: doomed marker %q is not a settled object's", b)
	}
	for _, n := range m.Names() {
		if !chainval.IsSettledKey(n.Key) {
			return Marker{}, fmt.Errorf("settle: doomed marker %q is not a settled object's", b)
		}
	}
	return m, nil
}

// Describe is a one-line summary of a result, for logs.
func (res Result) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "slots=%d objects=%d raw=%d stored=%d repointed=%d reclaimed=%d deleted=%d", res.Slots, res.Objects, res.RawBytes, res.StoredBytes, res.Repointed, res.Reclaimed, res.Deleted)
	return b.String()
}
