package loglet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	// 250ms).
	PollInterval time.Duration
}

// Reader reads absorbed history in a process that leads nothing: refs from
// the metastore, frames from the object store. It sees a record once the
// leader's absorb has recorded it (typically within Config.AbsorbInterval
// of its ack); the leader's Read also serves the unabsorbed tail. Safe for
// concurrent use.
type Reader struct {
	cfg  ReaderConfig
	hist *history
}

// NewReader returns a Reader.
func NewReader(cfg ReaderConfig) (*Reader, error) {
	if cfg.Meta == nil {
		return nil, errors.New("loglet: ReaderConfig.Meta is required")
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 250 * time.Millisecond
	}
	return &Reader{cfg: cfg, hist: &history{meta: cfg.Meta, sets: [2][]objstore.Store{cfg.Standard, cfg.Express}}}, nil
}

// Read returns absorbed records of stream from q.Start on. ReadResult.Tail
// is left zero: use CheckTail.
func (r *Reader) Read(ctx context.Context, stream string, q ReadQuery) (ReadResult, error) {
	if err := chain.ValidateStreamName(stream); err != nil {
		return ReadResult{}, fmt.Errorf("loglet: %w", err)
	}
	start, err := r.resolve(ctx, stream, q.Start)
	if err != nil {
		return ReadResult{}, err
	}
	maxRecs, maxBytes := limits(q)
	recs, err := r.hist.read(ctx, stream, start, maxRecs, maxBytes)
	return result(recs, start, Tail{}), err
}

func (r *Reader) resolve(ctx context.Context, stream string, p Position) (uint64, error) {
	switch p.kind {
	case posTailOffset:
		t, err := r.CheckTail(ctx, stream)
		if err != nil {
			return 0, err
		}
		if p.value >= t.Seq {
			return 0, nil
		}
		return t.Seq - p.value, nil
	case posTimestamp:
		seq, ok, err := r.hist.seqAtTimestamp(ctx, stream, p.ts)
		if err != nil || ok {
			return seq, err
		}
		t, err := r.CheckTail(ctx, stream)
		return t.Seq, err
	}
	return p.value, nil
}

// CheckTail returns the stream's absorbed tail: from its chain's
// checkpoint and tails snapshot (two metastore reads and one GET, whatever
// the stream's length).
func (r *Reader) CheckTail(ctx context.Context, stream string) (Tail, error) {
	it, err := r.cfg.Meta.Get(ctx, chain.StreamRecordKey(stream))
	if errors.Is(err, metastore.ErrNotFound) {
		return Tail{}, fmt.Errorf("%w: %q", ErrStreamNotFound, stream)
	}
	if err != nil {
		return Tail{}, fmt.Errorf("loglet: look up stream %q: %w", stream, err)
	}
	var rec streamRecord
	if err := json.Unmarshal(it.Value, &rec); err != nil {
		return Tail{}, fmt.Errorf("loglet: stream record of %q is corrupt: %v", stream, err)
	}
	c, err := chain.ParseClass(rec.Class)
	if err != nil {
		return Tail{}, err
	}
	cp, _, err := absorb.ReadCheckpoint(ctx, r.cfg.Meta, rec.Star, c)
	if errors.Is(err, metastore.ErrNotFound) {
		return Tail{}, nil // the star has never absorbed
	}
	if err != nil {
		return Tail{}, err
	}
	if cp.Tails == "" {
		return Tail{}, nil
	}
	set, err := r.hist.set(c.String())
	if err != nil {
		return Tail{}, err
	}
	snap, err := absorb.ReadSnapshot(ctx, set, cp.Tails)
	if err != nil {
		return Tail{}, err
	}
	t := snap.Streams[stream]
	return Tail{Seq: t.Next, Timestamp: t.Timestamp}, nil
}

// OpenReadSession starts a session at q.Start that polls for new refs.
func (r *Reader) OpenReadSession(ctx context.Context, stream string, q ReadQuery) (*ReadSession, error) {
	if err := chain.ValidateStreamName(stream); err != nil {
		return nil, fmt.Errorf("loglet: %w", err)
	}
	next, err := r.resolve(ctx, stream, q.Start)
	if err != nil {
		return nil, err
	}
	maxRecs, maxBytes := limits(q)
	read := func(ctx context.Context, from uint64) ([]SequencedRecord, error) {
		return r.hist.read(ctx, stream, from, maxRecs, maxBytes)
	}
	wait := func(ctx context.Context, _ uint64) error {
		t := time.NewTimer(r.cfg.PollInterval)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return &ReadSession{next: next, read: read, wait: wait}, nil
}

// ReaderStats counts a Reader's object reads.
type ReaderStats struct {
	Gets, GetBytes uint64
	// SkippedCopies: copies passed over (missing, short, poison, corrupt);
	// CorruptCopies: of which failed a checksum or decode.
	SkippedCopies, CorruptCopies uint64
}

// Stats returns the Reader's counters.
func (r *Reader) Stats() ReaderStats {
	return ReaderStats{Gets: r.hist.gets.Load(), GetBytes: r.hist.getBytes.Load(), SkippedCopies: r.hist.skipped.Load(), CorruptCopies: r.hist.corrupt.Load()}
}
