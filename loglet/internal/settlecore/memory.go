package settlecore

import (
	"errors"
	"fmt"

	absorb "github.com/flightlog/flightlog/absorb/absorbval"
	"github.com/flightlog/flightlog/envelope"
)

// The pass's buffers in the memory budget. The executor reserves the slot
// objects a pass reads (ReadSlots); with Config.Memory the pass also asks
// for the bytes of the settled objects it renders and of the extents it
// reads back to merge before it holds them (HoldMemory), a chunk of
// objects at a time (at most maxPrepared objects, maxPreparedBytes of
// buffers, at least one object), and gives them back once they are
// written. A chunk refused with nothing rendered is halved at once (for
// the rest of the pass, without the backoff) until one object is refused: the slots the pass reads can
// fill the budget but for the room they reserve to render them, and a
// chunk needing more (extents read back to merge) would be refused at
// every pass. The executor never blocks a pass that holds anything (no
// hold-and-wait): a reservation the budget cannot grant now fails
// transiently, and the pass first writes what it has rendered (giving its
// bytes back), then asks again on its backoff; a chunk still refused is
// left for the next pass (its streams fail; the cursor waits). So the
// write path, which frees the budget at every cut and never waits for
// settlement, and the passes cannot wait on each other.

// HoldMemory asks the executor to make the bytes of rendered and
// read-back objects it holds for the pass Bytes: more are reserved from
// the budget (failing if the budget has not them now and the pass holds
// anything; blocking otherwise), fewer are given back. → MemoryHeld.
type HoldMemory struct{ Bytes int64 }

// MemoryHeld is HoldMemory's result (Err: nothing changed).
type MemoryHeld struct{ Err error }

func (HoldMemory) isRequest() {}
func (MemoryHeld) isEvent()   {}

// holdMemory makes the executor hold n bytes of buffers for the pass
// (with Config.Memory; else nothing is asked), asked again on the pass's
// backoff while the budget refuses.
func (p *Pass) holdMemory(n int64, then func(error)) {
	p.holdMemoryTries(n, true, then)
}

// holdMemoryTries is holdMemory, asked once only unless retry: a chunk
// that can still be halved is halved at once rather than after the
// backoff (about 2.5 s of it: at 10,000 streams a pass whose slots held
// the whole budget spent most of its time asking again for a chunk that
// could not fit beside them).
func (p *Pass) holdMemoryTries(n int64, retry bool, then func(error)) {
	if !p.cfg.Memory || n == p.memHeld {
		then(nil)
		return
	}
	ask := p.call
	if !retry {
		ask = p.ask
	}
	ask(HoldMemory{Bytes: n}, func(ev Event) {
		err := ev.(MemoryHeld).Err
		if err == nil {
			p.memHeld = n
		}
		then(err)
	})
}

// objectOverhead bounds what a rendered settled object holds beside its
// frames and their index entries: its envelope header and the footer's
// fixed part (about 100 bytes measured). It was 4 KiB: at 10,000 streams
// a pass's chunk of 4,096 one-record objects then asked for 16 MiB more
// than it held, which a budget the write path uses refused, and the pass
// spent most of its time waiting to ask again.
const objectOverhead = 512

// buffers is what rendering pl holds: the extents read back (those not in
// the slots read) and the object rendered (rendered, an index entry a
// frame, and objectOverhead).
func (r *slotsRun) buffers(pl prepared) int64 {
	var n int64
	for _, f := range pl.all {
		for _, e := range f.r.Extents {
			if _, ok := r.objects[e.Key]; !ok {
				n += int64(e.Length)
			}
		}
		raw := int64(rawBytes(f.r))
		n += r.rendered(f.r) + 64*(int64(len(f.r.Extents))+raw/int64(r.p.cfg.FrameBytes)+1)
	}
	return n + objectOverhead
}

// rendered is what sr's records take in a rendered object: their raw
// bytes and a margin for a codec that expands; with a codec that
// compresses, their stored bytes and a quarter if fewer (they were
// compressed on their way in, and compress about as well again). The raw
// bound asked about four times what a pass rendered at 10,000 streams, so
// its chunks were refused and halved down to a few hundred objects, each
// chunk waiting for the slowest of its reads and PUTs. A chunk that
// renders more than it held asks for the rest at once, and writes what it
// rendered if the budget has it not (renderChunks).
func (r *slotsRun) rendered(sr absorb.SpanRef) int64 {
	raw := int64(rawBytes(sr))
	n := raw + raw/32
	if r.p.cfg.Codec != envelope.CodecNone {
		var stored int64
		for _, e := range sr.Extents {
			stored += int64(e.Length)
		}
		n = min(n, stored+stored/4)
	}
	return n
}

// renderChunks renders ps a chunk at a time, each chunk's buffers held
// first (holdMemory), writing what is rendered when it is full or the
// budget refuses; then gets the errors (with errs so far).
func (r *slotsRun) renderChunks(ps []prepared, errs []error, then func(error)) {
	if len(ps) == 0 {
		then(errors.Join(errs...))
		return
	}
	limit := maxPrepared
	if r.chunkLimit > 0 {
		limit = r.chunkLimit
	}
	n, need := 0, int64(0)
	for n < len(ps) && n < limit && (n == 0 || need+r.buffers(ps[n]) <= maxPreparedBytes) {
		need += r.buffers(ps[n])
		n++
	}
	chunk, rest := ps[:n], ps[n:]
	render := func() {
		r.p.phase = "read-merged"
		r.renderChunk(chunk, func(err error) {
			errs = append(errs, err)
			// The chunk's read-back extents are dropped: what the pass holds
			// is its rendered objects. Should they be more than the chunk
			// held (a codec that compressed them less than on their way
			// in: see rendered), the rest is asked for once, and if the
			// budget has it not they are written at once, which gives
			// their bytes back.
			r.p.holdMemoryTries(int64(r.preparedBytes), false, func(herr error) {
				if herr == nil && len(r.prepared) < maxPrepared && r.preparedBytes < maxPreparedBytes {
					r.renderChunks(rest, errs, then)
					return
				}
				r.flushPrepared(func(err error) {
					r.chunkLimit = 0 // what was rendered is written: the room is back
					r.renderChunks(rest, append(errs, err), then)
				})
			})
		})
	}
	refused := func(err error) {
		if n > 1 {
			// Settle less: the pass holds its slots (it may not wait for
			// more), so a chunk refused now would be refused at every pass
			// that reads them, and the cursor would wait for ever. Halve
			// the chunks, down to one object, until the pass writes what
			// it rendered (its bytes go back: chunks are whole again; at
			// 10,000 streams a halving kept for the rest of the pass cut
			// its chunks to ~800 objects, each waiting for its slowest
			// read).
			r.chunkLimit = n / 2
			r.renderChunks(ps, errs, then)
			return
		}
		for _, pl := range chunk {
			r.failed[pl.id] = true
		}
		errs = append(errs, fmt.Errorf("settle: %d settled objects to render, %d bytes of buffers: %w", len(chunk), need, err))
		r.renderChunks(rest, errs, then)
	}
	r.p.phase = "hold-memory"
	halvable := n > 1
	// Asked again on the backoff only if nothing else can be done: with
	// objects rendered, they are written first (their bytes go back); a
	// chunk of more than one is halved.
	r.p.holdMemoryTries(int64(r.preparedBytes)+need, !halvable && len(r.prepared) == 0, func(err error) {
		switch {
		case err == nil:
			render()
		case len(r.prepared) == 0:
			refused(err)
		default:
			// Write what is rendered (its bytes go back), then ask again.
			r.flushPrepared(func(ferr error) {
				errs = append(errs, ferr)
				r.chunkLimit = 0 // the room is back: a chunk halved before may fit whole
				r.p.phase = "hold-memory"
				r.p.holdMemoryTries(need, !halvable, func(err error) {
					if err != nil {
						refused(err)
						return
					}
					render()
				})
			})
		}
	})
}
