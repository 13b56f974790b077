package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/metastore"
)

// sealWatch is one process's view of the metastore as the seal checker sees
// it: below every fault wrapper, it knows which process writes. For every
// applied write to a chain's checkpoint it checks that the seal is binding
// (docs/design.md, invariant 8): the checkpoint's owner changes only through
// a seal (a candidate writing its own seal for the epoch after the record's
// current one, alone, or with that epoch's mint when the current one is
// sealed cleanly: nothing is fenced between them), and a process never rewrites a checkpoint that carries
// another owner's seal except by sealing it for a takeover of its own.
type sealWatch struct {
	metastore.Store
	o      *observer
	writer string
}

func (m sealWatch) Put(ctx context.Context, key string, value []byte, expect metastore.Version) (metastore.Version, error) {
	m.o.sealMu.Lock()
	defer m.o.sealMu.Unlock()
	check := m.before(ctx, []metastore.Op{{Kind: metastore.OpPut, Key: key, Value: value}})
	v, err := m.Store.Put(ctx, key, value, expect)
	if err == nil {
		check()
	}
	return v, err
}

func (m sealWatch) Commit(ctx context.Context, ops []metastore.Op) ([]metastore.Version, error) {
	m.o.sealMu.Lock()
	defer m.o.sealMu.Unlock()
	check := m.before(ctx, ops)
	vs, err := m.Store.Commit(ctx, ops)
	if err == nil {
		check()
	}
	return vs, err
}

// before reads what the checks need from the state before ops apply and
// returns the check to run once they have. Callers hold o.sealMu.
func (m sealWatch) before(ctx context.Context, ops []metastore.Op) func() {
	var checks []func()
	for _, c := range chain.Classes() {
		cpKey, epKey := chain.CheckpointKey(starName, c), chain.EpochKey(starName, c)
		var newCP *absorb.Checkpoint
		epochNew := uint64(0)
		for _, op := range ops {
			if op.Kind != metastore.OpPut {
				continue
			}
			switch op.Key {
			case cpKey:
				cp, err := absorb.DecodeCheckpoint(op.Value)
				if err != nil {
					m.o.sealViolation("metastore: %s writes a checkpoint of %s that does not decode: %v", m.writer, c, err)
					continue
				}
				newCP = &cp
			case epKey:
				var rec chain.EpochRecord
				if json.Unmarshal(op.Value, &rec) == nil {
					epochNew = rec.Epoch
				}
			}
		}
		if newCP == nil {
			continue
		}
		var old *absorb.Checkpoint
		if it, err := m.Store.Get(ctx, cpKey); err == nil {
			if cp, err := absorb.DecodeCheckpoint(it.Value); err == nil {
				old = &cp
			}
		} else if !errors.Is(err, metastore.ErrNotFound) {
			continue // cannot judge
		}
		epochNow, cleanNow := uint64(0), false
		if rec, _, err := chain.ReadEpoch(ctx, m.Store, starName, c); err == nil {
			epochNow = rec.Epoch
			cleanNow = rec.Seal != nil && rec.Seal.Epoch == rec.Epoch
		}
		if epochNew == 0 {
			epochNew = epochNow
		}
		nw, class, writer := *newCP, c, m.writer
		checks = append(checks, func() {
			m.o.sealWrites++
			switch {
			case old != nil && old.Owner == nw.Owner && old.Owner == writer:
				// Its own seal: an absorb round, or a mint moving it to the
				// new epoch.
			case nw.Owner == writer && nw.OwnerEpoch == epochNow+1 && epochNew == epochNow:
				m.o.seals++ // a seal for a takeover of its own
			case cleanNow && nw.Owner == writer && nw.OwnerEpoch == epochNow+1 && epochNew == epochNow+1:
				m.o.seals++ // a clean takeover's seal and mint in one Commit
			case old == nil && nw.Owner == writer && nw.OwnerEpoch == epochNew:
				// The first checkpoint of a chain.
			default:
				from := "none"
				if old != nil {
					from = old.Owner
				}
				m.o.sealViolations++
				m.o.sealViolation("metastore: %s checkpoint's seal moved from %q to %q (owner epoch %d) by %s outside a seal (epoch record at %d, %d after the write): the seal is binding",
					class, from, nw.Owner, nw.OwnerEpoch, writer, epochNow, epochNew)
			}
		})
	}
	return func() {
		for _, c := range checks {
			c()
		}
	}
}

// sealViolation records a finding of the seal checker. Callers hold
// o.sealMu.
func (o *observer) sealViolation(format string, args ...any) {
	if len(o.sealBad) < 20 {
		o.sealBad = append(o.sealBad, fmt.Sprintf(format, args...))
	}
}

// MaxCommitOps passes the limit of the store below through.
func (m sealWatch) MaxCommitOps() int { return metastore.MaxCommitOps(m.Store) }

// MaxCommitBytes and OpBytes pass the byte limit of the store below through.
func (m sealWatch) MaxCommitBytes() int         { return metastore.MaxCommitBytes(m.Store) }
func (m sealWatch) OpBytes(op metastore.Op) int { return metastore.OpBytes(m.Store, op) }
