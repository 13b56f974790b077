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
	// committed: the nonce of the flight each slot was decided committed
	// with (W copies of it), so the checker can read a slot back after
	// settlement deleted it.
	committed map[slotID]envelope.Nonce
	repoints  int // ref overwrites checked (settle's repoints)
	// reclaimRaces: refs settle repointed or merged away whose records a
	// reclaim (Trim, DeleteStream) had already deleted: trimmed or dead.
	reclaimRaces int
	trims        [2]chain.TrimCursor // each chain's trim cursor as last written
	retainTrim   map[string]uint64   // retained streams' trim points as written
	flips        []flip
	cuts         map[epochID]chain.Cut // every cut recorded in any epoch record
	latest       [2]uint64             // highest epoch minted per class
	bad          []string              // findings made while observing

	// The seal checker's (sealwatch.go), under sealMu: checkpoint writes
	// seen, seals among them, and writes that broke the binding seal.
	sealMu                            sync.Mutex
	sealWrites, seals, sealViolations int
	sealBad                           []string
}

func newObserver(w *world) *observer {
	return &observer{w: w, flights: map[slotID]map[envelope.Nonce][]byte{}, decided: map[slotID]chain.Decision{}, committed: map[slotID]envelope.Nonce{}, cuts: map[epochID]chain.Cut{}, retainTrim: map[string]uint64{}}
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
	occ := o.occupants(id)
	d := chain.Decide(len(o.w.mems[id.c]), o.w.quorum(id.c), occ)
	if d == chain.Undecided {
		return
	}
	if d == chain.Committed {
		for _, a := range occ {
			same := 0
			for _, b := range occ {
				if a.Kind == chain.OccupantFlight && b.Kind == chain.OccupantFlight && a.Nonce == b.Nonce {
					same++
				}
			}
			if same >= o.w.quorum(id.c) {
				if prev, ok := o.committed[id]; ok && prev != a.Nonce {
					o.violation("%s: slot %d of epoch %d was committed with one flight and later with another", id.c, id.slot, id.epoch)
				}
				o.committed[id] = a.Nonce
				break
			}
		}
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
		if (chain.Position{Epoch: id.epoch, Next: id.slot}).Less(b.o.trims[id.c].At) {
			// A write into a settled slot (deleted, or about to be): a
			// deposed incumbent's fence that began before its successor
			// settled can still poison it, and a zombie's straggler land
			// in it. Nothing reads it any more, and the fence takes the
			// recorded cut over what it found (work.Env.fence), so the
			// slot keeps the decision it had while it counted; an outcome
			// that came of a forged cut is caught by the outcome checks.
			return err
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
	if (chain.Position{Epoch: id.epoch, Next: id.slot}).Less(b.o.trims[id.c].At) {
		// Trim deleting a settled slot: nothing reads it any more, and a
		// bucket that refused the delete (a zone down) may leave copies
		// (poison among them) that decide anything. The slot's decision
		// stays the one it had while it counted.
		return err
	}
	b.o.redecide(id)
	return err
}

// observedMeta wraps the metastore: it records every cut an epoch record
// ever carries (and flags one that changes), checks every trim cursor
// write, and checks every write that replaces or deletes a span ref beside
// a replacement (absorb creates refs only if absent; settle's repoint
// replaces them by settled refs holding the same records: see
// settlecheck.go).
type observedMeta struct {
	metastore.Store
	o *observer
}

func (m observedMeta) Put(ctx context.Context, key string, value []byte, expect metastore.Version) (metastore.Version, error) {
	m.o.mu.Lock()
	defer m.o.mu.Unlock()
	old := m.refValue(ctx, key)
	v, err := m.Store.Put(ctx, key, value, expect)
	if err == nil {
		m.wrote(ctx, key, value)
		if old != nil {
			m.o.checkRefWrites(ctx, []refWrite{{key: key, old: old, new: value}})
		}
	}
	return v, err
}

func (m observedMeta) Commit(ctx context.Context, ops []metastore.Op) ([]metastore.Version, error) {
	m.o.mu.Lock()
	defer m.o.mu.Unlock()
	var ws []refWrite
	for _, op := range ops {
		if op.Kind == metastore.OpPut || op.Kind == metastore.OpDelete {
			if old := m.refValue(ctx, op.Key); old != nil {
				rw := refWrite{key: op.Key, old: old}
				if op.Kind == metastore.OpPut {
					rw.new = op.Value
				}
				ws = append(ws, rw)
			}
		}
	}
	vs, err := m.Store.Commit(ctx, ops)
	if err == nil {
		for _, op := range ops {
			if op.Kind == metastore.OpPut {
				m.wrote(ctx, op.Key, op.Value)
			}
		}
		m.o.checkRefWrites(ctx, ws)
	}
	return vs, err
}

// refValue is the value of the span ref at key, or nil (none, or not a
// ref key).
func (m observedMeta) refValue(ctx context.Context, key string) []byte {
	if !strings.HasPrefix(key, "refs/") {
		return nil
	}
	it, err := m.Store.Get(ctx, key)
	if err != nil {
		return nil
	}
	return it.Value
}

// wrote records one applied write. Callers hold o.mu.
func (m observedMeta) wrote(ctx context.Context, key string, value []byte) {
	o := m.o
	if name, ok := strings.CutPrefix(key, "streams/"); ok && o.w != nil {
		m.streamWrite(name, value)
	}
	for _, c := range chain.Classes() {
		if key == chain.TrimKey(starName, c) {
			m.trimWrite(ctx, c, value)
		}
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

// streamWrite notes a stream record write (under o.mu): a retained
// stream's record whose trim point rose is a trim its leader's retention
// pass made, which the checker then knows as a trim point the stream had
// from this moment (the trimmer's own Trim calls are recorded where they
// are made).
func (m observedMeta) streamWrite(key string, value []byte) {
	o, w := m.o, m.o.w
	var rec simStreamRecord
	if err := json.Unmarshal(value, &rec); err != nil || !w.retainedNames[rec.Name] || key != chain.StreamKey(rec.Name) {
		return
	}
	if rec.TrimSeq > o.retainTrim[rec.Name] {
		o.retainTrim[rec.Name] = rec.TrimSeq
		w.h.observedTrim(rec.Name, rec.TrimSeq)
	}
}
