package chaincore

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	chain "github.com/flightlog/flightlog/chain/chainval"
	"github.com/flightlog/flightlog/internal/invariants"
	objstore "github.com/flightlog/flightlog/objstore/objval"
)

// upload is one flight's write to one (epoch, slot): a render, then K
// copies. It outlives its flight's release while straggling copies finish.
type upload struct {
	id        UploadID
	f         *flight // the flight while it is unreleased and written here
	renderOut bool    // the Render request has not returned
	rendered  bool
	puts      int // PutCopy requests that have not returned
	tally     chain.Tally
	putStart  time.Time // the first PUT: the commit deadline runs from here
	deadline  time.Time
	straggle  time.Time // copies still out then are cancelled
	durable   bool
	cancelled bool
	objBytes  int64 // the rendered object, held by its copies' workers
	straggler bool  // released with copies still out: counted in stragglerBytes
	refused   error // a copy a bucket refused for good (objstore.ErrPermanent)
}

// startUpload starts f's upload at its current (epoch, slot): a render
// first.
func (c *Core) startUpload(f *flight) {
	id := UploadID{f.epoch, f.slot}
	up := &upload{id: id, f: f, renderOut: true}
	if old := c.uploads[id]; old != nil {
		panic(fmt.Sprintf("leader: second upload of epoch %d slot %d", id.Epoch, id.Slot))
	}
	c.uploads[id] = up
	f.up = up
	c.emit(Render{Upload: id, Streams: renderOf(f.batches)})
}

// onRendered starts the K copies of a rendered flight; a flight that
// cannot be rendered halts the epoch at its slot (it can never be written).
func (c *Core) onRendered(ev Rendered) {
	up := c.uploads[ev.Upload]
	if up == nil || !up.renderOut {
		panic(fmt.Sprintf("leader: Rendered for epoch %d slot %d, which is not rendering", ev.Upload.Epoch, ev.Upload.Slot))
	}
	up.renderOut = false
	f := up.f
	if up.cancelled || f == nil {
		c.forgetUpload(up)
		return
	}
	if ev.Err != nil {
		f.renderErr = ev.Err
		c.forgetUpload(up)
		c.halt(f.slot, fmt.Errorf("slot %d cannot be rendered: %w", f.slot, ev.Err))
		return
	}
	up.rendered = true
	up.objBytes = int64(len(ev.Obj))
	f.objBytes = up.objBytes
	up.putStart = c.now
	if f.trace != nil && f.trace.PutStart.IsZero() {
		f.trace.PutStart = c.now
	}
	up.deadline = c.now.Add(c.cfg.CommitDeadline)
	up.straggle = c.now.Add(c.cfg.StragglerTimeout)
	up.tally = chain.Tally{K: c.K(), W: c.cfg.W}
	f.key = chain.SlotKey(c.cfg.Star, c.cfg.Class, f.epoch, f.slot)
	f.frames = ev.Frames
	c.stats.flights++
	c.stats.flightPayload += uint64(f.payload)
	c.stats.flightObjects += uint64(len(ev.Obj))
	c.stats.flightSize.Record(int64(len(ev.Obj)))
	fl := chain.Flight{Key: f.key, Obj: ev.Obj, Epoch: f.epoch, Slot: f.slot, Nonce: ev.Nonce}
	for i := 0; i < c.K(); i++ {
		c.emit(PutCopy{Upload: up.id, Bucket: i, Flight: fl})
	}
	up.puts = c.K()
}

// onCopyDone counts one copy against W: the W-th copy of ours makes the
// slot durable; a foreign occupant halts the epoch past the slot (the slot
// still counts if W copies are ours); a slot that can no longer reach W
// halts at the slot.
func (c *Core) onCopyDone(ev CopyDone) {
	up := c.uploads[ev.Upload]
	if up == nil || up.puts <= 0 {
		panic(fmt.Sprintf("leader: CopyDone for epoch %d slot %d, which has no copy out", ev.Upload.Epoch, ev.Upload.Slot))
	}
	up.puts--
	r := ev.Result
	id := up.id
	switch r.Status {
	case chain.CopyOurs:
		if r.Bucket >= 0 && r.Bucket < len(c.stats.putLatency) {
			c.stats.putLatency[r.Bucket].RecordDuration(r.Latency)
		}
		if r.Ghost {
			c.stats.ghosts++
		}
	case chain.CopyFailed:
		if up.refused == nil && errors.Is(r.Err, objstore.ErrPermanent) {
			up.refused = fmt.Errorf("bucket %s refuses for good: %w", c.bucketName(r.Bucket), r.Err)
		}
	case chain.CopyForeign:
		c.stats.foreign++
		if id.Epoch == c.rec.Epoch && !up.cancelled {
			c.logf(slog.LevelWarn, "foreign occupant in slot; halting the epoch", attrU("epoch", id.Epoch), attrU("slot", id.Slot), attrS("bucket", c.bucketName(r.Bucket)), attrE(r.Err))
			c.halt(id.Slot+1, r.Err)
		}
	}
	if up.tally.Add(r) && !up.cancelled {
		up.durable = true
		c.stats.quorumLatency.RecordDuration(c.now.Sub(up.putStart))
		if up.f != nil && up.f.trace != nil && up.f.trace.Durable.IsZero() {
			up.f.trace.Durable, up.f.trace.StoreW = c.now, r.Latency
		}
		if up.f != nil && id.Epoch == c.rec.Epoch {
			c.markDurable(up.f)
		}
	}
	if !up.tally.Durable() && !up.tally.Reachable() && !up.cancelled && up.f != nil && id.Epoch == c.rec.Epoch && up.refused != nil {
		c.refused(id, up.refused)
	} else if !up.tally.Durable() && !up.tally.Reachable() && !up.cancelled && up.f != nil && id.Epoch == c.rec.Epoch {
		c.halt(id.Slot, fmt.Errorf("slot %d cannot reach W=%d: %d ours, %d foreign, %d failed (last: %v)", id.Slot, up.tally.W, up.tally.Ours, up.tally.Foreign, up.tally.Failed, r.Err))
	}
	if up.puts == 0 {
		if up.tally.Durable() && up.tally.Ours < up.tally.K {
			c.noteUnderReplicated(id)
			c.logf(slog.LevelInfo, "slot under-replicated", attrU("epoch", id.Epoch), attrU("slot", id.Slot), attrI("copies", up.tally.Ours), attrI("k", up.tally.K))
		}
		c.forgetUpload(up)
	}
}

// refused stops the chain when a slot cannot reach W because a bucket
// refuses its copy for good (a missing bucket, wrong credentials: a
// misconfiguration). A recovery would fence and republish into the same
// buckets and be refused again, or block its fence for ever; so the chain
// stops loudly, and every batch it has not acked ends outcome-unknown
// (copies may have landed in the other buckets) with the refusal as the
// cause its producers see. Stopping is always safe: the next owner fences.
func (c *Core) refused(id UploadID, cause error) {
	if c.phase != phaseServing && c.phase != phaseRecovering {
		return
	}
	c.stats.halts++
	c.stats.haltCause = cause.Error()
	c.die(Fate{Kind: OutcomeUnknown, Cause: fmt.Errorf("%w: %s/%s epoch %d slot %d cannot reach W=%d: %w", ErrHalted, c.cfg.Star, c.cfg.Class, id.Epoch, id.Slot, c.cfg.W, cause)})
}

// maxUnderReplicatedList bounds Stats' list of under-replicated slots.
const maxUnderReplicatedList = 1024

// noteUnderReplicated counts id under-replicated and puts it on the list
// (the oldest dropped past its bound).
func (c *Core) noteUnderReplicated(id UploadID) {
	c.stats.underReplicated++
	c.stats.underRepl = append(c.stats.underRepl, id)
	if n := len(c.stats.underRepl); n > maxUnderReplicatedList {
		c.stats.underRepl = c.stats.underRepl[n-maxUnderReplicatedList:]
	}
}

// forgetUnderReplicated drops from the list every slot below the trim
// cursor at: settlement moved its records and deletes its copies on
// purpose, so a repair must not copy it back (the count stays).
func (c *Core) forgetUnderReplicated(at chain.Position) {
	c.stats.underRepl = slices.DeleteFunc(c.stats.underRepl, func(id UploadID) bool {
		return (chain.Position{Epoch: id.Epoch, Next: id.Slot}).Less(at)
	})
}

func (c *Core) bucketName(i int) string {
	if i >= 0 && i < len(c.cfg.Buckets) {
		return c.cfg.Buckets[i]
	}
	return fmt.Sprintf("bucket %d", i)
}

// forgetUpload forgets an upload whose workers have all returned.
func (c *Core) forgetUpload(up *upload) {
	if !up.renderOut && up.puts == 0 {
		c.unstraggle(up)
		delete(c.uploads, up.id)
		if up.f != nil && up.f.up == up {
			up.f.up = nil
		}
	}
}

// cancel ends an upload's outstanding workers. Their results still arrive
// (as failures, or copies that landed anyway) and are only counted.
func (c *Core) cancel(up *upload) {
	if up.cancelled {
		return
	}
	up.cancelled = true
	if up.renderOut || up.puts > 0 {
		c.rd.Cancels = append(c.rd.Cancels, up.id)
	}
	c.unstraggle(up)
}

// straggle counts a released upload whose copies are still out: its
// workers hold the rendered object until they return. Past the straggler
// budget, the oldest are abandoned (cancelled: their missing copies are
// counted under-replicated).
func (c *Core) straggle(up *upload) {
	if up.straggler || up.puts == 0 || up.cancelled {
		return
	}
	up.straggler = true
	c.stragglerBytes += up.objBytes
	c.stragglers++
	if c.cfg.StragglerBytes <= 0 || c.stragglerBytes <= c.cfg.StragglerBytes {
		return
	}
	abandoned := 0
	for _, old := range c.sortedUploads() {
		if c.stragglerBytes <= c.cfg.StragglerBytes {
			break
		}
		if old.straggler {
			c.cancel(old)
			abandoned++
		}
	}
	c.stats.stragglersAbandoned += uint64(abandoned)
	c.logf(slog.LevelInfo, "straggling copies abandoned over the straggler budget", attrI("uploads", abandoned), slog.Int64("budget", c.cfg.StragglerBytes))
}

// unstraggle uncounts an upload that stops straggling.
func (c *Core) unstraggle(up *upload) {
	if up.straggler {
		up.straggler = false
		c.stragglerBytes -= up.objBytes
		c.stragglers--
	}
}

// checkDeadlines halts at a flight that missed its commit deadline and
// cancels straggling copies past their timeout.
func (c *Core) checkDeadlines() {
	if c.phase == phaseServing || c.phase == phaseRecovering {
		for _, f := range c.flights {
			up := f.up
			if up != nil && up.rendered && !up.durable && !up.cancelled && f.epoch == c.rec.Epoch && !c.now.Before(up.deadline) {
				c.halt(f.slot, fmt.Errorf("slot %d missed its commit deadline %v with %d of W=%d copies", f.slot, c.cfg.CommitDeadline, up.tally.Ours, up.tally.W))
				break // the halt cancels every later upload
			}
		}
	}
	for _, up := range c.sortedUploads() {
		if up.puts > 0 && !up.cancelled && !c.now.Before(up.straggle) {
			c.cancel(up)
		}
	}
}

// markDurable records that f's slot reached W and releases what it can.
func (c *Core) markDurable(f *flight) {
	c.window.MarkDurable(f.slot)
	if invariants.ReleaseOutOfOrder.On() && !f.released && f.slot >= c.window.Released() {
		c.releaseFlight(f) // a planted bug, for the simulation's checker
	}
	c.release()
}

// release releases, in slot order, every flight that is durable with all
// earlier slots released (invariant 1: an ack is released only when its
// slot holds W copies and every earlier slot has acked).
func (c *Core) release() {
	from, to := c.window.Release()
	for s := from; s < to; s++ {
		f := c.flights[0]
		if invariants.Enabled {
			invariants.Assert(f.slot == s && f.epoch == c.rec.Epoch, "release of slot %d found flight %d/%d first", s, f.epoch, f.slot)
		}
		c.flights[0] = nil
		c.flights = c.flights[1:]
		if !f.released {
			c.releaseFlight(f)
		}
	}
}

// releaseFlight acks f's batches: each stream's durable tail moves, the
// batches enter the flight index (to serve reads until absorbed), and the
// flight joins the absorb queue.
func (c *Core) releaseFlight(f *flight) {
	f.released = true
	c.rd.Slots = append(c.rd.Slots, ReleasedSlot{Epoch: f.epoch, Slot: f.slot})
	if up := f.up; up != nil {
		up.f = nil // its straggling copies go on, only counted
		f.up = nil
		c.straggle(up)
	}
	for _, b := range f.batches {
		st := b.Stream
		st.durable = Tail{Seq: b.End(), Timestamp: b.MaxTS}
		st.entries = append(st.entries, b)
		st.bytes += int64(len(b.Payload))
		c.ab.indexBytes += int64(len(b.Payload))
		b.Ack = Ack{Start: b.Start, End: b.End(), Tail: st.durable}
		c.decide(b, Fate{Kind: Acked})
		c.noteReleased(st)
	}
	c.ab.queue = append(c.ab.queue, f)
}

// noteReleased queues st for a readers' wake-up, once per Ready (a flag
// on the stream, cleared by Advance: a release of tens of thousands of
// streams in one Ready once cost a quadratic scan of the list).
func (c *Core) noteReleased(st *Stream) {
	if st.noted {
		return
	}
	st.noted = true
	c.rd.Released = append(c.rd.Released, st)
}

// halt halts the current epoch at slot: no claim, and no release at or past
// slot, until the recovery has fenced the epoch and moved on. The first
// halt starts the recovery; a later one only lowers the bound.
func (c *Core) halt(slot uint64, cause error) {
	if c.phase != phaseServing && c.phase != phaseRecovering {
		return
	}
	c.window.Halt(slot)
	if c.phase == phaseRecovering {
		return
	}
	bound, _ := c.window.Halted()
	c.stats.halts++
	c.stats.haltCause = cause.Error()
	c.logf(slog.LevelWarn, "chain halted; recovering", attrU("epoch", c.rec.Epoch), attrU("slot", bound), attrE(cause))
	c.startRecovery(cause)
}
