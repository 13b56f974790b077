package sim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// overwritingBucket is a planted bug: a PutIfAbsent that replaces whatever
// is there and reports success, as a store without conditional writes would.
type overwritingBucket struct{ objstore.Store }

func (b overwritingBucket) PutIfAbsent(ctx context.Context, key string, body []byte) error {
	err := b.Store.PutIfAbsent(ctx, key, body)
	if errors.Is(err, objstore.ErrExists) {
		if err := b.Store.Delete(ctx, key); err != nil {
			return err
		}
		return b.Store.PutIfAbsent(ctx, key, body)
	}
	return err
}

// losingBucket is a planted bug: a chain-slot PUT that reports success
// without storing anything, with probability p (an ack the bucket never
// honoured).
type losingBucket struct {
	objstore.Store
	mu    sync.Mutex
	draws *fault.Draws // per key, so a draw does not depend on scheduling
	p     float64
}

func (b *losingBucket) PutIfAbsent(ctx context.Context, key string, body []byte) error {
	if strings.HasPrefix(key, "chains/") {
		b.mu.Lock()
		lose := b.draws.Rand(key).Float64() < b.p
		b.mu.Unlock()
		if lose {
			return nil
		}
	}
	return b.Store.PutIfAbsent(ctx, key, body)
}

// blindCommitStore is a planted bug: Commit applies every op whatever its
// expected version (an unconditional transaction).
type blindCommitStore struct{ metastore.Store }

func (s blindCommitStore) Commit(ctx context.Context, ops []metastore.Op) ([]metastore.Version, error) {
	blind := make([]metastore.Op, 0, len(ops))
	for _, op := range ops {
		if op.Kind == metastore.OpCheck {
			continue
		}
		op.Expect = metastore.AnyVersion
		blind = append(blind, op)
	}
	vs, err := s.Store.Commit(ctx, blind)
	if err != nil {
		return nil, err
	}
	// Pad for the dropped checks so callers index versions as usual.
	out := make([]metastore.Version, 0, len(ops))
	j := 0
	for _, op := range ops {
		if op.Kind == metastore.OpCheck {
			out = append(out, op.Expect)
			continue
		}
		out = append(out, vs[j])
		j++
	}
	return out, nil
}

// frozenCopy returns a metastore holding what src holds now: the view of a
// replica that stops applying at this moment (the StaleReader planted bug).
func frozenCopy(ctx context.Context, src metastore.Store) metastore.Store {
	dst := metastore.NewMem()
	items, err := src.Scan(ctx, "", "", 0)
	if err != nil {
		return src
	}
	for _, it := range items {
		_, _ = dst.Put(ctx, it.Key, it.Value, metastore.NoVersion)
	}
	return dst
}

// mirroringBucket is a planted bug: a fence that accepts W−1 copies. When a
// poison is put to a chain slot this bucket does not hold while another
// bucket of the set holds a flight copy, it stores nothing, reports the key
// occupied, and from then on serves the other bucket's copy as its own: the
// fencer counts one flight copy twice and may decide committed a slot that
// holds W−1 copies.
type mirroringBucket struct {
	objstore.Store
	mems   []*objstore.Mem // the class's buckets as they are
	i      int             // this bucket's index among them
	mu     *sync.Mutex
	mirror map[string][]byte
}

func (b mirroringBucket) PutIfAbsent(ctx context.Context, key string, body []byte) error {
	if env, err := envelope.ParseEnvelope(body); err == nil && env.Kind == envelope.KindPoison && strings.HasPrefix(key, "chains/") {
		if _, err := b.mems[b.i].Get(ctx, key, 0, 1); errors.Is(err, objstore.ErrNotFound) {
			for j, m := range b.mems {
				if j == b.i {
					continue
				}
				obj, err := m.Get(ctx, key, 0, -1)
				if err != nil {
					continue
				}
				if e, err := envelope.ParseEnvelope(obj); err == nil && e.Kind == envelope.KindFlight {
					b.mu.Lock()
					b.mirror[key] = obj
					b.mu.Unlock()
					return fmt.Errorf("sim: mirrored %s: %w", key, objstore.ErrExists)
				}
			}
		}
	}
	return b.Store.PutIfAbsent(ctx, key, body)
}

func (b mirroringBucket) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	got, err := b.Store.Get(ctx, key, off, n)
	if errors.Is(err, objstore.ErrNotFound) {
		b.mu.Lock()
		obj, ok := b.mirror[key]
		b.mu.Unlock()
		if ok {
			end := int64(len(obj))
			if n >= 0 && off+n < end {
				end = off + n
			}
			if off > end {
				off = end
			}
			return append([]byte(nil), obj[off:end]...), nil
		}
	}
	return got, err
}

// limitedMeta gives the metastore a Commit size limit in ops (as etcd's
// --max-txn-ops does) and, if bytes > 0, in bytes (--max-request-bytes), so
// absorb splits its rounds: pending first, refs in chunks, then the
// checkpoint. A Commit over either limit fails with ErrTooLarge, nothing
// written, as etcd refuses it.
type limitedMeta struct {
	metastore.Store
	n     int // 0: no op limit
	bytes int // 0: no byte limit
}

func (s limitedMeta) MaxCommitOps() int                  { return s.n }
func (s limitedMeta) MaxCommitBytes() int                { return s.bytes }
func (s limitedMeta) OpBytes(op metastore.Op) int        { return metastore.BaseOpBytes(op) }
func (s limitedMeta) commitBytes(ops []metastore.Op) int { return metastore.CommitBytes(s, ops) }

func (s limitedMeta) Commit(ctx context.Context, ops []metastore.Op) ([]metastore.Version, error) {
	if s.n > 0 && len(ops) > s.n {
		return nil, fmt.Errorf("sim: commit of %d ops over the limit of %d: %w", len(ops), s.n, metastore.ErrTooLarge)
	}
	if n := s.commitBytes(ops); s.bytes > 0 && n > s.bytes {
		return nil, fmt.Errorf("sim: commit of %d bytes over the limit of %d: %w", n, s.bytes, metastore.ErrTooLarge)
	}
	return s.Store.Commit(ctx, ops)
}

// conflictingMeta is a fault, not a bug: a conditional write that applies
// and then reports ErrConflict, as a client's internal retry of a write
// whose first attempt applied does (every value the library writes carries
// the writer's identity and a counter, so the writer re-reads and recognises
// its own write). Rate p per write, off while p is 0.
type conflictingMeta struct {
	metastore.Store
	draws *fault.Draws
	mu    sync.Mutex
	p     float64
	n     int // injected
}

// hit draws whether this write (to keys) is reported conflicting. Like the
// FaultStores, the draw is keyed by the keys and how many writes to them
// came before, so it does not depend on how goroutines interleave.
func (s *conflictingMeta) hit(keys ...string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p > 0 && s.draws.Rand(keys...).Float64() < s.p {
		s.n++
		return true
	}
	return false
}

func (s *conflictingMeta) set(p float64) {
	s.mu.Lock()
	s.p = p
	s.mu.Unlock()
}

func (s *conflictingMeta) injected() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

func (s *conflictingMeta) MaxCommitOps() int { return metastore.MaxCommitOps(s.Store) }

// MaxCommitBytes and OpBytes pass the byte limit of the store below through.
func (s *conflictingMeta) MaxCommitBytes() int         { return metastore.MaxCommitBytes(s.Store) }
func (s *conflictingMeta) OpBytes(op metastore.Op) int { return metastore.OpBytes(s.Store, op) }

func (s *conflictingMeta) Put(ctx context.Context, key string, value []byte, expect metastore.Version) (metastore.Version, error) {
	v, err := s.Store.Put(ctx, key, value, expect)
	if err == nil && expect != metastore.AnyVersion && s.hit(key) {
		return "", fmt.Errorf("sim: retried conditional put of %s found its first attempt: %w", key, metastore.ErrConflict)
	}
	return v, err
}

func (s *conflictingMeta) Commit(ctx context.Context, ops []metastore.Op) ([]metastore.Version, error) {
	vs, err := s.Store.Commit(ctx, ops)
	keys := make([]string, len(ops))
	for i, op := range ops {
		keys[i] = op.Key
	}
	if err == nil && s.hit(keys...) {
		return nil, fmt.Errorf("sim: retried commit found its first attempt: %w", metastore.ErrConflict)
	}
	return vs, err
}

// lateReplies delays the reply of each stream-record read (plan.deleteRaces)
// by up to max after the read was served, as a network does: the value
// read may be stale by the time the caller acts on it. (The FaultStore's
// latency comes before a call is served, so on its own it never opens
// this window.) The delay is keyed like every other fault draw.
type lateReplies struct {
	metastore.Store
	max   time.Duration
	mu    sync.Mutex
	draws *fault.Draws
}

// MaxCommitOps, MaxCommitBytes and OpBytes pass the limits of the store
// below through: a wrapper that hid them would have the absorb and settle
// plan Commits the store then refuses.
func (s *lateReplies) MaxCommitOps() int           { return metastore.MaxCommitOps(s.Store) }
func (s *lateReplies) MaxCommitBytes() int         { return metastore.MaxCommitBytes(s.Store) }
func (s *lateReplies) OpBytes(op metastore.Op) int { return metastore.OpBytes(s.Store, op) }

func (s *lateReplies) Get(ctx context.Context, key string) (metastore.Item, error) {
	it, err := s.Store.Get(ctx, key)
	if !strings.HasPrefix(key, "streams/") {
		return it, err
	}
	s.mu.Lock()
	d := nsUpTo(s.draws.Rand("late", key), s.max)
	s.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return it, err
	case <-ctx.Done():
		return metastore.Item{}, fmt.Errorf("sim: reply of Get %q: %w", key, ctx.Err())
	}
}
