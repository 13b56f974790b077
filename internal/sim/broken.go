package sim

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"

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
	mu  sync.Mutex
	rng *rand.Rand
	p   float64
}

func (b *losingBucket) PutIfAbsent(ctx context.Context, key string, body []byte) error {
	if strings.HasPrefix(key, "chains/") {
		b.mu.Lock()
		lose := b.rng.Float64() < b.p
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
