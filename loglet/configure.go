package loglet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/loglet/internal/catalogcore"
	"github.com/flightlog/flightlog/metastore"
)

// A stream's options after creation: ConfigureStream changes them in the
// stream record, by a compare-and-swap on the version read
// (catalogcore.Configure decides), from any process. The record's Commit
// puts the star's catalogue generation (liveness.go), as a trim's does:
// the leader's retention pass reads the generation and, when it moved,
// re-reads the records of the streams it holds with retention off (those
// with retention re-read theirs at every pass), so a change made anywhere
// applies at the leader's next pass.

// StreamUpdate is a change of a stream's options (ConfigureStream): each
// field set (non-nil) replaces the stream's value, each nil field keeps it.
// The zero StreamUpdate changes nothing.
type StreamUpdate struct {
	// RetentionMaxAge replaces Retention.MaxAge (0 turns retention by age
	// off). Negative is refused.
	RetentionMaxAge *time.Duration
	// RetentionMaxBytes replaces Retention.MaxBytes (0 turns retention by
	// bytes off). Negative is refused.
	RetentionMaxBytes *int64
	// Incarnation, if set, is the only incarnation of the name to change
	// (StreamInfo.Incarnation): another is ErrStreamNotFound. "" changes
	// the incarnation ConfigureStream reads first, and that one only.
	Incarnation string
}

// empty reports that u changes nothing.
func (u StreamUpdate) empty() bool { return u.RetentionMaxAge == nil && u.RetentionMaxBytes == nil }

// check refuses values no stream can have.
func (u StreamUpdate) check(name string) error {
	if u.RetentionMaxAge != nil && *u.RetentionMaxAge < 0 {
		return fmt.Errorf("loglet: configure stream %q: negative retention max age %v", name, *u.RetentionMaxAge)
	}
	if u.RetentionMaxBytes != nil && *u.RetentionMaxBytes < 0 {
		return fmt.Errorf("loglet: configure stream %q: negative retention max bytes %d", name, *u.RetentionMaxBytes)
	}
	if u.Incarnation != "" && !chain.ValidIncarnation(u.Incarnation) {
		return fmt.Errorf("loglet: configure stream %q: invalid incarnation %q", name, u.Incarnation)
	}
	return nil
}

// apply writes u's changes into rec.
func (u StreamUpdate) apply(rec *streamRecord) {
	if u.RetentionMaxAge != nil {
		rec.RetentionMaxAgeMs = retentionAgeMs(*u.RetentionMaxAge)
	}
	if u.RetentionMaxBytes != nil {
		rec.RetentionMaxBytes = *u.RetentionMaxBytes
	}
}

// retentionAgeMs is a retention age as the record holds it: milliseconds,
// an age under one kept as 1 (the smallest age a record keeps), not as off.
func retentionAgeMs(d time.Duration) int64 {
	if ms := d.Milliseconds(); ms > 0 || d <= 0 {
		return ms
	}
	return 1
}

// ConfigureStream changes the options of the stream name (its retention)
// as u says, and returns the stream as its record now holds it; a zero u
// changes nothing and returns the stream as it is. It works from any
// process, leader of the stream's star or not (Reader.ConfigureStream does
// the same from a process that leads nothing): the leader's retention pass
// applies the new retention at its next pass (Config.RetentionInterval),
// and at once if the leader is this process.
//
// The change is a compare-and-swap on the stream record as read: it never
// overwrites a concurrent trim (it writes again on the newer record of the
// same incarnation) nor a concurrent delete, and it never lands on another
// incarnation: a name deleted and created again after ConfigureStream read
// it is ErrStreamNotFound, as are a name with no stream and, with
// u.Incarnation set, a name whose incarnation is another. Negative values
// are refused, writing nothing. A metastore failure may leave it unknown
// whether the change applied: calling again with the same u is safe.
func (s *Star) ConfigureStream(ctx context.Context, name string, u StreamUpdate) (StreamInfo, error) {
	if ctx == nil {
		return StreamInfo{}, ErrNilContext
	}
	if s.isClosed() {
		return StreamInfo{}, fmt.Errorf("loglet: configure stream %q: %w", name, ErrClosed)
	}
	rec, c, err := configureStream(ctx, s.cfg.Meta, name, u, s.cfg.Star, func(id string) {
		// Settlement's cached liveness answers, as after a trim.
		s.catalogChanged(id)
	})
	if err != nil {
		return StreamInfo{}, err
	}
	if !u.empty() {
		// This process's retention pass applies it at once (another
		// leader's sees the catalogue generation move).
		s.trims.reconfigured(rec, time.Now())
	}
	return streamInfo(rec, c), nil
}

// ConfigureStream is Star.ConfigureStream from a process that leads
// nothing (the CLI's config): the stream's leader, wherever it runs,
// applies the change at its next retention pass.
func (r *Reader) ConfigureStream(ctx context.Context, name string, u StreamUpdate) (StreamInfo, error) {
	if ctx == nil {
		return StreamInfo{}, ErrNilContext
	}
	rec, c, err := configureStream(ctx, r.cfg.Meta, name, u, "", nil)
	if err != nil {
		return StreamInfo{}, err
	}
	return streamInfo(rec, c), nil
}

// streamInfo describes rec's stream.
func streamInfo(rec streamRecord, c Class) StreamInfo {
	return StreamInfo{Name: rec.Name, Class: c, Star: rec.Star, Incarnation: rec.Incarnation, Retention: rec.retention()}
}

// configureStream runs a catalogcore.Configure of name against meta: it
// executes each request as one call, writing u into the record read. A
// record that names no star puts the catalogue generation of star (none
// if ""). committed, if set, is called with the stream's ID after every
// commit, applied or not.
func configureStream(ctx context.Context, meta metastore.Store, name string, u StreamUpdate, star string, committed func(id string)) (streamRecord, Class, error) {
	if err := checkStreamName(name); err != nil {
		return streamRecord{}, 0, err
	}
	if err := u.check(name); err != nil {
		return streamRecord{}, 0, err
	}
	if err := ctx.Err(); err != nil {
		return streamRecord{}, 0, fmt.Errorf("loglet: configure stream %q: %w", name, err)
	}
	op := catalogcore.NewConfigure(name, u.Incarnation, !u.empty())
	for req := op.Next(); req != nil; req = op.Next() {
		var res catalogcore.Result
		switch r := req.(type) {
		case catalogcore.ReadRecord:
			res = readCoreRecord(ctx, meta, r.Name)
		case catalogcore.PutConfig:
			if err := ctx.Err(); err != nil {
				// A conflict sent it back to write again: the host gave up.
				return streamRecord{}, 0, fmt.Errorf("loglet: configure stream %q: %w", name, err)
			}
			res = putConfig(ctx, meta, r.Record.Data.(recordData), u, star, committed)
		default:
			return streamRecord{}, 0, fmt.Errorf("loglet: configure stream %q: cannot execute %T", name, req)
		}
		if err := op.Step(res); err != nil {
			return streamRecord{}, 0, fmt.Errorf("loglet: configure stream %q: %w", name, err)
		}
	}
	out := op.Outcome()
	switch out.Status {
	case catalogcore.Configured:
		d := out.Record.Data.(recordData)
		rec := d.rec
		if out.Wrote {
			u.apply(&rec)
		}
		return rec, d.class, nil
	case catalogcore.NotFound:
		if out.Record.Name != "" {
			return streamRecord{}, 0, fmt.Errorf("%w: %q is another incarnation (%s) than the one to configure (deleted and created again)", ErrStreamNotFound, name, out.Record.Incarnation)
		}
		return streamRecord{}, 0, fmt.Errorf("%w: %q", ErrStreamNotFound, name)
	case catalogcore.Corrupt:
		return streamRecord{}, 0, &CorruptError{Object: chain.StreamRecordKey(name), Err: out.Err}
	}
	if out.Exhausted {
		return streamRecord{}, 0, fmt.Errorf("loglet: configure stream %q: the stream record changed under %d attempts: %w", name, out.Attempts, out.Err)
	}
	return streamRecord{}, 0, fmt.Errorf("loglet: configure stream %q: %w", name, out.Err)
}

// putConfig executes a PutConfig: the record read with u applied, and its
// name-index entry (so ListStreams shows the new options), expecting the
// version read, with the star's catalogue generation.
func putConfig(ctx context.Context, meta metastore.Store, d recordData, u StreamUpdate, star string, committed func(string)) catalogcore.ConfigPut {
	rec := d.rec
	u.apply(&rec)
	val, err := json.Marshal(rec)
	if err != nil {
		return catalogcore.ConfigPut{Err: fmt.Errorf("encode stream record: %w", err)}
	}
	ops := []metastore.Op{
		{Kind: metastore.OpPut, Key: d.item.Key, Value: val, Expect: d.item.Version},
		{Kind: metastore.OpPut, Key: chain.StreamNameKey(rec.Name), Value: val, Expect: metastore.AnyVersion},
	}
	if rec.Star != "" {
		star = rec.Star
	}
	if star != "" {
		ops = append(ops, catalogGenOp(star, rec.id()))
	}
	vs, err := meta.Commit(ctx, ops)
	if committed != nil {
		committed(rec.id())
	}
	if err != nil {
		return catalogcore.ConfigPut{Err: err, Conflict: errors.Is(err, metastore.ErrConflict)}
	}
	var v catalogcore.Version
	if len(vs) > 0 {
		v = catalogcore.Version(vs[0])
	}
	return catalogcore.ConfigPut{Version: v}
}
