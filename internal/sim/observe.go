package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// slotID names one chain slot.
type slotID struct {
	c           loglet.Class
	epoch, slot uint64
}

type epochID struct {
	c     loglet.Class
	epoch uint64
}

// flip is a slot whose decision changed from one permanent state to the
// other (committed to dead or back), as the observer saw the occupants.
type flip struct {
	id       slotID
	from, to chain.Decision
}

// observer records the ground truth as it happens, below every fault wrapper
// and planted bug: each flight copy ever stored in a bucket, each slot's
// decision from its occupants after every write to it (chain.Decide over the
// K buckets, one atomic view), and each cut ever recorded in an epoch
// record. The checker judges them after the run.
type observer struct {
	w  *world
	mu sync.Mutex // serializes observed writes with the views they decide from

	flights map[slotID]map[envelope.Nonce][]byte // every flight copy ever written
	decided map[slotID]chain.Decision            // last permanent decision seen
	flips   []flip
	cuts    map[epochID]chain.Cut // every cut recorded in any epoch record
	latest  [2]uint64             // highest epoch minted per class
	bad     []string              // findings made while observing

	// The seal checker's (sealwatch.go), under sealMu: checkpoint writes
	// seen, seals among them, and writes that broke the binding seal.
	sealMu                            sync.Mutex
	sealWrites, seals, sealViolations int
	sealBad                           []string
}

func newObserver(w *world) *observer {
	return &observer{w: w, flights: map[slotID]map[envelope.Nonce][]byte{}, decided: map[slotID]chain.Decision{}, cuts: map[epochID]chain.Cut{}}
}

func (o *observer) violation(format string, args ...any) {
	if len(o.bad) < 20 {
		o.bad = append(o.bad, fmt.Sprintf(format, args...))
	}
}

// parseSlotKey is chain.SlotKey's inverse for this run's star.
func parseSlotKey(key string) (slotID, bool) {
	parts := strings.Split(key, "/")
	if len(parts) != 5 || parts[0] != "chains" || parts[1] != starName {
		return slotID{}, false
	}
	c, err := chain.ParseClass(parts[2])
	e, err1 := strconv.ParseUint(parts[3], 10, 64)
	s, err2 := strconv.ParseUint(parts[4], 10, 64)
	if err != nil || err1 != nil || err2 != nil {
		return slotID{}, false
	}
	return slotID{c, e, s}, true
}

func (w *world) quorum(c loglet.Class) int {
	if c == loglet.Express {
		return 2
	}
	return w.p.stdK/2 + 1
}

// occupants reads what every bucket of the class holds at id, as chain's
// fence would classify it (no body check). Callers hold o.mu.
func (o *observer) occupants(id slotID) []chain.Occupant {
	key := chain.SlotKey(starName, id.c, id.epoch, id.slot)
	var occ []chain.Occupant
	for _, m := range o.w.mems[id.c] {
		b, err := m.Get(context.Background(), key, 0, envelope.EnvelopeSize)
		if err != nil {
			occ = append(occ, chain.Occupant{Kind: chain.OccupantUnknown, Err: err})
			continue
		}
		env, err := envelope.ParseEnvelope(b)
		switch {
		case err != nil:
			occ = append(occ, chain.Occupant{Kind: chain.OccupantCorrupt, Err: err})
		case env.Epoch == id.epoch && env.Slot == id.slot && env.Kind == envelope.KindFlight:
			occ = append(occ, chain.Occupant{Kind: chain.OccupantFlight, Nonce: env.Nonce})
		case env.Epoch == id.epoch && env.Slot == id.slot && env.Kind == envelope.KindPoison:
			occ = append(occ, chain.Occupant{Kind: chain.OccupantPoison, Nonce: env.Nonce})
		default:
			occ = append(occ, chain.Occupant{Kind: chain.OccupantForeign})
		}
	}
	return occ
}

// decide is chain.Decide over the slot's current occupants. Callers hold o.mu.
func (o *observer) decide(id slotID) chain.Decision {
	return chain.Decide(len(o.w.mems[id.c]), o.w.quorum(id.c), o.occupants(id))
}

// redecide records the slot's decision after a write to it, and any flip.
// Callers hold o.mu.
func (o *observer) redecide(id slotID) {
	d := o.decide(id)
	if d == chain.Undecided {
		return
	}
	if prev, ok := o.decided[id]; ok && prev != d {
		o.flips = append(o.flips, flip{id, prev, d})
	}
	o.decided[id] = d
}

// observedBucket wraps one bucket's Mem: every chain write through it is
// recorded and re-decided atomically with the write.
type observedBucket struct {
	*objstore.Mem
	o *observer
}

func (b observedBucket) PutIfAbsent(ctx context.Context, key string, body []byte) error {
	id, chainKey := parseSlotKey(key)
	if !chainKey {
		return b.Mem.PutIfAbsent(ctx, key, body)
	}
	b.o.mu.Lock()
	defer b.o.mu.Unlock()
	err := b.Mem.PutIfAbsent(ctx, key, body)
	if err == nil {
		if env, perr := envelope.ParseEnvelope(body); perr == nil && env.Kind == envelope.KindFlight {
			n := b.o.flights[id]
			if n == nil {
				n = map[envelope.Nonce][]byte{}
				b.o.flights[id] = n
			}
			if _, ok := n[env.Nonce]; !ok {
				n[env.Nonce] = append([]byte(nil), body...)
			}
		}
		b.o.redecide(id)
	}
	return err
}

func (b observedBucket) Delete(ctx context.Context, key string) error {
	id, chainKey := parseSlotKey(key)
	if !chainKey {
		return b.Mem.Delete(ctx, key)
	}
	b.o.mu.Lock()
	defer b.o.mu.Unlock()
	err := b.Mem.Delete(ctx, key)
	b.o.redecide(id)
	return err
}

// observedMeta wraps the metastore: it records every cut an epoch record
// ever carries (and flags one that changes), and flags any write that
// replaces an existing span ref (absorb creates refs only if absent; settle,
// the only repointer, does not run here).
type observedMeta struct {
	metastore.Store
	o *observer
}

func (m observedMeta) Put(ctx context.Context, key string, value []byte, expect metastore.Version) (metastore.Version, error) {
	m.o.mu.Lock()
	defer m.o.mu.Unlock()
	existed := m.refExists(ctx, key)
	v, err := m.Store.Put(ctx, key, value, expect)
	if err == nil {
		m.wrote(key, value, existed)
	}
	return v, err
}

func (m observedMeta) Commit(ctx context.Context, ops []metastore.Op) ([]metastore.Version, error) {
	m.o.mu.Lock()
	defer m.o.mu.Unlock()
	existed := make([]bool, len(ops))
	for i, op := range ops {
		existed[i] = op.Kind == metastore.OpPut && m.refExists(ctx, op.Key)
	}
	vs, err := m.Store.Commit(ctx, ops)
	if err == nil {
		for i, op := range ops {
			if op.Kind == metastore.OpPut {
				m.wrote(op.Key, op.Value, existed[i])
			}
		}
	}
	return vs, err
}

func (m observedMeta) refExists(ctx context.Context, key string) bool {
	if !strings.HasPrefix(key, "refs/") {
		return false
	}
	_, err := m.Store.Get(ctx, key)
	return err == nil
}

// wrote records one applied write. Callers hold o.mu.
func (m observedMeta) wrote(key string, value []byte, existed bool) {
	o := m.o
	if existed {
		o.violation("metastore: span ref %s was overwritten (refs are created only if absent)", key)
	}
	for _, c := range chain.Classes {
		if key != chain.EpochKey(starName, c) {
			continue
		}
		var rec chain.EpochRecord
		if err := json.Unmarshal(value, &rec); err != nil {
			o.violation("metastore: epoch record of %s does not parse: %v", c, err)
			return
		}
		if rec.Epoch < o.latest[c] {
			o.violation("metastore: %s epoch record went back from %d to %d", c, o.latest[c], rec.Epoch)
		}
		o.latest[c] = max(o.latest[c], rec.Epoch)
		cuts := append([]chain.Cut(nil), rec.Cuts...)
		for _, k := range rec.Cuts {
			if k.Epoch >= rec.Epoch {
				o.violation("metastore: %s epoch record %d carries a cut of epoch %d", c, rec.Epoch, k.Epoch)
			}
		}
		if rec.Seal != nil {
			if rec.Seal.Epoch != rec.Epoch {
				o.violation("metastore: %s epoch record %d carries a seal of epoch %d", c, rec.Epoch, rec.Seal.Epoch)
			}
			cuts = append(cuts, *rec.Seal)
		}
		for _, k := range cuts {
			id := epochID{c, k.Epoch}
			if prev, ok := o.cuts[id]; ok && prev.Slot != k.Slot {
				o.violation("metastore: the recorded cut of %s epoch %d changed from %d to %d", c, k.Epoch, prev.Slot, k.Slot)
				continue
			}
			if _, ok := o.cuts[id]; !ok {
				o.cuts[id] = k
			}
		}
	}
}

// cutOf returns the recorded cut of (c, e).
func (o *observer) cutOf(c loglet.Class, e uint64) (chain.Cut, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	k, ok := o.cuts[epochID{c, e}]
	return k, ok
}

// logWatch is the processes' slog handler: it passes events to inner
// (-sim.log) and nothing else.
type logWatch struct {
	w     *world
	inner slog.Handler
	attrs []slog.Attr
}

func (h logWatch) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner != nil && h.inner.Enabled(ctx, l)
}

func (h logWatch) Handle(ctx context.Context, r slog.Record) error {
	if h.inner != nil && h.inner.Enabled(ctx, r.Level) {
		return h.inner.Handle(ctx, r)
	}
	return nil
}

func (h logWatch) WithAttrs(as []slog.Attr) slog.Handler {
	h.attrs = append(slices.Clip(h.attrs), as...)
	if h.inner != nil {
		h.inner = h.inner.WithAttrs(as)
	}
	return h
}

func (h logWatch) WithGroup(name string) slog.Handler {
	if h.inner != nil {
		h.inner = h.inner.WithGroup(name)
	}
	return h
}
