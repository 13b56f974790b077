package loglet

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// ReaderConfig configures a Reader.
type ReaderConfig struct {
	// Meta is the metastore the leaders absorb into. Required.
	Meta metastore.Store
	// Standard and Express are the classes' bucket sets, as the leaders
	// have them (reads fall through each set in order).
	Standard, Express []objstore.Store
	// PollInterval paces read sessions' polls for new refs (default
	// 250ms) when the metastore cannot watch (metastore.Watcher: etcd and
	// Mem can); a watching session still re-reads every 10 PollIntervals.
	PollInterval time.Duration
	// ReadCacheMiB bounds the cache of recently decoded frames (default
	// 32; negative: none), as Config.ReadCacheMiB.
	ReadCacheMiB int
}

// Reader reads absorbed history in a process that leads nothing: refs from
// the metastore, frames from the object store. It sees a record once the
// leader's absorb has recorded it (typically within Config.AbsorbInterval
// of its ack); the leader's Read also serves the unabsorbed tail. Safe for
// concurrent use.
type Reader struct {
	cfg   ReaderConfig
	hist  *history
	tails *absorb.TailsCache // decoded tails snapshots, for CheckTail

	snapFallbacks atomic.Uint64
}

// NewReader returns a Reader.
func NewReader(cfg ReaderConfig) (*Reader, error) {
	if cfg.Meta == nil {
		return nil, errors.New("loglet: ReaderConfig.Meta is required")
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 250 * time.Millisecond
	}
	return &Reader{cfg: cfg, hist: &history{meta: cfg.Meta, sets: [2][]objstore.Store{cfg.Standard, cfg.Express}, frames: newFrameCache(cacheBytes(cfg.ReadCacheMiB))},
		tails: absorb.NewTailsCache(8)}, nil
}

// Read returns absorbed records of stream from q.Start on. ReadResult.Tail
// is left zero: use CheckTail. A stream that does not exist (or was
// deleted) is ErrStreamNotFound: the Reader looks its record up on every
// call (one metastore read), so a deleted stream's old incarnation is never
// read, and a trim (Star.Trim, retention) is honoured at once: a start
// below the stream's trim point reads from it, the first readable record.
// It returns records or an error, never both: records read before an
// error are returned alone, and the next Read from ReadResult.Next meets
// the error. Damaged data is an error matching ErrCorrupt that names the
// object (a *CorruptError); missing data is not.
func (r *Reader) Read(ctx context.Context, stream string, q ReadQuery) (ReadResult, error) {
	if ctx == nil {
		return ReadResult{}, ErrNilContext
	}
	rec, c, err := r.record(ctx, stream)
	if err != nil {
		return ReadResult{}, err
	}
	start, held, err := r.resolve(ctx, rec, c, q.Start)
	if err != nil {
		return ReadResult{}, err
	}
	start = max(start, rec.TrimSeq)
	maxRecs, maxBytes := limits(q)
	recs, err := r.hist.readHeld(ctx, rec.id(), start, maxRecs, maxBytes, held)
	recs, err = recordsOrError(recs, err)
	return result(recs, start, Tail{}), err
}

// recordsOrError is a read's result as Read returns it: records or an
// error, never both. A read that meets an error after some records
// returns those records; the next read, from ReadResult.Next, meets the
// error again (or not, if it was transient).
func recordsOrError(recs []SequencedRecord, err error) ([]SequencedRecord, error) {
	if len(recs) > 0 {
		return recs, nil
	}
	return nil, err
}

// Metastore is the Reader's metastore (ReaderConfig.Meta), for packages
// that keep their own records beside the star's (loglet/groups).
func (r *Reader) Metastore() metastore.Store { return r.cfg.Meta }

// record reads a stream's record.
func (r *Reader) record(ctx context.Context, stream string) (streamRecord, Class, error) {
	if err := checkStreamName(stream); err != nil {
		return streamRecord{}, 0, err
	}
	it, err := r.cfg.Meta.Get(ctx, chain.StreamRecordKey(stream))
	if errors.Is(err, metastore.ErrNotFound) {
		return streamRecord{}, 0, fmt.Errorf("%w: %q", ErrStreamNotFound, stream)
	}
	if err != nil {
		return streamRecord{}, 0, fmt.Errorf("loglet: look up stream %q: %w", stream, err)
	}
	return decodeStreamRecord(it)
}

// resolve turns a Position into a sequence number, with the frame a read
// by timestamp fetched to find it (nil if none), for the read that follows.
func (r *Reader) resolve(ctx context.Context, rec streamRecord, c Class, p Position) (uint64, *heldFrame, error) {
	switch p.kind {
	case posTailOffset:
		t, err := r.tail(ctx, rec, c)
		if err != nil {
			return 0, nil, err
		}
		if p.value >= t.Seq {
			return 0, nil, nil
		}
		return t.Seq - p.value, nil, nil
	case posTimestamp:
		seq, ok, held, err := r.hist.seqAtTimestamp(ctx, rec.id(), p.ts)
		if err != nil || ok {
			return seq, held, err
		}
		t, err := r.tail(ctx, rec, c)
		return t.Seq, nil, err
	}
	return p.value, nil, nil
}

// CheckTail returns the stream's absorbed tail: from its chain's
// checkpoint and tails snapshot (two metastore reads and one GET, whatever
// the stream's length).
func (r *Reader) CheckTail(ctx context.Context, stream string) (Tail, error) {
	if ctx == nil {
		return Tail{}, ErrNilContext
	}
	rec, c, err := r.record(ctx, stream)
	if err != nil {
		return Tail{}, err
	}
	return r.tail(ctx, rec, c)
}

// tail reads the absorbed tail of the stream whose record is rec: the
// checkpoint, then its tails snapshot (a delta over a full one: two GETs at
// most). A reader never fails because the writer made progress: the leader
// deletes a superseded snapshot only rounds after the checkpoint moved past
// it, and should a slow read still miss it, the tail is read again from the
// newer checkpoint, for as long as the checkpoint keeps moving. A snapshot
// that is gone while its checkpoint stands still, or damaged, is not
// progress but damage: the tail is then computed from the stream's refs
// (absorb.StreamTailFromRefs), and counted in ReaderStats.SnapshotFallbacks.
func (r *Reader) tail(ctx context.Context, rec streamRecord, c Class) (Tail, error) {
	set, err := r.hist.set(c.String())
	if err != nil {
		return Tail{}, err
	}
	seen := ""
	for attempt := 0; ; attempt++ {
		cp, _, err := absorb.ReadCheckpoint(ctx, r.cfg.Meta, rec.Star, c)
		if errors.Is(err, metastore.ErrNotFound) {
			return Tail{}, nil // the star has never absorbed
		}
		if errors.Is(err, absorb.ErrCorrupt) {
			return Tail{}, &CorruptError{Object: "checkpoint " + chain.CheckpointKey(rec.Star, c), Err: err}
		}
		if err != nil {
			return Tail{}, err
		}
		if cp.Tails == "" {
			return Tail{}, nil
		}
		t, _, err := r.tails.Lookup(ctx, set, cp.Tails, rec.id())
		if err == nil {
			return Tail{Seq: t.Next, Timestamp: t.Timestamp}, nil
		}
		if ctx.Err() != nil {
			return Tail{}, ctx.Err()
		}
		gone, damaged := absorb.IsSnapshotGone(err), absorb.IsSnapshotDamaged(err)
		if gone && cp.Tails != seen && attempt < maxTailAttempts {
			seen = cp.Tails // the writer moved on: follow it
			continue
		}
		if !gone && !damaged {
			return Tail{}, err
		}
		r.snapFallbacks.Add(1)
		t, _, ferr := absorb.StreamTailFromRefs(ctx, r.cfg.Meta, rec.Star, c, cp, rec.id())
		if ferr != nil {
			return Tail{}, fmt.Errorf("loglet: tails snapshot %s unusable (%v), and reading the tail from refs failed: %w", cp.Tails, err, ferr)
		}
		return Tail{Seq: t.Next, Timestamp: t.Timestamp}, nil
	}
}

// maxTailAttempts bounds the checkpoints a tail read follows while the
// writer keeps moving past each snapshot before it is read (it would take
// a reader stalled for many rounds per attempt to reach it).
const maxTailAttempts = 64

// OpenReadSession starts a session at q.Start that follows the stream's
// refs as the leader's absorb writes them.
//
// How it waits once caught up: when ReaderConfig.Meta implements
// metastore.Watcher (metastore/etcd, metastore.Mem), it watches the
// stream's refs and re-reads as soon as one is written, so a record
// reaches Recv about one absorb round after its ack instead of up to a
// PollInterval later; it still re-reads every 10 PollIntervals as a
// safety net. A store without Watch (metastore/bbolt, a fault wrapper), a
// Watch that fails, and a watch that ends (etcd compacted past it, lost
// its leader, or the store closed) mean polling every PollInterval, with
// a fresh watch tried at the next wait.
//
// The stream must exist when the session opens: a name with no stream is
// ErrStreamNotFound, also when the leader runs with CreateOnAppend (the
// stream is created by the first append, and a Reader never creates one;
// a leader's Star.OpenReadSession on such a name is ErrStreamNotFound as
// well). A stream that exists but holds no records yet opens at 0 (from
// AtSeq(0), a tail offset or a timestamp alike), and its first Recv waits
// for the first record.
//
// The session follows the incarnation the stream has when it opens: if
// the stream is deleted (and maybe created again), the session ends with
// ErrStreamNotFound at its next re-read (its next poll, or on a watched
// store the next ref written or safety poll).
//
// A session opened below the stream's trim point starts at it; a trim
// written while the session runs is honoured within 5 seconds (the
// session re-reads the stream record at most that often while it reads,
// and whenever it is caught up): it then skips to the trim point.
func (r *Reader) OpenReadSession(ctx context.Context, stream string, q ReadQuery) (*ReadSession, error) {
	if ctx == nil {
		return nil, ErrNilContext
	}
	rec, c, err := r.record(ctx, stream)
	if err != nil {
		return nil, err
	}
	next, _, err := r.resolve(ctx, rec, c, q.Start)
	if err != nil {
		return nil, err
	}
	next = max(next, rec.TrimSeq)
	floor, checked := rec.TrimSeq, time.Now()
	maxRecs, maxBytes := limits(q)
	recheck := func(ctx context.Context) error {
		now, _, err := r.record(ctx, stream)
		if err != nil {
			return err
		}
		if now.id() != rec.id() {
			return fmt.Errorf("%w: %q was deleted (and created again) after this session opened", ErrStreamNotFound, stream)
		}
		floor, checked = max(floor, now.TrimSeq), time.Now()
		return nil
	}
	read := func(ctx context.Context, from uint64) ([]SequencedRecord, error) {
		if time.Since(checked) >= trimRefresh {
			if err := recheck(ctx); err != nil {
				return nil, err
			}
		}
		recs, err := r.hist.read(ctx, rec.id(), max(from, floor), maxRecs, maxBytes)
		if err == nil && len(recs) == 0 {
			// Caught up: is it still the same incarnation (and trimmed
			// meanwhile)?
			if err := recheck(ctx); err != nil {
				return nil, err
			}
		}
		return recs, err
	}
	// wait watches the stream's refs where the store can (see the doc
	// above), else polls. A watch lives for one wait, so Close has none
	// to end.
	const safetyPolls = 10 // PollIntervals between re-reads while watching
	refs := chain.RefPrefix(rec.id())
	watcher, _ := r.cfg.Meta.(metastore.Watcher)
	hitAt := ^uint64(0) // the next at which the last recheck found a ref
	wait := func(ctx context.Context, next uint64) error {
		if watcher != nil {
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			if ch, err := watcher.Watch(wctx, refs); err == nil {
				// In place: a ref written from now on signals. One
				// written between the read that found nothing and now
				// did not: look for it. (A ref that the read could not
				// use is found once, not spun on.)
				items, err := r.cfg.Meta.Scan(ctx, refs, chain.RefKey(rec.id(), next), 1)
				if err == nil && len(items) > 0 && chain.IsRefOf(rec.id(), items[0].Key) && hitAt != next {
					hitAt = next
					return nil
				}
				if err == nil {
					t := time.NewTimer(safetyPolls * r.cfg.PollInterval)
					defer t.Stop()
					select {
					case _, ok := <-ch:
						if ok {
							return nil
						}
						// The watch ended: poll below.
					case <-t.C:
						return nil
					case <-ctx.Done():
						return ctx.Err()
					}
				}
			}
		}
		t := time.NewTimer(r.cfg.PollInterval)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return newReadSession(next, rec.Incarnation, read, wait), nil
}

// ReaderStats counts a Reader's object reads.
type ReaderStats struct {
	Gets, GetBytes uint64
	// ReadCacheBytes is the decoded frames cached now; ReadCacheHits and
	// ReadCacheMisses count lookups.
	ReadCacheBytes                 int64
	ReadCacheHits, ReadCacheMisses uint64
	// SkippedCopies: copies passed over (missing, short, poison, corrupt);
	// CorruptCopies: of which failed a checksum or decode.
	SkippedCopies, CorruptCopies uint64
	// SnapshotFallbacks counts CheckTails (and tail-relative reads) that
	// found the checkpoint's tails snapshot damaged or missing and read
	// the tail from the stream's refs instead.
	SnapshotFallbacks uint64
}

// Stats returns the Reader's counters.
func (r *Reader) Stats() ReaderStats {
	st := ReaderStats{Gets: r.hist.gets.Load(), GetBytes: r.hist.getBytes.Load(), SkippedCopies: r.hist.skipped.Load(), CorruptCopies: r.hist.corrupt.Load(),
		SnapshotFallbacks: r.snapFallbacks.Load()}
	st.ReadCacheBytes, st.ReadCacheHits, st.ReadCacheMisses = r.hist.frames.stats()
	return st
}
