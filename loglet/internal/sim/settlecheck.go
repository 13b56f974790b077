package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/settle"
)

// Settlement and stream trim, as the checker sees them (docs/design.md,
// "Settlement" and "Stream trim and retention"; docs/settlement.md;
// docs/operations.md, "Trim and retention").
//
// Settle passes rewrite absorbed transit slots into settled objects,
// repoint refs onto them by CAS, advance the trim cursor and delete the
// slots; Star.Trim raises a stream's trim point and reclaims the refs
// below it. What is legitimate:
//
//   - A ref is overwritten only by a settled ref of the same stream whose
//     records over the old ref's range are the old ref's, byte for byte
//     (checked by the observer as each repoint applies); a ref deleted in
//     the same Commit is covered the same way. A ref that changes any
//     other way is a violation (absorb creates refs only if absent).
//   - The trim cursor never moves back and never passes the checkpoint.
//   - At the end, every live ref (its incarnation's record exists and the
//     ref ends above the trim point) reads back, every extent from some
//     copy in its bucket set with a good CRC, and its records are the
//     chain's at those seqs; and the live refs cover each stream from its
//     trim point to its tail.
//   - No read returns a record below a trim point after the Trim call
//     returned (a Reader's session honours one within 5 s: documented).
//
// The chain's history below the trim cursor (slots settlement deleted) is
// rebuilt from the observer's copy of each slot's committed flight, so
// every check of the final state still runs over every seq ever committed.

// extentRecords reads extent e of the ref of stream id from the bare
// buckets: a settled object from the Standard set, a slot from its class's,
// from the first copy whose frame decodes (length and CRC).
func (w *world) extentRecords(ctx context.Context, id string, e absorb.Extent) ([]envelope.Record, error) {
	c := loglet.Standard
	if !chain.IsSettledKey(e.Key) {
		_, sc, _, _, ok := chain.ParseSlotKey(e.Key)
		if !ok {
			return nil, fmt.Errorf("extent key %s is neither a slot nor a settled object", e.Key)
		}
		c = sc
	}
	var errs []error
	for i, m := range w.mems[c] {
		data, err := m.Get(ctx, e.Key, int64(e.Offset), int64(e.Length))
		if err == nil {
			var recs []envelope.Record
			if recs, err = envelope.DecodeFrame(e.FrameInfo(id), data); err == nil {
				return recs, nil
			}
		}
		errs = append(errs, fmt.Errorf("copy %d: %w", i, err))
	}
	return nil, fmt.Errorf("no good copy of %s [%d+%d) (records %d-%d): %w", e.Key, e.Offset, e.Length, e.FirstSeq, e.FirstSeq+uint64(e.Count)-1, errors.Join(errs...))
}

// refRecords reads every record of a ref, by seq.
func (w *world) refRecords(ctx context.Context, sr absorb.SpanRef) (map[uint64]envelope.Record, error) {
	out := make(map[uint64]envelope.Record, sr.End-sr.Start)
	for _, e := range sr.Extents {
		recs, err := w.extentRecords(ctx, sr.Stream, e)
		if err != nil {
			return nil, err
		}
		for i, r := range recs {
			out[e.FirstSeq+uint64(i)] = r
		}
	}
	return out, nil
}

// refWrite is one applied write to a ref key: the value it replaced (nil:
// none) and the new one (nil: a delete).
type refWrite struct {
	key      string
	old, new []byte
}

// checkRefWrites judges the ref writes of one applied Put or Commit (the
// observer's, under o.mu): an overwrite must be settle's repoint, and a ref
// deleted beside it must be covered by it.
func (o *observer) checkRefWrites(ctx context.Context, ws []refWrite) {
	var puts []absorb.SpanRef
	for _, rw := range ws {
		if rw.new == nil || rw.old == nil {
			continue
		}
		nr, err := absorb.DecodeRef(rw.new)
		if err != nil || !nr.Settled() {
			o.violation("metastore: span ref %s was overwritten by a ref that is not settled (refs are created only if absent; only settle repoints them)", rw.key)
			continue
		}
		o.repoints++
		o.covered(ctx, rw.key, rw.old, nr, "overwritten")
		puts = append(puts, nr)
	}
	if len(puts) == 0 {
		return
	}
	for _, rw := range ws {
		if rw.new != nil || rw.old == nil {
			continue
		}
		old, err := absorb.DecodeRef(rw.old)
		if err != nil {
			continue
		}
		for _, nr := range puts {
			if nr.Stream == old.Stream && nr.Start <= old.Start && old.End <= nr.End {
				o.covered(ctx, rw.key, rw.old, nr, "deleted")
				break
			}
		}
	}
}

// covered checks that settled ref nr holds the records of the ref value
// old (at key), byte for byte.
func (o *observer) covered(ctx context.Context, key string, oldVal []byte, nr absorb.SpanRef, how string) {
	old, err := absorb.DecodeRef(oldVal)
	if err != nil {
		o.violation("metastore: ref %s, %s by settle, did not decode before: %v", key, how, err)
		return
	}
	if old.Stream != nr.Stream || nr.Start > old.Start || old.End > nr.End {
		o.violation("metastore: ref %s [%d, %d) of %q was %s by a settled ref [%d, %d) of %q that does not cover it", key, old.Start, old.End, trunc([]byte(old.Stream)), how, nr.Start, nr.End, trunc([]byte(nr.Stream)))
		return
	}
	was, err := o.w.refRecords(ctx, old)
	if err != nil {
		// A Trim's (or DeleteStream's) reclaim deletes the settled objects
		// of the refs it dooms before the refs themselves, so settle may
		// merge a ref whose object is gone: legitimate only if nothing can
		// read those records any more.
		name, _ := chain.SplitStreamID(old.Stream)
		rec, rerr := o.w.streamRecord(ctx, name)
		if errors.Is(rerr, metastore.ErrNotFound) || (rerr == nil && (rec.id() != old.Stream || old.End <= rec.TrimSeq)) {
			o.reclaimRaces++
			return
		}
		o.violation("metastore: ref %s [%d, %d), %s by settle, no longer read back before it: %v", key, old.Start, old.End, how, err)
		return
	}
	now, err := o.w.refRecords(ctx, nr)
	if err != nil {
		o.violation("metastore: the settled ref that replaced ref %s [%d, %d) does not read back: %v", key, nr.Start, nr.End, err)
		return
	}
	for seq := old.Start; seq < old.End; seq++ {
		a, ok1 := was[seq]
		b, ok2 := now[seq]
		if !ok1 || !ok2 || !sameRecord(a, b) {
			o.violation("metastore: ref %s %s by settle: seq %d of %q differs in the settled object (before %v, after %v)", key, how, seq, trunc([]byte(old.Stream)), ok1, ok2)
			return
		}
	}
}

// trimWrite checks a write of a chain's trim cursor (under o.mu): it never
// moves back and never passes the checkpoint.
func (m observedMeta) trimWrite(ctx context.Context, c chain.Class, value []byte) {
	o := m.o
	t, err := chain.DecodeTrimCursor(value)
	if err != nil {
		o.violation("metastore: %s trim cursor does not decode: %v", c, err)
		return
	}
	prev := o.trims[c]
	if t.At.Less(prev.At) || t.Deleted.Less(prev.Deleted) {
		o.violation("metastore: %s trim cursor went back from at %+v deleted %+v to at %+v deleted %+v", c, prev.At, prev.Deleted, t.At, t.Deleted)
	}
	o.trims[c] = t
	if cp, _, err := absorb.ReadCheckpoint(ctx, m.Store, starName, c); err == nil && (chain.Position{Epoch: cp.Epoch, Next: cp.Next}).Less(t.At) {
		o.violation("metastore: %s trim cursor at %+v passes the checkpoint (%d, %d)", c, t.At, cp.Epoch, cp.Next)
	}
}

// checkRefs reads every ref in the metastore back after the run. A live
// ref (its incarnation's record exists, it ends above the trim point) must
// read from its bucket set with good CRCs, and, on this star, hold the
// chain's records (byID, from the walk); the live refs of each stream in
// final must cover it from its trim point to its tail.
func (w *world) checkRefs(ctx context.Context, byID map[string][]loglet.SequencedRecord, final map[string][]loglet.SequencedRecord) {
	bad := w.h.violation
	type stream struct {
		rec  simStreamRecord
		err  error
		cuts [][2]uint64 // live refs' [start, end)
	}
	streams := map[string]*stream{}
	lookup := func(name string) *stream {
		s := streams[name]
		if s == nil {
			s = &stream{}
			s.rec, s.err = w.streamRecord(ctx, name)
			streams[name] = s
		}
		return s
	}
	objects := map[string]bool{}
	after := ""
	for {
		items, err := w.meta.Scan(ctx, "refs/", after, 512)
		if err != nil {
			bad("refs: scan: %v", err)
			return
		}
		for _, it := range items {
			sr, err := absorb.DecodeRef(it.Value)
			if err != nil {
				bad("ref %s does not decode: %v", it.Key, err)
				continue
			}
			name, _ := chain.SplitStreamID(sr.Stream)
			s := lookup(name)
			if errors.Is(s.err, metastore.ErrNotFound) || (s.err == nil && s.rec.id() != sr.Stream) {
				continue // a deleted incarnation's: unreadable, settlement reclaims it
			} else if s.err != nil {
				bad("ref %s: read its stream record: %v", it.Key, s.err)
				continue
			}
			if sr.End <= s.rec.TrimSeq {
				continue // trimmed: unreadable, reclaimed by the next Trim, retention or settle
			}
			w.res.RefsChecked++
			if sr.Settled() {
				w.res.SettledRefs++
				for _, e := range sr.Extents {
					objects[e.Key] = true
				}
			}
			recs, err := w.refRecords(ctx, sr)
			if err != nil {
				bad("live ref %s [%d, %d) of %s (settled %v) points at data that is gone: %v", it.Key, sr.Start, sr.End, trunc([]byte(name)), sr.Settled(), err)
				continue
			}
			s.cuts = append(s.cuts, [2]uint64{sr.Start, sr.End})
			hist, ok := byID[sr.Stream]
			if !ok {
				continue // another star's stream (the neighbour): its chain is not walked
			}
			for seq := sr.Start; seq < sr.End; seq++ {
				if seq >= uint64(len(hist)) || !sameRecord(recs[seq], hist[seq].Record) {
					bad("live ref %s [%d, %d) of %s (settled %v): seq %d differs from the chain's (which holds %d records)", it.Key, sr.Start, sr.End, trunc([]byte(name)), sr.Settled(), seq, len(hist))
					break
				}
			}
		}
		if len(items) < 512 {
			break
		}
		after = items[len(items)-1].Key
	}
	// Coverage: every stream the final read covers, from its trim point
	// to its tail.
	for name, recs := range final {
		s := lookup(name)
		if s.err != nil {
			continue
		}
		hist := byID[s.rec.id()]
		end := uint64(len(hist))
		cuts := s.cuts
		slices.SortFunc(cuts, func(a, b [2]uint64) int { return int(a[0]) - int(b[0]) })
		next := min(s.rec.TrimSeq, end)
		for _, k := range cuts {
			if k[0] > next {
				break
			}
			next = max(next, k[1])
		}
		if next < end {
			bad("the live refs of %s cover it from its trim point %d to %d, not to its tail %d (the final read has %d records)", trunc([]byte(name)), s.rec.TrimSeq, next, end, len(recs))
		}
	}
	// Settled objects with fewer copies than the Standard set has buckets.
	for key := range objects {
		n := 0
		for _, m := range w.mems[loglet.Standard] {
			if _, err := m.Get(ctx, key, 0, 1); err == nil {
				n++
			}
		}
		if n < len(w.mems[loglet.Standard]) {
			w.res.UnderReplicated++
		}
	}
}

// checkTrims: no read that began after a Trim returned holds a record
// below the trim point it left (trimOp.left: not what the record holds
// after it, which a retention pass may have raised meanwhile). A Reader's
// session re-reads the stream record at most every 5 s while it reads
// (docs/operations.md, "Trim and retention"), so its reads get that long.
func (w *world) checkTrims(reads []readOp) {
	w.h.mu.Lock()
	trims := slices.Clone(w.h.trims)
	w.h.mu.Unlock()
	by := map[string][]trimOp{}
	for _, t := range trims {
		if t.ok {
			by[t.stream] = append(by[t.stream], t)
		}
	}
	n := 0
	for _, r := range reads {
		if len(r.ids) == 0 {
			continue
		}
		for _, t := range by[r.stream] {
			if t.ret >= r.call || r.from >= t.left {
				continue
			}
			if r.who == "reader-session" && r.at.Sub(t.retAt) < 5*time.Second+time.Second {
				continue
			}
			if n++; n <= 5 {
				w.h.violation("%s read of %s returned seq %d, below the trim point %d a Trim (to %d) had left before the read began", r.who, r.stream, r.from, t.left, t.seq)
			}
			break
		}
	}
}

// finalTrims checks each trimmed stream's trim point at the end against
// the Trim calls: at least what every successful one left, at most what
// one asked for (or left).
func (w *world) finalTrims(ctx context.Context) {
	w.h.mu.Lock()
	trims := slices.Clone(w.h.trims)
	w.h.mu.Unlock()
	lo, hi := map[string]uint64{}, map[string]uint64{}
	for _, t := range trims {
		if t.ok {
			lo[t.stream] = max(lo[t.stream], t.actual)
		}
		hi[t.stream] = max(hi[t.stream], t.seq, t.actual)
	}
	for stream := range hi {
		got, err := w.trimSeqOf(ctx, stream)
		if err != nil {
			w.h.violation("trimmed stream %s: read its record: %v", stream, err)
			continue
		}
		if got < lo[stream] || got > hi[stream] {
			w.h.violation("trimmed stream %s ends with trim point %d; the Trim calls left at least %d and asked for at most %d", stream, got, lo[stream], hi[stream])
		}
	}
}

// settleSummary adds every process's settle figures (both classes, the
// neighbour's too) to the result.
func (w *world) settleSummary() {
	var stats []loglet.Stats
	for _, pr := range w.allProcs() {
		if pr.star != nil {
			stats = append(stats, pr.star.Stats())
		}
	}
	if w.nb != nil {
		stats = append(stats, w.nb.Stats())
	}
	for _, st := range stats {
		for _, cs := range []*loglet.ClassStats{st.Standard, st.Express} {
			if cs == nil {
				continue
			}
			s := cs.Settle
			w.res.SettlePasses += s.Passes
			w.res.SettleFailures += s.Failures
			w.res.SettledObjects += s.Objects
			w.res.Repointed += s.Repointed
			w.res.Reclaimed += s.Reclaimed
			w.res.DeletedCopies += s.DeletedCopies
		}
	}
	w.obs.mu.Lock()
	w.res.Repoints = w.obs.repoints
	w.res.ReclaimRaces = w.obs.reclaimRaces
	w.h.mu.Lock()
	w.res.RetentionTrims = w.h.retentionTrims
	w.h.mu.Unlock()
	w.obs.mu.Unlock()
}

// checkSettledLeaks, after every process has closed: each settled object
// in the Standard buckets is pointed at by a ref, or named by a marker a
// settle pass works off (doomed, pending, deleting: settle.MarkedObjects),
// or belongs to a deleted incarnation whose reclaim is still pending (its
// marker under chain.DeletedPrefix). Anything else is a leak nothing
// would ever delete. And a doomed object whose grace ran out well before
// the 90 healed seconds ended is deleted: passes run when one falls due,
// idle or not. (The grace is settle.DefaultDoomedGrace: the simulation
// does not override it.)
func (w *world) checkSettledLeaks(ctx context.Context, healedAt time.Time) {
	bad := w.h.violation
	referenced := map[string]bool{}
	for after := ""; ; {
		items, err := w.meta.Scan(ctx, "refs/", after, 512)
		if err != nil {
			bad("settled leaks: scan refs: %v", err)
			return
		}
		for _, it := range items {
			if sr, err := absorb.DecodeRef(it.Value); err == nil {
				for _, e := range sr.Extents {
					referenced[e.Key] = true
				}
			}
		}
		if len(items) < 512 {
			break
		}
		after = items[len(items)-1].Key
	}
	marked, err := settle.MarkedObjects(ctx, w.meta)
	if err != nil {
		bad("settled leaks: the settle markers: %v", err)
		return
	}
	deleted := map[string]bool{} // settled-object prefixes of incarnations whose reclaim is pending
	for after := ""; ; {
		items, err := w.meta.Scan(ctx, chain.DeletedPrefix, after, 512)
		if err != nil {
			bad("settled leaks: scan the deleted-incarnation markers: %v", err)
			return
		}
		for _, it := range items {
			var rec simStreamRecord
			if json.Unmarshal(it.Value, &rec) == nil {
				deleted[chain.SettledPrefixKey(rec.id())] = true
			}
		}
		if len(items) < 512 {
			break
		}
		after = items[len(items)-1].Key
	}
	n := 0
	for i, m := range w.mems[loglet.Standard] {
		for _, key := range m.Keys() {
			if !chain.IsSettledKey(key) || referenced[key] || marked[key] {
				continue
			}
			pending := false
			for p := range deleted {
				if strings.HasPrefix(key, p) {
					pending = true
					break
				}
			}
			if pending {
				continue
			}
			if n++; n <= 5 {
				bad("settled object %s in standard bucket %d: no ref points at it and no marker names it (a leak nothing reclaims)", key, i)
			}
		}
	}
	w.res.LeakedObjects = n
	grace := settle.DefaultDoomedGrace.Milliseconds()
	late := 0
	for after := ""; ; {
		items, err := w.meta.Scan(ctx, "stars/", after, 512)
		if err != nil {
			bad("settled leaks: scan the doomed markers: %v", err)
			return
		}
		for _, it := range items {
			if !strings.Contains(it.Key, "/doomed/") {
				continue
			}
			d, err := settle.DecodeMarker(it.Value)
			if err != nil {
				continue
			}
			var objs []string
			pending := false
			for _, n := range d.Names() { // a chunk marker names many
				objs = append(objs, n.Key)
				pending = pending || n.Ref != ""
			}
			if pending {
				continue
			}
			if due := d.At + grace; due+20_000 < healedAt.UnixMilli() {
				if late++; late <= 5 {
					bad("doomed settled objects %v were due at %v, %v before the healed idle ended, and are still there", objs, time.UnixMilli(due).UTC(), healedAt.Sub(time.UnixMilli(due)))
				}
			}
		}
		if len(items) < 512 {
			break
		}
		after = items[len(items)-1].Key
	}
}
