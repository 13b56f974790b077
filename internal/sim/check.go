package sim

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/objstore"
)

// check runs the checker over the run's history and the final state.
//
// final holds each stream as the leader read it after the run (faults
// healed, every in-flight batch settled); st is the leader's Stats just
// before Close, after just after it.
func (w *world) check(ctx context.Context, pr *process, final map[string][]loglet.SequencedRecord, st, after loglet.Stats) {
	h := w.h
	h.mu.Lock()
	appends := slices.Clone(h.appends)
	reads := slices.Clone(h.reads)
	h.mu.Unlock()
	bad := h.violation

	// 1. Every append has exactly one outcome.
	for _, op := range appends {
		if op.out == outPending {
			bad("op %d on %s: no outcome", op.id, op.stream)
		}
	}

	// 2. The final state: contiguous seqs, each record from an acked or
	// unknown append, every batch whole, in order and present at most once;
	// every acked batch exactly at its ack.
	present := map[uint32]uint64{} // op -> seq of its first record
	for stream, recs := range final {
		for i, r := range recs {
			if r.Seq != uint64(i) {
				bad("final %s: position %d holds seq %d", stream, i, r.Seq)
				break
			}
			id, ok := parseRecordID(r.Body)
			if !ok {
				continue // observeRead reported it
			}
			op := h.byID[uint32(id>>16)]
			idx := int(id & 0xffff)
			if op == nil {
				continue
			}
			switch op.out {
			case outNotCommitted:
				bad("final %s: seq %d holds op %d, which ended not-committed (%v)", stream, r.Seq, op.id, op.err)
			case outPending:
				bad("final %s: seq %d holds op %d, which has no outcome", stream, r.Seq, op.id)
			}
			if idx == 0 {
				if s, dup := present[op.id]; dup {
					bad("final %s: op %d appears twice, at %d and %d", stream, op.id, s, r.Seq)
				}
				present[op.id] = r.Seq
			}
			first, ok := present[op.id]
			if !ok || r.Seq != first+uint64(idx) {
				bad("final %s: seq %d holds record %d of op %d out of place (batch starts at %v)", stream, r.Seq, idx, op.id, first)
			}
		}
	}
	for _, op := range appends {
		first, ok := present[op.id]
		n := uint64(len(op.recs))
		recs := final[op.stream]
		if ok && first+n > uint64(len(recs)) {
			bad("final %s: op %d is torn: %d of %d records", op.stream, op.id, uint64(len(recs))-first, n)
		}
		switch op.out {
		case outAcked:
			if !ok {
				bad("acked op %d on %s [%d, %d) is not in the final read (%d records)", op.id, op.stream, op.ack.Start, op.ack.End, len(recs))
			} else if first != op.ack.Start {
				bad("acked op %d on %s [%d, %d) was read back at %d", op.id, op.stream, op.ack.Start, op.ack.End, first)
			}
		case outUnknown:
			w.res.Unknown++
			if ok {
				w.res.UnknownPresent++
			}
		}
	}

	// 3. Every read during the run agrees with the final state (an unknown
	// outcome resolves one way for everyone; nothing read is ever taken
	// back).
	for _, r := range reads {
		recs := final[r.stream]
		for i, id := range r.ids {
			seq := r.from + uint64(i)
			if seq >= uint64(len(recs)) {
				bad("%s read of %s saw seq %d, past the final tail %d", r.who, r.stream, seq, len(recs))
				break
			}
			if fid, _ := parseRecordID(recs[seq].Body); fid != id {
				bad("%s read of %s saw %x at seq %d, the final read has %x", r.who, r.stream, id, seq, fid)
				break
			}
		}
	}
	w.res.Reads = len(reads)

	// 4. Storage: walk each chain's committed slots from the bucket layer
	// and compare with the leader's final read (invariants 1 and 4).
	w.checkChains(ctx, final, after)

	// 5. A fresh Reader in another process, after Close, reads every
	// acked record back (all of it, unless a successor deposed the leader
	// before it could absorb).
	w.checkFreshReader(ctx, final)

	// 6. Per-stream linearizability.
	if w.o.NoLinearizability {
		w.res.Linearizability = "skipped"
	} else {
		w.res.Linearizability = w.linearizable()
	}
}

// checkChains walks [0, release point) of each chain (or [0, cut) for a
// fenced one) and checks the records found there against the final read.
func (w *world) checkChains(ctx context.Context, final map[string][]loglet.SequencedRecord, after loglet.Stats) {
	bad := w.h.violation
	for _, c := range chain.Classes {
		cs := classStats(after, c)
		if cs == nil {
			continue
		}
		end := cs.ReleasePoint
		fenced := w.fenced != nil && w.fenced.class == c && w.fenced.epoch == cs.Epoch
		if fenced {
			if cs.ReleasePoint > w.fenced.cut {
				bad("%s: the incumbent released slot %d at or past the fence's cut %d (an ack disowned)", c, cs.ReleasePoint-1, w.fenced.cut)
			}
			end = max(w.fenced.cut, cs.ReleasePoint)
			cp, _, err := absorb.ReadCheckpoint(ctx, w.meta, starName, c)
			if err != nil || cp.Owner != w.fenced.owner {
				bad("%s: the successor's seal was overwritten (checkpoint owner %q, err %v): a deposed leader kept absorbing", c, cp.Owner, err)
			}
		}
		set := chain.BucketSet{Stores: w.buckets[c], W: []int{w.p.stdK/2 + 1, 2}[c], Retry: chain.RetryPolicy{MinBackoff: time.Millisecond, MaxBackoff: 50 * time.Millisecond}}
		// Invariant 1: every released slot holds W copies (corruption
		// flips bytes, it never removes a copy).
		for slot := uint64(0); slot < cs.ReleasePoint; slot++ {
			key := chain.SlotKey(starName, c, cs.Epoch, slot)
			n := 0
			for _, m := range w.mems[c] {
				if _, err := m.Get(ctx, key, 0, 1); err == nil {
					n++
				}
			}
			if n < set.W {
				bad("%s: released slot %d of epoch %d holds %d copies, W=%d", c, slot, cs.Epoch, n, set.W)
			}
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		walked := map[string][]loglet.SequencedRecord{}
		err := chain.Walk(wctx, set, starName, c, cs.Epoch, 0, end, func(slot uint64, obj []byte, frames []envelope.FrameInfo) error {
			for _, f := range frames {
				recs, err := envelope.DecodeFrame(f, obj[f.Offset:f.Offset+uint64(f.Length)])
				if err != nil {
					return err
				}
				for i, r := range recs {
					walked[f.Stream] = append(walked[f.Stream], loglet.SequencedRecord{Seq: f.FirstSeq + uint64(i), Record: r})
				}
			}
			return nil
		})
		cancel()
		if err != nil {
			bad("%s: walk of epoch %d [0, %d): %v", c, cs.Epoch, end, err)
			continue
		}
		for stream, recs := range final {
			if len(recs) == 0 || !strings.HasPrefix(stream, c.String()) {
				continue
			}
			got := walked[stream]
			if len(got) < len(recs) || (!fenced && len(got) != len(recs)) {
				bad("%s: the chain holds %d records of %s, the leader read %d", c, len(got), stream, len(recs))
			}
			for i := range min(len(got), len(recs)) {
				if got[i].Seq != uint64(i) || !sameRecord(got[i].Record, recs[i].Record) {
					bad("%s: chain record %d of %s (seq %d) differs from the leader's", c, i, stream, got[i].Seq)
					break
				}
			}
			// Past the leader's tail (fenced: committed, never released)
			// only unknown outcomes may sit.
			for _, r := range got[min(len(got), len(recs)):] {
				if id, ok := parseRecordID(r.Body); ok {
					if op := w.h.byID[uint32(id>>16)]; op != nil && op.out != outUnknown {
						bad("%s: committed record %d of %s past the leader's tail is op %d, which ended %v", c, r.Seq, stream, op.id, op.out)
					}
				}
			}
		}
	}
}

func sameRecord(a, b loglet.Record) bool {
	return string(a.Body) == string(b.Body) && sameHeaders(a.Headers, b.Headers) && a.Timestamp == b.Timestamp
}

// checkFreshReader reads every stream through a new Reader over the bare
// buckets (bucket order rotated, so fall-through is exercised) after Close.
func (w *world) checkFreshReader(ctx context.Context, final map[string][]loglet.SequencedRecord) {
	bad := w.h.violation
	cfg := loglet.ReaderConfig{Meta: w.meta}
	if w.stale != nil {
		cfg.Meta = w.stale
	}
	rot := int(w.o.Seed % 3)
	for c := range w.buckets {
		k := len(w.buckets[c])
		for i := range k {
			b := w.buckets[c][(i+rot)%k]
			if c == int(loglet.Standard) {
				cfg.Standard = append(cfg.Standard, b)
			} else {
				cfg.Express = append(cfg.Express, b)
			}
		}
	}
	rd, err := loglet.NewReader(cfg)
	if err != nil {
		bad("fresh reader: %v", err)
		return
	}
	for stream, want := range final {
		got, err := w.readAll(ctx, "fresh-reader", stream, func(ctx context.Context, from uint64) (loglet.ReadResult, error) {
			return rd.Read(ctx, stream, loglet.ReadQuery{Start: loglet.AtSeq(from), MaxRecords: 64})
		}, false)
		if err != nil {
			bad("fresh reader: %v", err)
			continue
		}
		deposed := w.fenced != nil && strings.HasPrefix(stream, w.fenced.class.String())
		if len(got) > len(want) || (!deposed && len(got) != len(want)) {
			bad("fresh reader after Close: %s has %d records, the leader read %d", stream, len(got), len(want))
		}
		for i := range min(len(got), len(want)) {
			if !sameRecord(got[i].Record, want[i].Record) {
				bad("fresh reader after Close: %s seq %d differs from the leader's", stream, i)
				break
			}
		}
		if !deposed {
			t, err := rd.CheckTail(ctx, stream)
			if err != nil || t.Seq != uint64(len(want)) {
				bad("fresh reader after Close: CheckTail(%s) = %d (%v), the leader read %d records", stream, t.Seq, err, len(want))
			}
		}
	}
}

// ---- linearizability (porcupine) ----

type linIn struct {
	kind   uint8 // 0 append, 1 read, 2 tail >= (leader), 3 tail <= (reader)
	ids    []uint64
	match  *uint64
	from   uint64
	tail   uint64
	hasT   bool
	stream string
}

type linOut struct {
	out        outcome
	start, end uint64
	ids        []uint64
}

type linState []uint64

func linModel() porcupine.Model {
	return porcupine.Model{
		Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
			by := map[string][]porcupine.Operation{}
			var keys []string
			for _, op := range ops {
				s := op.Input.(linIn).stream
				if _, ok := by[s]; !ok {
					keys = append(keys, s)
				}
				by[s] = append(by[s], op)
			}
			out := make([][]porcupine.Operation, 0, len(keys))
			for _, k := range keys {
				out = append(out, by[k])
			}
			return out
		},
		Init: func() any { return linState(nil) },
		Step: func(state, input, output any) (bool, any) {
			s, in, out := state.(linState), input.(linIn), output.(linOut)
			n := uint64(len(s))
			switch in.kind {
			case 0:
				switch out.out {
				case outAcked:
					if out.start != n || out.end-out.start != uint64(len(in.ids)) {
						return false, s
					}
					return true, append(slices.Clip(s), in.ids...)
				case outUnknown:
					if in.match != nil && *in.match != n {
						return true, s
					}
					return true, append(slices.Clip(s), in.ids...)
				}
				return true, s
			case 1:
				if in.from+uint64(len(out.ids)) > n || (in.hasT && in.tail > n) {
					return false, s
				}
				return slices.Equal([]uint64(s[in.from:in.from+uint64(len(out.ids))]), out.ids), s
			case 2:
				return in.tail >= n, s
			default:
				return in.tail <= n, s
			}
		},
		Equal: func(a, b any) bool { return slices.Equal(a.(linState), b.(linState)) },
		Hash: func(a any) uint64 {
			s := a.(linState)
			if len(s) == 0 {
				return 0
			}
			return uint64(len(s))*1000003 ^ s[len(s)-1]
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(linIn), output.(linOut)
			switch in.kind {
			case 0:
				return fmt.Sprintf("append %d recs -> %v [%d,%d)", len(in.ids), out.out, out.start, out.end)
			case 1:
				return fmt.Sprintf("read from %d -> %d recs (tail %d)", in.from, len(out.ids), in.tail)
			case 2:
				return fmt.Sprintf("leader tail %d", in.tail)
			}
			return fmt.Sprintf("reader tail %d", in.tail)
		},
	}
}

// linearizable checks every stream's history: appends with their outcomes
// (unknown ones return at the end of time, porcupine's convention for ops
// whose effect is unknown), reads and tails.
func (w *world) linearizable() string {
	h := w.h
	h.mu.Lock()
	defer h.mu.Unlock()
	end := int64(math.MaxInt64)
	var ops []porcupine.Operation
	for _, op := range h.appends {
		ids := make([]uint64, len(op.recs))
		for i := range ids {
			ids[i] = recordID(op.id, i)
		}
		ret := op.ret
		if op.out == outUnknown || op.out == outPending {
			ret = end
		}
		ops = append(ops, porcupine.Operation{ClientId: op.producer, Input: linIn{kind: 0, ids: ids, match: op.match, stream: op.stream},
			Call: op.call, Output: linOut{out: op.out, start: op.ack.Start, end: op.ack.End}, Return: ret})
	}
	for _, r := range h.reads {
		ops = append(ops, porcupine.Operation{ClientId: 1000, Input: linIn{kind: 1, from: r.from, tail: r.tail, hasT: r.hasTail, stream: r.stream},
			Call: r.call, Output: linOut{ids: r.ids}, Return: r.ret})
	}
	for _, t := range h.tails {
		k := uint8(3)
		if t.lower {
			k = 2
		}
		ops = append(ops, porcupine.Operation{ClientId: 1001, Input: linIn{kind: k, tail: t.t, stream: t.stream}, Call: t.call, Output: linOut{}, Return: t.ret})
	}
	res := porcupine.CheckOperationsTimeout(linModel(), ops, 20*time.Second)
	switch res {
	case porcupine.Ok:
		return "ok"
	case porcupine.Unknown:
		return "inconclusive (timeout)"
	}
	if len(h.bad) < 50 {
		h.bad = append(h.bad, "per-stream histories are not linearizable against an append-only sequence (porcupine)")
	}
	return "not linearizable"
}

func (w *world) summarize(after loglet.Stats) {
	h := w.h
	h.mu.Lock()
	defer h.mu.Unlock()
	w.res.Violations = append(w.res.Violations, h.bad...)
	w.res.Appends = len(h.appends)
	w.res.KnownBugs = h.known
	for _, op := range h.appends {
		switch op.out {
		case outAcked:
			w.res.Acked++
			w.res.Records += len(op.recs)
		case outNotCommitted:
			w.res.NotCommitted++
		}
	}
	for _, n := range h.readErr {
		w.res.ReadErrors += n
	}
	for _, cs := range []*loglet.ClassStats{after.Standard, after.Express} {
		if cs != nil {
			w.res.Halts += cs.Halts
		}
	}
	for _, pr := range w.procs {
		for c := range pr.fs {
			for _, f := range pr.fs[c] {
				in := f.Injected()
				add(&w.res.Injected, in)
			}
		}
		m := pr.mf.Injected()
		w.res.MetaInjected.Down += m.Down
		w.res.MetaInjected.Failed += m.Failed
		w.res.MetaInjected.Ambiguous += m.Ambiguous
		w.res.MetaInjected.Delayed += m.Delayed
		w.res.MetaInjected.Cancelled += m.Cancelled
	}
}

func add(a *objstore.FaultCounters, b objstore.FaultCounters) {
	a.Unavailable += b.Unavailable
	a.Errors += b.Errors
	a.Ambiguous += b.Ambiguous
	a.Delayed += b.Delayed
	a.Cancelled += b.Cancelled
	a.Hooked += b.Hooked
}
