// Package settle holds what settlement (docs/design.md, "Settlement")
// shares with the tools that check and repair a star: the settle pass's
// input and result, the doomed-marker format under
// stars/<star>/<class>/doomed/ (MarkedObjects), and the part of a pass
// that rewrites the transit extents of absorbed flights into per-stream
// settled objects in the Standard bucket set and repoints the refs that
// pointed into them (SettleSlots).
//
// A pass as a whole (read the trim cursor, delete what is behind it,
// reclaim doomed objects, re-derive a lost cut, settle, advance the
// cursor, delete) is decided by a core in the loglet's chain runtime and
// executed one I/O call at a time; SettleSlots is its one coarse step.
//
// Every step is idempotent and a pass may die at any point: a settled
// object is written with PutIfAbsent and one found in place is adopted for
// the records it holds; a repoint is one compare-and-swap Commit (or, past
// the backend's size limit, a put of the merged ref followed by deletes of
// the refs it covers, which readers tolerate: they dedupe overlapping refs
// by sequence number); the cursor moves only once every ref into the slots
// behind it is repointed; and deletes come after the cursor, so a slot is
// deleted only when nothing reads it. A settled object is marked pending
// before it is written, so one whose repoint is lost is deleted by a later
// pass; and every metastore mutation of a pass is one Commit that also
// checks the checkpoint is still sealed by the pass's leader, so a deposed
// leader's pass changes nothing once a successor has sealed.
//
// Settlement's values and pure functions (Pass, Result, SlotsPass, Slot,
// Segments, Marker and its keys, the sentinel errors) are declared in
// settle/settleval, which does no I/O, and re-exported here under the same
// names.
package settle

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// Liveness tells settle whether the stream with ID id still exists (its
// record names this incarnation) and below which sequence number its
// records are trimmed. Refs of a dead incarnation, and refs wholly below
// the trim point, are reclaimed instead of settled.
type Liveness func(ctx context.Context, id string) (live bool, trimSeq uint64, err error)

// Config is one chain's settle.
type Config struct {
	Meta    metastore.Store
	Star    string
	Class   chain.Class
	Owner   string
	Epoch   uint64          // the leader's epoch, for the Writer of settled refs
	Transit chain.BucketSet // the chain's bucket set
	Settled []objstore.Store
	// Codec compresses settled frames; history is read rarely and kept
	// long, so zstd (envelope.CodecZstd) is the default choice.
	Codec       envelope.Codec
	TargetBytes int
	FrameBytes  int
	Liveness    Liveness // nil: every stream is live, none trimmed
	// DoomedGrace is how long a settled object merged into a larger one
	// is kept before it is deleted, so that a reader that resolved a ref
	// to it just before the merge still reads it (0: DefaultDoomedGrace;
	// negative: none; readers then re-resolve the moved ref).
	DoomedGrace time.Duration
	Logger      *slog.Logger
	// Now is the clock for DoomedGrace (default time.Now).
	Now func() time.Time
}

// DefaultDoomedGrace is Config.DoomedGrace's default.
const DefaultDoomedGrace = time.Minute

// SettleSlots settles (or reclaims) every ref with records in the slots
// given, stream by stream: it writes the settled objects (each marked
// pending before), and repoints the refs onto them in guarded Commits of
// many. It returns what it did even with an error, and which streams
// failed (SlotsResult.Failed): every step is idempotent, so a retry of
// those streams alone (SlotsPass.Streams) finishes the job.
func SettleSlots(ctx context.Context, cfg Config, p SlotsPass) (SlotsResult, error) {
	cfg.defaults()
	r := &run{cfg: cfg, p: Pass{Upto: p.Upto, Checkpoint: p.Checkpoint}, cpVer: p.Guard, upto: p.Upto, slots: p.Slots, objects: map[string][]byte{}, failed: map[string]bool{}}
	if p.Streams != nil {
		r.only = map[string]bool{}
		for _, id := range p.Streams {
			r.only[id] = true
		}
	}
	for _, c := range p.Cuts {
		r.addCut(c)
	}
	for _, s := range p.Slots {
		r.objects[chain.SlotKey(cfg.Star, cfg.Class, s.Pos.Epoch, s.Pos.Next)] = s.Object
	}
	err := r.settleStreams(ctx)
	out := SlotsResult{Objects: r.res.Objects, Repointed: r.res.Repointed, Merged: r.res.Merged, Reclaimed: r.res.Reclaimed,
		RawBytes: r.res.RawBytes, StoredBytes: r.res.StoredBytes, DoomedNew: r.doomedNew, Guard: r.cpVer}
	for id := range r.failed {
		out.Failed = append(out.Failed, id)
	}
	slices.Sort(out.Failed)
	return out, err
}

// WithDefaults returns c with every zero setting at its default.
func (c Config) WithDefaults() Config {
	c.defaults()
	return c
}

func (c *Config) defaults() {
	if c.Codec == 0 {
		c.Codec = envelope.CodecZstd
	}
	if c.TargetBytes <= 0 {
		c.TargetBytes = DefaultTargetBytes
	}
	if c.FrameBytes <= 0 {
		c.FrameBytes = DefaultFrameBytes
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.DoomedGrace == 0 {
		c.DoomedGrace = DefaultDoomedGrace
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

type run struct {
	cfg  Config
	p    Pass
	res  Result
	cuts map[uint64]uint64
	upto chain.Position // where this pass moves the cursor
	// pending ops of groups not committed yet, and what each group does.
	pending      []metastore.Op
	pendingBytes int
	counts       []commitCounts
	doomedNew    bool // a committed merge doomed objects
	// cpVer is the checkpoint's version as holder last read it (see
	// commit).
	cpVer metastore.Version
	// prepared: objects rendered, to write (flushPrepared).
	prepared      []prepared
	preparedBytes int
	// lastPrev is the settled ref transitRefs found ending where the
	// stream's pass starts; prevHint is it for the stream being settled.
	lastPrev, prevHint *ref
	// slots read this pass, in chain order, with their frames by stream.
	slots []Slot
	// objects: the slot objects read, by key, for extents that point there.
	objects map[string][]byte
	// only: the streams to settle (nil: all); failed: those that failed.
	only, failed map[string]bool
}

func (r *run) addCut(c chain.Cut) {
	if r.cuts == nil {
		r.cuts = map[uint64]uint64{}
	}
	r.cuts[c.Epoch] = c.Slot
}

// settleStreams settles (or reclaims) every ref with records in the slots
// read, stream by stream.
func (r *run) settleStreams(ctx context.Context) error {
	first := map[string]uint64{} // stream ID → lowest seq seen in these slots
	for _, s := range r.slots {
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
	for _, id := range ids {
		if err := r.settleStream(ctx, id, first[id]); err != nil {
			r.failed[id] = true
			errs = append(errs, fmt.Errorf("stream %q: %w", id, err))
			if ctx.Err() != nil || errors.Is(err, ErrDeposed) {
				break
			}
		}
	}
	if err := r.flushPrepared(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := r.flush(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ref is one ref as read, with its version.
type ref struct {
	key string
	ver metastore.Version
	r   absorb.SpanRef
}

// settleStream settles stream id's refs from the one covering seq on, for
// as long as they point into the slots this pass read (or other slots
// before the checkpoint).
func (r *run) settleStream(ctx context.Context, id string, seq uint64) error {
	refs, err := r.transitRefs(ctx, id, seq)
	r.prevHint = r.lastPrev
	if err != nil || len(refs) == 0 {
		return err
	}
	live, trimSeq := true, uint64(0)
	if r.cfg.Liveness != nil {
		if live, trimSeq, err = r.cfg.Liveness(ctx, id); err != nil {
			return err
		}
	}
	var keep []ref
	for i, f := range refs {
		// Below the trim point: reclaimed, but for the stream's last ref
		// (the last this pass found, to be safe), which carries its
		// absorbed tail: a successor learns tails from refs, and a trim may
		// reach past what is absorbed.
		if !live || (f.r.End < trimSeq && i < len(refs)-1) {
			if err := r.queue(ctx, []metastore.Op{{Kind: metastore.OpDelete, Key: f.key, Expect: f.ver}}, commitCounts{stream: id, reclaimed: 1}); err != nil {
				return fmt.Errorf("reclaim ref %s: %w", f.key, err)
			}
			continue
		}
		keep = append(keep, f)
	}
	for len(keep) > 0 {
		run := 1 // a group is contiguous
		for run < len(keep) && keep[run].r.Start == keep[run-1].r.End {
			run++
		}
		n, err := r.settleGroup(ctx, id, keep[:run])
		if err != nil {
			return err
		}
		keep = keep[n:]
	}
	return nil
}

// transitRefs returns the stream's refs from the one covering seq on that
// still point into this chain's slots and start before the pass's end, in
// order (settled ones skipped; there may be gaps where refs were
// reclaimed).
func (r *run) transitRefs(ctx context.Context, id string, seq uint64) ([]ref, error) {
	var out []ref
	r.lastPrev = nil
	after := chain.RefKey(id, seq)
	if seq > 0 {
		// From the ref ending at seq: the settled one before the pass's
		// records, which the first new object may absorb (mergeable), comes
		// in the same Scan.
		after = chain.RefKey(id, seq-1)
	}
	for {
		items, err := r.cfg.Meta.Scan(ctx, chain.RefPrefix(id), after, 256)
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			if !chain.IsRefOf(id, it.Key) {
				return out, nil
			}
			sr, err := absorb.DecodeRef(it.Value)
			if err != nil {
				return nil, fmt.Errorf("ref %s: %w", it.Key, err)
			}
			if sr.Settled() {
				if sr.End == seq && len(out) == 0 {
					r.lastPrev = &ref{key: it.Key, ver: it.Version, r: sr}
				}
				continue
			}
			if !r.startsBefore(sr, r.upto) {
				return out, nil
			}
			if !r.settleable(sr) {
				return nil, fmt.Errorf("ref %s [%d, %d) points past the checkpoint %+v, out of this chain, or past its epoch's cut", it.Key, sr.Start, sr.End, r.p.Checkpoint)
			}
			out = append(out, ref{key: it.Key, ver: it.Version, r: sr})
		}
		if len(items) < 256 {
			return out, nil
		}
		after = items[len(items)-1].Key
	}
}

// startsBefore: the ref's first extent is a slot of this chain before p.
func (r *run) startsBefore(sr absorb.SpanRef, p chain.Position) bool {
	star, c, epoch, slot, ok := chain.ParseSlotKey(sr.Extents[0].Key)
	return ok && star == r.cfg.Star && c == r.cfg.Class && (chain.Position{Epoch: epoch, Next: slot}).Less(p)
}

// settleable: every extent is a slot of this chain before the checkpoint,
// and below its epoch's cut where the pass knows it (an extent past a cut
// would mean the cut is wrong: the pass stops rather than trim by it).
func (r *run) settleable(sr absorb.SpanRef) bool {
	for _, e := range sr.Extents {
		star, c, epoch, slot, ok := chain.ParseSlotKey(e.Key)
		if !ok || star != r.cfg.Star || c != r.cfg.Class || !(chain.Position{Epoch: epoch, Next: slot}).Less(r.p.Checkpoint) {
			return false
		}
		if cut, ok := r.cuts[epoch]; ok && epoch < r.p.Checkpoint.Epoch && slot >= cut {
			return false
		}
	}
	return true
}

// DeriveCutPatience bounds the fence that re-derives a cut recorded
// nowhere (deriveCuts): a slot no fence can decide (buckets refusing, an
// object no envelope parses) fails the pass after it, and the next pass
// tries again.
const DeriveCutPatience = time.Minute

// settleGroup writes one settled object from the leading refs of refs (up
// to TargetBytes raw, and as many as one Commit takes), merged with the
// stream's small settled objects just before it (see mergeable), repoints
// them all in one Commit, and returns how many of refs it consumed.
func (r *run) settleGroup(ctx context.Context, id string, refs []ref) (int, error) {
	maxOps := metastore.MaxCommitOps(r.cfg.Meta)
	if maxOps <= 0 {
		maxOps = 1 << 30
	}
	maxOps -= 2 // the guard (see commit) and the new object's pending marker's delete
	n, raw := 0, 0
	for n < len(refs) && (n == 0 || (raw < r.cfg.TargetBytes && n+1+2*maxMerges < maxOps)) {
		raw += rawBytes(refs[n].r)
		n++
	}
	group := refs[:n]
	// A merged object costs two ops (its ref's delete, its doomed marker):
	// the group's Commit must fit the backend.
	merges := min(maxMerges, max(0, (maxOps-n)/2))
	prev, err := r.mergeable(ctx, id, group[0].r.Start, raw, merges)
	if err != nil {
		return 0, err
	}
	all := append(append([]ref(nil), prev...), group...)
	start, end := all[0].r.Start, group[n-1].r.End
	key := chain.SettledKey(id, start, end)
	obj, frames, err := r.render(ctx, id, all)
	if err != nil {
		return 0, err
	}
	r.prepared = append(r.prepared, prepared{id: id, key: key, obj: obj, frames: frames, all: all, merged: len(prev), start: start, end: end})
	r.preparedBytes += len(obj)
	if len(r.prepared) >= maxPrepared || r.preparedBytes >= maxPreparedBytes {
		if err := r.flushPrepared(ctx); err != nil {
			return 0, err
		}
	}
	return n, nil
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

// Bounds on the objects a pass renders before it writes them.
const (
	maxPrepared      = 256
	maxPreparedBytes = 32 << 20
)

// flushPrepared writes the objects rendered so far and queues their
// repoints. Each is marked pending (a doomed marker naming the ref that
// will point at it) before it is written, in Commits of many, and the
// repoint's Commit deletes the marker: a pass that loses its repoint (a
// retention trim or a delete changed a ref; it died; it was deposed)
// leaves a marker, and a later pass deletes the object once its grace has
// passed and the ref does not point at it (the pass's reclaim). Without the
// marker such an object had no ref and nothing ever reclaimed it.
func (r *run) flushPrepared(ctx context.Context) error {
	ps := r.prepared
	r.prepared, r.preparedBytes = nil, 0
	if len(ps) == 0 {
		return nil
	}
	maxOps := metastore.MaxCommitOps(r.cfg.Meta)
	if maxOps <= 0 || maxOps > maxBatchOps {
		maxOps = maxBatchOps
	}
	maxOps-- // the guard
	maxBytes := metastore.MaxCommitBytes(r.cfg.Meta)
	now := r.cfg.Now().UnixMilli()
	vers := make([]metastore.Version, 0, len(ps))
	var ops []metastore.Op
	size := 0
	mark := func() error {
		if len(ops) == 0 {
			return nil
		}
		vs, err := r.commit(ctx, ops)
		if err != nil {
			for _, p := range ps {
				r.failed[p.id] = true
			}
			return fmt.Errorf("settle: mark %d settled objects pending before writing them: %w", len(ops), err)
		}
		vers, ops, size = append(vers, vs...), nil, 0
		return nil
	}
	for _, p := range ps {
		val := Marker{Key: p.key, At: now, Ref: p.all[len(p.all)-1].key}.Encode()
		op := metastore.Op{Kind: metastore.OpPut, Key: MarkerKey(r.cfg.Star, r.cfg.Class, p.key), Value: val, Expect: metastore.AnyVersion}
		n := metastore.CommitBytes(r.cfg.Meta, []metastore.Op{op})
		if len(ops) >= maxOps || (maxBytes > 0 && size+n > maxBytes/2) {
			if err := mark(); err != nil {
				return err
			}
		}
		ops, size = append(ops, op), size+n
	}
	if err := mark(); err != nil {
		return err
	}
	var errs []error
	for i, p := range ps {
		frames, stored := p.frames, int64(len(p.obj))
		err := r.put(ctx, p.key, p.obj)
		if errors.Is(err, objstore.ErrExists) {
			// A pass that died wrote it (or a zombie's did): the key names
			// the records it holds, so it is the same; read its index back.
			frames, stored, err = r.adopt(ctx, p.key, p.start, p.end)
		}
		if err != nil {
			r.failed[p.id] = true
			errs = append(errs, fmt.Errorf("stream %q: %w", p.id, err))
			continue
		}
		counts := commitCounts{stream: p.id, objects: 1, stored: stored}
		for _, f := range frames {
			counts.raw += int64(f.RawLength)
		}
		if err := r.repoint(ctx, p.id, p.key, p.all, frames, p.merged, counts, vers[i]); err != nil {
			r.failed[p.id] = true
			errs = append(errs, fmt.Errorf("stream %q: %w", p.id, err))
		}
	}
	return errors.Join(errs...)
}

// maxMerges bounds the settled objects one new object absorbs.
const maxMerges = 8

// settledNonce is the envelope nonce of the settled object at key.
func settledNonce(key string) envelope.Nonce {
	var n envelope.Nonce
	a, b := xxhash.Sum64String(key), xxhash.Sum64String("settled\x00"+key)
	binary.LittleEndian.PutUint64(n[:8], a)
	binary.LittleEndian.PutUint32(n[8:], uint32(b))
	return n
}

// rawBytes is the ref's records' decoded bytes.
func rawBytes(sr absorb.SpanRef) int {
	n := 0
	for _, e := range sr.Extents {
		n += int(e.RawLength)
	}
	return n
}

// mergeable returns the stream's settled refs that end where the new
// object starts and that it should absorb, oldest first. The rule keeps
// rewriting bounded like a binary counter: a settled object is merged
// while it is no more than twice what the new one holds so far and the
// sum stays within TargetBytes, so a slow stream's objects grow toward
// TargetBytes with each byte rewritten about log2(TargetBytes / pass
// size) times, instead of one small object per pass forever.
func (r *run) mergeable(ctx context.Context, id string, start uint64, raw, most int) ([]ref, error) {
	var out []ref
	for len(out) < most && start > 0 {
		var it metastore.Item
		var sr absorb.SpanRef
		if h := r.prevHint; h != nil && h.r.End == start {
			it, sr = metastore.Item{Key: h.key, Version: h.ver}, h.r // read by transitRefs' Scan
		} else {
			var err error
			it, err = r.cfg.Meta.Get(ctx, chain.RefKey(id, start))
			if errors.Is(err, metastore.ErrNotFound) {
				break
			}
			if err != nil {
				return nil, err
			}
			if sr, err = absorb.DecodeRef(it.Value); err != nil {
				return nil, fmt.Errorf("ref %s: %w", it.Key, err)
			}
		}
		pr := rawBytes(sr)
		if !sr.Settled() || sr.End != start || pr > 2*raw || raw+pr > r.cfg.TargetBytes || !r.oneObject(sr) {
			break
		}
		out = append([]ref{{key: it.Key, ver: it.Version, r: sr}}, out...)
		start, raw = sr.Start, raw+pr
	}
	return out, nil
}

// oneObject: every extent of a settled ref is in the same object.
func (r *run) oneObject(sr absorb.SpanRef) bool {
	for _, e := range sr.Extents {
		if e.Key != sr.Extents[0].Key {
			return false
		}
	}
	return true
}

// render builds the settled object of refs' records.
func (r *run) render(ctx context.Context, id string, refs []ref) ([]byte, []envelope.FrameInfo, error) {
	w := envelope.NewBundleWriter()
	var buf []byte
	var first uint64
	count := 0
	var lo, hi int64
	flush := func() error {
		if count == 0 {
			return nil
		}
		err := w.AddFrame(id, first, count, lo, hi, buf, r.cfg.Codec)
		buf, count = buf[:0], 0
		return err
	}
	for _, f := range refs {
		for _, e := range f.r.Extents {
			recs, err := r.records(ctx, f.r, e, id)
			if err != nil {
				return nil, nil, err
			}
			for i, rec := range recs {
				size := envelope.EncodedRecordSize(rec)
				if count > 0 && (len(buf)+size > r.cfg.FrameBytes || count >= envelope.MaxFrameRecords || len(buf)+size > envelope.MaxFrameRawBytes) {
					if err := flush(); err != nil {
						return nil, nil, err
					}
				}
				if count == 0 {
					first, lo, hi = e.FirstSeq+uint64(i), rec.Timestamp, rec.Timestamp
				}
				lo, hi = min(lo, rec.Timestamp), max(hi, rec.Timestamp)
				buf = envelope.AppendRecord(buf, rec)
				count++
			}
		}
	}
	if err := flush(); err != nil {
		return nil, nil, err
	}
	// The nonce is the key's: two passes settling the same records render
	// the same bytes, so copies written by different passes agree.
	obj, frames := w.FinishSettled(refs[0].r.Start, settledNonce(chain.SettledKey(id, refs[0].r.Start, refs[len(refs)-1].r.End)))
	return obj, frames, nil
}

// records returns the records of extent e, from the slot object this pass
// read or by a ranged GET falling through the chain's buckets (the settled
// set's, for a settled object being merged).
func (r *run) records(ctx context.Context, sr absorb.SpanRef, e absorb.Extent, id string) ([]envelope.Record, error) {
	info := e.FrameInfo(id)
	if obj, ok := r.objects[e.Key]; ok && e.Offset+uint64(e.Length) <= uint64(len(obj)) {
		recs, err := envelope.DecodeFrame(info, obj[e.Offset:e.Offset+uint64(e.Length)])
		if err == nil {
			return recs, nil
		}
	}
	var errs []error
	set := r.cfg.Transit.Stores
	if chain.IsSettledKey(e.Key) {
		set = r.cfg.Settled // a small settled object being merged
	}
	for i, b := range set {
		data, err := b.Get(ctx, e.Key, int64(e.Offset), int64(e.Length))
		if err == nil {
			var recs []envelope.Record
			if recs, err = envelope.DecodeFrame(info, data); err == nil {
				return recs, nil
			}
		}
		errs = append(errs, fmt.Errorf("copy %d: %w", i, err))
	}
	return nil, fmt.Errorf("settle: no good copy of %s [%d+%d) for records %d-%d: %w", e.Key, e.Offset, e.Length, e.FirstSeq, e.FirstSeq+uint64(e.Count)-1, absorb.CopyErrors(errs))
}

// put writes obj at key in every bucket of the settled set. It returns
// ErrExists (after trying every bucket) if any bucket already held the
// key: a pass that died, or a zombie's, wrote it there.
func (r *run) put(ctx context.Context, key string, obj []byte) error {
	existed := false
	for i, b := range r.cfg.Settled {
		var err error
		for attempt := 0; attempt < 4; attempt++ {
			if err = b.PutIfAbsent(ctx, key, obj); err == nil || errors.Is(err, objstore.ErrExists) || errors.Is(err, objstore.ErrPermanent) || ctx.Err() != nil {
				break
			}
		}
		switch {
		case errors.Is(err, objstore.ErrExists):
			existed = true
		case err != nil:
			return fmt.Errorf("settle: put %s in settled bucket %d: %w", key, i, err)
		}
	}
	if existed {
		return objstore.ErrExists
	}
	return nil
}

// adopt reads the settled object at key (first good copy) and returns its
// frames and size, checking it holds exactly [start, end).
func (r *run) adopt(ctx context.Context, key string, start, end uint64) ([]envelope.FrameInfo, int64, error) {
	var errs []error
	for i, b := range r.cfg.Settled {
		obj, err := b.Get(ctx, key, 0, -1)
		if err == nil {
			var frames []envelope.FrameInfo
			if _, frames, err = envelope.ParseSettled(obj); err == nil {
				last := frames[len(frames)-1]
				if frames[0].FirstSeq == start && last.FirstSeq+uint64(last.Count) == end {
					// Every bucket gets this copy (one that missed the key
					// gets it now): the ref will point at its frames.
					if err := r.put(ctx, key, obj); err != nil && !errors.Is(err, objstore.ErrExists) {
						return nil, 0, err
					}
					return frames, int64(len(obj)), nil
				}
				err = fmt.Errorf("holds [%d, %d), its key says [%d, %d)", frames[0].FirstSeq, last.FirstSeq+uint64(last.Count), start, end)
			}
		}
		errs = append(errs, fmt.Errorf("copy %d: %w", i, err))
	}
	return nil, 0, fmt.Errorf("settle: read back %s: %w", key, absorb.CopyErrors(errs))
}

// repoint replaces refs (the first merged of them settled objects being
// absorbed) by one settled ref at the last one's key, covering
// [refs[0].Start, last.End) with extents into the object at key, in one
// Commit that also marks the absorbed objects doomed (deleted once no ref
// points at them: the pass's reclaim).
func (r *run) repoint(ctx context.Context, id, key string, refs []ref, frames []envelope.FrameInfo, merged int, counts commitCounts, pendingVer metastore.Version) error {
	last := refs[len(refs)-1]
	sr := absorb.SpanRef{Stream: id, Class: last.r.Class, Star: r.cfg.Star, Start: refs[0].r.Start, End: last.r.End,
		MinTS: frames[0].MinTimestamp, MaxTS: frames[0].MaxTimestamp,
		Writer: fmt.Sprintf("settle/%s/%d", r.cfg.Owner, r.cfg.Epoch)}
	for _, f := range frames {
		sr.MinTS, sr.MaxTS = min(sr.MinTS, f.MinTimestamp), max(sr.MaxTS, f.MaxTimestamp)
		sr.Extents = append(sr.Extents, absorb.Extent{Key: key, Offset: f.Offset, Length: f.Length, RawLength: f.RawLength, Codec: f.Codec,
			CRC: f.CRC, FirstSeq: f.FirstSeq, Count: f.Count, MinTimestamp: f.MinTimestamp, MaxTimestamp: f.MaxTimestamp})
	}
	if err := sr.Validate(); err != nil {
		return fmt.Errorf("settle: the settled ref of %s: %w", key, err)
	}
	val, err := json.Marshal(sr)
	if err != nil {
		return err
	}
	ops := []metastore.Op{{Kind: metastore.OpPut, Key: last.key, Value: val, Expect: last.ver}}
	for _, f := range refs[:len(refs)-1] {
		ops = append(ops, metastore.Op{Kind: metastore.OpDelete, Key: f.key, Expect: f.ver})
	}
	for _, f := range refs[:merged] {
		d := Marker{Key: f.r.Extents[0].Key, At: r.cfg.Now().UnixMilli()}.Encode()
		ops = append(ops, metastore.Op{Kind: metastore.OpPut, Key: MarkerKey(r.cfg.Star, r.cfg.Class, f.r.Extents[0].Key), Value: d, Expect: metastore.NoVersion})
	}
	// The new object is referenced from this Commit on: its pending marker
	// goes with it.
	ops = append(ops, metastore.Op{Kind: metastore.OpDelete, Key: MarkerKey(r.cfg.Star, r.cfg.Class, key), Expect: pendingVer})
	counts.repointed, counts.merged = len(refs)-merged, merged
	if err := r.queue(ctx, ops, counts); err != nil {
		return fmt.Errorf("settle: repoint %d refs of %q to %s: %w", len(refs), id, key, err)
	}
	return nil
}

// maxBatchOps bounds one Commit of a pass on a backend without a limit.
const maxBatchOps = 1024

// commitCounts is what a queued group of ops does once committed.
type commitCounts struct {
	stream                                string
	objects, repointed, merged, reclaimed int
	raw, stored                           int64
}

// queue adds one group of ops (a repoint, or a reclaim) to the pass's
// pending Commit, committing what is pending first if the group would not
// fit the backend's limits with it. The ops of one group always commit
// together; one Commit carries many streams' groups, so a pass costs a
// Commit per MaxCommitOps ops rather than one per stream.
func (r *run) queue(ctx context.Context, ops []metastore.Op, c commitCounts) error {
	maxOps, maxBytes := metastore.MaxCommitOps(r.cfg.Meta), metastore.MaxCommitBytes(r.cfg.Meta)
	if maxOps <= 0 || maxOps > maxBatchOps {
		maxOps = maxBatchOps
	}
	maxOps-- // the guard (see commit)
	if maxBytes > 0 {
		maxBytes -= metastore.CommitBytes(r.cfg.Meta, []metastore.Op{r.guardOp()})
	}
	size := metastore.CommitBytes(r.cfg.Meta, ops)
	if len(r.pending) > 0 && (len(r.pending)+len(ops) > maxOps || (maxBytes > 0 && r.pendingBytes+size > maxBytes)) {
		if err := r.flush(ctx); err != nil {
			return err
		}
	}
	r.pending = append(r.pending, ops...)
	r.pendingBytes += size
	r.counts = append(r.counts, c)
	if c.merged > 0 {
		r.doomedNew = true
	}
	return nil
}

// flush commits the pending ops.
func (r *run) flush(ctx context.Context) error {
	if len(r.pending) == 0 {
		return nil
	}
	ops, counts := r.pending, r.counts
	r.pending, r.counts, r.pendingBytes = nil, nil, 0
	if _, err := r.commit(ctx, ops); err != nil {
		for _, c := range counts {
			r.failed[c.stream] = true
		}
		return fmt.Errorf("settle: commit %d ops of %d repoints and reclaims: %w", len(ops), len(counts), err)
	}
	for _, c := range counts {
		r.res.Objects += c.objects
		r.res.Repointed += c.repointed
		r.res.Merged += c.merged
		r.res.Reclaimed += c.reclaimed
		r.res.RawBytes += c.raw
		r.res.StoredBytes += c.stored
	}
	return nil
}

// MarkedObjects returns the settled objects that a doomed or pending
// marker of any chain names: a settle pass of that chain deletes each once
// it is due (unless, for a pending one, its ref points at it by then). An
// operator's tool reclaiming orphans leaves these to the passes. It scans
// the control keys of every star.
func MarkedObjects(ctx context.Context, ms metastore.Store) (map[string]bool, error) {
	out := map[string]bool{}
	after := ""
	for {
		items, err := ms.Scan(ctx, "stars/", after, 1000)
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			if !strings.Contains(it.Key, "/doomed/") {
				continue
			}
			if d, err := DecodeMarker(it.Value); err == nil {
				out[d.Key] = true
			}
		}
		if len(items) < 1000 {
			return out, nil
		}
		after = items[len(items)-1].Key
	}
}

// holder reads the chain's checkpoint and returns its version if the
// pass's leader still holds it (its seal is Owner's, for Epoch), or an
// error wrapping ErrDeposed.
func (r *run) holder(ctx context.Context) (metastore.Version, error) {
	cp, ver, err := absorb.ReadCheckpoint(ctx, r.cfg.Meta, r.cfg.Star, r.cfg.Class)
	if err != nil {
		return "", fmt.Errorf("settle: read the checkpoint of %s/%s: %w", r.cfg.Star, r.cfg.Class, err)
	}
	if cp.Owner != r.cfg.Owner || cp.OwnerEpoch != r.cfg.Epoch {
		return "", fmt.Errorf("%w: %s/%s is sealed by %q for epoch %d; this pass is %q's, of epoch %d", ErrDeposed, r.cfg.Star, r.cfg.Class, cp.Owner, cp.OwnerEpoch, r.cfg.Owner, r.cfg.Epoch)
	}
	return ver, nil
}

// guardOp checks the checkpoint at the version holder last found.
func (r *run) guardOp() metastore.Op {
	return metastore.Op{Kind: metastore.OpCheck, Key: chain.CheckpointKey(r.cfg.Star, r.cfg.Class), Expect: r.cpVer}
}

// commit applies ops in one Commit that also checks the checkpoint is at a
// version sealed by this pass's leader: every metastore mutation of a pass
// goes through it, so a deposed leader's pass (a zombie that has not
// noticed yet) changes nothing once a successor has sealed the checkpoint,
// the successor's first step. The leader's own absorb moves the checkpoint
// too: a Commit that conflicts on it is retried at the new version if the
// seal is still ours. It returns the versions of ops.
func (r *run) commit(ctx context.Context, ops []metastore.Op) ([]metastore.Version, error) {
	for attempt := 0; ; attempt++ {
		if r.cpVer == "" {
			v, err := r.holder(ctx)
			if err != nil {
				return nil, err
			}
			r.cpVer = v
		}
		vs, err := r.cfg.Meta.Commit(ctx, append(ops[:len(ops):len(ops)], r.guardOp()))
		if err == nil {
			return vs[:len(ops)], nil
		}
		if !errors.Is(err, metastore.ErrConflict) || attempt >= GuardRetries {
			return nil, err
		}
		old := r.cpVer
		v, herr := r.holder(ctx)
		if herr != nil {
			return nil, herr
		}
		r.cpVer = v
		if v == old {
			return nil, err // the conflict is another op's
		}
	}
}
