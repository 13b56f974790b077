package settlecore

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	absorb "github.com/flightlog/flightlog/absorb/absorbval"
	chain "github.com/flightlog/flightlog/chain/chainval"
	"github.com/flightlog/flightlog/envelope"
	metastore "github.com/flightlog/flightlog/metastore/metaval"
	objstore "github.com/flightlog/flightlog/objstore/objval"
	settle "github.com/flightlog/flightlog/settle/settleval"
)

// Settling the slots read: for every stream with records in them, stream
// by stream, take its transit refs in order (ScanRefs), reclaim those of a
// dead incarnation or below its trim point (CheckLive), group the rest
// into settled objects, merging the stream's small settled objects just
// before (GetRef), render each (settle.Render, from the slots read or a
// ranged GET of each extent: GetRange), mark it pending (Commit), write it
// to every settled bucket (PutObject; one found in place is adopted for
// the records it holds: GetObject), and repoint its refs onto it, many
// streams' repoints to a Commit.
//
// Every step is idempotent and a pass may die at any point: a settled
// object is written with PutIfAbsent and one found in place is adopted; a
// repoint is one compare-and-swap Commit; the cursor moves only once every
// ref into the slots behind it is repointed, each repoint checking that
// no deletion of its object is under way. The objects a pass writes
// together are named by chunk markers (pending, each object with the ref
// that will point at it) before they are written, and a chunk's marker
// goes only once every repoint onto its objects has committed (or is
// narrowed to the objects whose repoint failed), so an object whose
// repoint is lost is deleted by a later pass (reclaim). A repoint costs
// the new ref's put at the last ref's key, a delete of each other ref and
// a check that no marker is at the object's settle.MarkerKey;
// the objects one Commit's repoints merge away are named by one doomed
// chunk marker in that Commit.

// ScanRefs asks for the refs under Prefix after After (a page of at most
// Limit). → RefsScanned.
type ScanRefs struct {
	Prefix, After string
	Limit         int
}

// CheckLive asks whether stream Stream's incarnation still exists and
// below which sequence number its records are trimmed. → Live.
type CheckLive struct{ Stream string }

// GetRange asks for Length bytes at Offset of object Key in bucket Bucket
// of the chain's buckets (Settled: of the settled set). → RangeGot.
type GetRange struct {
	Settled        bool
	Bucket         int
	Key            string
	Offset, Length int64
}

// PutObject asks for Body to be written at Key in settled bucket Bucket
// if no object is there (objstore.ErrExists if one is). → ObjectPut.
type PutObject struct {
	Bucket int
	Key    string
	Body   []byte
}

// GetObject asks for the whole object at Key in settled bucket Bucket.
// → ObjectGot.
type GetObject struct {
	Bucket int
	Key    string
}

func (ScanRefs) isRequest()  {}
func (CheckLive) isRequest() {}
func (GetRange) isRequest()  {}
func (PutObject) isRequest() {}
func (GetObject) isRequest() {}

// RefsScanned is ScanRefs' result.
type RefsScanned struct {
	Items []metastore.Item
	Err   error
}

// Live is CheckLive's result.
type Live struct {
	Live    bool
	TrimSeq uint64
	Err     error
}

// RangeGot is GetRange's result.
type RangeGot struct {
	Data []byte
	Err  error
}

// ObjectPut is PutObject's result.
type ObjectPut struct{ Err error }

// ObjectGot is GetObject's result.
type ObjectGot struct {
	Body []byte
	Err  error
}

func (RefsScanned) isEvent() {}
func (Live) isEvent()        {}
func (RangeGot) isEvent()    {}
func (ObjectPut) isEvent()   {}
func (ObjectGot) isEvent()   {}

// refPage is the refs one ScanRefs returns.
const refPage = 256

// maxMerges bounds the settled objects one new object absorbs.
const maxMerges = 8

// Bounds on the objects a pass plans (their merged extents are read back
// together: maxPlanned, maxPlannedBytes) and renders before it writes them (maxPrepared,
// maxPreparedBytes). The objects rendered are written together, their
// pending marks and repoints in Commits of many: at 10,000 active streams
// a bound of 256 cost a pass about 40 mark-pending Commits, each also
// prone to a conflict with the absorb on the checkpoint guard, where
// Commits of MaxCommitOps need ten.
const (
	maxPlanned       = 4096
	maxPlannedBytes  = 32 << 20 // raw, the merged objects' included
	maxPrepared      = 4096
	maxPreparedBytes = 32 << 20
)

// ref is one ref as read, with its version.
type ref struct {
	key string
	ver metastore.Version
	r   absorb.SpanRef
}

// prepared is a settled object rendered and not yet written.
type prepared struct {
	id, key    string
	obj        []byte
	frames     []envelope.FrameInfo
	all        []ref // the refs it replaces, the merged settled ones first
	merged     int
	start, end uint64
}

// commitCounts is what a queued group of ops does once committed.
type commitCounts struct {
	// stream: whose group it is ("": a chunk marker's, no stream's).
	stream string
	// doomed: the settled objects the repoint merges away, named by the
	// Commit's doomed chunk marker.
	doomed []string
	// settled: the settled ref a repoint puts, its op at index op of the
	// Commit's ops.
	settled                               *settle.KnownRef
	op                                    int
	objects, repointed, merged, reclaimed int
	raw, stored                           int64
}

// slotsRun is one try of settling the slots read.
type slotsRun struct {
	p  *Pass
	sp settle.SlotsPass
	// res: what committed; doomedNew: a committed merge doomed objects.
	res       settle.SlotsResult
	doomedNew bool
	// pending ops of groups not committed yet, and what each group does.
	pending      []metastore.Op
	pendingBytes int
	counts       []commitCounts
	// prepared: objects rendered, to write (flushPrepared).
	prepared      []prepared
	preparedBytes int
	// chunkLimit: the most objects renderChunks renders at a time after
	// the budget refused a larger chunk (0: maxPrepared).
	chunkLimit int
	// lastPrev is the settled ref transitRefs found ending where the
	// stream's pass starts; prevHint is it for the stream being settled.
	lastPrev, prevHint *ref
	// objects: the slot objects read, by key, for extents that point there;
	// fetched: extents read ahead (renderPlanned), by fetchKey.
	objects map[string][]byte
	fetched map[string][]byte
	// planned: objects grouped, to render (renderPlanned); errs: what
	// failed while rendering them mid-way.
	planned      []prepared
	plannedBytes int
	errs         []error
	// only: the streams to settle (nil: all); failed: those that failed.
	only, failed map[string]bool
}

// settleSlotsOnce settles (or reclaims) every ref with records in sp's
// slots (or of sp.Streams only), stream by stream, and gives then what
// committed, the streams that failed and why.
func (p *Pass) settleSlotsOnce(sp settle.SlotsPass, then func(settle.SlotsResult, error)) {
	r := &slotsRun{p: p, sp: sp, objects: map[string][]byte{}, fetched: map[string][]byte{}, failed: map[string]bool{}}
	if sp.Streams != nil {
		r.only = map[string]bool{}
		for _, id := range sp.Streams {
			r.only[id] = true
		}
	}
	for _, s := range sp.Slots {
		r.objects[chain.SlotKey(p.cfg.Star, p.cfg.Class, s.Pos.Epoch, s.Pos.Next)] = s.Object
	}
	first := map[string]uint64{} // stream ID → lowest seq seen in these slots
	for _, s := range sp.Slots {
		for _, f := range s.Frames {
			if r.only != nil && !r.only[f.Stream] {
				continue
			}
			if v, ok := first[f.Stream]; !ok || f.FirstSeq < v {
				first[f.Stream] = f.FirstSeq
			}
		}
	}
	ids := make([]string, 0, len(first))
	for id := range first {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var errs []error
	end := func() {
		r.renderPlanned(func(err error) {
			errs = append(append(errs, r.errs...), err)
			r.flushPrepared(func(err error) {
				errs = append(errs, err)
				r.flush(func(err error) {
					errs = append(errs, err)
					r.res.DoomedNew = r.doomedNew
					for id := range r.failed {
						r.res.Failed = append(r.res.Failed, id)
					}
					slices.Sort(r.res.Failed)
					then(r.res, errors.Join(errs...))
				})
			})
		})
	}
	var next func(i int)
	next = func(i int) {
		if i == len(ids) {
			end()
			return
		}
		id := ids[i]
		p.phase = "settle-stream"
		r.settleStream(id, first[id], func(err error) {
			if err != nil {
				r.failed[id] = true
				errs = append(errs, fmt.Errorf("stream %q: %w", id, err))
				if errors.Is(err, settle.ErrDeposed) {
					end()
					return
				}
			}
			next(i + 1)
		})
	}
	next(0)
}

// settleStream settles stream id's refs from the one covering seq on, for
// as long as they point into the slots this pass read (or other slots
// before the checkpoint).
func (r *slotsRun) settleStream(id string, seq uint64, then func(error)) {
	r.transitRefs(id, seq, func(refs []ref, err error) {
		r.prevHint = r.lastPrev
		if err != nil || len(refs) == 0 {
			then(err)
			return
		}
		r.liveness(id, func(live bool, trimSeq uint64, err error) {
			if err != nil {
				then(err)
				return
			}
			var keep []ref
			var reclaim func(i int)
			reclaim = func(i int) {
				if i == len(refs) {
					r.settleGroups(id, keep, then)
					return
				}
				f := refs[i]
				// Below the trim point: reclaimed, but for the stream's last
				// ref (the last this pass found, to be safe), which carries
				// its absorbed tail: a successor learns tails from refs, and
				// a trim may reach past what is absorbed.
				if live && (f.r.End >= trimSeq || i == len(refs)-1) {
					keep = append(keep, f)
					reclaim(i + 1)
					return
				}
				r.queue([]metastore.Op{{Kind: metastore.OpDelete, Key: f.key, Expect: f.ver}}, commitCounts{stream: id, reclaimed: 1}, func(err error) {
					if err != nil {
						then(fmt.Errorf("reclaim ref %s: %w", f.key, err))
						return
					}
					reclaim(i + 1)
				})
			}
			reclaim(0)
		})
	})
}

// liveness asks whether id lives and where it is trimmed (every stream
// lives, none trimmed, without a liveness source).
func (r *slotsRun) liveness(id string, then func(live bool, trimSeq uint64, err error)) {
	if !r.p.cfg.Liveness {
		then(true, 0, nil)
		return
	}
	r.p.call(CheckLive{Stream: id}, func(ev Event) {
		l := ev.(Live)
		then(l.Live, l.TrimSeq, l.Err)
	})
}

// settleGroups settles keep in groups, each contiguous.
func (r *slotsRun) settleGroups(id string, keep []ref, then func(error)) {
	if len(keep) == 0 {
		then(nil)
		return
	}
	run := 1 // a group is contiguous
	for run < len(keep) && keep[run].r.Start == keep[run-1].r.End {
		run++
	}
	r.settleGroup(id, keep[:run], func(n int, err error) {
		if err != nil {
			then(err)
			return
		}
		r.settleGroups(id, keep[n:], then)
	})
}

// transitRefs gives then the stream's refs from the one covering seq on
// that still point into this chain's slots and start before the pass's
// end, in order (settled ones skipped; there may be gaps where refs were
// reclaimed).
func (r *slotsRun) transitRefs(id string, seq uint64, then func([]ref, error)) {
	var out []ref
	r.lastPrev = nil
	if r.p.known != nil && r.sp.Streams == nil {
		// The leader knows every ref from the cursor on (a retry scans:
		// what it knew may have moved).
		if pr, ok := r.p.knownSettled(id, seq); ok {
			r.lastPrev = &pr
		}
		for _, f := range r.p.known[id] {
			if f.r.End <= seq {
				continue
			}
			if !r.startsBefore(f.r, r.sp.Upto) {
				break
			}
			if !r.settleable(f.r) {
				then(nil, fmt.Errorf("ref %s [%d, %d) points past the checkpoint %+v, out of this chain, or past its epoch's cut", f.key, f.r.Start, f.r.End, r.sp.Checkpoint))
				return
			}
			out = append(out, f)
		}
		then(out, nil)
		return
	}
	r.p.res.RefScans++
	after := chain.RefKey(id, seq)
	if seq > 0 {
		// From the ref ending at seq: the settled one before the pass's
		// records, which the first new object may absorb (mergeable), comes
		// in the same Scan.
		after = chain.RefKey(id, seq-1)
	}
	var page func(after string)
	page = func(after string) {
		r.p.call(ScanRefs{Prefix: chain.RefPrefix(id), After: after, Limit: refPage}, func(ev Event) {
			rs := ev.(RefsScanned)
			if rs.Err != nil {
				then(nil, rs.Err)
				return
			}
			for _, it := range rs.Items {
				if !chain.IsRefOf(id, it.Key) {
					then(out, nil)
					return
				}
				sr, err := absorb.DecodeRef(it.Value)
				if err != nil {
					then(nil, fmt.Errorf("ref %s: %w", it.Key, err))
					return
				}
				if sr.Settled() {
					if sr.End == seq && len(out) == 0 {
						r.lastPrev = &ref{key: it.Key, ver: it.Version, r: sr}
					}
					continue
				}
				if !r.startsBefore(sr, r.sp.Upto) {
					then(out, nil)
					return
				}
				if !r.settleable(sr) {
					then(nil, fmt.Errorf("ref %s [%d, %d) points past the checkpoint %+v, out of this chain, or past its epoch's cut", it.Key, sr.Start, sr.End, r.sp.Checkpoint))
					return
				}
				out = append(out, ref{key: it.Key, ver: it.Version, r: sr})
			}
			if len(rs.Items) < refPage {
				then(out, nil)
				return
			}
			page(rs.Items[len(rs.Items)-1].Key)
		})
	}
	page(after)
}

// startsBefore: the ref's first extent is a slot of this chain before p.
func (r *slotsRun) startsBefore(sr absorb.SpanRef, p chain.Position) bool {
	star, c, epoch, slot, ok := chain.ParseSlotKey(sr.Extents[0].Key)
	return ok && star == r.p.cfg.Star && c == r.p.cfg.Class && (chain.Position{Epoch: epoch, Next: slot}).Less(p)
}

// settleable: every extent is a slot of this chain before the checkpoint,
// and below its epoch's cut where the pass knows it (an extent past a cut
// would mean the cut is wrong: the pass stops rather than trim by it).
func (r *slotsRun) settleable(sr absorb.SpanRef) bool {
	for _, e := range sr.Extents {
		star, c, epoch, slot, ok := chain.ParseSlotKey(e.Key)
		if !ok || star != r.p.cfg.Star || c != r.p.cfg.Class || !(chain.Position{Epoch: epoch, Next: slot}).Less(r.sp.Checkpoint) {
			return false
		}
		if cut, ok := r.p.cuts[epoch]; ok && epoch < r.sp.Checkpoint.Epoch && slot >= cut {
			return false
		}
	}
	return true
}

// settleGroup renders one settled object from the leading refs of refs
// (up to TargetBytes raw, and as many as one Commit takes), merged with the
// stream's small settled objects just before it (see mergeable), to be
// written and repointed (flushPrepared), and gives then how many of refs
// it consumed.
func (r *slotsRun) settleGroup(id string, refs []ref, then func(int, error)) {
	maxOps := r.p.cfg.MaxCommitOps - 3 // the guard (see commit), the Commit's doomed chunk marker, the object's marker check (see repoint)
	n, raw := 0, 0
	for n < len(refs) && (n == 0 || (raw < r.p.cfg.TargetBytes && n+1+maxMerges < maxOps)) {
		raw += rawBytes(refs[n].r)
		n++
	}
	group := refs[:n]
	// A merged object costs an op (its ref's delete; the Commit's doomed
	// chunk marker names it): the group's Commit must fit the backend.
	merges := min(maxMerges, max(0, maxOps-n))
	r.mergeable(id, group[0].r.Start, raw, merges, nil, func(prev []ref, err error) {
		if err != nil {
			then(0, err)
			return
		}
		all := append(append([]ref(nil), prev...), group...)
		// Rendered later, with other streams' objects, so that the
		// extents read back (a merged object's) are read in parallel.
		r.planned = append(r.planned, prepared{id: id, key: chain.SettledKey(id, all[0].r.Start, group[n-1].r.End), all: all, merged: len(prev),
			start: all[0].r.Start, end: group[n-1].r.End})
		for _, f := range all {
			r.plannedBytes += rawBytes(f.r)
		}
		if len(r.planned) < maxPlanned && r.plannedBytes < maxPlannedBytes {
			then(n, nil)
			return
		}
		r.renderPlanned(func(err error) {
			if err != nil {
				r.errs = append(r.errs, err) // its streams are marked failed
			}
			then(n, nil)
		})
	})
}

// renderPlanned renders the objects planned so far, their extents that are
// not in the slots read fetched in parallel first (fanOut; one that fails
// there is read again, bucket after bucket, by records), a chunk at a
// time, and writes them once maxPrepared or maxPreparedBytes are
// rendered. A stream whose object
// cannot be rendered is marked failed; then gets the errors.
func (r *slotsRun) renderPlanned(then func(error)) {
	ps := r.planned
	r.planned, r.plannedBytes = nil, 0
	r.renderChunks(ps, nil, then) // memory.go: in chunks the budget holds
}

// renderChunk renders ps (their extents not in the slots read fetched in
// parallel first) into r.prepared, and gives then the errors.
func (r *slotsRun) renderChunk(ps []prepared, then func(error)) {
	var reqs []Request
	for _, pl := range ps {
		for _, f := range pl.all {
			for _, e := range f.r.Extents {
				if _, ok := r.objects[e.Key]; !ok {
					reqs = append(reqs, GetRange{Settled: chain.IsSettledKey(e.Key), Key: e.Key, Offset: int64(e.Offset), Length: int64(e.Length)})
				}
			}
		}
	}
	r.p.phase = "read-merged"
	r.p.fanOut(reqs, func(evs []Event) {
		for i, ev := range evs {
			if rg := ev.(RangeGot); rg.Err == nil {
				g := reqs[i].(GetRange)
				r.fetched[fetchKey(g.Key, uint64(g.Offset))] = rg.Data
			}
		}
		var errs []error
		var next func(i int)
		next = func(i int) {
			if i == len(ps) {
				clear(r.fetched)
				then(errors.Join(errs...))
				return
			}
			pl := ps[i]
			fail := func(err error) {
				r.failed[pl.id] = true
				errs = append(errs, fmt.Errorf("stream %q: %w", pl.id, err))
				next(i + 1)
			}
			r.runs(pl.id, pl.all, func(runs []settle.Run, err error) {
				if err != nil {
					fail(err)
					return
				}
				if pl.obj, pl.frames, err = settle.Render(pl.id, pl.start, pl.end, runs, r.p.cfg.Codec, r.p.cfg.FrameBytes); err != nil {
					fail(err)
					return
				}
				r.prepared = append(r.prepared, pl)
				r.preparedBytes += len(pl.obj)
				next(i + 1)
			})
		}
		next(0)
	})
}

// fetchKey names an extent fetched ahead (renderPlanned).
func fetchKey(key string, offset uint64) string { return fmt.Sprintf("%s@%d", key, offset) }

// rawBytes is the ref's records' decoded bytes.
func rawBytes(sr absorb.SpanRef) int {
	n := 0
	for _, e := range sr.Extents {
		n += int(e.RawLength)
	}
	return n
}

// mergeable gives then the stream's settled refs that end where the new
// object starts and that it should absorb, oldest first (out: those found
// so far). The rule keeps rewriting bounded like a binary counter: a
// settled object is merged while it is no more than twice what the new one
// holds so far and the sum stays within TargetBytes, so a slow stream's
// objects grow toward TargetBytes with each byte rewritten about
// log2(TargetBytes / pass size) times, instead of one small object per
// pass forever.
func (r *slotsRun) mergeable(id string, start uint64, raw, most int, out []ref, then func([]ref, error)) {
	if len(out) >= most || start == 0 {
		then(out, nil)
		return
	}
	consider := func(it metastore.Item, sr absorb.SpanRef) {
		pr := rawBytes(sr)
		if !sr.Settled() || sr.End != start || pr > 2*raw || raw+pr > r.p.cfg.TargetBytes || !oneObject(sr) {
			then(out, nil)
			return
		}
		out = append([]ref{{key: it.Key, ver: it.Version, r: sr}}, out...)
		r.mergeable(id, sr.Start, raw+pr, most, out, then)
	}
	if h := r.prevHint; h != nil && h.r.End == start {
		consider(metastore.Item{Key: h.key, Version: h.ver}, h.r) // read by transitRefs' Scan
		return
	}
	if r.p.known != nil && r.sp.Streams == nil {
		// Further back, the leader may know it too (a retry reads: what
		// it knew may have moved).
		if h, ok := r.p.knownSettled(id, start); ok {
			consider(metastore.Item{Key: h.key, Version: h.ver}, h.r)
			return
		}
	}
	r.p.call(GetRef{Key: chain.RefKey(id, start)}, func(ev Event) {
		rg := ev.(RefGot)
		switch {
		case rg.Err != nil:
			then(nil, rg.Err)
		case !rg.Found:
			then(out, nil)
		default:
			sr, err := absorb.DecodeRef(rg.Item.Value)
			if err != nil {
				then(nil, fmt.Errorf("ref %s: %w", rg.Item.Key, err))
				return
			}
			if sr.Settled() {
				// The leader learns it: the next pass's walk stops there
				// without a read.
				r.p.res.Seen = append(r.p.res.Seen, settle.KnownRef{Key: rg.Item.Key, Version: rg.Item.Version, Ref: sr})
			}
			consider(rg.Item, sr)
		}
	})
}

// oneObject: every extent of a settled ref is in the same object.
func oneObject(sr absorb.SpanRef) bool {
	for _, e := range sr.Extents {
		if e.Key != sr.Extents[0].Key {
			return false
		}
	}
	return true
}

// runs gives then the records of refs' extents, in order.
func (r *slotsRun) runs(id string, refs []ref, then func([]settle.Run, error)) {
	var out []settle.Run
	var exts []absorb.Extent
	for _, f := range refs {
		exts = append(exts, f.r.Extents...)
	}
	var next func(i int)
	next = func(i int) {
		if i == len(exts) {
			then(out, nil)
			return
		}
		e := exts[i]
		r.records(id, e, func(recs []envelope.Record, err error) {
			if err != nil {
				then(nil, err)
				return
			}
			out = append(out, settle.Run{FirstSeq: e.FirstSeq, Records: recs})
			next(i + 1)
		})
	}
	next(0)
}

// records gives then the records of extent e, from the slot object this
// pass read or by a ranged GET falling through the chain's buckets (the
// settled set's, for a settled object being merged).
func (r *slotsRun) records(id string, e absorb.Extent, then func([]envelope.Record, error)) {
	info := e.FrameInfo(id)
	if obj, ok := r.objects[e.Key]; ok && e.Offset+uint64(e.Length) <= uint64(len(obj)) {
		if recs, err := envelope.DecodeFrame(info, obj[e.Offset:e.Offset+uint64(e.Length)]); err == nil {
			then(recs, nil)
			return
		}
	}
	if data, ok := r.fetched[fetchKey(e.Key, e.Offset)]; ok {
		if recs, err := envelope.DecodeFrame(info, data); err == nil {
			then(recs, nil)
			return
		}
	}
	settled := chain.IsSettledKey(e.Key) // a small settled object being merged
	n := r.p.cfg.TransitK
	if settled {
		n = r.p.cfg.SettledBuckets
	}
	var errs []error
	var copyOf func(b int)
	copyOf = func(b int) {
		if b == n {
			then(nil, fmt.Errorf("settle: no good copy of %s [%d+%d) for records %d-%d: %w", e.Key, e.Offset, e.Length, e.FirstSeq, e.FirstSeq+uint64(e.Count)-1, errors.Join(errs...)))
			return
		}
		r.p.call(GetRange{Settled: settled, Bucket: b, Key: e.Key, Offset: int64(e.Offset), Length: int64(e.Length)}, func(ev Event) {
			rg := ev.(RangeGot)
			err := rg.Err
			if err == nil {
				var recs []envelope.Record
				if recs, err = envelope.DecodeFrame(info, rg.Data); err == nil {
					then(recs, nil)
					return
				}
			}
			errs = append(errs, fmt.Errorf("copy %d: %w", b, err))
			copyOf(b + 1)
		})
	}
	copyOf(0)
}

// flushPrepared writes the objects rendered so far and queues their
// repoints. Before they are written they are named by chunk markers
// (pendingChunks: one a few hundred objects, each object with the ref that
// will point at it), in Commits of many; once every repoint onto a chunk's
// objects has committed, its marker is deleted (closeChunk). A pass that
// loses a repoint (a retention trim or a delete changed a ref; it died; it
// was deposed) leaves its object named, and a later pass deletes the
// object once the grace has passed and the ref does not point at it (the
// pass's reclaim).
func (r *slotsRun) flushPrepared(then func(error)) {
	ps := r.prepared
	r.prepared, r.preparedBytes = nil, 0
	if len(ps) == 0 {
		then(nil)
		return
	}
	maxOps := r.p.cfg.MaxCommitOps - 1 // the guard
	maxBytes := r.p.cfg.MaxCommitBytes
	chunks := r.pendingChunks(ps)
	var ops []metastore.Op
	size := 0
	fail := func(err error) {
		for _, p := range ps {
			r.failed[p.id] = true
		}
		then(fmt.Errorf("settle: mark %d settled objects pending before writing them: %w", len(ps), err))
	}
	var mark func(i, from int)
	mark = func(i, from int) {
		commitNow := len(ops) > 0 && i == len(chunks)
		var n int
		if i < len(chunks) {
			n = r.p.opBytes(chunks[i].op)
			commitNow = len(ops) >= maxOps || (maxBytes > 0 && size+n > maxBytes/2)
		}
		if commitNow {
			r.p.phase = "mark-pending"
			r.p.noteMarked()
			r.p.commit("mark-pending", ops, func(vs []metastore.Version, err error) {
				if err != nil {
					fail(err)
					return
				}
				for j, v := range vs {
					chunks[from+j].ver = v
				}
				ops, size = nil, 0
				mark(i, i)
			})
			return
		}
		if i == len(chunks) {
			r.writeAll(ps, chunks, func(err error) {
				// Written (or failed): the pass holds their bodies no more.
				r.p.holdMemory(0, func(error) { then(err) })
			})
			return
		}
		ops, size = append(ops, chunks[i].op), size+n
		mark(i+1, from)
	}
	mark(0, 0)
}

// maxChunkMarkerBytes bounds one chunk marker's stored form (about 400
// objects' names), and a quarter of MaxCommitBytes where there is one.
const maxChunkMarkerBytes = 64 << 10

// pendingChunk is one chunk marker of the objects ps[first:end].
type pendingChunk struct {
	first, end int
	m          settle.Marker
	op         metastore.Op
	ver        metastore.Version
}

// pendingChunks splits ps into runs whose names fit a chunk marker, and
// gives each its marker's put.
func (r *slotsRun) pendingChunks(ps []prepared) []pendingChunk {
	limit := maxChunkMarkerBytes
	if mb := r.p.cfg.MaxCommitBytes; mb > 0 {
		limit = min(limit, mb/4)
	}
	now := r.p.now.UnixMilli()
	var out []pendingChunk
	for i := 0; i < len(ps); {
		c := pendingChunk{first: i, m: settle.Marker{At: now}}
		size := 0
		var keys []string
		for i < len(ps) {
			n := settle.Named{Key: ps[i].key, Ref: ps[i].all[len(ps[i].all)-1].key}
			if len(keys) > 0 && size+settle.NamedBytes(n) > limit {
				break
			}
			c.m.Objects = append(c.m.Objects, n)
			keys = append(keys, n.Key)
			size += settle.NamedBytes(n)
			i++
		}
		c.end = i
		c.op = metastore.Op{Kind: metastore.OpPut, Key: settle.ChunkMarkerKey(r.p.cfg.Star, r.p.cfg.Class, keys), Value: c.m.Encode(), Expect: metastore.AnyVersion}
		out = append(out, c)
	}
	return out
}

// writeAll writes every prepared object to every settled bucket, the
// PUTs in parallel (fanOut), then, object by object, adopts one found in
// place and queues its repoint; a stream whose write fails is left out.
// After a chunk's last object, its marker's end is queued (closeChunk).
func (r *slotsRun) writeAll(ps []prepared, chunks []pendingChunk, then func(error)) {
	nb := r.p.cfg.SettledBuckets
	var reqs []Request
	for _, p := range ps {
		for b := 0; b < nb; b++ {
			reqs = append(reqs, PutObject{Bucket: b, Key: p.key, Body: p.obj})
		}
	}
	r.p.phase = "write-settled"
	r.p.fanOut(reqs, func(evs []Event) {
		var errs []error
		c := 0
		var next func(i int)
		next = func(i int) {
			if c < len(chunks) && i == chunks[c].end {
				ch := chunks[c]
				c++
				r.closeChunk(ps[ch.first:ch.end], ch, func(err error) {
					if err != nil {
						errs = append(errs, err)
					}
					next(i)
				})
				return
			}
			if i == len(ps) {
				then(errors.Join(errs...))
				return
			}
			p := ps[i]
			failed := func(err error) {
				r.failed[p.id] = true
				errs = append(errs, fmt.Errorf("stream %q: %w", p.id, err))
				next(i + 1)
			}
			repoint := func(frames []envelope.FrameInfo, stored int64) {
				counts := commitCounts{stream: p.id, objects: 1, stored: stored}
				for _, f := range frames {
					counts.raw += int64(f.RawLength)
				}
				r.repoint(p.id, p.key, p.all, frames, p.merged, counts, func(err error) {
					if err != nil {
						failed(err)
						return
					}
					next(i + 1)
				})
			}
			existed := false
			for b := 0; b < nb; b++ {
				err := evs[i*nb+b].(ObjectPut).Err
				switch {
				case errors.Is(err, objstore.ErrExists):
					existed = true
				case err != nil:
					failed(fmt.Errorf("settle: put %s in settled bucket %d: %w", p.key, b, err))
					return
				}
			}
			if !existed {
				repoint(p.frames, int64(len(p.obj)))
				return
			}
			// A pass that died wrote it (or a zombie's did): the key names
			// the records it holds, so it is the same; read its index back.
			r.adopt(p.key, p.start, p.end, func(frames []envelope.FrameInfo, stored int64, err error) {
				if err != nil {
					failed(err)
					return
				}
				repoint(frames, stored)
			})
		}
		next(0)
	})
}

// closeChunk queues the end of a chunk marker once every repoint onto its
// objects (ps) is queued: its delete, in the Commit of the last of them or
// after it, so the marker goes only with or after every repoint. An
// object whose stream failed in this run (its write, its adoption or its
// repoint's Commit) may be written and not pointed at: the marker is
// narrowed to those instead, and a later pass reclaims them.
func (r *slotsRun) closeChunk(ps []prepared, ch pendingChunk, then func(error)) {
	m := ch.m
	m.Objects = nil
	for j, p := range ps {
		if r.failed[p.id] {
			m.Objects = append(m.Objects, ch.m.Objects[j])
		}
	}
	if len(m.Objects) == len(ch.m.Objects) {
		then(nil) // every one failed: the marker stays as it is
		return
	}
	op := metastore.Op{Kind: metastore.OpDelete, Key: ch.op.Key, Expect: ch.ver}
	if len(m.Objects) > 0 {
		op = metastore.Op{Kind: metastore.OpPut, Key: ch.op.Key, Value: m.Encode(), Expect: ch.ver}
	}
	r.queue([]metastore.Op{op}, commitCounts{}, then)
}

// put writes obj at key in every bucket of the settled set. It gives
// objstore.ErrExists (after trying every bucket) if any bucket already
// held the key: a pass that died, or a zombie's, wrote it there.
func (r *slotsRun) put(key string, obj []byte, then func(error)) {
	existed := false
	var next func(b int)
	next = func(b int) {
		if b == r.p.cfg.SettledBuckets {
			if existed {
				then(objstore.ErrExists)
				return
			}
			then(nil)
			return
		}
		r.p.call(PutObject{Bucket: b, Key: key, Body: obj}, func(ev Event) {
			err := ev.(ObjectPut).Err
			switch {
			case errors.Is(err, objstore.ErrExists):
				existed = true
			case err != nil:
				then(fmt.Errorf("settle: put %s in settled bucket %d: %w", key, b, err))
				return
			}
			next(b + 1)
		})
	}
	next(0)
}

// adopt reads the settled object at key (first good copy) and gives then
// its frames and size, checking it holds exactly [start, end).
func (r *slotsRun) adopt(key string, start, end uint64, then func([]envelope.FrameInfo, int64, error)) {
	r.p.phase = "adopt"
	var errs []error
	var next func(b int)
	next = func(b int) {
		if b == r.p.cfg.SettledBuckets {
			then(nil, 0, fmt.Errorf("settle: read back %s: %w", key, errors.Join(errs...)))
			return
		}
		r.p.call(GetObject{Bucket: b, Key: key}, func(ev Event) {
			og := ev.(ObjectGot)
			err := og.Err
			if err == nil {
				var frames []envelope.FrameInfo
				if _, frames, err = envelope.ParseSettled(og.Body); err == nil {
					last := frames[len(frames)-1]
					if frames[0].FirstSeq == start && last.FirstSeq+uint64(last.Count) == end {
						// Every bucket gets this copy (one that missed the
						// key gets it now): the ref will point at its frames.
						r.put(key, og.Body, func(err error) {
							if err != nil && !errors.Is(err, objstore.ErrExists) {
								then(nil, 0, err)
								return
							}
							then(frames, int64(len(og.Body)), nil)
						})
						return
					}
					err = fmt.Errorf("holds [%d, %d), its key says [%d, %d)", frames[0].FirstSeq, last.FirstSeq+uint64(last.Count), start, end)
				}
			}
			errs = append(errs, fmt.Errorf("copy %d: %w", b, err))
			next(b + 1)
		})
	}
	next(0)
}

// repoint replaces refs (the first merged of them settled objects being
// absorbed) by one settled ref at the last one's key, covering
// [refs[0].Start, last.End) with extents into the object at key, in one
// Commit whose doomed chunk marker names the absorbed objects (deleted
// once no reader may hold a ref to them: the pass's reclaim).
func (r *slotsRun) repoint(id, key string, refs []ref, frames []envelope.FrameInfo, merged int, counts commitCounts, then func(error)) {
	cfg := r.p.cfg
	last := refs[len(refs)-1]
	sr := absorb.SpanRef{Stream: id, Class: last.r.Class, Star: cfg.Star, Start: refs[0].r.Start, End: last.r.End,
		MinTS: frames[0].MinTimestamp, MaxTS: frames[0].MaxTimestamp,
		Writer: fmt.Sprintf("settle/%s/%d", cfg.Owner, cfg.Epoch)}
	for _, f := range frames {
		sr.MinTS, sr.MaxTS = min(sr.MinTS, f.MinTimestamp), max(sr.MaxTS, f.MaxTimestamp)
		sr.Extents = append(sr.Extents, absorb.Extent{Key: key, Offset: f.Offset, Length: f.Length, RawLength: f.RawLength, Codec: f.Codec,
			CRC: f.CRC, FirstSeq: f.FirstSeq, Count: f.Count, MinTimestamp: f.MinTimestamp, MaxTimestamp: f.MaxTimestamp})
	}
	if err := sr.Validate(); err != nil {
		then(fmt.Errorf("settle: the settled ref of %s: %w", key, err))
		return
	}
	val, err := json.Marshal(sr)
	if err != nil {
		then(err)
		return
	}
	ops := []metastore.Op{{Kind: metastore.OpPut, Key: last.key, Value: val, Expect: last.ver}}
	for _, f := range refs[:len(refs)-1] {
		ops = append(ops, metastore.Op{Kind: metastore.OpDelete, Key: f.key, Expect: f.ver})
	}
	// No deletion of the object may be under way: a reclaim claims an
	// object by a Deleting marker at its MarkerKey before deleting it (see
	// reclaimDue), so this Commit fails if one is there, and the stream is
	// settled again once the deletion is over. A pending marker of an
	// earlier version there goes with this repoint, at the version the
	// scan read (a claim would have moved it).
	mk := settle.MarkerKey(cfg.Star, cfg.Class, key)
	if v, ok := r.p.oldPending[mk]; ok {
		ops = append(ops, metastore.Op{Kind: metastore.OpDelete, Key: mk, Expect: v})
	} else {
		ops = append(ops, metastore.Op{Kind: metastore.OpCheck, Key: mk, Expect: metastore.NoVersion})
	}
	for _, f := range refs[:merged] {
		counts.doomed = append(counts.doomed, f.r.Extents[0].Key) // the Commit's doomed chunk marker names it
	}
	counts.repointed, counts.merged = len(refs)-merged, merged
	counts.settled = &settle.KnownRef{Key: last.key, Ref: sr}
	r.queue(ops, counts, func(err error) {
		if err != nil {
			then(fmt.Errorf("settle: repoint %d refs of %q to %s: %w", len(refs), id, key, err))
			return
		}
		then(nil)
	})
}

// queue adds one group of ops (a repoint, or a reclaim) to the pending
// Commit, committing what is pending first if the group would not fit the
// backend's limits with it. The ops of one group always commit together;
// one Commit carries many streams' groups, so a pass costs a Commit per
// MaxCommitOps ops rather than one per stream.
func (r *slotsRun) queue(ops []metastore.Op, c commitCounts, then func(error)) {
	// Room for the guard (see commit) and the doomed chunk marker.
	maxOps, maxBytes := r.p.cfg.MaxCommitOps-2, r.p.cfg.MaxCommitBytes
	if maxBytes > 0 {
		maxBytes -= r.p.opBytes(r.p.guardOp()) + r.p.opBytes(r.doomedOp(nil))
	}
	size := 0
	for _, op := range ops {
		size += r.p.opBytes(op)
	}
	for _, k := range c.doomed {
		size += settle.NamedBytes(settle.Named{Key: k})
	}
	add := func() {
		c.op = len(r.pending)
		r.pending = append(r.pending, ops...)
		r.pendingBytes += size
		r.counts = append(r.counts, c)
		if c.merged > 0 {
			r.doomedNew = true
		}
		then(nil)
	}
	if len(r.pending) > 0 && (len(r.pending)+len(ops) > maxOps || (maxBytes > 0 && r.pendingBytes+size > maxBytes)) {
		r.flush(func(err error) {
			if err != nil {
				then(err)
				return
			}
			add()
		})
		return
	}
	add()
}

// doomedOp is the put of the doomed chunk marker naming objects (merged
// away by the repoints of one Commit).
func (r *slotsRun) doomedOp(objects []string) metastore.Op {
	m := settle.Marker{At: r.p.now.UnixMilli()}
	for _, k := range objects {
		m.Objects = append(m.Objects, settle.Named{Key: k})
	}
	return metastore.Op{Kind: metastore.OpPut, Key: settle.ChunkMarkerKey(r.p.cfg.Star, r.p.cfg.Class, objects), Value: m.Encode(), Expect: metastore.AnyVersion}
}

// flush commits the pending ops.
func (r *slotsRun) flush(then func(error)) {
	if len(r.pending) == 0 {
		then(nil)
		return
	}
	ops, counts := r.pending, r.counts
	r.pending, r.counts, r.pendingBytes = nil, nil, 0
	r.p.phase = "repoint"
	var doomed []string
	for _, c := range counts {
		doomed = append(doomed, c.doomed...)
	}
	if len(doomed) > 0 {
		r.p.noteMarked()
		ops = append(ops, r.doomedOp(doomed))
	}
	r.p.commit("repoint", ops, func(vs []metastore.Version, err error) {
		if err != nil {
			for _, c := range counts {
				if c.stream != "" {
					r.failed[c.stream] = true
				}
			}
			then(fmt.Errorf("settle: commit %d ops of %d repoints and reclaims: %w", len(ops), len(counts), err))
			return
		}
		for _, c := range counts {
			if c.settled != nil {
				k := *c.settled
				k.Version = vs[c.op]
				r.p.res.Settled = append(r.p.res.Settled, k)
			}
			r.res.Objects += c.objects
			r.res.Repointed += c.repointed
			r.res.Merged += c.merged
			r.res.Reclaimed += c.reclaimed
			r.res.RawBytes += c.raw
			r.res.StoredBytes += c.stored
		}
		then(nil)
	})
}
