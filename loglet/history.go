package loglet

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// history reads absorbed records: span refs from the metastore, frames from
// the object store by ranged GETs. Any process can use it.
type history struct {
	meta metastore.Store
	sets [2][]objstore.Store // bucket sets by class

	frames *frameCache // recently decoded frames (nil: none)

	skipped  atomic.Uint64 // copies skipped: missing, short, poison or corrupt
	corrupt  atomic.Uint64 // of which failed a checksum or decode
	gets     atomic.Uint64
	getBytes atomic.Uint64
}

const refScanBatch = 16

// readAhead is how many extents a history read fetches at once: a catch-up
// read spans many extents, and one GET at a time pays a round trip each.
// readAheadBytes bounds the stored bytes those fetches hold at once (a read
// may hold one frame over it).
const (
	readAhead      = 8
	readAheadBytes = 8 << 20
)

// read returns up to maxRecs records (and about maxBytes) of stream from
// seq `from` on. It returns no records if nothing at or past from is
// absorbed, and ErrHistoryTrimmed if refs exist only past from.
//
// It plans the extents a batch of refs contributes (stopping at a gap or
// once the limits are surely met), fetches up to readAhead of them at
// once, and consumes them in order.
func (h *history) read(ctx context.Context, stream string, from uint64, maxRecs, maxBytes int) ([]SequencedRecord, error) {
	return h.readHeld(ctx, stream, from, maxRecs, maxBytes, nil)
}

// readHeld is read given a frame already fetched (held, possibly nil: a
// read by timestamp found its start in it), which it uses instead of
// fetching that extent again.
func (h *history) readHeld(ctx context.Context, stream string, from uint64, maxRecs, maxBytes int, held *heldFrame) ([]SequencedRecord, error) {
	prefix := chain.RefPrefix(stream)
	after := chain.RefKey(stream, from) // refs ending after from
	next := from
	var out []SequencedRecord
	size := 0
	for {
		items, err := h.meta.Scan(ctx, prefix, after, refScanBatch)
		if err != nil {
			return out, fmt.Errorf("loglet: read refs of %q: %w", stream, err)
		}
		items = refsOf(stream, items)
		// Plan: the extents past next, in order, until a gap or enough.
		var jobs []extentJob
		planned, recs, bytes := next, len(out), size
		gap := false
		stopped := -1 // the item whose extents the plan stopped in, at the limits
	plan:
		for i, it := range items {
			ref, err := absorb.DecodeRef(it.Value)
			if err != nil {
				return out, &CorruptError{Object: "ref " + it.Key, Err: err}
			}
			if ref.Start > planned {
				if len(out) == 0 && len(jobs) == 0 {
					return nil, fmt.Errorf("%w: stream %q: oldest readable record after %d is %d", ErrHistoryTrimmed, stream, from, ref.Start)
				}
				gap = true // a gap past what we return: let the caller come back
				break
			}
			for _, ext := range ref.Extents {
				end := ext.FirstSeq + uint64(ext.Count)
				if end <= planned {
					continue
				}
				jobs = append(jobs, extentJob{key: it.Key, ref: ref, ext: ext})
				recs += int(end - max(planned, ext.FirstSeq))
				bytes += int(ext.RawLength)
				planned = end
				if recs >= maxRecs || bytes >= maxBytes {
					stopped = i
					break plan
				}
			}
		}
		done, err := h.consume(ctx, stream, jobs, &out, &next, &size, maxRecs, maxBytes, held)
		if err != nil || done || gap {
			return out, err
		}
		if stopped >= 0 {
			// The plan's estimate (raw frame lengths) was over what the
			// records hold: scan again from the item it stopped in.
			if stopped > 0 {
				after = items[stopped-1].Key
			}
			continue
		}
		if len(items) < refScanBatch {
			return out, nil
		}
		after = items[len(items)-1].Key
	}
}

// extentJob is one extent a read fetches, with the ref it came from.
type extentJob struct {
	key string
	ref absorb.SpanRef
	ext absorb.Extent
}

// consume fetches jobs, up to readAhead at once, and appends their records
// to out in order from *next, within the limits. It reports whether a limit
// was reached. Fetches not yet consumed when it returns are cancelled. A
// job for held's extent takes held's records instead of a fetch.
func (h *history) consume(ctx context.Context, stream string, jobs []extentJob, out *[]SequencedRecord, next *uint64, size *int, maxRecs, maxBytes int, held *heldFrame) (bool, error) {
	if len(jobs) == 0 {
		return false, nil
	}
	type fetched struct {
		first uint64
		recs  []Record
		err   error
	}
	fctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	results := make([]chan fetched, len(jobs))
	started := 0
	start := func() {
		j := jobs[started]
		ch := make(chan fetched, 1)
		results[started] = ch
		started++
		if held != nil && keyOf(j.ext) == keyOf(held.ext) {
			ch <- fetched{held.first, held.recs, nil}
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			first, recs, err := h.fetch(fctx, j.key, j.ref, j.ext, stream)
			ch <- fetched{first, recs, err}
		}()
	}
	inFlight := int64(0) // stored bytes of the fetches started and not consumed
	for i, j := range jobs {
		for started < len(jobs) && started-i < readAhead && (started == i || inFlight+int64(jobs[started].ext.Length) <= readAheadBytes) {
			inFlight += int64(jobs[started].ext.Length)
			start()
		}
		f := <-results[i]
		inFlight -= int64(j.ext.Length)
		if f.err != nil {
			return false, f.err
		}
		for k, r := range f.recs {
			seq := f.first + uint64(k)
			if seq < *next {
				continue // refs may overlap while settle repoints: dedupe by seq
			}
			rs := recordSize(r)
			if len(*out) >= maxRecs || (len(*out) > 0 && *size+rs > maxBytes) {
				return true, nil
			}
			*size += rs
			*out = append(*out, SequencedRecord{Seq: seq, Record: cloneRecord(r)})
			*next = seq + 1
			if len(*out) >= maxRecs {
				return true, nil // full: fetch no further frame to learn it
			}
		}
	}
	return false, nil
}

func recordSize(r Record) int {
	n := len(r.Body)
	for _, h := range r.Headers {
		n += len(h.Name) + len(h.Value)
	}
	return n
}

// fetch reads one extent, falling through the class's bucket set past
// missing, short, poisoned or corrupt copies. If none is good it
// re-resolves the extent's records through the refs once (settle may have
// repointed or merged the ref, and trim deleted the slot) and reads them
// from there. It returns the sequence number of the first record returned,
// which is at or before ext.FirstSeq, and records through at least the
// extent's last.
func (h *history) fetch(ctx context.Context, refKey string, ref absorb.SpanRef, ext absorb.Extent, stream string) (uint64, []Record, error) {
	recs, corrupt, cause := h.fetchExtent(ctx, ref.Class, ext, stream)
	if cause == nil {
		return ext.FirstSeq, recs, nil
	}
	// Settle may move the records more than once while we look (a small
	// settled object merged into a larger one and deleted): re-resolve
	// until the refs stop moving.
	end := ext.FirstSeq + uint64(ext.Count)
	failed := ext
	for attempt := 0; attempt < maxReresolve; attempt++ {
		if ctx.Err() != nil {
			return 0, nil, ctx.Err()
		}
		exts, class, err := h.reresolve(ctx, stream, ext.FirstSeq, end, failed)
		if err != nil {
			return 0, nil, fmt.Errorf("loglet: no good copy of %s [%d+%d) (%v), and re-reading its ref %s failed: %w", ext.Key, ext.Offset, ext.Length, cause, refKey, err)
		}
		if len(exts) == 0 {
			if corrupt {
				return 0, nil, &CorruptError{Object: fmt.Sprintf("%s[%d+%d) (records %d-%d of %q)", failed.Key, failed.Offset, failed.Length, failed.FirstSeq, failed.FirstSeq+uint64(failed.Count)-1, nameOfID(stream)), Err: cause}
			}
			return 0, nil, fmt.Errorf("loglet: no good copy of %s [%d+%d): %w", failed.Key, failed.Offset, failed.Length, cause)
		}
		var out []Record
		moved := false
		for _, e := range exts {
			recs, ecorrupt, err := h.fetchExtent(ctx, class, e, stream)
			if err != nil {
				if ctx.Err() != nil {
					return 0, nil, ctx.Err()
				}
				failed, corrupt, cause, moved = e, ecorrupt, err, true
				break
			}
			out = append(out, recs...)
		}
		if !moved {
			return exts[0].FirstSeq, out, nil
		}
	}
	return 0, nil, fmt.Errorf("loglet: records %d-%d of %q kept moving while read (last: %v)", ext.FirstSeq, end-1, nameOfID(stream), cause)
}

// maxReresolve bounds the re-resolutions of one extent a read makes.
const maxReresolve = 8

// fetchExtent reads one extent from the first good copy in class's bucket
// set. On failure it returns every copy's error, and whether any copy was
// damaged (rather than absent).
func (h *history) fetchExtent(ctx context.Context, class string, ext absorb.Extent, stream string) ([]Record, bool, error) {
	if recs, ok := h.frames.get(ext); ok {
		return recs, false, nil
	}
	if chain.IsSettledKey(ext.Key) {
		class = chain.Standard.String() // settled objects live in the Standard bucket set
	}
	set, err := h.set(class)
	if err != nil {
		return nil, false, err
	}
	// Every copy's failure is kept: the error says damage when any copy
	// was damaged, not whatever the last bucket said.
	var errs []error
	corrupt := false
	for i, b := range set {
		data, err := b.Get(ctx, ext.Key, int64(ext.Offset), int64(ext.Length))
		h.gets.Add(1)
		if err != nil {
			if ctx.Err() != nil {
				return nil, false, ctx.Err()
			}
			h.skipped.Add(1)
			errs = append(errs, fmt.Errorf("copy %d: %w", i, err))
			continue
		}
		h.getBytes.Add(uint64(len(data)))
		recs, err := envelope.DecodeFrame(ext.FrameInfo(stream), data)
		if err != nil {
			h.skipped.Add(1)
			h.corrupt.Add(1)
			corrupt = true
			errs = append(errs, fmt.Errorf("copy %d: %w", i, err))
			continue
		}
		h.frames.put(ext, recs)
		return recs, false, nil
	}
	return nil, corrupt, absorb.CopyErrors(errs)
}

// reresolve finds, in the stream's refs as they are now, the extents that
// hold records [from, end): in order, contiguous, from one that holds from
// through one that holds end-1. It returns none if the refs still point at
// failed (the extent that could not be read: nothing moved) or no longer
// cover the records (trimmed), and the class whose bucket set holds them.
func (h *history) reresolve(ctx context.Context, stream string, from, end uint64, failed absorb.Extent) ([]absorb.Extent, string, error) {
	items, err := h.meta.Scan(ctx, chain.RefPrefix(stream), chain.RefKey(stream, from), 4)
	if err != nil {
		return nil, "", err
	}
	var out []absorb.Extent
	class := ""
	next := from
	for _, it := range refsOf(stream, items) {
		ref, err := absorb.DecodeRef(it.Value)
		if err != nil {
			return nil, "", &CorruptError{Object: "ref " + it.Key, Err: err}
		}
		for _, e := range ref.Extents {
			eEnd := e.FirstSeq + uint64(e.Count)
			if eEnd <= next || next >= end {
				continue
			}
			if e.FirstSeq > next || (class != "" && ref.Class != class) {
				return nil, "", nil // a gap: the records are gone
			}
			if e.Key == failed.Key && e.Offset == failed.Offset {
				return nil, "", nil // not moved
			}
			out, class, next = append(out, e), ref.Class, eEnd
		}
		if next >= end {
			return out, class, nil
		}
	}
	return nil, "", nil
}

func (h *history) set(class string) ([]objstore.Store, error) {
	c, err := chain.ParseClass(class)
	if err != nil {
		return nil, err
	}
	if len(h.sets[c]) == 0 {
		return nil, fmt.Errorf("%w: refs point into the %s bucket set, which this process was not given", ErrClassDisabled, c)
	}
	return h.sets[c], nil
}

// heldFrame is a frame a read by timestamp fetched to find its start: the
// read that follows uses it instead of fetching it again.
type heldFrame struct {
	ext   absorb.Extent
	first uint64 // the sequence number of recs[0]
	recs  []Record
}

// seqAtTimestamp returns the first absorbed sequence number whose record's
// timestamp is >= ms, and false if every absorbed record is older, with the
// frame it read to find it (nil if none).
//
// A stream's timestamps never decrease (the sequencer re-stamps a record
// older than its predecessor), so neither do its refs' MaxTS in key order:
// the ref that holds the answer is the first whose MaxTS is >= ms. It is
// found from the refs alone, by galloping then bisecting over sequence
// numbers (refAfter: one metastore read a probe, about 2·log2 of the
// records before it), then the extent within it by its MaxTimestamp, and
// the record by one GET of that frame.
func (h *history) seqAtTimestamp(ctx context.Context, stream string, ms int64) (uint64, bool, *heldFrame, error) {
	it, ref, err := h.firstRefAtTimestamp(ctx, stream, ms)
	if err != nil || it == nil {
		return 0, false, nil, err
	}
	for _, ext := range ref.Extents {
		if ext.MaxTimestamp < ms {
			continue
		}
		first, recs, err := h.fetch(ctx, it.Key, ref, ext, stream)
		if err != nil {
			return 0, false, nil, err
		}
		for j, r := range recs {
			if seq := first + uint64(j); seq >= ext.FirstSeq && r.Timestamp >= ms {
				held := &heldFrame{ext: ext, first: first, recs: recs}
				if first != ext.FirstSeq || len(recs) != int(ext.Count) {
					held = nil // re-resolved elsewhere: not the extent's frame
				}
				return seq, true, held, nil
			}
		}
		// The extent's bounds promised a record at or past ms but its
		// frame has none: look on in the ref.
	}
	// The ref's MaxTS promised a record at or past ms: refs that break
	// their own bounds are damage.
	return 0, false, nil, &CorruptError{Object: "ref " + it.Key, Err: fmt.Errorf("MaxTS %d but no record reaches %d", ref.MaxTS, ms)}
}

// firstRefAtTimestamp returns the stream's first ref (in key order) whose
// MaxTS is >= ms, or nil if there is none.
func (h *history) firstRefAtTimestamp(ctx context.Context, stream string, ms int64) (*metastore.Item, absorb.SpanRef, error) {
	// The first refScanBatch refs in one read: a short stream's answer
	// costs one request, as a scan in order would.
	items, err := h.meta.Scan(ctx, chain.RefPrefix(stream), "", refScanBatch)
	if err != nil {
		return nil, absorb.SpanRef{}, fmt.Errorf("loglet: read refs of %q: %w", stream, err)
	}
	n := len(items)
	items = refsOf(stream, items)
	if len(items) == 0 {
		return nil, absorb.SpanRef{}, nil
	}
	var first, last absorb.SpanRef
	for i := range items {
		ref, err := absorb.DecodeRef(items[i].Value)
		if err != nil {
			return nil, absorb.SpanRef{}, &CorruptError{Object: "ref " + items[i].Key, Err: err}
		}
		if ref.MaxTS >= ms {
			return &items[i], ref, nil
		}
		if i == 0 {
			first = ref
		}
		last = ref
	}
	if n < refScanBatch || len(items) < n {
		return nil, absorb.SpanRef{}, nil
	}
	// Every s below lo has refAfter(s) older than ms, and refAfter(hi)
	// is found (or none: hi past the last ref). Gallop, in steps of
	// about one ref, two, four..., then bisect.
	var found *metastore.Item
	var foundRef absorb.SpanRef
	lo, step := last.End, max(1, (last.End-min(first.Start, last.End))/uint64(len(items)))
	hi := lo
	for {
		it, ref, err := h.refAfter(ctx, stream, hi)
		if err != nil {
			return nil, absorb.SpanRef{}, err
		}
		if it == nil || ref.MaxTS >= ms {
			found, foundRef = it, ref
			break
		}
		lo = ref.End
		if lo > math.MaxUint64/2-step {
			return nil, absorb.SpanRef{}, &CorruptError{Object: "ref " + it.Key, Err: fmt.Errorf("ref ends at %d", ref.End)}
		}
		hi, step = lo+step-1, step*2
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		it, ref, err := h.refAfter(ctx, stream, mid)
		if err != nil {
			return nil, absorb.SpanRef{}, err
		}
		if it == nil || ref.MaxTS >= ms {
			hi, found, foundRef = mid, it, ref
			continue
		}
		lo = ref.End // > mid
	}
	return found, foundRef, nil
}

// refAfter returns the stream's first ref that ends after seq s (the one
// that holds s, or the next past a gap), or nil if none does.
func (h *history) refAfter(ctx context.Context, stream string, s uint64) (*metastore.Item, absorb.SpanRef, error) {
	items, err := h.meta.Scan(ctx, chain.RefPrefix(stream), chain.RefKey(stream, s), 1)
	if err != nil {
		return nil, absorb.SpanRef{}, fmt.Errorf("loglet: read refs of %q: %w", stream, err)
	}
	items = refsOf(stream, items)
	if len(items) == 0 {
		return nil, absorb.SpanRef{}, nil
	}
	ref, err := absorb.DecodeRef(items[0].Value)
	if err != nil {
		return nil, absorb.SpanRef{}, &CorruptError{Object: "ref " + items[0].Key, Err: err}
	}
	if ref.End <= s {
		return nil, absorb.SpanRef{}, &CorruptError{Object: "ref " + items[0].Key, Err: fmt.Errorf("ends at %d, keyed after %d", ref.End, s)}
	}
	return &items[0], ref, nil
}

// refsOf keeps the items that are refs of the stream with ID id: under an
// incarnation-less stream's prefix lie the refs of later incarnations of
// its name too (they sort after every one of its own).
func refsOf(id string, items []metastore.Item) []metastore.Item {
	for i, it := range items {
		if !chain.IsRefOf(id, it.Key) {
			return items[:i]
		}
	}
	return items
}

// nameOfID is the name part of a stream ID, for messages.
func nameOfID(id string) string {
	name, _ := chain.SplitStreamID(id)
	return name
}
