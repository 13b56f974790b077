package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/loglet/internal/chaincore"
	"github.com/flightlog/flightlog/loglet/internal/settlecore"
	"github.com/flightlog/flightlog/loglet/internal/work"
	"github.com/flightlog/flightlog/objstore"
	"github.com/flightlog/flightlog/settle"
)

// Settlement in the core-level simulation. In every seed the cores run
// settle passes (chaincore's Settle request), and the simulation steps
// each pass's requests (loglet/internal/settlecore) as separate instants,
// each with its own latency, between everything else that happens: an
// absorb round committing, a zone or the metastore going down, a
// successor sealing, a crash killing the pass mid-way. The quiet period
// (CoreOptions.Quiet) then stops appends and faults and lets the live
// leader settle everything, and its checker asserts nothing leaks: no
// doomed or pending marker, no entry on the under-replicated list, no
// flight copy of a settled slot, no settled object no ref points at. The
// final check then lets the final process settle everything, and asserts what the
// goroutine simulation's settlecheck.go asserts: every acked record reads
// back through the refs, every transit slot settled is gone, and no
// settled object is left that no ref points at (nor a marker names).

// coreSettlePlan is a seed's settlement: drawn from its own generator,
// so the rest of every seed's plan is what it was.
type coreSettlePlan struct {
	on       bool
	interval time.Duration
	grace    time.Duration // negative: none
}

func drawCoreSettlePlan(seed uint64, p corePlan) coreSettlePlan {
	r := rand.New(rand.NewPCG(seed, 0x5e771e))
	r.IntN(2) // was: on or off (on in every seed now, as by default)
	sp := coreSettlePlan{on: true}
	if p.commitLimit > 0 && p.commitLimit < settlecore.MinCommitOps {
		// A pass refuses such a backend (a repoint's Commit would not fit)
		// and would never finish: the traces cover that refusal. Only a
		// planted bug's limit (Broken.CommitLimit) is this small.
		sp.on = false
	}
	sp.interval = time.Duration(20+r.IntN(300)) * time.Millisecond
	sp.grace = []time.Duration{-1, 100 * time.Millisecond, 2 * time.Second}[r.IntN(3)]
	return sp
}

func (sp coreSettlePlan) String() string {
	if !sp.on {
		return "settlement off"
	}
	return fmt.Sprintf("settlement every %v, doomed grace %v", sp.interval, sp.grace)
}

// coreSettle is one process's settle pass under way.
type coreSettle struct {
	pass *settlecore.Pass
	exec work.SettleExec
	n    int // its requests so far
}

// settleStores is the settled bucket set: the chain's own for a Standard
// chain, else one Standard bucket of its own (registered with the world,
// so the observer's checks of repoints read settled objects there).
func (cw *coreWorld) settleStores() []objstore.Store {
	if cw.settled != nil {
		return cw.settled
	}
	if cw.p.class == chain.Standard {
		cw.settled = cw.buckets
		return cw.settled
	}
	m := objstore.NewMem()
	cw.w.mems[chain.Standard] = append(cw.w.mems[chain.Standard], m)
	cw.settledMems = append(cw.settledMems, m)
	cw.settled = []objstore.Store{m}
	return cw.settled
}

// settleConfigure turns settlement on in a process being opened.
func (cw *coreWorld) settleConfigure(pr *coreProc, cfg *chaincore.Config) {
	if !cw.sp.on {
		return
	}
	cfg.SettleInterval = cw.sp.interval
	pr.env.Settled, pr.env.SettleGrace = cw.settleStores(), cw.sp.grace
	if cw.soak != nil {
		pr.env.Liveness = cw.soakLive
	}
}

// startSettle begins the pass a Settle request asks for: its first
// request becomes pending like any other.
func (cw *coreWorld) startSettle(pr *coreProc, r chaincore.Settle) {
	cfg := pr.env.SettleConfig(r.Epoch)
	s := &coreSettle{exec: work.SettleExec{Cfg: cfg}}
	s.pass = work.NewSettlePass(cfg, settle.Pass{Upto: r.Upto, Checkpoint: r.Checkpoint, Cuts: r.Cuts,
		Known: r.Known, KnownFrom: r.KnownFrom, KnownOK: r.KnownOK, Prev: r.Prev, Idle: r.Idle}, false)
	cw.tracef("p%d settle pass upto=%d/%d checkpoint=%d/%d", pr.n, r.Upto.Epoch, r.Upto.Next, r.Checkpoint.Epoch, r.Checkpoint.Next)
	cw.nextSettle(pr, s)
}

// nextSettle issues the pass's next request, or steps its end into the
// core.
func (cw *coreWorld) nextSettle(pr *coreProc, s *coreSettle) {
	for _, l := range s.pass.Logs() {
		cw.tracef("p%d settle log %s", pr.n, l.Msg)
	}
	req := s.pass.Next()
	cw.issued++
	if req == nil {
		// Its end goes to the core as an instant of its own (never from
		// inside the Ready being executed).
		pr.pending = append(pr.pending, &coreReq{p: pr, settle: s, id: cw.issued, due: cw.now})
		return
	}
	s.n++
	q := &coreReq{p: pr, settle: s, sreq: req, id: cw.issued, due: cw.now.Add(cw.settleLatency(req))}
	pr.pending = append(pr.pending, q)
	cw.tracef("p%d req#%d settle %s due +%v", pr.n, q.id, describeSettle(req), q.due.Sub(cw.now))
}

// noteLate records a crashed process's late copy landing (settlement's
// check tells a straggler that landed after its slot was deleted).
func (cw *coreWorld) noteLate(q *coreReq) {
	if pc, ok := q.req.(chaincore.PutCopy); ok && cw.sp.on {
		if cw.lateLanded == nil {
			cw.lateLanded = map[string]time.Time{}
		}
		cw.lateLanded[chain.SlotKey(starName, cw.p.class, pc.Upload.Epoch, pc.Upload.Slot)] = cw.now
	}
}

// completeSettle executes one request of a pass and steps its event in,
// or steps the pass's end into the core.
func (cw *coreWorld) completeSettle(q *coreReq) {
	pr, s := q.p, q.settle
	if q.sreq == nil {
		_, res, err := s.pass.Done()
		cw.res.SettlePasses++
		cw.res.SettleSteps += s.n
		cw.tracef("p%d settle passed at=%d/%d deleted=%d/%d %s err=%v", pr.n, res.Trim.At.Epoch, res.Trim.At.Next, res.Trim.Deleted.Epoch, res.Trim.Deleted.Next, res.Describe(), err != nil)
		pr.core.Step(cw.now, chaincore.SettlePassed{Result: res, Err: err})
		cw.drain(pr)
		return
	}
	var ev settlecore.Event
	switch r := q.sreq.(type) {
	case settlecore.Wait:
		ev = settlecore.Waited{} // its latency was the wait
	case settlecore.Parallel:
		// The calls complete in an order the seed draws.
		out := settlecore.ParallelDone{Puts: make([]settlecore.ObjectPut, len(r.Puts)), Deletes: make([]settlecore.ObjectDeleted, len(r.Deletes)),
			Gets: make([]settlecore.RangeGot, len(r.Gets))}
		np, nd := len(r.Puts), len(r.Deletes)
		for _, i := range cw.rng.Perm(np + nd + len(r.Gets)) {
			switch {
			case i < np:
				out.Puts[i] = s.exec.Do(context.Background(), r.Puts[i]).(settlecore.ObjectPut)
			case i < np+nd:
				out.Deletes[i-np] = s.exec.Do(context.Background(), r.Deletes[i-np]).(settlecore.ObjectDeleted)
			default:
				out.Gets[i-np-nd] = s.exec.Do(context.Background(), r.Gets[i-np-nd]).(settlecore.RangeGot)
			}
		}
		ev = out
	default:
		ev = s.exec.Do(context.Background(), q.sreq)
	}
	if d, ok := q.sreq.(settlecore.DeleteSlots); ok && cw.sp.on {
		if cw.deletedAt == nil {
			cw.deletedAt = map[string]time.Time{}
		}
		for slot := d.From; slot < d.To; slot++ {
			cw.deletedAt[chain.SlotKey(starName, cw.p.class, d.Epoch, slot)] = cw.now
		}
	}
	cw.tracef("p%d done#%d settle %s", pr.n, q.id, describeSettleEvent(ev))
	s.pass.Step(cw.now, ev)
	cw.nextSettle(pr, s)
}

// settleExecutable: object-store work needs every zone, metastore work
// the metastore.
func (cw *coreWorld) settleExecutable(q *coreReq) bool {
	return cw.settleCallExecutable(q.sreq)
}

func (cw *coreWorld) settleCallExecutable(req settlecore.Request) bool {
	switch r := req.(type) {
	case settlecore.Parallel:
		for _, g := range r.Gets {
			if !g.Settled && cw.zoneDown {
				return false
			}
		}
		return true // the settled set has no zone down
	case settlecore.DeleteSlots, settlecore.FenceEpoch, settlecore.ReadSlots:
		return !cw.zoneDown
	case settlecore.GetRange:
		return r.Settled || !cw.zoneDown
	case settlecore.DeleteObject, settlecore.PutObject, settlecore.GetObject, settlecore.Wait:
		return true // the settled set has no zone down; a wait is the clock's
	}
	return !cw.metaDown
}

func (cw *coreWorld) settleLatency(r settlecore.Request) time.Duration {
	switch r := r.(type) {
	case settlecore.Wait:
		return r.For
	case settlecore.Parallel:
		var most time.Duration // the slowest of calls made at once
		for _, q := range r.Puts {
			most = max(most, cw.settleLatency(q))
		}
		for _, q := range r.Deletes {
			most = max(most, cw.settleLatency(q))
		}
		for _, q := range r.Gets {
			most = max(most, cw.settleLatency(q))
		}
		return most
	}
	var fake chaincore.Request = chaincore.ReadCheckpoint{} // a metastore call
	switch r.(type) {
	case settlecore.DeleteSlots, settlecore.DeleteObject, settlecore.FenceEpoch, settlecore.ReadSlots,
		settlecore.GetRange, settlecore.PutObject, settlecore.GetObject:
		fake = chaincore.Probe{} // an object-store call
	}
	return cw.latency(fake)
}

func describeSettle(r settlecore.Request) string {
	switch r := r.(type) {
	case settlecore.ReadTrim:
		return "read-trim"
	case settlecore.ReadCheckpoint:
		return "read-checkpoint"
	case settlecore.Commit:
		return fmt.Sprintf("commit %s ops=%d", r.What, len(r.Ops))
	case settlecore.DeleteSlots:
		return fmt.Sprintf("delete-slots e=%d [%d,%d)", r.Epoch, r.From, r.To)
	case settlecore.ScanMarkers:
		return "scan-markers"
	case settlecore.GetRef:
		return "get-ref " + r.Key
	case settlecore.DeleteObject:
		return fmt.Sprintf("delete-object b=%d %s", r.Bucket, r.Key)
	case settlecore.FenceEpoch:
		return fmt.Sprintf("fence e=%d from=%d", r.Epoch, r.From)
	case settlecore.ReadSlots:
		return fmt.Sprintf("read-slots e=%d [%d,%d)", r.Epoch, r.From, r.To)
	case settlecore.ScanRefs:
		return fmt.Sprintf("scan-refs %s after %s", r.Prefix, r.After)
	case settlecore.CheckLive:
		return "check-live " + r.Stream
	case settlecore.GetRange:
		return fmt.Sprintf("get-range settled=%v b=%d %s [%d+%d)", r.Settled, r.Bucket, r.Key, r.Offset, r.Length)
	case settlecore.PutObject:
		return fmt.Sprintf("put-object b=%d %s %dB", r.Bucket, r.Key, len(r.Body))
	case settlecore.GetObject:
		return fmt.Sprintf("get-object b=%d %s", r.Bucket, r.Key)
	case settlecore.Wait:
		return fmt.Sprintf("wait %v", r.For)
	case settlecore.Parallel:
		var parts []string
		for _, q := range r.Puts {
			parts = append(parts, describeSettle(q))
		}
		for _, q := range r.Deletes {
			parts = append(parts, describeSettle(q))
		}
		for _, q := range r.Gets {
			parts = append(parts, describeSettle(q))
		}
		return "parallel [" + strings.Join(parts, "; ") + "]"
	}
	return fmt.Sprintf("%T", r)
}

func describeSettleEvent(ev settlecore.Event) string {
	errs := func(err error) string {
		if err == nil {
			return "ok"
		}
		return "err"
	}
	switch ev := ev.(type) {
	case settlecore.TrimRead:
		return fmt.Sprintf("trim-read at=%d/%d deleted=%d/%d %s", ev.Cursor.At.Epoch, ev.Cursor.At.Next, ev.Cursor.Deleted.Epoch, ev.Cursor.Deleted.Next, errs(ev.Err))
	case settlecore.CheckpointRead:
		return fmt.Sprintf("checkpoint-read sealed-by=%s/%d %s", ev.Owner, ev.Epoch, errs(ev.Err))
	case settlecore.Committed:
		return "committed " + errs(ev.Err)
	case settlecore.SlotsDeleted:
		return fmt.Sprintf("slots-deleted %d %s", ev.Deleted, errs(ev.Err))
	case settlecore.MarkersScanned:
		return fmt.Sprintf("markers %d %s", len(ev.Items), errs(ev.Err))
	case settlecore.RefGot:
		return fmt.Sprintf("ref found=%v %s", ev.Found, errs(ev.Err))
	case settlecore.ObjectDeleted:
		return "object-deleted " + errs(ev.Err)
	case settlecore.EpochFenced:
		return fmt.Sprintf("fenced cut=%d %s", ev.Cut, errs(ev.Err))
	case settlecore.SlotsRead:
		return fmt.Sprintf("slots-read %d full=%v %s", len(ev.Slots), ev.Full, errs(ev.Err))
	case settlecore.RefsScanned:
		return fmt.Sprintf("refs %d %s", len(ev.Items), errs(ev.Err))
	case settlecore.Live:
		return fmt.Sprintf("live=%v trim=%d %s", ev.Live, ev.TrimSeq, errs(ev.Err))
	case settlecore.RangeGot:
		return fmt.Sprintf("range %dB %s", len(ev.Data), errs(ev.Err))
	case settlecore.ObjectPut:
		return "object-put " + errs(ev.Err)
	case settlecore.ObjectGot:
		return fmt.Sprintf("object %dB %s", len(ev.Body), errs(ev.Err))
	case settlecore.Waited:
		return "waited"
	case settlecore.ParallelDone:
		var parts []string
		for _, e := range ev.Puts {
			parts = append(parts, describeSettleEvent(e))
		}
		for _, e := range ev.Deletes {
			parts = append(parts, describeSettleEvent(e))
		}
		for _, e := range ev.Gets {
			parts = append(parts, describeSettleEvent(e))
		}
		return "parallel-done [" + strings.Join(parts, "; ") + "]"
	}
	return fmt.Sprintf("%T", ev)
}

// walkStores is what the final walk reads the chain from: the bare
// buckets, with each slot settlement deleted put back from the observer's
// copy of the flight it was committed with (settlement on), so the walk
// still checks every seq ever committed.
func (cw *coreWorld) walkStores() []objstore.Store {
	if !cw.sp.on {
		return memStores(cw.mems)
	}
	ctx := context.Background()
	out := make([]objstore.Store, len(cw.mems))
	cw.obs.mu.Lock()
	defer cw.obs.mu.Unlock()
	for i, m := range cw.mems {
		h := objstore.NewMem()
		for _, k := range m.Keys() {
			if b, err := m.Get(ctx, k, 0, -1); err == nil {
				_ = h.PutIfAbsent(ctx, k, b)
			}
		}
		for id, nonce := range cw.obs.committed {
			if id.c != cw.p.class {
				continue
			}
			if body := cw.obs.flights[id][nonce]; body != nil {
				_ = h.PutIfAbsent(ctx, chain.SlotKey(starName, id.c, id.epoch, id.slot), body) // present already: kept
			}
		}
		out[i] = h
	}
	return out
}

// decideFinal is a slot's decision for the final check: the last one the
// observer saw while it counted for a slot settlement deleted (below the
// trim cursor), else what its occupants decide now. Callers hold obs.mu.
func (cw *coreWorld) decideFinal(id slotID) chain.Decision {
	if cw.sp.on && (chain.Position{Epoch: id.epoch, Next: id.slot}).Less(cw.obs.trims[id.c].At) {
		if d, ok := cw.obs.decided[id]; ok {
			return d
		}
	}
	return cw.obs.decide(id)
}

// settleFinal runs with settlement on once the final process serves: it
// lets that process's passes settle everything up to the checkpoint and
// reclaim every doomed object, then checks the state they leave.
func (cw *coreWorld) settleFinal(final *coreProc) {
	if !cw.sp.on {
		return
	}
	ctx := context.Background()
	bound := 5 * time.Minute
	if cw.o.Quiet > 0 {
		bound = cw.o.Quiet
	}
	if !cw.runUntil(func() bool { return cw.settledUp(ctx) || final.stopped }, bound) {
		t, _, _ := chain.ReadTrimCursor(ctx, cw.meta, starName, cw.p.class)
		cp, _, _ := absorb.ReadCheckpoint(ctx, cw.meta, starName, cw.p.class)
		cw.violation("settlement did not finish within %v of the final open: cursor at %+v deleted %+v, checkpoint %d/%d; %+v", bound, t.At, t.Deleted, cp.Epoch, cp.Next, final.core.Stats(cw.now).Settle)
		return
	}
	cw.tracef("settled up")
	cw.checkSettled(ctx, true)
}

// faultsOff stops the injected metastore errors and ambiguous PUTs of pr.
func (pr *coreProc) faultsOff() {
	pr.metaFaults.SetErrorRate(0)
	pr.metaFaults.SetAmbiguousRate(0)
	for _, f := range pr.putFaults {
		f.SetAmbiguousRate(0, fault.Put)
	}
}

// quietPeriod ends the workload (CoreOptions.Quiet; nothing when 0): no
// new appends (none come after the workload), every fault off (outages are
// healed already; metastore errors and ambiguous PUTs stop now, and in
// every process opened later), and the live leader, if one serves, runs in
// virtual time until its settlement has caught up: the trim cursor at the
// checkpoint with everything behind it deleted, and no doomed or pending
// marker left (doomed objects are deleted on schedule with nothing new
// arriving). Then the quiet checker (checkQuiet).
func (cw *coreWorld) quietPeriod() {
	if cw.o.Quiet <= 0 {
		return
	}
	cw.quiet = true
	for _, pr := range cw.procs {
		pr.faultsOff()
	}
	cw.tracef("quiet")
	pr := cw.leader
	if pr == nil || !pr.opened || pr.stopped || pr.crashed || pr.core.Stats(cw.now).Phase != "serving" || !cw.sp.on {
		return // the final process settles (settleFinal)
	}
	ctx := context.Background()
	if !cw.runUntil(func() bool { return pr.stopped || cw.settledUp(ctx) }, cw.o.Quiet) {
		t, _, _ := chain.ReadTrimCursor(ctx, cw.meta, starName, cw.p.class)
		cp, _, _ := absorb.ReadCheckpoint(ctx, cw.meta, starName, cw.p.class)
		marks, _ := cw.meta.Scan(ctx, settle.MarkerPrefix(starName, cw.p.class), "", 0)
		cw.violation("quiet: settlement did not catch up within %v of quiet (faults off, no appends): cursor at %+v deleted %+v, checkpoint %d/%d, %d markers left; %+v", cw.o.Quiet, t.At, t.Deleted, cp.Epoch, cp.Next, len(marks), pr.core.Stats(cw.now).Settle)
		return
	}
	if pr.stopped {
		return
	}
	cw.tracef("quiet: settled up")
	cw.checkQuiet(ctx, pr)
	cw.soakQuiet(ctx, pr)
}

// checkQuiet asserts that nothing leaks once the leader's settlement has
// caught up: no doomed or pending marker (settledUp), nothing on the
// leader's under-replicated list (every slot it names is settled, and a
// repair would copy back what settlement deleted), no flight copy of a
// settled slot and no settled object no ref points at (checkSettled).
func (cw *coreWorld) checkQuiet(ctx context.Context, pr *coreProc) {
	if slots := pr.core.Stats(cw.now).UnderReplSlots; len(slots) > 0 {
		t, _, _ := chain.ReadTrimCursor(ctx, cw.meta, starName, cw.p.class)
		cw.violation("quiet: p%d's under-replicated list still names slots %v with the trim cursor at %d/%d (settled and deleted: a repair would copy them back)", pr.n, slots, t.At.Epoch, t.At.Next)
	}
	cw.checkSettled(ctx, false)
}

// settledUp: the trim cursor is at the checkpoint with everything behind
// it deleted, and no marker is left.
func (cw *coreWorld) settledUp(ctx context.Context) bool {
	t, _, err := chain.ReadTrimCursor(ctx, cw.meta, starName, cw.p.class)
	if err != nil {
		return false
	}
	cp, _, err := absorb.ReadCheckpoint(ctx, cw.meta, starName, cw.p.class)
	if err != nil || t.At != (chain.Position{Epoch: cp.Epoch, Next: cp.Next}) || t.Deleted != t.At {
		return false
	}
	marks, err := cw.meta.Scan(ctx, settle.MarkerPrefix(starName, cw.p.class), "", 1)
	return err == nil && len(marks) == 0
}

// checkSettled checks the settled state: every acked batch reads back
// through the refs at its ack (each stream tiled from 0 by its refs); no
// flight copy is left in a slot settled and deleted; every settled object
// is pointed at by a ref; no repoint was excused as a reclaim's race (this
// simulation reclaims nothing).
func (cw *coreWorld) checkSettled(ctx context.Context, final bool) {
	items, err := cw.meta.Scan(ctx, "refs/", "", 0)
	if err != nil {
		cw.violation("settled: scan refs: %v", err)
		return
	}
	read := map[string][]envelope.Record{}
	referenced := map[string]bool{}
	for _, it := range items {
		sr, err := absorb.DecodeRef(it.Value)
		if err != nil {
			cw.violation("settled: ref %s does not decode: %v", it.Key, err)
			continue
		}
		for _, e := range sr.Extents {
			referenced[e.Key] = true
		}
		if !sr.Settled() {
			cw.violation("settled: ref %s [%d, %d) of %s still points into the chain after settlement finished", it.Key, sr.Start, sr.End, sr.Stream)
		}
		if got := uint64(len(read[sr.Stream])); sr.Start > got && sr.Start <= cw.soakTrim(sr.Stream) {
			// Below its trim point the refs were reclaimed: a gap there.
			read[sr.Stream] = append(read[sr.Stream], make([]envelope.Record, sr.Start-got)...)
		}
		if got := uint64(len(read[sr.Stream])); sr.Start != got && !cw.soakDead(sr.Stream) {
			cw.violation("settled: ref %s of %s starts at %d; the refs before it end at %d (a gap or an overlap)", it.Key, sr.Stream, sr.Start, got)
			continue
		}
		recs, err := cw.w.refRecords(ctx, sr)
		if err != nil {
			cw.violation("settled: ref %s [%d, %d) of %s does not read back: %v", it.Key, sr.Start, sr.End, sr.Stream, err)
			continue
		}
		for seq := sr.Start; seq < sr.End; seq++ {
			read[sr.Stream] = append(read[sr.Stream], recs[seq])
		}
	}
	for _, cb := range cw.batches {
		if cb.b.Fate.Kind != chaincore.Acked {
			continue
		}
		got := read[cb.stream]
		for i, r := range cb.recs {
			seq := cb.b.Start + uint64(i)
			if cw.soakGone(cb.stream, seq) {
				continue
			}
			if seq >= uint64(len(got)) || string(got[seq].Body) != string(r.Body) {
				cw.violation("settled: acked %s[%d,%d) by p%d does not read back through the refs at its seqs", cb.stream, cb.b.Start, cb.b.End(), cb.proc.n)
				break
			}
		}
	}
	t, _, err := chain.ReadTrimCursor(ctx, cw.meta, starName, cw.p.class)
	if err != nil {
		cw.violation("settled: read the trim cursor: %v", err)
		return
	}
	rec, _, err := chain.ReadEpoch(ctx, cw.meta, starName, cw.p.class)
	if err != nil {
		cw.violation("settled: read the epoch record: %v", err)
		return
	}
	for i, m := range cw.mems {
		for _, key := range m.Keys() {
			star, c, e, slot, ok := chain.ParseSlotKey(key)
			if !ok || star != starName || c != cw.p.class || !(chain.Position{Epoch: e, Next: slot}).Less(t.At) {
				continue
			}
			if k, known := cw.obs.cutOf(cw.p.class, e); (known && slot >= k.Slot) || (!known && e < rec.Epoch) {
				continue // past its epoch's cut: the garbage probe's, not settlement's
			}
			head, err := m.Get(ctx, key, 0, envelope.EnvelopeSize)
			if err != nil {
				continue
			}
			if env, err := envelope.ParseEnvelope(head); err == nil && env.Kind == envelope.KindFlight {
				at, late := cw.lateLanded[key]
				if del, deleted := cw.deletedAt[key]; late && deleted && del.Before(at) {
					// A crashed process's PUT that landed after settlement
					// had deleted the slot: nothing can tell it is there,
					// so nothing reclaims it. Counted, not hidden.
					cw.res.StragglerLeaks++
					cw.tracef("straggler leak: %s landed at %v, after its slot was deleted", key, at.Sub(cw.start))
					continue
				}
				cw.violation("settled: bucket %d still holds the flight copy %s, a slot settled and deleted (the cursor is at %d/%d)", i, key, t.At.Epoch, t.At.Next)
			}
		}
	}
	settledMems := cw.settledMems
	if cw.p.class == chain.Standard {
		settledMems = cw.mems
	}
	var objects []string
	for _, m := range settledMems {
		for _, key := range m.Keys() {
			if chain.IsSettledKey(key) && !slices.Contains(objects, key) {
				objects = append(objects, key)
			}
		}
	}
	for _, key := range objects {
		if !referenced[key] {
			cw.violation("settled: settled object %s: no ref points at it and no marker names it (a leak nothing reclaims)", key)
		}
	}
	if !final {
		return
	}
	cw.res.SettledObjects += len(objects)
	cw.obs.mu.Lock()
	if cw.obs.reclaimRaces > 0 {
		cw.violation("settled: %d repoints excused as a reclaim's race, and nothing here reclaims", cw.obs.reclaimRaces)
	}
	cw.res.Repoints += cw.obs.repoints
	cw.obs.mu.Unlock()
}
