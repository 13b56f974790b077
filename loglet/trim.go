package loglet

import (
	"context"
	"errors"
	"fmt"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/metastore"
)

// streamLiveness reports whether the stream incarnation id (a
// chain.StreamID) is live: a stream record exists for its name with the
// same incarnation. live is false when the name has no record (deleted) or
// its record has another incarnation (deleted and created again). trimSeq
// is the live record's TrimSeq (records below it are unreadable and may be
// reclaimed). It reads the metastore (one Get) every call, so it is never
// stale; err is a metastore failure or a corrupt record, never absence.
func (s *Star) streamLiveness(ctx context.Context, id string) (live bool, trimSeq uint64, err error) {
	if ctx == nil {
		return false, 0, ErrNilContext
	}
	name, _ := chain.SplitStreamID(id)
	it, err := s.cfg.Meta.Get(ctx, chain.StreamRecordKey(name))
	if errors.Is(err, metastore.ErrNotFound) {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, fmt.Errorf("loglet: look up stream %q: %w", name, err)
	}
	rec, _, err := decodeStreamRecord(it)
	if err != nil {
		return false, 0, err
	}
	if rec.id() != id {
		return false, 0, nil
	}
	return true, rec.TrimSeq, nil
}
