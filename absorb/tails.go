package absorb

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"

	"github.com/flightlog/flightlog/chain"
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

// TailsCache serves tail lookups from tails snapshots without decoding a
// snapshot per lookup: it keeps the last few decoded snapshot objects by
// key (a key names its position and its writer, so its content never
// changes), and answers a lookup in a delta from the delta, else from its
// base. A Reader checking the tails of many streams decodes each snapshot
// once, not once per stream. Safe for concurrent use.
type TailsCache struct {
	mu    sync.Mutex
	max   int
	snaps map[string]Tails
	order []string // oldest first
}

// NewTailsCache returns a cache of up to n decoded snapshots (at least 2:
// a delta and its base).
func NewTailsCache(n int) *TailsCache {
	return &TailsCache{max: max(2, n), snaps: map[string]Tails{}}
}

// Lookup returns stream's tail as of the snapshot at key (ok false: the
// snapshot has no tail for it). An error is ReadSnapshot's (IsSnapshotGone
// when the snapshot or its base was deleted meanwhile), or ErrCorrupt for a
// delta that builds on a delta.
func (c *TailsCache) Lookup(ctx context.Context, stores []objstore.Store, key, stream string) (StreamTail, bool, error) {
	t, err := c.snapshot(ctx, stores, key)
	if err != nil {
		return StreamTail{}, false, err
	}
	if st, ok := t.Streams[stream]; ok || t.Base == "" {
		return st, ok, nil
	}
	base, err := c.snapshot(ctx, stores, t.Base)
	if err != nil {
		return StreamTail{}, false, fmt.Errorf("absorb: tails snapshot %s builds on %s: %w", key, t.Base, err)
	}
	if base.Base != "" {
		return StreamTail{}, false, fmt.Errorf("%w: tails snapshot %s builds on %s, itself a delta", ErrCorrupt, key, t.Base)
	}
	st, ok := base.Streams[stream]
	return st, ok, nil
}

func (c *TailsCache) snapshot(ctx context.Context, stores []objstore.Store, key string) (Tails, error) {
	c.mu.Lock()
	t, ok := c.snaps[key]
	c.mu.Unlock()
	if ok {
		return t, nil
	}
	t, err := ReadSnapshot(ctx, stores, key)
	if err != nil {
		return Tails{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.snaps[key]; !ok {
		c.snaps[key] = t
		c.order = append(c.order, key)
		for len(c.order) > c.max {
			delete(c.snaps, c.order[0])
			c.order = c.order[1:]
		}
	}
	return t, nil
}

// maxPlans bounds the plans of one round UncommittedSnapshots looks for:
// a refused round is planned again over half its slots, so no writer gets
// near it.
const maxPlans = 64

// MaxUncommittedWriters bounds the writers UncommittedSnapshots looks for
// (the newest): only takeovers in quick succession, none of which commits
// a round, put more epochs between the checkpoint and the latest one.
const MaxUncommittedWriters = 8

// UncommittedSnapshots finds, by point lookups, the tails snapshots that
// rounds from checkpoint cp (as a successor found it at the seal) wrote
// and never committed: a crash, or a seal, stopped them between the
// snapshot's PUT and the Commit, so no checkpoint names them. They are at
// TailsRoundKey of cp's position, for each writer that may have planned a
// round from there, plan 0, 1, .... A writer is the epoch of a leader that
// absorbed from cp, so at least cp.Epoch, and that held the checkpoint's
// seal at that epoch (a seal only goes up), so at most cp.OwnerEpoch:
// those are looked for, newest first, at most MaxUncommittedWriters. A
// round is planned again (the next plan) only after its snapshot was
// written and the metastore refused the round, so the lookups of a writer
// stop at the first plan no bucket holds. A key that some bucket could not
// be asked about, and no other holds, is returned too (deleting a missing
// key is harmless), with the error. Nothing is deleted here.
func UncommittedSnapshots(ctx context.Context, stores []objstore.Store, star string, c chain.Class, cp Checkpoint) ([]string, error) {
	top := cp.OwnerEpoch
	var out []string
	var errs []error
	for w := top; w >= cp.Epoch && w > 0 && top-w < MaxUncommittedWriters; w-- {
		for plan := uint64(0); plan < maxPlans; plan++ {
			key := TailsRoundKey(star, c, cp.Epoch, cp.Next, w, plan)
			found, err := anyHolds(ctx, stores, key)
			if found || err != nil {
				out = append(out, key)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("absorb: look up uncommitted tails snapshot %s: %w", key, err))
			}
			if !found {
				break
			}
		}
	}
	return out, errors.Join(errs...)
}

// anyHolds reports whether some store holds key (asked in parallel); err
// joins the errors of the stores that could not answer, when none holds it.
func anyHolds(ctx context.Context, stores []objstore.Store, key string) (bool, error) {
	errs := make(chan error, len(stores))
	for _, s := range stores {
		go func() {
			_, err := s.Get(ctx, key, 0, 0)
			errs <- err
		}()
	}
	var failed []error
	found := false
	for range stores {
		switch err := <-errs; {
		case err == nil:
			found = true
		case !errors.Is(err, objstore.ErrNotFound):
			failed = append(failed, err)
		}
	}
	if found {
		return true, nil
	}
	return false, errors.Join(failed...)
}
