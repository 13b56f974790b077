package repair

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// Chain is one chain (star, class): the metastore that holds its epoch
// record, checkpoint and refs, and its bucket set (Stores and Names in set
// order, W the copy quorum).
type Chain struct {
	Meta  metastore.Store
	Star  string
	Class chain.Class
	Set   chain.BucketSet
}

// State classifies one bucket's copy of an object.
type State uint8

const (
	// Good: the whole copy was read and checks (a slot: its envelope is a
	// flight of this epoch and slot, its size, footer and every frame's
	// checksum and decoding; a snapshot: its checksum and JSON).
	Good State = iota + 1
	// Missing: the bucket has no object at the key.
	Missing
	// Poison: a fencer's poison of this slot.
	Poison
	// Corrupt: the object is damaged: its envelope, size, footer or a
	// frame does not check (Err says which). Repairable from a good copy.
	Corrupt
	// Foreign: a sound object that is not this slot's flight (another
	// epoch or slot, a settled object, another nonce than the good copies).
	// Never touched.
	Foreign
	// Unreachable: the read failed; nothing is known. Never touched.
	Unreachable
)

// String names the state.
func (s State) String() string {
	switch s {
	case Good:
		return "good"
	case Missing:
		return "missing"
	case Poison:
		return "poison"
	case Corrupt:
		return "corrupt"
	case Foreign:
		return "foreign"
	case Unreachable:
		return "unreachable"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Copy is what one bucket holds at a key.
type Copy struct {
	Bucket string
	State  State
	// Nonce is the writer's nonce of a good copy or a poison, and of a
	// corrupt copy whose envelope still parses as this slot's flight.
	Nonce envelope.Nonce
	// Envelope is set when the copy's envelope parses as a flight of this
	// epoch and slot, with Nonce: what a fence counts as a flight copy,
	// whatever the body holds.
	Envelope bool
	// Size is the bytes read.
	Size int
	// Err says why the copy is corrupt, foreign or unreachable.
	Err error
}

// SlotReport is what CheckSlot found in every bucket of a slot's set.
type SlotReport struct {
	Key         string
	Epoch, Slot uint64
	Copies      []Copy // in set order
	// Nonce is the flight the good copies hold (the one most of them hold,
	// if they disagree; the others are Foreign), Good how many do, and
	// Envelopes how many copies a fence would count as that flight's.
	Nonce     envelope.Nonce
	Good      int
	Envelopes int
	// Frames are the frames of a good copy (nil without one).
	Frames []envelope.FrameInfo

	source []byte // one good copy's bytes
	from   int    // its bucket
}

// Empty reports whether every bucket is missing the slot.
func (r *SlotReport) Empty() bool { return r.count(Missing) == len(r.Copies) }

// Healthy reports whether every bucket holds a good copy of one flight.
func (r *SlotReport) Healthy() bool { return r.Good == len(r.Copies) && len(r.Copies) > 0 }

// Poisons counts the copies that are poison of this slot.
func (r *SlotReport) Poisons() int { return r.count(Poison) }

func (r *SlotReport) count(s State) int {
	n := 0
	for _, c := range r.Copies {
		if c.State == s {
			n++
		}
	}
	return n
}

// Damaged lists the copies a repair would re-copy (missing or corrupt),
// by index into Copies.
func (r *SlotReport) Damaged() []int {
	var out []int
	for i, c := range r.Copies {
		if c.State == Missing || c.State == Corrupt {
			out = append(out, i)
		}
	}
	return out
}

// Source names the bucket of the good copy a repair copies from ("" if
// none).
func (r *SlotReport) Source() string {
	if r.source == nil {
		return ""
	}
	return r.Copies[r.from].Bucket
}

// CheckSlot reads the whole copy of (epoch, slot) in every bucket of set,
// by point lookups, and classifies each. It returns an error only for an
// invalid set or an ended ctx; a failed read is an Unreachable copy.
func CheckSlot(ctx context.Context, set chain.BucketSet, star string, class chain.Class, epoch, slot uint64) (SlotReport, error) {
	r := SlotReport{Key: chain.SlotKey(star, class, epoch, slot), Epoch: epoch, Slot: slot}
	if err := set.Validate(); err != nil {
		return r, err
	}
	objs := make([][]byte, set.K())
	frames := make([][]envelope.FrameInfo, set.K())
	for i, b := range set.Stores {
		obj, err := b.Get(ctx, r.Key, 0, -1)
		if ctx.Err() != nil {
			return r, fmt.Errorf("repair: check %s: %w", r.Key, ctx.Err())
		}
		c := Copy{Bucket: bucketName(set, i), Size: len(obj)}
		switch {
		case errors.Is(err, objstore.ErrNotFound):
			c.State = Missing
		case err != nil:
			c.State, c.Err = Unreachable, err
		default:
			frames[i] = classifySlotCopy(&c, obj, epoch, slot)
			if c.State == Good {
				objs[i] = obj
			}
		}
		r.Copies = append(r.Copies, c)
	}
	// The slot's flight: the nonce most good copies carry; without a good
	// copy, the one most flight envelopes carry (what a fence would count).
	good, envs := map[envelope.Nonce]int{}, map[envelope.Nonce]int{}
	for _, c := range r.Copies {
		if c.State == Good {
			good[c.Nonce]++
		}
		if c.Envelope {
			envs[c.Nonce]++
		}
	}
	best, bestEnv := 0, 0
	for i, c := range r.Copies {
		switch {
		case c.State == Good && good[c.Nonce] > best:
			best, r.Nonce = good[c.Nonce], c.Nonce
			r.source, r.from, r.Frames = objs[i], i, frames[i]
		case best == 0 && c.Envelope && envs[c.Nonce] > bestEnv:
			bestEnv, r.Nonce = envs[c.Nonce], c.Nonce
		}
	}
	for i := range r.Copies {
		c := &r.Copies[i]
		if c.State == Good && c.Nonce != r.Nonce {
			c.State = Foreign
			c.Err = fmt.Errorf("a good flight copy of nonce %s; the other good copies are of nonce %s", c.Nonce, r.Nonce)
		}
		if c.State == Good {
			r.Good++
		}
		if c.Envelope && c.Nonce == r.Nonce {
			r.Envelopes++
		}
	}
	return r, nil
}

// classifySlotCopy fills in c for a copy read whole, and returns its
// frames when it is good.
func classifySlotCopy(c *Copy, obj []byte, epoch, slot uint64) []envelope.FrameInfo {
	env, err := envelope.ParseEnvelope(obj)
	if err != nil {
		c.State, c.Err = Corrupt, fmt.Errorf("envelope (bytes 0..%d): %w", envelope.EnvelopeSize-1, err)
		return nil
	}
	if env.Epoch != epoch || env.Slot != slot {
		c.State, c.Err = Foreign, fmt.Errorf("a %s of epoch %d slot %d, not of epoch %d slot %d", env.Kind, env.Epoch, env.Slot, epoch, slot)
		return nil
	}
	switch env.Kind {
	case envelope.KindPoison:
		c.State, c.Nonce = Poison, env.Nonce
		return nil
	case envelope.KindFlight:
	default:
		c.State, c.Err = Foreign, fmt.Errorf("a %s object, not a flight", env.Kind)
		return nil
	}
	c.Nonce, c.Envelope = env.Nonce, true
	if uint64(len(obj)) != env.Size {
		c.State, c.Err = Corrupt, fmt.Errorf("truncated or extended: %d bytes, its envelope says %d", len(obj), env.Size)
		return nil
	}
	_, frames, err := envelope.ParseBundle(obj)
	if err != nil {
		c.State, c.Err = Corrupt, fmt.Errorf("footer @%d+%d: %w", env.FooterOffset, env.FooterLength, err)
		return nil
	}
	for i, f := range frames {
		if _, err := envelope.DecodeFrame(f, obj[f.Offset:f.End()]); err != nil {
			c.State, c.Err = Corrupt, fmt.Errorf("frame %d (stream %q, records [%d, %d)) @%d+%d: %w", i, streamName(f.Stream), f.FirstSeq, f.FirstSeq+uint64(f.Count), f.Offset, f.Length, err)
			return nil
		}
	}
	c.State = Good
	return frames
}

func bucketName(set chain.BucketSet, i int) string {
	if i < len(set.Names) && set.Names[i] != "" {
		return set.Names[i]
	}
	return "bucket " + strconv.Itoa(i)
}

// Settlement is why a slot's outcome is known to be "committed", or that it
// is not known.
type Settlement uint8

const (
	// Undetermined: nothing shows the slot committed. A repair refuses it.
	Undetermined Settlement = iota
	// BelowCut: below its epoch's recorded cut (or clean seal).
	BelowCut
	// Absorbed: below the checkpoint, in the checkpoint's epoch.
	Absorbed
	// Referenced: the caller found a span ref pointing into it.
	Referenced
	// Released: the caller's own leader released it (its under-replicated
	// list names slots that reached W copies).
	Released
	// Quorum: W good copies of one flight are in the buckets now.
	Quorum
)

// String says what the settlement rests on.
func (s Settlement) String() string {
	switch s {
	case Undetermined:
		return "undetermined"
	case BelowCut:
		return "below its epoch's recorded cut"
	case Absorbed:
		return "absorbed (below the checkpoint)"
	case Referenced:
		return "referenced by a span ref"
	case Released:
		return "released by its leader"
	case Quorum:
		return "W good copies of one flight"
	}
	return "Settlement(" + strconv.Itoa(int(s)) + ")"
}

// Evidence is what the caller knows about a slot's outcome that the
// buckets and the chain's records may not show. Give only what is true:
// each one lets a repair copy a slot with fewer than W good copies.
type Evidence struct {
	// Referenced: a span ref in the metastore points into the slot (the
	// absorb only absorbs released, hence committed, slots).
	Referenced bool
	// Released: this process's leader released the slot (reached W copies)
	// in this very epoch.
	Released bool
}

// Action is what a repair did, or refused, for one bucket's copy.
type Action struct {
	Bucket string
	Was    State // the copy's state before
	// Done: the bucket now holds a good copy of the flight (Copied: ours;
	// otherwise someone else's PUT of the same flight landed first).
	Done, Copied bool
	// Note says what happened (what landed in the hole, why it was refused,
	// the error).
	Note string
}

// SlotResult is what RepairSlot found and did.
type SlotResult struct {
	Report  SlotReport
	Settled Settlement
	// Refused is why nothing was done ("" when the slot was repaired, or
	// healthy). A slot can also be repaired in part: see Actions.
	Refused string
	Actions []Action
}

// Repaired counts the copies the repair put back.
func (r SlotResult) Repaired() int {
	n := 0
	for _, a := range r.Actions {
		if a.Done {
			n++
		}
	}
	return n
}

// Complete reports whether every damaged copy was put back.
func (r SlotResult) Complete() bool {
	return r.Refused == "" && r.Repaired() == len(r.Report.Damaged())
}

// Records are a chain's epoch record, checkpoint and trim cursor, read
// once (ReadRecords) to plan the repairs of many slots.
type Records struct {
	rec    chain.EpochRecord
	hasRec bool
	cp     absorb.Checkpoint
	hasCP  bool
	trim   *chain.TrimCursor
}

// ReadRecords reads the chain's epoch record, checkpoint and trim cursor
// (each may be absent).
func (c Chain) ReadRecords(ctx context.Context) (Records, error) {
	var st Records
	rec, _, err := chain.ReadEpoch(ctx, c.Meta, c.Star, c.Class)
	switch {
	case err == nil:
		st.rec, st.hasRec = rec, true
	case !errors.Is(err, metastore.ErrNotFound):
		return st, err
	}
	cp, _, err := absorb.ReadCheckpoint(ctx, c.Meta, c.Star, c.Class)
	switch {
	case err == nil:
		st.cp, st.hasCP = cp, true
	case !errors.Is(err, metastore.ErrNotFound):
		return st, err
	}
	it, err := c.Meta.Get(ctx, chain.TrimKey(c.Star, c.Class))
	switch {
	case err == nil:
		// A cursor that does not decode guards nothing; fsck and walk
		// report it.
		if t, derr := chain.DecodeTrimCursor(it.Value); derr == nil {
			st.trim = &t
		}
	case !errors.Is(err, metastore.ErrNotFound):
		return st, err
	}
	return st, nil
}

// fenceable reports whether a fence may still run over (epoch, slot): it is
// in the live epoch, which has no recorded cut, at or past the checkpoint.
func (st Records) fenceable(epoch, slot uint64) bool {
	if !st.hasRec || epoch != st.rec.Epoch {
		return !st.hasRec // no record: nothing is known, assume it may
	}
	if _, ok := st.rec.CutOf(epoch); ok {
		return false
	}
	return !(st.hasCP && (st.cp.Epoch > epoch || (st.cp.Epoch == epoch && slot < st.cp.Next)))
}

// Plan returns what RepairSlot would do for the slot r reports, given the
// chain's records, without writing anything: the settlement (or Refused,
// why nothing would be done), and an Action per missing or corrupt copy
// whose Note is empty when it would be re-copied, or says why not.
func (c Chain) Plan(st Records, r SlotReport, ev Evidence) SlotResult {
	res := SlotResult{Report: r}
	if r.Healthy() || len(r.Damaged()) == 0 {
		return res
	}
	res.Settled, res.Refused = settle(st, r, ev, c.Set.W)
	if res.Refused != "" {
		return res
	}
	fenceable := st.fenceable(r.Epoch, r.Slot)
	for _, i := range r.Damaged() {
		cp := r.Copies[i]
		a := Action{Bucket: cp.Bucket, Was: cp.State}
		if cp.State == Corrupt && fenceable {
			others := r.Envelopes
			if cp.Envelope && cp.Nonce == r.Nonce {
				others--
			}
			if others < c.Set.W {
				a.Note = fmt.Sprintf("refused: a fence may still run over this slot, and without this copy %d bucket(s) hold its flight, fewer than W=%d: a fencer's poison in the hole could kill it", others, c.Set.W)
			}
		}
		res.Actions = append(res.Actions, a)
	}
	return res
}

// RepairSlot re-copies the missing and corrupt copies of (epoch, slot) from
// a good copy, when the slot is settled (see the package doc for what that
// means and why), and reports what it found and did. ev is the caller's
// evidence of the slot's outcome. The error is only for an ended ctx, an
// invalid set or an unreadable metastore; everything else (refusals, a
// bucket that failed) is in the result.
func (c Chain) RepairSlot(ctx context.Context, epoch, slot uint64, ev Evidence) (SlotResult, error) {
	rep, err := CheckSlot(ctx, c.Set, c.Star, c.Class, epoch, slot)
	if err != nil {
		return SlotResult{Report: rep}, err
	}
	if rep.Healthy() || len(rep.Damaged()) == 0 {
		return SlotResult{Report: rep}, nil
	}
	st, err := c.ReadRecords(ctx)
	if err != nil {
		return SlotResult{Report: rep}, fmt.Errorf("repair: %s: %w", rep.Key, err)
	}
	res := c.Plan(st, rep, ev)
	for j, i := range rep.Damaged() {
		if res.Refused != "" || res.Actions[j].Note != "" {
			continue
		}
		c.recopy(ctx, c.Set.Stores[i], rep, &res.Actions[j])
	}
	return res, ctx.Err()
}

// settle decides whether rep's slot may be repaired, and on what grounds.
func settle(st Records, rep SlotReport, ev Evidence, w int) (Settlement, string) {
	if rep.source == nil {
		return Undetermined, "no good copy to copy from in any bucket"
	}
	// Below the cursor's At a slot is settled (no ref needs it) and its
	// deletes may be under way: a copy would only resurrect garbage.
	if t := st.trim; t != nil && (chain.Position{Epoch: rep.Epoch, Next: rep.Slot}).Less(t.At) {
		return Undetermined, fmt.Sprintf("behind the trim cursor (settled below epoch %d, slot %d): trimmed on purpose", t.At.Epoch, t.At.Next)
	}
	if st.hasRec {
		if cut, ok := st.rec.CutOf(rep.Epoch); ok {
			if rep.Slot >= cut.Slot {
				return Undetermined, fmt.Sprintf("at or past epoch %d's cut %d: nothing here counts", rep.Epoch, cut.Slot)
			}
			return BelowCut, ""
		}
	}
	switch {
	case st.hasCP && st.cp.Epoch == rep.Epoch && rep.Slot < st.cp.Next:
		return Absorbed, ""
	case ev.Referenced:
		return Referenced, ""
	case ev.Released:
		return Released, ""
	case rep.Good >= w:
		return Quorum, ""
	}
	return Undetermined, fmt.Sprintf("undetermined: %d good copies of W=%d, not absorbed, no recorded cut; copying could commit a flight its leader reported not committed (a fence decides it)", rep.Good, w)
}

// recopy puts rep's good copy into bucket b at rep.Key: it deletes a
// corrupt copy (read again first), then PutIfAbsent; an object found then
// is read back and accepted only if it is a good copy of the same flight.
func (c Chain) recopy(ctx context.Context, b objstore.Store, rep SlotReport, a *Action) {
	if a.Was == Corrupt {
		obj, err := b.Get(ctx, rep.Key, 0, -1)
		if err != nil && !errors.Is(err, objstore.ErrNotFound) {
			a.Note = fmt.Sprintf("re-read before the delete failed: %v", err)
			return
		}
		if err == nil {
			var now Copy
			classifySlotCopy(&now, obj, rep.Epoch, rep.Slot)
			if now.State != Corrupt {
				a.Note = fmt.Sprintf("left: the copy reads %s now", now.State)
				a.Done = now.State == Good && now.Nonce == rep.Nonce
				return
			}
			if err := b.Delete(ctx, rep.Key); err != nil {
				a.Note = fmt.Sprintf("delete of the corrupt copy failed: %v", err)
				return
			}
		}
	}
	err := b.PutIfAbsent(ctx, rep.Key, rep.source)
	if err == nil {
		a.Done, a.Copied = true, true
		a.Note = fmt.Sprintf("re-copied from %s (%d bytes)", rep.Copies[rep.from].Bucket, len(rep.source))
		return
	}
	// ErrExists (someone's PUT landed in the hole) or an ambiguous failure:
	// read what is there.
	obj, gerr := b.Get(ctx, rep.Key, 0, -1)
	if gerr != nil {
		a.Note = fmt.Sprintf("put failed (%v), and the read back too: %v", err, gerr)
		return
	}
	var now Copy
	classifySlotCopy(&now, obj, rep.Epoch, rep.Slot)
	switch {
	case bytes.Equal(obj, rep.source):
		a.Done = true
		a.Copied = !errors.Is(err, objstore.ErrExists)
		if a.Copied {
			a.Note = fmt.Sprintf("re-copied from %s (%d bytes; the put's response was lost)", rep.Copies[rep.from].Bucket, len(rep.source))
		} else {
			a.Note = "the same flight's copy landed first (a straggler PUT of its leader): left"
		}
	case now.State == Good && now.Nonce == rep.Nonce:
		a.Done = true
		a.Note = "a good copy of the same flight landed first: left"
	case now.State == Poison:
		a.Note = "a fencer's poison landed in the hole first: left (the slot is committed without this copy)"
	default:
		a.Note = fmt.Sprintf("something else landed first (%s: %v): left", now.State, now.Err)
	}
}

// streamName is the name in a stream ID, for messages.
func streamName(id string) string {
	name, _ := chain.SplitStreamID(id)
	return name
}
