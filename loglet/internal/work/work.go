// Package work executes the core's requests (loglet/internal/chaincore): each
// Request is one I/O call (or, for Render, one piece of CPU work) that
// returns exactly one Event. It holds no decision: what to do with the
// result is the core's. The loglet's shell runs Do on a goroutine per
// request; the simulation's goroutine-free driver calls it in line.
//
// Not every request is one call yet, and not every worker is free of
// decisions: a Fence re-reads the epoch record and the trim cursor around
// chain.Fence, prefers a recorded cut and retries; a CommitRound puts the
// tails snapshot, commits the round and deletes doomed snapshots; a
// MintFirst mints epoch 1 and creates the checkpoint. Those steps are due to
// move into the core. A Settle drives a settlement pass whose decisions are
// its own core's (loglet/internal/settlecore, executed by SettleExec), but
// for one coarse step, settle.SettleSlots.
package work

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/internal/invariants"
	"github.com/flightlog/flightlog/loglet/internal/chaincore"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
	"github.com/flightlog/flightlog/settle"
)

// Env is what the workers of one chain need: its stores and settings.
type Env struct {
	// Background, if set, counts the writes a request leaves running
	// after its event is returned (a tails snapshot's copies past the
	// W-th): the shell waits for it when it stops, as for its workers.
	Background *sync.WaitGroup

	Star    string
	Class   chain.Class
	Owner   string
	Buckets []objstore.Store
	Names   []string
	W       int
	Meta    metastore.Store
	Codec   envelope.Codec
	Retry   chain.RetryPolicy
	// ReadAhead bounds the slots a fence, walk or probe works on at once
	// (chain.BucketSet.ReadAhead; 0: their defaults).
	ReadAhead int
	// Frames bound each frame (the core cuts flights within them too).
	Frames chaincore.FrameLimits
	// Now, if set, is the clock PutCopy latencies are measured with
	// (default time.Now).
	Now func() time.Time
	// Settle: the Standard bucket set settled objects go to, the streams'
	// liveness, and the bound of one pass (0: none but the shell's ctx).
	Settled       []objstore.Store
	Liveness      settle.Liveness
	SettleTimeout time.Duration
	SettleCodec   envelope.Codec
	SettleGrace   time.Duration // settle.Config.DoomedGrace

	writers sync.Pool // *envelope.BundleWriter
	objects sync.Pool // *[]byte: flight objects Recycle gave back
}

// Recycle gives back a flight object rendered here once nothing holds it
// any more: every copy's PutCopy has returned (a Store retains no body
// after PutIfAbsent returns: objstore's buffer ownership contract, which
// the conformance kit checks). The next render writes into it instead of
// a new, zeroed buffer. Under -tags invariants it is overwritten first, so
// a use after Recycle corrupts the object a checksum then refuses.
func (e *Env) Recycle(obj []byte) {
	if cap(obj) < envelope.EnvelopeSize {
		return
	}
	if invariants.Enabled {
		full := obj[:cap(obj)]
		full[0] = 0xA5
		for i := 1; i < len(full); i *= 2 {
			copy(full[i:], full[:i]) // memmove speed, not a byte at a time
		}
	}
	obj = obj[:0]
	e.objects.Put(&obj)
}

// buffer returns a recycled object buffer of capacity n or more, or nil.
func (e *Env) buffer(n int) []byte {
	p, _ := e.objects.Get().(*[]byte)
	if p == nil || cap(*p) < n {
		return nil // too small for this flight: left to the collector
	}
	return *p
}

// Set is the chain's bucket set as chain's successor-side primitives take it.
func (e *Env) Set() chain.BucketSet {
	return chain.BucketSet{Stores: e.Buckets, Names: e.Names, W: e.W, Retry: e.Retry, ReadAhead: e.ReadAhead}
}

func (e *Env) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

// Do executes req and returns its event. ctx bounds it (a PutCopy's is
// cancelled when the core cancels its upload).
func (e *Env) Do(ctx context.Context, req chaincore.Request) chaincore.Event {
	switch r := req.(type) {
	case chaincore.Render:
		return e.render(r)
	case chaincore.PutCopy:
		start := e.now()
		res := chain.WriteCopy(ctx, e.Buckets[r.Bucket], r.Flight, e.Retry)
		res.Bucket, res.Latency = r.Bucket, e.now().Sub(start)
		return chaincore.CopyDone{Upload: r.Upload, Result: res}
	case chaincore.ReadEpoch:
		rec, ver, err := chain.ReadEpoch(ctx, e.Meta, e.Star, e.Class)
		return chaincore.EpochRead{Record: rec, Version: ver, Err: err}
	case chaincore.MintFirst:
		rec, ver, err := chain.MintFirst(ctx, e.Meta, e.Star, e.Class, r.Record)
		if err != nil {
			return chaincore.FirstMinted{Err: err}
		}
		cm, err := absorb.InitCheckpoint(ctx, e.Meta, e.Star, e.Class, e.Owner, rec.Epoch)
		return chaincore.FirstMinted{Record: rec, Version: ver, Committer: cm, Err: err}
	case chaincore.Seal:
		cm, cp, err := absorb.SealCheckpoint(ctx, e.Meta, e.Star, e.Class, e.Owner, r.Epoch+1, r.EpochVersion)
		return chaincore.Sealed{Committer: cm, Checkpoint: cp, Err: err}
	case chaincore.Fence:
		return e.fence(ctx, r)
	case chaincore.Mint:
		rec, ver, err := r.Committer.MintNext(ctx, r.Prev, r.PrevVersion, r.Next)
		ev := chaincore.Minted{Record: rec, Version: ver, Err: err}
		var se *absorb.SealedError
		if errors.As(err, &se) {
			ev.SealedBy = se.Owner
		}
		return ev
	case chaincore.ReadCheckpoint:
		cp, _, err := absorb.ReadCheckpoint(ctx, e.Meta, e.Star, e.Class)
		return chaincore.CheckpointRead{Epoch: r.Epoch, Checkpoint: cp, Err: err}
	case chaincore.Probe:
		res, err := chain.GarbageProbe(ctx, e.Set(), e.Star, e.Class, r.Epoch, r.Cut, r.Window, envelope.NewNonce())
		return chaincore.Probed{Epoch: r.Epoch, Result: res, Err: err}
	case chaincore.ReadTails:
		// What the predecessor's last round wrote and never committed is
		// garbage collection: a failed lookup leaves it behind, never
		// fails the takeover.
		orphans, _ := absorb.UncommittedSnapshots(ctx, e.Buckets, e.Star, e.Class, r.Checkpoint)
		if r.Rebuild {
			t, err := absorb.RebuildTails(ctx, e.Meta, e.Star, e.Class, r.Checkpoint)
			return chaincore.TailsRead{Tails: t, Rebuilt: true, Orphans: orphans, Err: err}
		}
		if r.Key == "" {
			return chaincore.TailsRead{Orphans: orphans}
		}
		t, err := absorb.ReadTails(ctx, e.Buckets, r.Key)
		return chaincore.TailsRead{Tails: t, Orphans: orphans, Err: err}
	case chaincore.Walk:
		return e.walk(ctx, r)
	case chaincore.CommitRound:
		dropped, err := commitRound(ctx, r, e.Buckets, e.W, e.Background)
		return chaincore.RoundDone{Round: r.Round, Requests: r.Committer.Requests, Dropped: dropped, Err: err}
	case chaincore.SealEpoch:
		v, err := r.Committer.SealEpoch(ctx, r.Record, r.Version, r.Cut)
		return chaincore.EpochSealed{Version: v, Err: err}
	case chaincore.Settle:
		return e.settle(ctx, r)
	}
	panic(fmt.Sprintf("work: unknown request %T", req))
}

// render builds a flight's transit bundle: each stream's batches of this
// flight (consecutive sequence numbers), in frames split greedily within
// the frame limits (one frame per stream unless it fills one), streams in
// the order each first arrived; a batch compressed at admission
// (Batch.Stored) is a frame of its own. Each batch's bytes go straight
// from its payload (or stored form) into an object sized at the start, so
// every byte is copied once, and a flight of batches compressed ahead of
// time is only assembled here (issue 16).
func (e *Env) render(r chaincore.Render) chaincore.Event {
	w, _ := e.writers.Get().(*envelope.BundleWriter)
	if w == nil {
		w = envelope.NewBundleWriter()
	}
	defer e.writers.Put(w)
	type group struct {
		st    *chaincore.Stream
		parts []*chaincore.Batch
	}
	var order []*group
	byStream := make(map[*chaincore.Stream]*group, 16)
	for _, b := range r.Batches {
		g := byStream[b.Stream]
		if g == nil {
			g = &group{st: b.Stream}
			byStream[b.Stream] = g
			order = append(order, g)
		}
		g.parts = append(g.parts, b)
	}
	limits := e.Frames
	if limits == (chaincore.FrameLimits{}) {
		limits = chaincore.DefaultFrameLimits(envelope.MaxFrameRawBytes)
	}
	type frame struct {
		st    *chaincore.Stream
		parts []*chaincore.Batch
	}
	frames := make([]frame, 0, len(order))
	size := envelope.FooterTrailerBytes
	for _, g := range order {
		for len(g.parts) > 0 {
			n, fill := 0, chaincore.FrameFill{}
			for n < len(g.parts) && limits.Fits(fill, g.parts[n]) {
				fill = fill.Add(g.parts[n])
				n++
			}
			frames = append(frames, frame{g.st, g.parts[:n]})
			size += envelope.FrameEntryMaxBytes(len(g.st.Name()))
			for _, b := range g.parts[:n] {
				if b.Stored != nil {
					size += len(b.Stored)
				} else {
					size += len(b.Payload) // stored bytes are never more than raw
				}
			}
			g.parts = g.parts[n:]
		}
	}
	if buf := e.buffer(envelope.EnvelopeSize + size); buf != nil {
		w.Use(buf)
	}
	w.Grow(size) // at most the object's size: each byte is copied once
	parts := make([]envelope.FramePart, 0, 8)
	for _, f := range frames {
		first := f.parts[0]
		if first.Stored != nil { // a frame of its own, compressed at admission
			if err := w.AddStoredFrame(f.st.Name(), first.Start, first.Count, first.MinTS, first.MaxTS, len(first.Payload), first.Stored, first.StoredCodec, first.StoredCRC); err != nil {
				w.Finish(0, 0, envelope.Nonce{})
				return chaincore.Rendered{Upload: r.Upload, Err: fmt.Errorf("work: render slot %d: %w", r.Upload.Slot, err)}
			}
			continue
		}
		minTS, maxTS := first.MinTS, first.MaxTS
		parts = parts[:0]
		for _, p := range f.parts {
			parts = append(parts, envelope.FramePart{Records: p.Payload, Count: p.Count, Encoded: true})
			minTS, maxTS = min(minTS, p.MinTS), max(maxTS, p.MaxTS)
		}
		if err := w.AddFrameParts(f.st.Name(), first.Start, minTS, maxTS, parts, e.Codec); err != nil {
			w.Finish(0, 0, envelope.Nonce{}) // reset the writer
			return chaincore.Rendered{Upload: r.Upload, Err: fmt.Errorf("work: render slot %d: %w", r.Upload.Slot, err)}
		}
	}
	nonce := envelope.NewNonce()
	obj, infos := w.Finish(r.Upload.Epoch, r.Upload.Slot, nonce)
	return chaincore.Rendered{Upload: r.Upload, Obj: obj, Frames: infos, Nonce: nonce}
}

func (e *Env) walk(ctx context.Context, r chaincore.Walk) chaincore.Event {
	ev := chaincore.Walked{Epoch: r.Epoch, Next: r.From}
	// Walk no further than Max slots: the walk reads ahead, and reads past
	// this batch would be thrown away (and made again by the next one). So
	// a batch ends where the walk does, and needs no stop of its own.
	to := r.To
	if r.Max > 0 && to > r.From && to-r.From > uint64(r.Max) {
		to = r.From + uint64(r.Max)
	}
	err := chain.Walk(ctx, e.Set(), e.Star, e.Class, r.Epoch, r.From, to, func(slot uint64, _ []byte, frames []envelope.FrameInfo) error {
		ev.Slots = append(ev.Slots, absorb.Slot{Epoch: r.Epoch, Slot: slot, Key: chain.SlotKey(e.Star, e.Class, r.Epoch, slot), Frames: frames})
		return nil
	})
	if err != nil {
		return chaincore.Walked{Epoch: r.Epoch, Next: r.From, Err: fmt.Errorf("work: walk %s/%s epoch %d [%d, %d): %w", e.Star, e.Class, r.Epoch, r.From, r.To, err)}
	}
	ev.Next = to
	return ev
}

// commitRound writes a round's tails snapshot, then its refs and the
// checkpoint (one metastore Commit where the backend allows), recording
// the doomed snapshots, then deletes the ones the core says are due, and
// returns those deleted from every bucket. A delete that fails is not the
// round's failure: the snapshot stays doomed (in the checkpoint too), and
// a later round, or a successor, tries again.
func commitRound(ctx context.Context, r chaincore.CommitRound, stores []objstore.Store, w int, bg *sync.WaitGroup) ([]string, error) {
	if err := absorb.PutSnapshotTracked(ctx, stores, w, r.SnapshotKey, r.Snapshot, bg); err != nil {
		return nil, err
	}
	if err := r.Committer.CommitDooming(ctx, r.Round, r.Refs, r.SnapshotKey, r.SnapshotBase, r.Doomed); err != nil {
		return nil, err
	}
	var dropped []string
	for _, key := range r.Drop {
		if key == r.SnapshotKey {
			continue
		}
		ok := true
		for _, b := range stores {
			if err := b.Delete(ctx, key); err != nil {
				ok = false
			}
		}
		if ok {
			dropped = append(dropped, key)
		}
	}
	return dropped, nil
}

// fence finds the cut of r.Epoch from r.From. A successor that minted
// after the epoch recorded its cut in the epoch record, and that cut is the
// one (a deposed incumbent fencing its own epoch takes it from there, as
// its successor decided it). Otherwise the fence never reads below the
// chain's trim cursor: settled slots are deleted, and a fence that read one
// as absent would poison it and forge a lower cut, failing as not committed
// batches that are committed (the simulation found a deposed incumbent
// fencing from its release point, below its successor's cursor). If the
// cut is recorded, or the cursor passes the cut found, while the fence
// runs, the recorded cut wins, or the fence runs again from the cursor.
// If settlement has passed the epoch and its cut is recorded nowhere any
// more, no fence can find it: the result says so (Fenced.CutLost), naming
// the later epoch that deposed the fencing process, and the core decides.
func (e *Env) fence(ctx context.Context, r chaincore.Fence) chaincore.Event {
	par := max(1, min(chain.DefaultFenceParallel, r.Window))
	fctx := ctx
	if r.Patience > 0 {
		var cancel context.CancelFunc
		fctx, cancel = context.WithTimeout(ctx, r.Patience)
		defer cancel()
	}
	opt := chain.FenceOptions{Retry: e.Retry, Parallel: par, MaxSlots: r.MaxSlots,
		AcceptReadableFlight: r.Override >= chaincore.FenceAcceptReadable, DiscardUnreadable: r.Override == chaincore.FenceDiscardUnreadable}
	// recorded returns the epoch's cut if a record has it, or, if
	// settlement passed the epoch and its cut is recorded nowhere, who
	// deposed the fencing process.
	recorded := func(t chain.TrimCursor) (uint64, bool, *chaincore.Deposed) {
		// An unreadable epoch record only loses the shortcut: a halted
		// incumbent fences with the buckets alone (its mint waits for the
		// metastore anyway).
		rec, _, err := chain.ReadEpoch(fctx, e.Meta, e.Star, e.Class)
		if err == nil && rec.Epoch > r.Epoch {
			if cut, ok := rec.CutOf(r.Epoch); ok {
				return cut.Slot, true, nil
			}
		}
		if cut, ok := t.CutOf(r.Epoch); ok && t.At.Epoch > r.Epoch {
			return cut, true, nil
		}
		if t.At.Epoch > r.Epoch {
			// The cursor never passes the checkpoint, and the checkpoint
			// reaches an epoch only once it is minted: a later epoch
			// exists.
			d := &chaincore.Deposed{Leader: t.Owner, Epoch: t.At.Epoch}
			if err == nil && rec.Epoch >= d.Epoch {
				d.Leader, d.Epoch = rec.Owner, rec.Epoch
			}
			return 0, false, d
		}
		return 0, false, nil
	}
	done := func(cut uint64) chaincore.Event {
		// A recorded cut below r.From (an operator's fence override
		// discarded slots this process had released): nothing here is
		// below it, and every flight from r.From on is past it.
		cut = max(cut, r.From)
		return chaincore.Fenced{Epoch: r.Epoch, Result: chain.FenceResult{Cut: cut, Committed: cut - r.From}}
	}
	for attempt := 0; ; attempt++ {
		// The cursor must be read: fencing below it is the one thing a
		// fence must not do (the core retries a failed fence).
		t, _, err := chain.ReadTrimCursor(fctx, e.Meta, e.Star, e.Class)
		if err != nil {
			return chaincore.Fenced{Epoch: r.Epoch, Err: err}
		}
		if cut, ok, lost := recorded(t); lost != nil || ok {
			if lost != nil {
				return chaincore.Fenced{Epoch: r.Epoch, CutLost: lost}
			}
			return done(cut)
		}
		from := r.From
		if t.At.Epoch == r.Epoch && t.At.Next > from {
			from = t.At.Next
		}
		res, err := chain.Fence(fctx, e.Set(), e.Star, e.Class, r.Epoch, from, envelope.NewNonce(), opt)
		if err != nil {
			return chaincore.Fenced{Epoch: r.Epoch, Result: res, Err: err}
		}
		after, _, err := chain.ReadTrimCursor(fctx, e.Meta, e.Star, e.Class)
		if err != nil {
			return chaincore.Fenced{Epoch: r.Epoch, Err: err} // fenced again later: a rerun finds its own poison
		}
		if cut, ok, lost := recorded(after); lost != nil || ok {
			if lost != nil {
				return chaincore.Fenced{Epoch: r.Epoch, CutLost: lost}
			}
			return done(cut)
		}
		if !(chain.Position{Epoch: r.Epoch, Next: res.Cut}).Less(after.At) {
			res.Committed += from - r.From // the settled slots skipped are committed
			return chaincore.Fenced{Epoch: r.Epoch, Result: res}
		}
		if attempt >= 3 {
			return chaincore.Fenced{Epoch: r.Epoch, Err: fmt.Errorf("work: fence of %s/%s epoch %d: settlement kept moving the trim cursor past the cut found", e.Star, e.Class, r.Epoch)}
		}
	}
}
