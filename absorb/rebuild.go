package absorb

import (
	"context"
	"fmt"
	"strings"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/metastore"
)

// RebuildTails computes, from the span refs in the metastore, the tails the
// snapshot of checkpoint cp holds: for every stream with a record absorbed
// on chain (star, c) before the checkpoint's position, the end of its last
// such extent and its last timestamp. It is the way back when the snapshot
// the checkpoint names is damaged or missing: the refs are the truth the
// snapshot summarises, and the snapshot is only a cache of them.
//
// An extent counts when it lies in a slot of the chain before (cp.Epoch,
// cp.Next). Extents of a pending round (cp.Pending, at or past that
// position) do not: the snapshot is as of the checkpoint, and the pending
// round is replayed over it. It scans every ref of the metastore (every
// star's: refs are keyed by stream, not by chain), so it costs a full scan
// of the ref keyspace; callers log that they fall back to it.
func RebuildTails(ctx context.Context, meta metastore.Store, star string, c chain.Class, cp Checkpoint) (Tails, error) {
	f := tailFold{star: star, class: c, cp: cp, tails: map[string]StreamTail{}}
	if err := f.scan(ctx, meta, "refs/", ""); err != nil {
		return Tails{}, err
	}
	return Tails{Epoch: cp.Epoch, Next: cp.Next, Streams: f.tails}, nil
}

// StreamTailFromRefs is RebuildTails for the one stream whose ID is id: a
// scan of that stream's refs. ok is false when nothing of it is absorbed
// before the checkpoint.
func StreamTailFromRefs(ctx context.Context, meta metastore.Store, star string, c chain.Class, cp Checkpoint, id string) (StreamTail, bool, error) {
	f := tailFold{star: star, class: c, cp: cp, tails: map[string]StreamTail{}}
	if err := f.scan(ctx, meta, chain.RefPrefix(id), id); err != nil {
		return StreamTail{}, false, err
	}
	t, ok := f.tails[id]
	return t, ok, nil
}

// tailFold folds refs into tails as of a checkpoint.
type tailFold struct {
	star  string
	class chain.Class
	cp    Checkpoint
	tails map[string]StreamTail
}

const rebuildScanBatch = 1000

// scan folds every ref under prefix (only id's own when id is set: an
// incarnation-less ID's prefix also holds later incarnations' refs).
func (f *tailFold) scan(ctx context.Context, meta metastore.Store, prefix, id string) error {
	after := ""
	for {
		items, err := meta.Scan(ctx, prefix, after, rebuildScanBatch)
		if err != nil {
			return fmt.Errorf("absorb: rebuild tails of %s/%s from refs: %w", f.star, f.class, err)
		}
		for _, it := range items {
			if id != "" && !chain.IsRefOf(id, it.Key) {
				continue
			}
			ref, err := DecodeRef(it.Value)
			if err != nil {
				return fmt.Errorf("absorb: rebuild tails of %s/%s: ref %s: %w", f.star, f.class, it.Key, err)
			}
			f.add(ref)
		}
		if len(items) < rebuildScanBatch {
			return nil
		}
		after = items[len(items)-1].Key
	}
}

func (f *tailFold) add(ref SpanRef) {
	t, seen := f.tails[ref.Stream]
	counted, all := 0, true
	for _, ext := range ref.Extents {
		if chain.IsSettledKey(ext.Key) {
			// Settled: behind the trim cursor, so behind the checkpoint.
			if ref.Star != f.star || ref.Class != f.class.String() {
				all = false
				continue
			}
			counted++
			if end := ext.FirstSeq + uint64(ext.Count); !seen || end > t.Next {
				t.Next, seen = end, true
			}
			t.Timestamp = max(t.Timestamp, ext.MaxTimestamp)
			continue
		}
		star, c, epoch, slot, ok := chain.ParseSlotKey(ext.Key)
		if !ok || star != f.star || c != f.class {
			all = false
			continue
		}
		if epoch > f.cp.Epoch || (epoch == f.cp.Epoch && slot >= f.cp.Next) {
			all = false
			continue // not absorbed as of the checkpoint (a pending round's)
		}
		counted++
		if end := ext.FirstSeq + uint64(ext.Count); !seen || end > t.Next {
			t.Next, seen = end, true
		}
		t.Timestamp = max(t.Timestamp, ext.MaxTimestamp)
	}
	if counted == 0 {
		return
	}
	if all {
		// What the round that wrote the ref put in its snapshot (Plan).
		t.Timestamp = max(t.Timestamp, ref.MaxTS)
	}
	f.tails[ref.Stream] = t
}

// CopyErrors are the failures of each copy of one object, in bucket order:
// one line, and errors.Is matches any of them.
type CopyErrors []error

func (e CopyErrors) Error() string {
	parts := make([]string, len(e))
	for i, err := range e {
		parts[i] = err.Error()
	}
	return strings.Join(parts, "; ")
}

func (e CopyErrors) Unwrap() []error { return e }
