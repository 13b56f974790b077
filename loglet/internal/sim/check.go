package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/loglet"
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
	leaderFinal := final

	// The chain's whole history, walked epoch by epoch (below the trim
	// cursors: the observer's copy of each slot settlement deleted), and
	// the leader's final read (from each stream's trim point) against it.
	// The checks of the final state below run over that history: every
	// seq ever committed, trimmed or not.
	hist, byID, walkedIDs := w.checkChains(ctx, leaderFinal, after)
	final = hist

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
	w.present = present
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
	// No read after a Trim returned holds a record below its trim point.
	w.checkTrims(reads)
	w.finalTrims(ctx)
	w.checkBeyondCut(walkedIDs)

	// 4. Storage: every live ref reads back (settled or not) and holds the
	// chain's records; the processes against the cuts.
	w.checkRefs(ctx, byID, leaderFinal)
	w.checkProcesses(appends, present)
	w.obs.mu.Lock()
	for _, v := range w.obs.bad {
		bad("%s", v)
	}
	w.obs.mu.Unlock()
	if w.fenced != nil {
		if k, ok := w.obs.cutOf(w.fenced.class, w.fenced.epoch); ok && k.Slot != w.fenced.cut {
			bad("%s: the harness's fence of epoch %d cut at %d; the incumbent recorded %d", w.fenced.class, w.fenced.epoch, w.fenced.cut, k.Slot)
		}
	}

	// 5. A fresh Reader in another process, after Close, reads every
	// record back (the final leader absorbed everything before sealing).
	w.checkFreshReader(ctx, leaderFinal)

	// 6. Per-stream linearizability.
	// It runs after the bubble (Run), where its timeout is real time.
	if w.o.NoLinearizability {
		w.res.Linearizability = "skipped"
	} else {
		w.res.linOps = w.linearizabilityOps()
	}

	// 7. Last, as it writes: a second fencer reaches every recorded cut.
	w.refence(ctx)
}

// memSet is a class's bucket set over the bare Mems: the truth, under every
// fault wrapper and planted bug.
func (w *world) memSet(c loglet.Class) chain.BucketSet {
	set := chain.BucketSet{W: w.quorum(c), Retry: chain.RetryPolicy{MinBackoff: time.Millisecond, MaxBackoff: 50 * time.Millisecond, Jitter: fixedJitter}}
	for _, m := range w.mems[c] {
		set.Stores = append(set.Stores, m)
	}
	return set
}

type seqKey struct {
	stream string
	seq    uint64
}

// checkChains walks every epoch of each chain, each up to its recorded
// cut (the last epoch: the clean seal of the leader's Close): from the
// bucket layer from the chain's trim cursor on, and below it (slots
// settlement deleted) from the observer's copy of the flight each slot was
// decided committed with. It checks that a stream's records continue
// across epochs with no gap and no seq twice, and that the leader's final
// read (from each stream's trim point) is exactly the chain's. It checks
// the decisions the observer made (every slot below a cut committed, from
// its final occupants where it still exists, a fenced cut dead, no
// committed/dead flip below a cut). It returns the chain's records of each
// stream of final from seq 0, by name, of every stream by ID, and their
// identities by (name, seq).
func (w *world) checkChains(ctx context.Context, final map[string][]loglet.SequencedRecord, after loglet.Stats) (map[string][]loglet.SequencedRecord, map[string][]loglet.SequencedRecord, map[seqKey]uint64) {
	bad := w.h.violation
	o := w.obs
	walkedIDs := map[seqKey]uint64{}
	hist := map[string][]loglet.SequencedRecord{}
	byID := map[string][]loglet.SequencedRecord{}
	for _, c := range chain.Classes() {
		rec, _, err := chain.ReadEpoch(ctx, w.meta, starName, c)
		if err != nil {
			bad("%s: read epoch record: %v", c, err)
			continue
		}
		trim, _, err := chain.ReadTrimCursor(ctx, w.meta, starName, c)
		if err != nil {
			bad("%s: read the trim cursor: %v", c, err)
			trim = chain.TrimCursor{At: chain.Start(), Deleted: chain.Start()}
		}
		w.trimCursor[c] = trim
		if pe := w.preludeEpoch[c]; pe > 0 && w.p.settleEvery > 0 && trim.At.Less(chain.Position{Epoch: pe + 1}) {
			bad("%s: settlement was switched on after %d opens without it and never passed their epochs: the trim cursor is at %+v after 90 healed seconds (the prelude's last epoch was %d)", c, w.p.preludeOpens, trim.At, pe)
		}
		w.res.Epochs += int(rec.Epoch)
		recorded := append([]chain.Cut(nil), rec.Cuts...)
		if rec.Seal == nil || rec.Seal.Epoch != rec.Epoch {
			bad("%s: epoch %d has no clean seal after the leader's Close", c, rec.Epoch)
		} else {
			recorded = append(recorded, *rec.Seal)
		}
		for _, k := range recorded {
			if oc, ok := o.cutOf(c, k.Epoch); !ok || oc.Slot != k.Slot {
				bad("%s: the epoch record's cut of epoch %d is %d; the observer saw %v", c, k.Epoch, k.Slot, oc)
			}
		}
		for _, k := range trim.Cuts {
			if oc, ok := o.cutOf(c, k.Epoch); !ok || oc.Slot != k.Slot {
				bad("%s: the trim cursor's cut of epoch %d is %d; the observer saw %v", c, k.Epoch, k.Slot, oc)
			}
		}
		set := w.memSet(c)
		walked := map[string][]loglet.SequencedRecord{}
		// take adds one slot's records to the walk.
		take := func(e, slot uint64, obj []byte, frames []envelope.FrameInfo) error {
			for _, f := range frames {
				recs, err := envelope.DecodeFrame(f, obj[f.Offset:f.Offset+uint64(f.Length)])
				if err != nil {
					return err
				}
				// Walked by stream id: each incarnation of a name
				// (lifers re-create theirs) is its own run of seqs
				// from 0. Other names live once.
				stream, _ := chain.SplitStreamID(f.Stream)
				for i, r := range recs {
					seq := f.FirstSeq + uint64(i)
					if n := uint64(len(walked[f.Stream])); seq != n {
						bad("%s: epoch %d slot %d holds %s seq %d where the chain's next is %d (a gap, or a seq committed twice)", c, e, slot, trunc([]byte(f.Stream)), seq, n)
						return errStopWalk
					}
					walked[f.Stream] = append(walked[f.Stream], loglet.SequencedRecord{Seq: seq, Record: r})
					if id, ok := parseRecordID(r.Body); ok {
						walkedIDs[seqKey{stream, seq}] = id
					}
				}
			}
			return nil
		}
		for e := uint64(1); e <= rec.Epoch; e++ {
			k, ok := o.cutOf(c, e)
			if !ok {
				cs := classStats(after, c)
				if e != rec.Epoch || cs == nil || cs.Epoch != e {
					bad("%s: no cut was ever recorded for epoch %d (the chain is at %d)", c, e, rec.Epoch)
					continue
				}
				k = chain.Cut{Epoch: e, Slot: cs.ReleasePoint, Clean: true}
			}
			// from: the first slot of the epoch settlement has not passed.
			from := uint64(0)
			switch {
			case e < trim.At.Epoch:
				from = k.Slot
			case e == trim.At.Epoch:
				from = min(trim.At.Next, k.Slot)
			}
			// Invariants 1 and 4 from the final occupants, or below the
			// trim cursor from the last decision the observer saw; below
			// it the slot's committed flight as the observer kept it.
			o.mu.Lock()
			undecided, leftover := 0, 0
			var settled [][]byte
			for slot := uint64(0); slot < k.Slot; slot++ {
				id := slotID{c, e, slot}
				d := o.decided[id]
				if slot >= from {
					d = o.decide(id)
				}
				if d != chain.Committed {
					if undecided++; undecided <= 3 {
						bad("%s: slot %d of epoch %d is below the recorded cut %d but decides %v (from its final occupants: %v)", c, slot, e, k.Slot, d, slot >= from)
					}
					if slot < from {
						settled = append(settled, nil)
					}
					continue
				}
				if slot < from {
					if (chain.Position{Epoch: e, Next: slot}).Less(trim.Deleted) {
						for _, oc := range o.occupants(id) {
							if oc.Kind != chain.OccupantUnknown {
								leftover++
							}
						}
					}
					settled = append(settled, o.flights[id][o.committed[id]])
				}
			}
			if !k.Clean {
				if d := o.decide(slotID{c, e, k.Slot}); d != chain.Dead {
					bad("%s: the fenced cut %d of epoch %d decides %v from its final occupants, not dead", c, k.Slot, e, d)
				}
			}
			w.res.SlotsDecided += int(k.Slot)
			w.res.LeftoverCopies += leftover
			o.mu.Unlock()
			if (chain.Position{Epoch: e}).Less(trim.Deleted) {
				w.res.SlotsTrimmed += int(k.Slot)
				if e == trim.Deleted.Epoch {
					w.res.SlotsTrimmed -= int(k.Slot - min(trim.Deleted.Next, k.Slot))
				}
			}
			for slot, obj := range settled {
				if obj == nil {
					bad("%s: slot %d of epoch %d, below the trim cursor %+v, was never seen committed with a flight the observer kept", c, slot, e, trim.At)
					break
				}
				_, frames, err := envelope.ParseBundle(obj)
				if err == nil {
					err = take(e, uint64(slot), obj, frames)
				}
				if err != nil {
					if !errors.Is(err, errStopWalk) {
						bad("%s: the observer's copy of slot %d of epoch %d: %v", c, slot, e, err)
					}
					break
				}
			}
			if from >= k.Slot {
				continue
			}
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := chain.Walk(wctx, set, starName, c, e, from, k.Slot, func(slot uint64, obj []byte, frames []envelope.FrameInfo) error {
				return take(e, slot, obj, frames)
			})
			cancel()
			if err != nil && !errors.Is(err, errStopWalk) {
				bad("%s: walk of epoch %d [%d, %d): %v", c, e, from, k.Slot, err)
			}
		}
		for id, recs := range walked {
			byID[id] = recs
			name, _ := chain.SplitStreamID(id)
			if _, ok := final[name]; ok {
				hist[name] = recs
			}
		}
		for stream, recs := range final {
			if !strings.HasPrefix(stream, c.String()) {
				continue
			}
			got := hist[stream]
			if hist[stream] == nil {
				hist[stream] = []loglet.SequencedRecord{}
			}
			// The leader reads from the stream's trim point.
			base := uint64(len(got))
			if len(recs) > 0 {
				base = recs[0].Seq
			}
			if t, err := w.trimSeqOf(ctx, stream); err == nil && min(t, uint64(len(got))) != min(base, uint64(len(got))) {
				bad("%s: the leader's final read of %s starts at %d; its trim point is %d (the chain holds %d records)", c, stream, base, t, len(got))
			}
			if base > uint64(len(got)) || uint64(len(got))-base != uint64(len(recs)) {
				bad("%s: the chain (every epoch below its cut) holds %d records of %s, the leader read %d from %d", c, len(got), stream, len(recs), base)
			}
			for i := range recs {
				j := base + uint64(i)
				if j >= uint64(len(got)) {
					break
				}
				if recs[i].Seq != j || !sameRecord(got[j].Record, recs[i].Record) {
					bad("%s: chain record %d of %s differs from the leader's (seq %d)", c, j, stream, recs[i].Seq)
					break
				}
			}
		}
	}

	// Decisions never flip, except where nothing counts: at or past a cut
	// (the garbage probe deletes flight copies there).
	o.mu.Lock()
	flips := slices.Clone(o.flips)
	o.mu.Unlock()
	for _, f := range flips {
		if k, ok := o.cutOf(f.id.c, f.id.epoch); ok && f.id.slot >= k.Slot {
			continue
		}
		w.res.Flips++
		bad("%s: slot %d of epoch %d was %v and later %v (below any recorded cut)", f.id.c, f.id.slot, f.id.epoch, f.from, f.to)
	}
	return hist, byID, walkedIDs
}

// checkBeyondCut: nothing at or past a cut is ever read, unless the same
// record is committed at that seq below a cut (republished after a halt).
func (w *world) checkBeyondCut(walkedIDs map[seqKey]uint64) {
	bad := w.h.violation
	o := w.obs
	beyond := map[seqKey][]uint64{}
	o.mu.Lock()
	for id, copies := range o.flights {
		k, ok := o.cuts[epochID{id.c, id.epoch}]
		if !ok || id.slot < k.Slot {
			continue
		}
		for _, obj := range copies {
			_, frames, err := envelope.ParseBundle(obj)
			if err != nil {
				continue
			}
			for _, f := range frames {
				recs, err := envelope.DecodeFrame(f, obj[f.Offset:f.Offset+uint64(f.Length)])
				if err != nil {
					continue
				}
				stream, _ := chain.SplitStreamID(f.Stream)
				for i, r := range recs {
					if rid, ok := parseRecordID(r.Body); ok {
						sk := seqKey{stream, f.FirstSeq + uint64(i)}
						beyond[sk] = append(beyond[sk], rid)
					}
				}
			}
		}
	}
	o.mu.Unlock()
	w.res.BeyondCut = len(beyond)
	w.h.mu.Lock()
	reads := slices.Clone(w.h.reads)
	w.h.mu.Unlock()
	for _, r := range reads {
		for i, id := range r.ids {
			sk := seqKey{r.stream, r.from + uint64(i)}
			if slices.Contains(beyond[sk], id) && walkedIDs[sk] != id {
				bad("%s read of %s returned seq %d (%x) from a slot at or past a recorded cut; the chain holds %x there", r.who, r.stream, sk.seq, id, walkedIDs[sk])
			}
		}
	}
}

var errStopWalk = errors.New("sim: stop walking")

// checkProcesses checks every process against the cuts: no process ever
// released a slot at or past its epoch's recorded cut, and every append a
// process took after a successor had taken over ended not-committed, or
// unknown and absent from the final state.
func (w *world) checkProcesses(appends []*appendOp, present map[uint32]uint64) {
	bad := w.h.violation
	procs := w.allProcs()
	for _, pr := range procs {
		if pr.crashed {
			continue
		}
		st := pr.star.Stats()
		for _, c := range chain.Classes() {
			cs := classStats(st, c)
			if cs == nil {
				continue
			}
			if k, ok := w.obs.cutOf(c, cs.Epoch); ok && cs.ReleasePoint > k.Slot {
				bad("proc-%d: %s released slot %d of epoch %d, at or past its recorded cut %d (an ack disowned)", pr.n, c, cs.ReleasePoint-1, cs.Epoch, k.Slot)
			}
		}
	}
	for _, op := range appends {
		if op.proc >= len(procs) {
			continue
		}
		pr := procs[op.proc]
		if pr.deposedAt == 0 || op.call < pr.deposedAt {
			continue
		}
		w.res.ZombieAppends++
		_, in := present[op.id]
		switch {
		case op.out == outAcked:
			bad("op %d on %s, sent to proc-%d after a successor took over, was acked [%d, %d)", op.id, op.stream, pr.n, op.ack.Start, op.ack.End)
		case op.out == outUnknown && in:
			bad("op %d on %s, sent to proc-%d after a successor took over, ended unknown and is committed", op.id, op.stream, pr.n)
		}
	}
}

// refence fences every epoch again from slot 0 (from the trim cursor, if
// settlement passed it), over the bare buckets with
// a fresh nonce, after everything else is checked: deciding from final
// occupants, a second fencer must reach every recorded cut exactly (DESIGN:
// fencing is idempotent).
func (w *world) refence(ctx context.Context) {
	bad := w.h.violation
	for _, c := range chain.Classes() {
		w.obs.mu.Lock()
		latest := w.obs.latest[c]
		w.obs.mu.Unlock()
		trim := w.trimCursor[c]
		for e := max(1, trim.At.Epoch); e <= latest; e++ {
			k, ok := w.obs.cutOf(c, e)
			if !ok {
				continue
			}
			// Never below the trim cursor: a deleted slot reads absent,
			// and poisoning it would forge a lower cut (DESIGN, "Settle").
			from := uint64(0)
			if e == trim.At.Epoch {
				from = min(trim.At.Next, k.Slot)
			}
			fctx, cancel := context.WithTimeout(ctx, time.Minute)
			res, err := chain.Fence(fctx, w.memSet(c), starName, c, e, from, envelope.NewNonce(), chain.FenceOptions{})
			cancel()
			if err != nil {
				bad("%s: re-fence of epoch %d: %v", c, e, err)
			} else if res.Cut != k.Slot {
				bad("%s: re-fencing epoch %d from 0 cuts at %d; the recorded cut is %d", c, e, res.Cut, k.Slot)
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
		// Both read from the stream's trim point.
		if len(got) != len(want) || (len(got) > 0 && got[0].Seq != want[0].Seq) {
			bad("fresh reader after Close: %s has %d records from %v, the leader read %d from %v", stream, len(got), firstSeq(got), len(want), firstSeq(want))
		}
		for i := range min(len(got), len(want)) {
			if got[i].Seq != want[i].Seq || !sameRecord(got[i].Record, want[i].Record) {
				bad("fresh reader after Close: %s seq %d differs from the leader's", stream, want[i].Seq)
				break
			}
		}
		end := uint64(0)
		if len(want) > 0 {
			end = want[len(want)-1].Seq + 1
		} else if t, err := w.trimSeqOf(ctx, stream); err == nil {
			end = t // nothing readable: empty, or trimmed to its tail
		}
		t, err := rd.CheckTail(ctx, stream)
		if err != nil || t.Seq != end {
			bad("fresh reader after Close: CheckTail(%s) = %d (%v), the leader read up to %d", stream, t.Seq, err, end)

		}
	}
}

// ---- linearizability (porcupine) ----

type linIn struct {
	op     uint32 // append: its id
	proc   int    // append: the process
	who    string // read, tail: who
	kind   uint8  // 0 append, 1 read, 2 tail >= (leader), 3 tail <= (reader)
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
				// A read from at or past the durable end returns nothing
				// (a deposed leader's assigned seqs past its cut never
				// commit, so from may be past n for good).
				if len(out.ids) == 0 {
					return !(in.hasT && in.tail > n), s
				}
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

// linearizabilityOps is every stream's history for porcupine: appends with
// their outcomes (unknown ones return at the end of time, porcupine's
// convention for ops whose effect is unknown), reads and tails.
func (w *world) linearizabilityOps() []porcupine.Operation {
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
		out := linOut{out: op.out, start: op.ack.Start, end: op.ack.End}
		ret := op.ret
		if op.out == outUnknown || op.out == outPending {
			// Resolved by the final state (checked against the chain):
			// present, it took effect at its seq, some time after its call;
			// absent, it had none. Unresolved, porcupine's search over
			// every unknown append's two fates explodes on crash seeds.
			first, ok := w.present[op.id]
			if !ok {
				continue
			}
			out = linOut{out: outAcked, start: first, end: first + uint64(len(ids))}
			ret = end
		}
		if out.out == outNotCommitted {
			continue // no effect
		}
		ops = append(ops, porcupine.Operation{ClientId: op.producer, Input: linIn{kind: 0, ids: ids, match: op.match, stream: op.stream, op: op.id, proc: op.proc},
			Call: op.call, Output: out, Return: ret})
	}
	for _, r := range h.reads {
		ops = append(ops, porcupine.Operation{ClientId: 1000, Input: linIn{kind: 1, from: r.from, tail: r.tail, hasT: r.hasTail, stream: r.stream, who: r.who},
			Call: r.call, Output: linOut{ids: r.ids}, Return: r.ret})
	}
	for _, t := range h.tails {
		k := uint8(3)
		if t.lower {
			k = 2
		}
		ops = append(ops, porcupine.Operation{ClientId: 1001, Input: linIn{kind: k, tail: t.t, stream: t.stream, who: t.who}, Call: t.call, Output: linOut{}, Return: t.ret})
	}
	return ops
}

// blame names the kinds of operation (append, read or tail, by who) whose
// removal alone makes a failing stream's history linearizable: a triage
// hint for the report.
func blame(ops []porcupine.Operation, budget time.Duration) string {
	classOf := func(op porcupine.Operation) string {
		in := op.Input.(linIn)
		switch in.kind {
		case 0:
			return fmt.Sprintf("appends@proc-%d", in.proc)
		case 1:
			return "reads by " + in.who
		case 2:
			return "leader tails by " + in.who
		}
		return "reader tails"
	}
	var classes []string
	for _, op := range ops {
		if c := classOf(op); !slices.Contains(classes, c) {
			classes = append(classes, c)
		}
	}
	slices.Sort(classes)
	var culprits []string
	deadline := time.Now().Add(min(budget, 10*time.Second))
	for _, c := range classes {
		var rest []porcupine.Operation
		for _, op := range ops {
			if classOf(op) != c {
				rest = append(rest, op)
			}
		}
		if left := time.Until(deadline); left > 0 && porcupine.CheckOperationsTimeout(linModel(), rest, left) == porcupine.Ok {
			culprits = append(culprits, c)
		}
	}
	if len(culprits) == 0 {
		return ""
	}
	return "; linearizable without any one of: " + strings.Join(culprits, ", ")
}

// linearizable checks ops per stream (outside the bubble: real time),
// naming the streams that fail.
func linearizable(ops []porcupine.Operation, timeout time.Duration) (string, []string) {
	by := map[string][]porcupine.Operation{}
	var streams []string
	for _, op := range ops {
		s := op.Input.(linIn).stream
		if _, ok := by[s]; !ok {
			streams = append(streams, s)
		}
		by[s] = append(by[s], op)
	}
	slices.Sort(streams)
	verdict := "ok"
	var bad []string
	deadline := time.Now().Add(timeout)
	for _, s := range streams {
		left := time.Until(deadline)
		if left <= 0 {
			return "inconclusive (timeout)", bad
		}
		switch porcupine.CheckOperationsTimeout(linModel(), by[s], left) {
		case porcupine.Unknown:
			verdict = "inconclusive (timeout)"
		case porcupine.Illegal:
			verdict = "not linearizable"
			bad = append(bad, fmt.Sprintf("stream %s: its history is not linearizable against an append-only sequence (porcupine)%s", s, blame(by[s], time.Until(deadline))))
		}
	}
	return verdict, bad
}

func (w *world) summarize(after loglet.Stats) {
	h := w.h
	h.mu.Lock()
	defer h.mu.Unlock()
	w.res.Violations = append(w.res.Violations, h.bad...)
	w.obs.sealMu.Lock()
	w.res.Seals, w.res.SealViolations = w.obs.seals, w.obs.sealViolations
	w.res.Violations = append(w.res.Violations, w.obs.sealBad...)
	w.obs.sealMu.Unlock()
	w.res.Appends = len(h.appends)
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
	for _, pr := range w.procs {
		if pr.crashed {
			continue
		}
		st := after
		if pr.star != nil {
			st = pr.star.Stats()
		}
		for _, cs := range []*loglet.ClassStats{st.Standard, st.Express} {
			if cs != nil {
				w.res.Halts += cs.Halts
			}
		}
	}
	for _, pr := range w.procs {
		for c := range pr.fs {
			for _, f := range pr.fs[c] {
				in := f.Injected()
				add(&w.res.Injected, in)
			}
		}
		add(&w.res.MetaInjected, pr.mf.Injected())
		w.res.MetaConflicts += pr.cm.injected()
	}
}

func add(a *fault.Counters, b fault.Counters) {
	a.Unavailable += b.Unavailable
	a.Failed += b.Failed
	a.Ambiguous += b.Ambiguous
	a.Delayed += b.Delayed
	a.Cancelled += b.Cancelled
	a.Hooked += b.Hooked
}
