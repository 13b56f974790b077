// Package settle is the auditor (DESIGN.md, "Settle"): it rewrites the
// transit extents of absorbed flights into per-stream settled objects in
// the Standard bucket set, repoints the refs that pointed into them,
// advances the chain's trim cursor, and deletes the settled slots from
// every bucket of the chain.
//
// One Run is one pass over the slots from the trim cursor up to a position
// the leader gives (never past the checkpoint, nor past a slot with copies
// still uploading or missing). Every step is idempotent and a pass may die
// at any point: a settled object is written with PutIfAbsent and one found
// in place is adopted for the records it holds; a repoint is one
// compare-and-swap Commit (or, past the backend's size limit, a put of the
// merged ref followed by deletes of the refs it covers, which readers
// tolerate: they dedupe overlapping refs by sequence number); the cursor
// moves only once every ref into the slots behind it is repointed; and
// deletes come after the cursor, so a slot is deleted only when nothing
// reads it.
package settle

import (
	"cmp"
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

// Defaults.
const (
	// DefaultTargetBytes is the raw size a settled object grows to before
	// settle starts the next one for the stream.
	DefaultTargetBytes = 8 << 20
	// DefaultFrameBytes is the raw size of one frame of a settled object:
	// what one ranged GET of a read fetches and decodes.
	DefaultFrameBytes = 256 << 10
	// DefaultMaxSlots bounds the slots one pass reads.
	DefaultMaxSlots = 64
	// (MaxPassBytes bounds the bytes those slots may take.)
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

// Pass is what one Run is asked to do.
type Pass struct {
	Trim        chain.TrimCursor
	TrimVersion metastore.Version
	// Upto is where the pass stops: at most the checkpoint, and before
	// any slot whose copies are still uploading or missing.
	Upto chain.Position
	// Checkpoint is the chain's checkpoint: refs may straddle Upto, and
	// are settled whole when every extent lies before the checkpoint.
	Checkpoint chain.Position
	// Cuts are the cuts of every epoch from Trim.Deleted's to Upto's
	// (exclusive) the leader knows; the cursor's own are used too.
	Cuts     []chain.Cut
	MaxSlots int
}

// Result is what a Run did.
type Result struct {
	Trim        chain.TrimCursor // the cursor as the pass left it
	TrimVersion metastore.Version
	Slots       int   // slots read
	Objects     int   // settled objects written (or adopted)
	RawBytes    int64 // raw record bytes settled
	StoredBytes int64 // bytes of the settled objects
	Repointed   int   // refs replaced by settled refs
	Merged      int   // small settled objects absorbed into larger ones
	// DeletedObjects is settled objects deleted once merged away.
	DeletedObjects int
	Reclaimed      int   // refs of deleted incarnations or trimmed records deleted
	Deleted        int   // slot deletes that succeeded (per bucket)
	FreedBytes     int64 // transit bytes of the slots deleted (as read by this pass)
	// DeleteErr is why the deletes behind the cursor are not all done (a
	// bucket down): they stay due for the next pass; the pass itself
	// succeeded.
	DeleteErr error
}

// ErrCutUnknown: the pass needed the cut of an epoch that neither the
// cursor nor the leader knows.
var ErrCutUnknown = errors.New("settle: the cut of an epoch is unknown")

// Run runs one pass. It returns what it did even with an error; the next
// pass resumes from the cursor the result carries.
func Run(ctx context.Context, cfg Config, p Pass) (Result, error) {
	cfg.defaults()
	if p.Checkpoint.Less(p.Upto) {
		// The cursor never passes the checkpoint: a fence, a walk and a
		// garbage probe start there, and a trimmed slot reads absent.
		return Result{Trim: p.Trim, TrimVersion: p.TrimVersion}, fmt.Errorf("settle: %s/%s: asked to settle up to %+v, past the checkpoint %+v", cfg.Star, cfg.Class, p.Upto, p.Checkpoint)
	}
	r := &run{cfg: cfg, p: p, res: Result{Trim: p.Trim, TrimVersion: p.TrimVersion}}
	for _, c := range p.Trim.Cuts {
		r.addCut(c)
	}
	for _, c := range p.Cuts {
		r.addCut(c)
	}
	// Deletes a previous pass left undone come first: they are behind the
	// cursor already, so nothing reads them. A bucket that refuses them
	// (a zone down) does not hold settlement up: they stay due.
	r.deleteBehind(ctx)
	if err := r.deleteDoomed(ctx); err != nil {
		return r.res, err
	}
	if !p.Trim.At.Less(p.Upto) {
		return r.res, nil
	}
	if err := r.deriveCuts(ctx); err != nil {
		return r.res, err
	}
	upto, err := r.readSlots(ctx)
	if err != nil && len(r.slots) == 0 {
		return r.res, err
	}
	r.upto = upto
	if serr := r.settleStreams(ctx); serr != nil {
		return r.res, serr
	}
	if err := r.advance(ctx, upto); err != nil {
		return r.res, err
	}
	r.deleteBehind(ctx)
	return r.res, err
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
	// lastPrev is the settled ref transitRefs found ending where the
	// stream's pass starts; prevHint is it for the stream being settled.
	lastPrev, prevHint *ref
	// slots read this pass, in chain order, with their frames by stream.
	slots []slotData
	// objects: the slot objects read, by key, for extents that point there.
	objects map[string][]byte
}

type slotData struct {
	pos    chain.Position
	size   int64
	frames []envelope.FrameInfo
}

func (r *run) addCut(c chain.Cut) {
	if r.cuts == nil {
		r.cuts = map[uint64]uint64{}
	}
	r.cuts[c.Epoch] = c.Slot
}

// segments returns the committed slot ranges [from, to) of each epoch
// between a and b, in chain order.
func (r *run) segments(a, b chain.Position) ([][3]uint64, error) {
	var out [][3]uint64
	for e := a.Epoch; e <= b.Epoch; e++ {
		from := uint64(0)
		if e == a.Epoch {
			from = a.Next
		}
		to := b.Next
		if e < b.Epoch {
			cut, ok := r.cuts[e]
			if !ok {
				return out, fmt.Errorf("%w: epoch %d of %s/%s", ErrCutUnknown, e, r.cfg.Star, r.cfg.Class)
			}
			to = cut
		}
		if from < to {
			out = append(out, [3]uint64{e, from, to})
		}
	}
	return out, nil
}

// readSlots reads the slots from the cursor on, up to Upto, MaxSlots or
// MaxPassBytes, and returns the position after the last one read.
func (r *run) readSlots(ctx context.Context) (chain.Position, error) {
	at := r.p.Trim.At
	segs, serr := r.segments(at, r.p.Upto)
	budget := r.p.MaxSlots
	if budget <= 0 {
		budget = DefaultMaxSlots
	}
	var bytes int64
	r.objects = map[string][]byte{}
	for _, s := range segs {
		e, from, to := s[0], s[1], s[2]
		limit := min(to, from+uint64(budget-len(r.slots)))
		werr := chain.Walk(ctx, r.cfg.Transit, r.cfg.Star, r.cfg.Class, e, from, limit, func(slot uint64, obj []byte, frames []envelope.FrameInfo) error {
			if bytes >= MaxPassBytes {
				return errFull
			}
			r.slots = append(r.slots, slotData{pos: chain.Position{Epoch: e, Next: slot}, size: int64(len(obj)), frames: frames})
			r.objects[chain.SlotKey(r.cfg.Star, r.cfg.Class, e, slot)] = obj
			bytes += int64(len(obj))
			at = chain.Position{Epoch: e, Next: slot + 1}
			return nil
		})
		r.res.Slots = len(r.slots)
		if errors.Is(werr, errFull) {
			return at, nil
		}
		if werr != nil {
			return at, werr
		}
		if limit < to {
			return at, nil
		}
		at = chain.Position{Epoch: e, Next: to}
	}
	if serr != nil {
		return at, serr
	}
	return r.p.Upto, nil
}

// MaxPassBytes bounds the slot objects one pass holds in memory.
const MaxPassBytes = 64 << 20

var errFull = errors.New("settle: pass full")

// settleStreams settles (or reclaims) every ref with records in the slots
// read, stream by stream.
func (r *run) settleStreams(ctx context.Context) error {
	first := map[string]uint64{} // stream ID → lowest seq seen in these slots
	for _, s := range r.slots {
		for _, f := range s.frames {
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
			errs = append(errs, fmt.Errorf("stream %q: %w", id, err))
			if ctx.Err() != nil {
				break
			}
		}
	}
	if err := r.flush(ctx); err != nil {
		errs = append(errs, err)
	}
	if r.doomedNew {
		if err := r.deleteDoomed(ctx); err != nil {
			errs = append(errs, err)
		}
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
			if err := r.queue(ctx, []metastore.Op{{Kind: metastore.OpDelete, Key: f.key, Expect: f.ver}}, commitCounts{reclaimed: 1}); err != nil {
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

// deriveCuts finds the cut of every epoch between the cursor and Upto
// that neither the cursor nor the leader knows, and records it in the
// cursor before the pass uses it.
//
// A cut goes missing when an epoch record pruned it while the cursor had
// not passed the epoch: a star opened several times with settlement off,
// by a version that kept only the cuts a walk needs, then run with
// settlement on. The epoch is over (the checkpoint is past it, so its
// successor decided its cut long ago, by a fence or a clean seal), and its
// slots from the cursor on are still there: a fence of the epoch from the
// cursor finds the same cut. Fence decisions are permanent and quorum
// based: a slot the successor's fence poisoned is dead to this fence too,
// a slot is committed only with W copies of one flight, and a slot past a
// clean seal (never written) is poisoned now, so nothing dead is ever
// counted as committed. Only epochs from the cursor's on are fenced, from
// the cursor: the slots below it may be deleted, and a fence would read
// them as absent and poison them.
func (r *run) deriveCuts(ctx context.Context) error {
	at := r.res.Trim.At
	var found []chain.Cut
	for e := at.Epoch; e < r.p.Upto.Epoch && e < r.p.Checkpoint.Epoch; e++ {
		if _, ok := r.cuts[e]; ok {
			continue
		}
		from := uint64(0)
		if e == at.Epoch {
			from = at.Next
		}
		fctx, cancel := context.WithTimeout(ctx, DeriveCutPatience)
		res, err := chain.Fence(fctx, r.cfg.Transit, r.cfg.Star, r.cfg.Class, e, from, envelope.NewNonce(), chain.FenceOptions{Parallel: 1})
		cancel()
		if err != nil {
			return fmt.Errorf("%w: epoch %d of %s/%s, recorded nowhere, and a fence from slot %d to re-derive it failed: %w", ErrCutUnknown, e, r.cfg.Star, r.cfg.Class, from, err)
		}
		r.cfg.Logger.Warn("settle: re-derived the cut of an epoch recorded nowhere", "star", r.cfg.Star, "class", r.cfg.Class.String(), "epoch", e, "from", from, "cut", res.Cut)
		r.addCut(chain.Cut{Epoch: e, Slot: res.Cut})
		found = append(found, chain.Cut{Epoch: e, Slot: res.Cut})
	}
	if len(found) == 0 {
		return nil
	}
	// Recorded before use: a later pass, fsck and a fence of an epoch the
	// cursor passes read it there.
	t := r.res.Trim
	t.Owner = r.cfg.Owner
	t.Cuts = r.cutsFrom(t.Deleted.Epoch)
	ver, err := r.cfg.Meta.Put(ctx, chain.TrimKey(r.cfg.Star, r.cfg.Class), t.Encode(), r.res.TrimVersion)
	if err != nil {
		return fmt.Errorf("settle: record the re-derived cuts %v of %s/%s in the trim cursor: %w", found, r.cfg.Star, r.cfg.Class, err)
	}
	r.res.Trim, r.res.TrimVersion = t, ver
	return nil
}

// settleGroup writes one settled object from the leading refs of refs (up
// to TargetBytes raw, and as many as one Commit takes), merged with the
// stream's small settled objects just before it (see mergeable), repoints
// them all in one Commit, and returns how many of refs it consumed.
func (r *run) settleGroup(ctx context.Context, id string, refs []ref) (int, error) {
	maxOps := metastore.MaxCommitOps(r.cfg.Meta)
	if maxOps <= 0 {
		maxOps = 1 << 30
	}
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
	stored := int64(len(obj))
	if err := r.put(ctx, key, obj); errors.Is(err, objstore.ErrExists) {
		// A pass that died wrote it (or a zombie's did): the key names the
		// records it holds, so it is the same; read its index back.
		frames, stored, err = r.adopt(ctx, key, start, end)
		if err != nil {
			return 0, err
		}
	} else if err != nil {
		return 0, err
	}
	counts := commitCounts{objects: 1, stored: stored}
	for _, f := range frames {
		counts.raw += int64(f.RawLength)
	}
	if err := r.repoint(ctx, id, key, all, frames, len(prev), counts); err != nil {
		return 0, err
	}
	return n, nil
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
// points at them: see deleteDoomed).
func (r *run) repoint(ctx context.Context, id, key string, refs []ref, frames []envelope.FrameInfo, merged int, counts commitCounts) error {
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
		d, _ := json.Marshal(doomed{Key: f.r.Extents[0].Key, At: r.cfg.Now().UnixMilli()})
		ops = append(ops, metastore.Op{Kind: metastore.OpPut, Key: doomedKey(r.cfg.Star, r.cfg.Class, f.r.Extents[0].Key), Value: d, Expect: metastore.NoVersion})
	}
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
	if _, err := r.cfg.Meta.Commit(ctx, ops); err != nil {
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

// doomedPrefix is where a chain's settle marks settled objects no ref
// points at any more, to delete (metastore keys: an object key may be
// longer than a metastore key, so the marker is keyed by its hash and
// holds it).
func doomedPrefix(star string, c chain.Class) string {
	return "stars/" + star + "/" + c.String() + "/doomed/"
}

func doomedKey(star string, c chain.Class, objKey string) string {
	return fmt.Sprintf("%s%016x", doomedPrefix(star, c), xxhash.Sum64String(objKey))
}

// doomed is a doomed marker's value.
type doomed struct {
	Key string `json:"key"`
	At  int64  `json:"at_ms"` // when the merge that doomed it committed
}

// deleteDoomed deletes the settled objects marked doomed at least
// DoomedGrace ago, then their markers. A reader still holding a ref that
// pointed at one after that finds it gone and re-resolves the ref, which
// now points at the object that absorbed it.
func (r *run) deleteDoomed(ctx context.Context) error {
	items, err := r.cfg.Meta.Scan(ctx, doomedPrefix(r.cfg.Star, r.cfg.Class), "", 256)
	if err != nil {
		return err
	}
	now := r.cfg.Now().UnixMilli()
	var done []metastore.Op
	for _, it := range items {
		var d doomed
		if err := json.Unmarshal(it.Value, &d); err != nil || !chain.IsSettledKey(d.Key) {
			return fmt.Errorf("settle: doomed marker %s is %q, not a settled object's", it.Key, it.Value)
		}
		if r.cfg.DoomedGrace > 0 && now-d.At < r.cfg.DoomedGrace.Milliseconds() {
			continue
		}
		key := d.Key
		for i, b := range r.cfg.Settled {
			if err := b.Delete(ctx, key); err != nil && !errors.Is(err, objstore.ErrNotFound) {
				return fmt.Errorf("settle: delete doomed %s in settled bucket %d: %w", key, i, err)
			}
		}
		// The markers go in Commits of many (after their objects: a marker
		// lost to a crash before it is deleted only deletes again).
		done = append(done, metastore.Op{Kind: metastore.OpDelete, Key: it.Key, Expect: it.Version})
		r.res.DeletedObjects++
	}
	maxOps := metastore.MaxCommitOps(r.cfg.Meta)
	if maxOps <= 0 || maxOps > maxBatchOps {
		maxOps = maxBatchOps
	}
	for len(done) > 0 {
		n := min(len(done), maxOps)
		if _, err := r.cfg.Meta.Commit(ctx, done[:n]); err != nil && !errors.Is(err, metastore.ErrConflict) {
			return err
		}
		done = done[n:]
	}
	return nil
}

// advance moves the cursor to upto (never back) by compare-and-swap.
func (r *run) advance(ctx context.Context, upto chain.Position) error {
	t := r.res.Trim
	if !t.At.Less(upto) {
		return nil
	}
	t.At, t.Owner = upto, r.cfg.Owner
	t.Cuts = r.cutsFrom(t.Deleted.Epoch)
	ver, err := r.cfg.Meta.Put(ctx, chain.TrimKey(r.cfg.Star, r.cfg.Class), t.Encode(), r.res.TrimVersion)
	if err != nil {
		got, gv, rerr := chain.ReadTrimCursor(ctx, r.cfg.Meta, r.cfg.Star, r.cfg.Class)
		if rerr == nil && !got.At.Less(upto) {
			r.res.Trim, r.res.TrimVersion = got, gv // ours applied, or someone got as far
			return nil
		}
		return fmt.Errorf("settle: advance the trim cursor of %s/%s to %+v: %w", r.cfg.Star, r.cfg.Class, upto, err)
	}
	r.res.Trim, r.res.TrimVersion = t, ver
	return nil
}

// cutsFrom returns the known cuts of epochs from `from` on.
func (r *run) cutsFrom(from uint64) []chain.Cut {
	var out []chain.Cut
	for e, s := range r.cuts {
		if e >= from {
			out = append(out, chain.Cut{Epoch: e, Slot: s})
		}
	}
	slices.SortFunc(out, func(a, b chain.Cut) int { return cmp.Compare(a.Epoch, b.Epoch) })
	return out
}

// deleteBehind deletes the slots in [Deleted, At) from every bucket of the
// chain, then records Deleted = At. A failure is kept in res.DeleteErr:
// the deletes stay due, and the next pass tries them again.
func (r *run) deleteBehind(ctx context.Context) {
	if err := r.deleteBehindErr(ctx); err != nil {
		r.res.DeleteErr = err
	}
}

func (r *run) deleteBehindErr(ctx context.Context) error {
	t := r.res.Trim
	if !t.Deleted.Less(t.At) {
		return nil
	}
	segs, err := r.segments(t.Deleted, t.At)
	if err != nil {
		return err
	}
	sizes := map[chain.Position]int64{}
	for _, s := range r.slots {
		sizes[s.pos] = s.size
	}
	for _, s := range segs {
		n, err := chain.Trim(ctx, r.cfg.Transit, r.cfg.Star, r.cfg.Class, s[0], s[1], s[2])
		r.res.Deleted += n
		if err != nil {
			return err
		}
		for slot := s[1]; slot < s[2]; slot++ {
			r.res.FreedBytes += sizes[chain.Position{Epoch: s[0], Next: slot}] * int64(r.cfg.Transit.K())
		}
	}
	t.Deleted = t.At
	t.Cuts = r.cutsFrom(t.At.Epoch)
	ver, err := r.cfg.Meta.Put(ctx, chain.TrimKey(r.cfg.Star, r.cfg.Class), t.Encode(), r.res.TrimVersion)
	if err != nil {
		return fmt.Errorf("settle: record the deletes of %s/%s up to %+v: %w", r.cfg.Star, r.cfg.Class, t.At, err)
	}
	r.res.Trim, r.res.TrimVersion = t, ver
	return nil
}

// Describe is a one-line summary of a result, for logs.
func (res Result) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "slots=%d objects=%d raw=%d stored=%d repointed=%d reclaimed=%d deleted=%d", res.Slots, res.Objects, res.RawBytes, res.StoredBytes, res.Repointed, res.Reclaimed, res.Deleted)
	return b.String()
}
