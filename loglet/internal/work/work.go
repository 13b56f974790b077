// Package work executes the core's requests (loglet/internal/chaincore): each
// Request is one I/O call (or, for Render, one piece of CPU work) that
// returns exactly one Event. It holds no decision: what to do with the
// result is the core's. It holds no state of the chain either: a request
// that writes the checkpoint carries the checkpoint the core holds
// (absorb.Held), the worker builds a committer over it for that one call,
// and the event carries the new value back. The calls are the chain's and
// absorb's primitives (chain.Fence, chain.WriteCopy, absorb's commits),
// which resolve an ambiguous write by reading it back themselves. The
// loglet's shell runs Do on a goroutine per request; the simulation's
// goroutine-free driver calls it in line. A Settle's pass is decided by its
// own core (loglet/internal/settlecore), each of its requests one call of
// SettleExec.
package work

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

	Star   string
	Class  chain.Class
	Owner  string
	Stores []objstore.Store
	Names  []string
	W      int
	Meta   metastore.Store
	Codec  envelope.Codec
	Retry  chain.RetryPolicy
	// ReadAhead bounds the slots a fence, walk or probe works on at once
	// (chain.BucketSet.ReadAhead; 0: their defaults).
	ReadAhead int
	// FenceParallel, if set, bounds the slots a fence poisons at once
	// (chain.FenceOptions.Parallel) instead of the request's window (up
	// to chain.DefaultFenceParallel). At 1 a fence places nothing past
	// the slot it decides, so what it leaves in the buckets does not
	// depend on how far its look-ahead got before the cut cancelled it:
	// the core-level simulation needs that to replay a seed exactly.
	FenceParallel int
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
	// PassMemory, if set, accounts each pass's slot objects in the
	// chain's memory budget (nil: unaccounted, as for tools' passes).
	PassMemory *PassMemory

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
	return chain.BucketSet{Stores: e.Stores, Names: e.Names, W: e.W, Retry: e.Retry, ReadAhead: e.ReadAhead}
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
		res := chain.WriteCopy(ctx, e.Stores[r.Bucket], r.Flight, e.Retry)
		res.Bucket, res.Latency = r.Bucket, e.now().Sub(start)
		return chaincore.CopyDone{Upload: r.Upload, Result: res}
	case chaincore.ReadEpoch:
		if r.Checkpoint {
			return e.readEpochAndCheckpoint(ctx)
		}
		rec, ver, err := chain.ReadEpoch(ctx, e.Meta, e.Star, e.Class)
		return chaincore.EpochRead{Record: rec, Version: ver, Err: err}
	case chaincore.ReadTrimCursor:
		t, _, err := chain.ReadTrimCursor(ctx, e.Meta, e.Star, e.Class)
		return chaincore.TrimCursorRead{Cursor: t, Err: err}
	case chaincore.MintFirst:
		rec, ver, err := chain.MintFirst(ctx, e.Meta, e.Star, e.Class, r.Record)
		if err != nil {
			return chaincore.FirstMinted{Err: err}
		}
		return chaincore.FirstMinted{Record: rec, Version: ver}
	case chaincore.CreateCheckpoint:
		cm, err := absorb.InitCheckpoint(ctx, e.Meta, e.Star, e.Class, e.Owner, r.Epoch)
		if err != nil {
			return chaincore.CheckpointCreated{Err: err}
		}
		return chaincore.CheckpointCreated{Held: cm.Held(), Requests: cm.Requests}
	case chaincore.Seal:
		cm, cp, err := absorb.SealCheckpointOnce(ctx, e.Meta, e.Star, e.Class, e.Owner, r.Epoch+1, r.EpochVersion)
		if err != nil {
			return chaincore.Sealed{Err: err}
		}
		return chaincore.Sealed{Held: cm.Held(), Checkpoint: cp, Requests: cm.Requests}
	case chaincore.SealMint:
		cm, rec, ver, err := absorb.SealMint(ctx, e.Meta, e.Star, e.Class, e.Owner, r.Prev, r.PrevVersion, r.Next, r.Checkpoint, r.CheckpointVersion)
		if err != nil {
			return chaincore.SealMinted{Err: err, Requests: 1} // the Commit (its resolving reads are not counted)
		}
		return chaincore.SealMinted{Record: rec, Version: ver, Held: cm.Held(), Requests: cm.Requests}
	case chaincore.Fence:
		return e.fence(ctx, r)
	case chaincore.Mint:
		cm := e.committer(r.Held)
		rec, ver, err := cm.MintNext(ctx, r.Prev, r.PrevVersion, r.Next)
		ev := chaincore.Minted{Record: rec, Version: ver, Held: cm.Held(), Requests: cm.Requests, Err: err}
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
		orphans, _ := absorb.UncommittedSnapshots(ctx, e.Stores, e.Star, e.Class, r.Checkpoint)
		if r.Rebuild {
			t, err := absorb.RebuildTails(ctx, e.Meta, e.Star, e.Class, r.Checkpoint)
			return chaincore.TailsRead{Streams: chaincore.TailsViewOf(t.Streams), Base: t.Base, Rebuilt: true, Orphans: orphans, Err: err}
		}
		if r.Key == "" {
			return chaincore.TailsRead{Orphans: orphans}
		}
		ev := readTails(ctx, e.Stores, r.Key)
		ev.Orphans = orphans
		return ev
	case chaincore.Walk:
		return e.walk(ctx, r)
	case chaincore.PutSnapshot:
		// Encoded here, off the core's loop.
		body, err := r.Encode()
		if err == nil {
			err = absorb.PutSnapshotTracked(ctx, e.Stores, e.W, r.Key, body, e.Background)
		}
		return chaincore.SnapshotPut{Round: r.Round, Bytes: len(body), Err: err}
	case chaincore.CommitRound:
		cm := e.committer(r.Held)
		if s := r.Seal; s.Record.Epoch != 0 {
			split, sealed, err := cm.CommitAtomicSealing(ctx, r.Round, r.Refs, r.SnapshotKey, r.SnapshotBase, r.Doomed, s.Record, s.Version, s.Cut)
			return chaincore.RoundCommitted{Round: r.Round, Held: cm.Held(), Split: split, Requests: cm.Requests, RefVersions: cm.RefVersions, Sealed: sealed, Err: err}
		}
		split, err := cm.CommitAtomic(ctx, r.Round, r.Refs, r.SnapshotKey, r.SnapshotBase, r.Doomed)
		return chaincore.RoundCommitted{Round: r.Round, Held: cm.Held(), Split: split, Requests: cm.Requests, RefVersions: cm.RefVersions, Err: err}
	case chaincore.MarkRoundPending:
		cm := e.committer(r.Held)
		err := cm.MarkPending(ctx, r.Round)
		return chaincore.RoundMarked{Round: r.Round, Held: cm.Held(), Requests: cm.Requests, Err: err}
	case chaincore.CommitRefs:
		cm := e.committer(r.Held)
		err := cm.CommitRefs(ctx, r.Round, r.Refs, r.MayExist)
		return chaincore.RefsCommitted{Round: r.Round, To: r.To, Held: cm.Held(), Requests: cm.Requests, RefVersions: cm.RefVersions, Err: err}
	case chaincore.AdvanceRound:
		cm := e.committer(r.Held)
		err := cm.Advance(ctx, r.Round, r.SnapshotKey, r.SnapshotBase, r.Doomed)
		return chaincore.RoundCommitted{Round: r.Round, Held: cm.Held(), Requests: cm.Requests, Err: err}
	case chaincore.DropSnapshots:
		return chaincore.SnapshotsDropped{Dropped: dropSnapshots(ctx, e.Stores, r.Keys)}
	case chaincore.SealEpoch:
		cm := e.committer(r.Held)
		v, err := cm.SealEpoch(ctx, r.Record, r.Version, r.Cut)
		return chaincore.EpochSealed{Version: v, Held: cm.Held(), Requests: cm.Requests, Err: err}
	case chaincore.Settle:
		return e.settle(ctx, r)
	}
	panic(fmt.Sprintf("work: unknown request %T", req))
}

// readEpochAndCheckpoint is ReadEpochAndCheckpoint of this chain.
func (e *Env) readEpochAndCheckpoint(ctx context.Context) chaincore.EpochRead {
	return ReadEpochAndCheckpoint(ctx, e.Meta, e.Star, e.Class)
}

// ReadEpochAndCheckpoint reads a chain's epoch record and checkpoint at
// once (two requests in flight, one round trip's wait): a takeover's first
// step (chaincore.ReadEpoch with Checkpoint), or the star's live-owner
// check handing it to the chain's opening (chaincore.Config.Found). A chain
// with no checkpoint reads as a seal would create it.
func ReadEpochAndCheckpoint(ctx context.Context, ms metastore.Store, star string, class chain.Class) chaincore.EpochRead {
	var ev chaincore.EpochRead
	done := make(chan struct{})
	go func() {
		defer close(done)
		cp, ver, err := absorb.ReadCheckpoint(ctx, ms, star, class)
		if errors.Is(err, metastore.ErrNotFound) {
			cp, ver, err = absorb.Checkpoint{Epoch: 1}, metastore.NoVersion, nil
		}
		ev.Checkpoint, ev.CheckpointVersion, ev.CheckpointErr, ev.CheckpointRead = cp, ver, err, err == nil
	}()
	rec, ver, err := chain.ReadEpoch(ctx, ms, star, class)
	<-done
	ev.Record, ev.Version, ev.Err = rec, ver, err
	return ev
}

// render builds a flight's transit bundle: each stream's batches of this
// flight (consecutive sequence numbers), in frames split greedily within
// the frame limits (one frame per stream unless it fills one), streams in
// the order the request lists them (each stream's first arrival); a batch
// compressed at admission (RenderPart.Stored) is a frame of its own. Each
// batch's bytes go straight
// from its payload (or stored form) into an object sized at the start, so
// every byte is copied once, and a flight of batches compressed ahead of
// time is only assembled here (issue 16).
func (e *Env) render(r chaincore.Render) chaincore.Event {
	w, _ := e.writers.Get().(*envelope.BundleWriter)
	if w == nil {
		w = envelope.NewBundleWriter()
	}
	defer e.writers.Put(w)
	limits := e.Frames
	if limits == (chaincore.FrameLimits{}) {
		limits = chaincore.DefaultFrameLimits(envelope.MaxFrameRawBytes)
	}
	type frame struct {
		name  string
		parts []chaincore.RenderPart
	}
	frames := make([]frame, 0, len(r.Streams))
	size := envelope.FooterTrailerBytes
	for _, st := range r.Streams {
		rest := st.Parts
		for len(rest) > 0 {
			n, fill := 0, chaincore.FrameFill{}
			for n < len(rest) && limits.Fits(fill, &rest[n]) {
				fill = fill.Add(&rest[n])
				n++
			}
			frames = append(frames, frame{st.Name, rest[:n]})
			size += envelope.FrameEntryMaxBytes(len(st.Name))
			for i := range rest[:n] {
				p := &rest[i]
				if p.Producer.ID != "" {
					size += envelope.ProducerMarkMaxBytes(len(p.Producer.ID))
				}
				if p.Fence {
					size += envelope.FenceMarkMaxBytes
				}
				if p.Stored != nil {
					size += len(p.Stored)
				} else {
					size += len(p.Payload) // stored bytes are never more than raw
				}
			}
			rest = rest[n:]
		}
	}
	if buf := e.buffer(envelope.EnvelopeSize + size); buf != nil {
		w.Use(buf)
	}
	w.Grow(size) // at most the object's size: each byte is copied once
	parts := make([]envelope.FramePart, 0, 8)
	for _, f := range frames {
		first := &f.parts[0]
		if first.Stored != nil { // a frame of its own, compressed at admission
			if err := w.AddStoredFrame(f.name, first.Start, first.Count, first.MinTS, first.MaxTS, len(first.Payload), first.Stored, first.StoredCodec, first.StoredCRC); err != nil {
				w.Finish(0, 0, envelope.Nonce{})
				return chaincore.Rendered{Upload: r.Upload, Err: fmt.Errorf("work: render slot %d: %w", r.Upload.Slot, err)}
			}
			if err := markProducers(w, f.parts); err != nil {
				w.Finish(0, 0, envelope.Nonce{})
				return chaincore.Rendered{Upload: r.Upload, Err: fmt.Errorf("work: render slot %d: %w", r.Upload.Slot, err)}
			}
			continue
		}
		minTS, maxTS := first.MinTS, first.MaxTS
		parts = parts[:0]
		for i := range f.parts {
			p := &f.parts[i]
			parts = append(parts, envelope.FramePart{Records: p.Payload, Count: p.Count, Encoded: true})
			minTS, maxTS = min(minTS, p.MinTS), max(maxTS, p.MaxTS)
		}
		if err := w.AddFrameParts(f.name, first.Start, minTS, maxTS, parts, e.Codec); err != nil {
			w.Finish(0, 0, envelope.Nonce{}) // reset the writer
			return chaincore.Rendered{Upload: r.Upload, Err: fmt.Errorf("work: render slot %d: %w", r.Upload.Slot, err)}
		}
		if err := markProducers(w, f.parts); err != nil {
			w.Finish(0, 0, envelope.Nonce{})
			return chaincore.Rendered{Upload: r.Upload, Err: fmt.Errorf("work: render slot %d: %w", r.Upload.Slot, err)}
		}
	}
	nonce := envelope.NewNonce()
	obj, infos := w.Finish(r.Upload.Epoch, r.Upload.Slot, nonce)
	return chaincore.Rendered{Upload: r.Upload, Obj: obj, Frames: infos, Nonce: nonce}
}

// markProducers marks, in the frame just added, the batches that carry a
// producer identity (docs/design.md, "Producers: exactly once across
// retries") and the fence batches ("Fencing tokens"): a successor's walk
// learns the producers' windows and the streams' tokens from them.
func markProducers(w *envelope.BundleWriter, parts []chaincore.RenderPart) error {
	for i := range parts {
		if b := &parts[i]; b.Producer.ID != "" {
			if err := w.MarkProducer(b.Start, b.Count, b.Producer.ID, b.Producer.Seq); err != nil {
				return err
			}
		}
	}
	for i := range parts {
		if b := &parts[i]; b.Fence {
			if err := w.MarkFence(b.Start, b.SetToken); err != nil {
				return err
			}
		}
	}
	return nil
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
	err := chain.Walk(ctx, e.Set(), e.Star, e.Class, r.Epoch, r.From, to, func(slot uint64, obj []byte, frames []envelope.FrameInfo) error {
		env, err := envelope.ParseEnvelope(obj)
		if err != nil {
			return err
		}
		marks, err := envelope.ParseProducers(env, obj[env.FooterOffset:env.Size], frames)
		if err != nil {
			return err
		}
		fences, err := envelope.ParseFences(env, obj[env.FooterOffset:env.Size], frames)
		if err != nil {
			return err
		}
		ev.Slots = append(ev.Slots, absorb.Slot{Epoch: r.Epoch, Slot: slot, Key: chain.SlotKey(e.Star, e.Class, r.Epoch, slot), Frames: frames, Producers: marks, Fences: fences})
		return nil
	})
	if err != nil {
		return chaincore.Walked{Epoch: r.Epoch, Next: r.From, Err: fmt.Errorf("work: walk %s/%s epoch %d [%d, %d): %w", e.Star, e.Class, r.Epoch, r.From, r.To, err)}
	}
	ev.Next = to
	return ev
}

// committer returns a committer over the checkpoint the core holds, for
// one call.
func (e *Env) committer(h absorb.Held) *absorb.Committer {
	return absorb.Resume(e.Meta, e.Star, e.Class, e.Owner, h)
}

// dropSnapshots deletes keys from every bucket and returns those deleted
// from every one.
func dropSnapshots(ctx context.Context, stores []objstore.Store, keys []string) []string {
	var dropped []string
	for _, key := range keys {
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
	return dropped
}

// fence fences r.Epoch's slots from r.From in the buckets (chain.Fence),
// within r.Patience. Whether a fence is needed, where it starts, and
// whether its cut stands, the core decides from the trim cursor and the
// epoch record.
func (e *Env) fence(ctx context.Context, r chaincore.Fence) chaincore.Event {
	par := max(1, min(chain.DefaultFenceParallel, r.Window))
	if e.FenceParallel > 0 {
		par = e.FenceParallel
	}
	if r.Patience > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.Patience)
		defer cancel()
	}
	opt := chain.FenceOptions{Retry: e.Retry, Parallel: par, MaxSlots: r.MaxSlots,
		AcceptReadableFlight: r.Override >= chaincore.FenceAcceptReadable, DiscardUnreadable: r.Override == chaincore.FenceDiscardUnreadable}
	res, err := chain.Fence(ctx, e.Set(), e.Star, e.Class, r.Epoch, r.From, envelope.NewNonce(), opt)
	return chaincore.Fenced{Epoch: r.Epoch, Result: res, Err: err}
}

// readTails reads the tails as of the snapshot at key, as absorb.ReadTails
// does (a delta laid over the full snapshot it builds on), and tells the
// core what it needs to build its deltas on the same base: the base's
// streams, and the delta's (chaincore.TailsRead). The snapshots are
// decoded straight into the view the core adopts (no map of a million
// streams is built, and the core's loop inserts none of them).
func readTails(ctx context.Context, stores []objstore.Store, key string) chaincore.TailsRead {
	// A full snapshot's streams go straight into b; a delta's are kept
	// aside until its base is in b.
	var b chaincore.TailsBuilder
	var delta []absorb.StreamTail
	var deltaIDs []string
	isDelta := false
	first := func(h absorb.TailsHeader) {
		b, delta, deltaIDs, isDelta = chaincore.TailsBuilder{}, delta[:0], deltaIDs[:0], h.Base != ""
		if !isDelta {
			b.Expect(h.Streams)
		}
	}
	h, err := absorb.ReadSnapshotFunc(ctx, stores, key, first, func(id string, t absorb.StreamTail) {
		if isDelta {
			deltaIDs, delta = append(deltaIDs, id), append(delta, t)
		} else {
			b.Set(id, t)
		}
	})
	if err != nil {
		return chaincore.TailsRead{Err: err}
	}
	if h.Base == "" {
		if b.Len() != h.Streams {
			return chaincore.TailsRead{Err: fmt.Errorf("absorb: read tails snapshot %s: %w: %d streams listed, %d distinct", key, absorb.ErrCorrupt, h.Streams, b.Len())}
		}
		return chaincore.TailsRead{Streams: b.View(), BaseStreams: b.Len()}
	}
	bh, err := absorb.ReadSnapshotFunc(ctx, stores, h.Base, func(bh absorb.TailsHeader) {
		b = chaincore.TailsBuilder{}
		b.Expect(bh.Streams + len(deltaIDs))
	}, b.Set)
	if err != nil {
		return chaincore.TailsRead{Err: fmt.Errorf("absorb: tails snapshot %s builds on %s: %w", key, h.Base, err)}
	}
	if bh.Base != "" {
		return chaincore.TailsRead{Err: fmt.Errorf("%w: tails snapshot %s builds on %s, itself a delta", absorb.ErrCorrupt, key, h.Base)}
	}
	if b.Len() != bh.Streams {
		return chaincore.TailsRead{Err: fmt.Errorf("absorb: read tails snapshot %s: %w: %d streams listed, %d distinct", h.Base, absorb.ErrCorrupt, bh.Streams, b.Len())}
	}
	baseStreams := b.Len()
	for i, id := range deltaIDs {
		b.Set(id, delta[i])
	}
	changed := slices.Clone(deltaIDs)
	slices.Sort(changed)
	for i := 1; i < len(changed); i++ {
		if changed[i] == changed[i-1] {
			return chaincore.TailsRead{Err: fmt.Errorf("absorb: read tails snapshot %s: %w: stream %q listed twice", key, absorb.ErrCorrupt, changed[i])}
		}
	}
	return chaincore.TailsRead{Streams: b.View(), Base: h.Base, BaseStreams: baseStreams, Changed: changed}
}
