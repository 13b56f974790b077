package groups

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/loglet/internal/catalogcore"
	"github.com/flightlog/flightlog/metastore"
)

// Errors of consumer offsets, matched with errors.Is.
var (
	// ErrConflict: the group's offset changed since it was read
	// (another committer won the race). The error is an
	// *ConflictError holding the offset as it is now.
	ErrConflict = errors.New("groups: consumer offset changed since it was read")
	// ErrBackwards: a commit below the offset it replaces. Nothing
	// was written.
	ErrBackwards = errors.New("groups: consumer offset commit goes backwards")
	// ErrInvalidName: a group name that is not 1..MaxNameLen bytes of
	// [A-Za-z0-9._-] not starting with '.', or that with its stream's name
	// makes an offset key over the metastore's key limit.
	ErrInvalidName = errors.New("groups: invalid consumer group")
)

// MaxNameLen bounds consumer group names. A group of up to
// SafeNameLen bytes fits with every stream name CreateStream accepts;
// a longer one fits streams with shorter keys, and is refused with
// ErrInvalidName (at Get, Commit or Open) where it does not.
const (
	MaxNameLen  = 128
	SafeNameLen = 17
)

const offsetsPrefix = "offsets/"

// noIncarnation is the <incarnation> segment of a stream that has none.
const noIncarnation = "-"

// ValidateName accepts 1..MaxNameLen bytes of [A-Za-z0-9._-], not
// starting with '.': group names appear raw in metastore keys.
func ValidateName(group string) error {
	if group == "" || len(group) > MaxNameLen || group[0] == '.' {
		return fmt.Errorf("%w: %q: want 1-%d of [A-Za-z0-9._-], not starting with '.'", ErrInvalidName, group, MaxNameLen)
	}
	for i := 0; i < len(group); i++ {
		c := group[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %q: byte %q at %d: want [A-Za-z0-9._-]", ErrInvalidName, group, c, i)
		}
	}
	return nil
}

// OffsetKey is the metastore key of group's offset in the given
// incarnation of stream ("" for a stream that has none).
func Key(group, stream, incarnation string) string {
	if incarnation == "" {
		incarnation = noIncarnation
	}
	return offsetsPrefix + group + "/" + chain.StreamKey(stream) + "/" + incarnation
}

// ValidateKey checks group's name and stream's, and that the offset
// key of any incarnation of stream fits metastore.MaxKeyLen.
func ValidateKey(group, stream string) error {
	if err := ValidateName(group); err != nil {
		return err
	}
	if err := chain.ValidateStreamName(stream); err != nil {
		return fmt.Errorf("groups: %w", err)
	}
	longest := Key(group, stream, "i"+fmt.Sprintf("%0*d", chain.IncarnationLen-1, 0))
	if n := len(longest); n > metastore.MaxKeyLen {
		return fmt.Errorf("%w: group %q (%d bytes) and stream %q make an offset key of %d bytes, over the metastore's %d (groups of up to %d bytes fit every stream)",
			ErrInvalidName, group, len(group), stream, n, metastore.MaxKeyLen, SafeNameLen)
	}
	return nil
}

// Offset is a consumer group's committed position in one incarnation of a
// stream: every record below Next has been processed, and the group
// resumes at Next. Get returns it; Commit and Delete take it back as the
// version they expect.
type Offset struct {
	Group, Stream string
	// Incarnation is the stream's incarnation the offset belongs to.
	Incarnation string
	// Next is the first sequence number the group has not processed (0
	// when it has committed nothing).
	Next uint64
	// Version is the offset's metastore version (metastore.NoVersion
	// when the group has committed nothing on this incarnation).
	Version metastore.Version

	// record is the version of the stream record, of this incarnation,
	// as last read: a commit expects it, and re-reads the record (a trim
	// moved it) when it no longer holds.
	record metastore.Version
}

// Committed reports whether the group has committed an offset (false: it
// starts wherever its reader chooses, see Options.Start).
func (o Offset) Committed() bool { return o.Version != metastore.NoVersion }

// offsetValue is the value at an offset key. Nonce and Owner make the
// writer recognise its own write after an ambiguous failure.
type offsetValue struct {
	Next        uint64 `json:"next"`
	Owner       string `json:"owner,omitempty"`
	Nonce       string `json:"nonce"`
	CommittedMs int64  `json:"committed_ms"`
}

// ConflictError is a commit that lost a race: the group's offset is
// no longer the one the commit expected. Current is the offset as it was
// re-read (commit again from it, or give way). It matches
// ErrConflict.
type ConflictError struct {
	Current Offset
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("groups: group %q on stream %q: offset changed since it was read (now %d)", e.Current.Group, e.Current.Stream, e.Current.Next)
}

// Is makes it match ErrConflict.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// Offsets reads and writes consumer offsets in a metastore. Any process
// may use it, leader or not. Safe for concurrent use.
//
// Costs: Get is two metastore reads (the stream record, the offset);
// Commit and Delete are one metastore Commit each (plus re-reads after a
// failure). Consumer commits are metastore writes at the rate consumers
// commit: commit per batch processed (an offset covers every record below
// it), not per record, to keep that rate low.
type Offsets struct {
	meta  metastore.Store
	owner string
}

// NewOffsets returns the offsets kept in meta; owner names the writer in
// the values it writes (may be empty).
func NewOffsets(meta metastore.Store, owner string) *Offsets {
	return &Offsets{meta: meta, owner: owner}
}

// OffsetsOf returns the consumer offsets kept in log's metastore, written
// under log's Owner if it has one (a *loglet.Star does; a *loglet.Reader
// writes none).
func OffsetsOf(log Log) *Offsets {
	owner := ""
	if o, ok := log.(interface{ Owner() string }); ok {
		owner = o.Owner()
	}
	return NewOffsets(log.Metastore(), owner)
}

// streamRecord is what groups reads of a stream's record (the value at
// chain.StreamRecordKey, written by loglet): its incarnation and trim point.
type streamRecord struct {
	Incarnation string `json:"incarnation,omitempty"`
	TrimSeq     uint64 `json:"trim_seq,omitempty"`
}

// decodeStreamRecord parses the parts of a stream record groups reads.
func decodeStreamRecord(it metastore.Item) (streamRecord, error) {
	var rec streamRecord
	if err := json.Unmarshal(it.Value, &rec); err != nil {
		return rec, fmt.Errorf("groups: stream record %s is corrupt: %v", it.Key, err)
	}
	if !chain.ValidIncarnation(rec.Incarnation) {
		return rec, fmt.Errorf("groups: stream record %s is corrupt: incarnation %q", it.Key, rec.Incarnation)
	}
	return rec, nil
}

// record reads stream's record and its version.
func (o *Offsets) record(ctx context.Context, stream string) (streamRecord, metastore.Version, error) {
	it, err := o.meta.Get(ctx, chain.StreamRecordKey(stream))
	if errors.Is(err, metastore.ErrNotFound) {
		return streamRecord{}, "", fmt.Errorf("%w: %q", loglet.ErrStreamNotFound, stream)
	}
	if err != nil {
		return streamRecord{}, "", fmt.Errorf("groups: look up stream %q: %w", stream, err)
	}
	rec, err := decodeStreamRecord(it)
	if err != nil {
		return streamRecord{}, "", &loglet.CorruptError{Object: it.Key, Err: err}
	}
	return rec, it.Version, nil
}

// readCoreRecord reads name's stream record for the catalogue's core.
func readCoreRecord(ctx context.Context, meta metastore.Store, name string) catalogcore.RecordRead {
	it, err := meta.Get(ctx, chain.StreamRecordKey(name))
	if errors.Is(err, metastore.ErrNotFound) {
		return catalogcore.RecordRead{NotFound: true, Err: err}
	}
	if err != nil {
		return catalogcore.RecordRead{Err: err}
	}
	rec, err := decodeStreamRecord(it)
	if err != nil {
		return catalogcore.RecordRead{Corrupt: true, Err: err, Record: catalogcore.Record{Name: name, Version: catalogcore.Version(it.Version)}}
	}
	return catalogcore.RecordRead{Record: catalogcore.Record{Name: name, Incarnation: rec.Incarnation, TrimSeq: rec.TrimSeq, Version: catalogcore.Version(it.Version)}}
}

// Get returns group's offset in the current incarnation of stream:
// Next 0 and Version metastore.NoVersion if the group has committed
// nothing there. A stream that does not exist is loglet.ErrStreamNotFound.
func (o *Offsets) Get(ctx context.Context, group, stream string) (Offset, error) {
	if ctx == nil {
		return Offset{}, loglet.ErrNilContext
	}
	if err := ValidateKey(group, stream); err != nil {
		return Offset{}, err
	}
	rec, rv, err := o.record(ctx, stream)
	if err != nil {
		return Offset{}, err
	}
	return o.read(ctx, group, stream, rec.Incarnation, rv)
}

// read reads the offset of one incarnation, the stream record being at
// version rv.
func (o *Offsets) read(ctx context.Context, group, stream, inc string, rv metastore.Version) (Offset, error) {
	off := Offset{Group: group, Stream: stream, Incarnation: inc, record: rv}
	it, err := o.meta.Get(ctx, Key(group, stream, inc))
	if errors.Is(err, metastore.ErrNotFound) {
		return off, nil
	}
	if err != nil {
		return Offset{}, fmt.Errorf("groups: read offset of group %q on stream %q: %w", group, stream, err)
	}
	var v offsetValue
	if err := json.Unmarshal(it.Value, &v); err != nil || v.Nonce == "" {
		return Offset{}, &loglet.CorruptError{Object: it.Key, Err: fmt.Errorf("offset value does not parse: %v", err)}
	}
	off.Next, off.Version = v.Next, it.Version
	return off, nil
}

// Commit records that the group has processed every record below next,
// replacing prev (as Get or an earlier Commit returned it), and returns the
// new offset. It is a compare-and-swap: it fails, writing nothing, with
// ErrBackwards if next < prev.Next, with an *ConflictError
// (ErrConflict) if the offset is no longer prev (another committer
// won; the error holds the offset now), and with loglet.ErrStreamNotFound if the
// stream was deleted (and maybe created again) since prev was read. A Trim
// or retention pass since prev was read is none of these: the stream is
// the same incarnation, and the commit applies. Any other error is the
// metastore's and may be ambiguous; Commit resolves it by re-reading where
// it can (a write of its own that applied is success). Committing prev.Next
// again is allowed (it refreshes the version).
func (o *Offsets) Commit(ctx context.Context, prev Offset, next uint64) (Offset, error) {
	return o.commitFrom(ctx, prev, next, false)
}

// commitFrom is Commit, or Reset when back is set: the move may go
// backwards.
func (o *Offsets) commitFrom(ctx context.Context, prev Offset, next uint64, back bool) (Offset, error) {
	if ctx == nil {
		return Offset{}, loglet.ErrNilContext
	}
	if err := ValidateKey(prev.Group, prev.Stream); err != nil {
		return Offset{}, err
	}
	if prev.record == "" {
		return Offset{}, fmt.Errorf("groups: commit offset of group %q on stream %q: the offset was not read by Offsets.Get", prev.Group, prev.Stream)
	}
	what := fmt.Sprintf("group %q on stream %q", prev.Group, prev.Stream)
	from := prev.core()
	if back {
		// The core refuses only a move below from.Next; the
		// compare-and-swap is on the versions, which stay.
		from.Next = 0
	}
	op := catalogcore.NewCommitOffset(from, next)
	first := true
	for req := op.Next(); req != nil; req = op.Next() {
		var res catalogcore.Result
		switch r := req.(type) {
		case catalogcore.CommitOffsetReq:
			if !first {
				// The record moved under the same incarnation (a trim):
				// the core commits again, unless the host gave up.
				if cerr := ctx.Err(); cerr != nil {
					return Offset{}, cerr
				}
			}
			first = false
			res = o.commit(ctx, r)
		case catalogcore.ReadOffset:
			res = o.readCore(ctx, r.Offset)
		case catalogcore.ReadRecord:
			res = readCoreRecord(ctx, o.meta, r.Name)
			if rr := res.(catalogcore.RecordRead); rr.Corrupt {
				rr.Err = &loglet.CorruptError{Object: chain.StreamRecordKey(r.Name), Err: rr.Err}
				res = rr
			}
		default:
			return Offset{}, fmt.Errorf("groups: commit offset of %s: cannot execute %T", what, req)
		}
		if err := op.Step(res); err != nil {
			return Offset{}, fmt.Errorf("groups: commit offset of %s: %w", what, err)
		}
	}
	out := op.Outcome()
	switch out.Status {
	case catalogcore.Committed:
		return offsetOf(out.Offset), nil
	case catalogcore.Backwards:
		return Offset{}, fmt.Errorf("%w: group %q on stream %q: %d is below the committed %d", ErrBackwards, prev.Group, prev.Stream, next, prev.Next)
	case catalogcore.Conflict:
		return Offset{}, &ConflictError{Current: offsetOf(out.Offset)}
	case catalogcore.NotFound:
		return Offset{}, fmt.Errorf("%w: %q was deleted (and maybe created again) since the offset of group %q was read", loglet.ErrStreamNotFound, prev.Stream, prev.Group)
	}
	switch {
	case out.Exhausted:
		return Offset{}, fmt.Errorf("groups: commit offset of %s: the stream record changed under %d attempts: %w", what, out.Attempts, out.Err)
	case out.Cause != nil:
		return Offset{}, fmt.Errorf("groups: commit offset of %s: %w (and the re-read to learn whether it applied failed: %v)", what, out.Err, out.Cause)
	}
	return Offset{}, fmt.Errorf("groups: commit offset of %s: %w", what, out.Err)
}

// core is o as the catalogue's core sees it.
func (o Offset) core() catalogcore.Offset {
	return catalogcore.Offset{Group: o.Group, Stream: o.Stream, Incarnation: o.Incarnation, Next: o.Next,
		Version: catalogcore.Version(o.Version), RecordVersion: catalogcore.Version(o.record)}
}

// offsetOf is the core's offset as an Offset.
func offsetOf(c catalogcore.Offset) Offset {
	return Offset{Group: c.Group, Stream: c.Stream, Incarnation: c.Incarnation, Next: c.Next,
		Version: metastore.Version(c.Version), record: metastore.Version(c.RecordVersion)}
}

// commit executes one offset commit the core asks: the new value, under a
// fresh nonce, expecting the offset's version, with a check that the stream
// record is still at the version read with the offset's incarnation (the
// record's version stands for the incarnation: incarnations are never
// reused, so while it holds the stream is the life the offset belongs to).
func (o *Offsets) commit(ctx context.Context, r catalogcore.CommitOffsetReq) catalogcore.OffsetCommitted {
	val := offsetValue{Next: r.Next, Owner: o.owner, Nonce: envelope.NewNonce().String(), CommittedMs: time.Now().UnixMilli()}
	body, err := json.Marshal(val)
	if err != nil {
		return catalogcore.OffsetCommitted{Err: fmt.Errorf("groups: encode offset: %w", err)}
	}
	vs, err := o.meta.Commit(ctx, []metastore.Op{
		{Kind: metastore.OpCheck, Key: chain.StreamRecordKey(r.Offset.Stream), Expect: metastore.Version(r.Offset.RecordVersion)},
		{Kind: metastore.OpPut, Key: Key(r.Offset.Group, r.Offset.Stream, r.Offset.Incarnation), Value: body, Expect: metastore.Version(r.Offset.Version)},
	})
	if err != nil {
		return catalogcore.OffsetCommitted{Nonce: val.Nonce, Err: err, Conflict: errors.Is(err, metastore.ErrConflict)}
	}
	return catalogcore.OffsetCommitted{Nonce: val.Nonce, Version: catalogcore.Version(vs[1])}
}

// readCore executes one offset read the core asks.
func (o *Offsets) readCore(ctx context.Context, off catalogcore.Offset) catalogcore.OffsetRead {
	key := Key(off.Group, off.Stream, off.Incarnation)
	it, err := o.meta.Get(ctx, key)
	if errors.Is(err, metastore.ErrNotFound) {
		return catalogcore.OffsetRead{}
	}
	if err != nil {
		return catalogcore.OffsetRead{Err: err}
	}
	var v offsetValue
	if err := json.Unmarshal(it.Value, &v); err != nil || v.Nonce == "" {
		return catalogcore.OffsetRead{Found: true, Corrupt: true, Version: catalogcore.Version(it.Version),
			Err: &loglet.CorruptError{Object: it.Key, Err: fmt.Errorf("offset value does not parse: %v", err)}}
	}
	return catalogcore.OffsetRead{Found: true, Next: v.Next, Nonce: v.Nonce, Version: catalogcore.Version(it.Version)}
}

// Delete removes the group's offset prev (as Get or Commit returned it),
// so the group starts afresh on the stream. It is a compare-and-swap like
// Commit: an offset that changed since is an *ConflictError. An
// offset never committed (Version metastore.NoVersion) is nothing to delete
// unless one was committed meanwhile. It works on an incarnation the stream
// no longer has, to clean up after a DeleteStream.
func (o *Offsets) Delete(ctx context.Context, prev Offset) error {
	if ctx == nil {
		return loglet.ErrNilContext
	}
	if err := ValidateKey(prev.Group, prev.Stream); err != nil {
		return err
	}
	key := Key(prev.Group, prev.Stream, prev.Incarnation)
	op := metastore.Op{Kind: metastore.OpDelete, Key: key, Expect: prev.Version}
	if prev.Version == metastore.NoVersion {
		op = metastore.Op{Kind: metastore.OpCheck, Key: key, Expect: metastore.NoVersion}
	}
	_, err := o.meta.Commit(ctx, []metastore.Op{op})
	if err == nil {
		return nil
	}
	it, gerr := o.meta.Get(ctx, key)
	if errors.Is(gerr, metastore.ErrNotFound) {
		return nil // gone: ours applied, or someone else's delete did
	}
	if gerr == nil && errors.Is(err, metastore.ErrConflict) {
		cur := prev
		var v offsetValue
		if json.Unmarshal(it.Value, &v) != nil {
			return &loglet.CorruptError{Object: key, Err: errors.New("offset value does not parse")}
		}
		cur.Next, cur.Version = v.Next, it.Version
		return &ConflictError{Current: cur}
	}
	return fmt.Errorf("groups: delete offset of group %q on stream %q: %w", prev.Group, prev.Stream, err)
}
