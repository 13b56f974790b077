package absorb

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/flightlog/flightlog/objstore"
)

// ReadTails reads the tails as of the snapshot at key: the snapshot, and
// when it is a delta, the full snapshot it builds on, with the delta's
// streams laid over it. The result's Base is the delta's (so a writer can
// go on adding to it). Two reads at most.
func ReadTails(ctx context.Context, stores []objstore.Store, key string) (Tails, error) {
	t, err := ReadSnapshot(ctx, stores, key)
	if err != nil || t.Base == "" {
		return t, err
	}
	base, err := ReadSnapshot(ctx, stores, t.Base)
	if err != nil {
		return Tails{}, fmt.Errorf("absorb: tails snapshot %s builds on %s: %w", key, t.Base, err)
	}
	if base.Base != "" {
		return Tails{}, fmt.Errorf("%w: tails snapshot %s builds on %s, itself a delta", ErrCorrupt, key, t.Base)
	}
	merged := maps.Clone(base.Streams)
	if merged == nil {
		merged = map[string]StreamTail{}
	}
	maps.Copy(merged, t.Streams)
	return Tails{Epoch: t.Epoch, Next: t.Next, Streams: merged, Base: t.Base}, nil
}

// IsSnapshotGone reports whether err says a snapshot (or its base) was not
// found: a reader that raced the absorb may re-read the checkpoint and try
// the newer snapshot.
func IsSnapshotGone(err error) bool { return errors.Is(err, objstore.ErrNotFound) }
