package chain

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/objstore"
)

// Occupant is what one bucket holds at a slot key.
type Occupant struct {
	Kind OccupantKind
	// Nonce is the writer's nonce of a flight or poison: flight copies count
	// toward the quorum only with copies of the same nonce.
	Nonce envelope.Nonce
	// Readable is set on a flight whose whole copy was read and checked
	// (ParseBundle and DecodeFrame of every frame succeeded). Fence only
	// checks it under FenceOptions.AcceptReadableFlight; Decide ignores it.
	Readable bool
	// Err says why the occupant is unknown, corrupt or foreign.
	Err error
}

// Decision is a fence's verdict on one slot.
type Decision uint8

const (
	// Undecided: neither W flight copies nor K−W+1 poisons are known yet.
	Undecided Decision = iota
	// Committed: W buckets hold flight copies (of one nonce). Permanent.
	Committed
	// Dead: K−W+1 buckets hold poison, so W flight copies can never exist.
	// Permanent.
	Dead
)

// String names the decision.
func (d Decision) String() string {
	switch d {
	case Undecided:
		return "undecided"
	case Committed:
		return "committed"
	case Dead:
		return "dead"
	}
	return fmt.Sprintf("Decision(%d)", uint8(d))
}

// Decide is the fence's per-slot rule, a pure function of the slot's
// occupants (one per bucket, len(occupants) == k): Committed if at least w
// of them are flight copies with the same nonce, Dead if at least k−w+1 are
// poisons, Undecided otherwise (and for malformed input: a length other
// than k, or w outside [1, k]).
//
// The two can never both hold (w + k−w+1 > k), and because every kind but
// OccupantUnknown is permanent, a decision reached from a partial view is
// the decision of every fuller view: whoever decides, from whatever final
// occupants they see, decides the same.
func Decide(k, w int, occupants []Occupant) Decision {
	if len(occupants) != k || w < 1 || w > k {
		return Undecided
	}
	poisons := 0
	for i, o := range occupants {
		switch o.Kind {
		case OccupantPoison:
			poisons++
		case OccupantFlight:
			same := 0
			for _, p := range occupants[i:] {
				if p.Kind == OccupantFlight && p.Nonce == o.Nonce {
					same++
				}
			}
			if same >= w {
				return Committed
			}
		}
	}
	if poisons >= k-w+1 {
		return Dead
	}
	return Undecided
}

// decideWith is Decide plus the operator override: an undecided slot with a
// readable flight copy is committed.
func decideWith(k, w int, occupants []Occupant, acceptReadable bool) (d Decision, overridden bool) {
	d = Decide(k, w, occupants)
	if d != Undecided || !acceptReadable {
		return d, false
	}
	for _, o := range occupants {
		if o.Kind == OccupantFlight && o.Readable {
			return Committed, true
		}
	}
	return Undecided, false
}

// Fence finds the cut of epoch of the chain (star, class), from slot from
// on: for each slot it makes every reachable bucket hold something
// (PutIfAbsent of a poison carrying nonce, the fencer's own; on ErrExists or
// an ambiguous failure it reads the occupant's envelope), and decides from
// the final occupants with Decide: committed, go on; dead, that slot is the
// cut. It uses point lookups only, never a listing. Up to opt.Parallel
// slots are fenced at once, and further slots up to opt.ReadAhead are read
// ahead (a slot whose every bucket is occupied needs no PUT), but they are
// decided in slot order; the look-ahead past the cut is stopped once the
// cut is known.
//
// Because it decides from occupants rather than from what it placed, Fence
// is idempotent: a rerun, or a second fencer racing this one, reaches the
// same cut. A slot that cannot be decided (buckets down or failing, a
// corrupt occupant that leaves the quorum unknowable) is retried with
// backoff until ctx ends; the error is then an *UndecidedError naming the
// slot and what each bucket held. A slot that buckets refusing for good
// (objstore.ErrPermanent) leave undecidable whatever the others hold fails
// at once the same way, its error wrapping the refusal.
//
// from must be at or past the chain's trim cursor (the design starts at 0,
// or at the checkpoint's slot if the checkpoint is in epoch): trimmed slots
// read empty, and a fence there would kill them.
func Fence(ctx context.Context, set BucketSet, star string, class Class, epoch, from uint64, nonce envelope.Nonce, opt FenceOptions) (FenceResult, error) {
	if err := set.Validate(); err != nil {
		return FenceResult{}, err
	}
	if err := objstore.ValidateKey(SlotKey(star, class, epoch, from)); err != nil {
		return FenceResult{}, fmt.Errorf("chain: fence %s/%s epoch %d: %w", star, class, epoch, err)
	}
	retry := opt.Retry
	if retry.MinBackoff == 0 && retry.MaxBackoff == 0 && retry.Jitter == nil {
		retry = set.Retry
	}
	bound := opt.MaxSlots
	if bound == 0 {
		bound = DefaultFenceMaxSlots
	}
	par := uint64(opt.Parallel)
	if opt.Parallel <= 0 {
		par = DefaultFenceParallel
	}
	ahead := uint64(opt.ReadAhead)
	if opt.ReadAhead <= 0 {
		ahead = DefaultFenceReadAhead
	}
	ahead = max(ahead, par)
	par, ahead = uint64(set.capAhead(int(par))), uint64(set.capAhead(int(ahead)))
	// Slots in [slot, next) are being worked on, each by its own goroutine
	// reporting on its channel (buffered: a goroutine never waits for the
	// reader). They are consumed in slot order. A slot started par or more
	// past the first undecided one, or after a slot was found committed, is
	// read first; if that does not decide it, it waits for its fence
	// channel, closed once it is within par of the first undecided slot,
	// before it may place anything. Before any slot is found committed the
	// nearest par start with their PutIfAbsents, the cheaper way to fence
	// an empty slot (the cut of a chain with no backlog).
	type outcome struct {
		d          Decision
		overridden bool
		placed     int
		err        error
	}
	type work struct {
		slot  uint64
		out   chan outcome
		fence chan struct{} // nil once closed, or for a slot fenced at once
	}
	lctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var inflight []work
	next := from
	var res FenceResult
	// stop ends the look-ahead and counts what it placed past the cut.
	stop := func() {
		cancel()
		wg.Wait()
		for _, w := range inflight {
			res.PoisonedAhead += (<-w.out).placed
		}
	}
	for slot := from; ; slot++ {
		if slot-from >= bound {
			stop()
			return res, fmt.Errorf("%w: %s/%s epoch %d: %d slots from %d are committed and no dead slot found (is a writer still running?)", ErrFenceBound, star, class, epoch, bound, from)
		}
		// The read-ahead grows with the slots found committed: a fence
		// that meets its cut at once reads nothing past what it fences.
		depth := min(ahead, par+res.Committed)
		for next-slot < depth && next-from < bound {
			f := &slotFence{set: set, key: SlotKey(star, class, epoch, next), epoch: epoch, slot: next, nonce: nonce,
				accept: opt.AcceptReadableFlight || opt.DiscardUnreadable, discard: opt.DiscardUnreadable}
			w := work{slot: next, out: make(chan outcome, 1)}
			if next-slot >= par || res.Committed > 0 {
				w.fence = make(chan struct{})
			}
			inflight = append(inflight, w)
			next++
			wg.Add(1)
			go func() {
				defer wg.Done()
				if w.fence != nil {
					if d, ok := f.read(lctx); ok {
						w.out <- outcome{d: d}
						return
					}
					select {
					case <-w.fence:
					case <-lctx.Done():
						w.out <- outcome{err: f.undecided(lctx.Err())}
						return
					}
				}
				d, overridden, err := f.run(lctx, retry)
				w.out <- outcome{d, overridden, f.placed, err}
			}()
		}
		for i := range inflight {
			if inflight[i].slot-slot >= par {
				break
			}
			if inflight[i].fence != nil {
				close(inflight[i].fence)
				inflight[i].fence = nil
			}
		}
		o := <-inflight[0].out
		inflight = inflight[1:]
		res.Poisoned += o.placed
		if o.err != nil {
			stop()
			return res, o.err
		}
		if o.d == Dead {
			res.Cut = slot
			if o.overridden {
				res.Discarded = 1
			}
			stop()
			return res, nil
		}
		res.Committed++
		if o.overridden {
			res.Overridden++
		}
	}
}

// slotFence decides one slot.
type slotFence struct {
	set     BucketSet
	key     string
	epoch   uint64
	slot    uint64
	nonce   envelope.Nonce
	accept  bool
	discard bool

	occ       []Occupant
	ambiguous []bool // a poison PUT of ours to bucket i failed ambiguously
	checked   []bool // bucket i's flight copy was read whole for the override
	placed    int
}

// read is the read-ahead of a slot not yet fenced: it reads each bucket's
// occupant (one envelope GET each, in parallel) and places nothing. It
// reports the decision when every bucket holds an object (flight, poison,
// foreign or corrupt) and Decide decides from them, which is what run
// would decide, its PutIfAbsents all failing with ErrExists. Otherwise it
// leaves what it read in f.occ for run to start from: an empty or
// unreadable bucket stays unknown, and run poisons it.
func (f *slotFence) read(ctx context.Context) (Decision, bool) {
	k := f.set.K()
	f.occ = make([]Occupant, k)
	var wg sync.WaitGroup
	for i := range f.occ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			env, err := ProbeEnvelope(ctx, f.set.Stores[i], f.key)
			switch {
			case err == nil:
				f.occ[i] = classify(env, f.epoch, f.slot)
			case envelope.IsCorruption(err):
				f.occ[i] = Occupant{Kind: OccupantCorrupt, Err: err}
			default:
				f.occ[i] = Occupant{Kind: OccupantUnknown, Err: fmt.Errorf("read ahead: %w", err)}
			}
		}()
	}
	wg.Wait()
	if !f.allReached() {
		return Undecided, false
	}
	d := Decide(k, f.set.W, f.occ)
	return d, d != Undecided
}

func (f *slotFence) run(ctx context.Context, retry RetryPolicy) (Decision, bool, error) {
	k := f.set.K()
	if f.occ == nil {
		f.occ = make([]Occupant, k) // else: what read found
	}
	f.ambiguous = make([]bool, k)
	f.checked = make([]bool, k)
	poison := envelope.Poison(f.epoch, f.slot, f.nonce)
	bo := newBackoff(retry)
	for {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for i := range f.occ {
			switch f.occ[i].Kind {
			case OccupantFlight, OccupantPoison, OccupantForeign:
				continue // permanent: no need to look again
			}
			occupied := f.occ[i].Kind == OccupantCorrupt
			wg.Add(1)
			go func() {
				defer wg.Done()
				o, placed, ambiguous := resolveOccupant(ctx, f.set.Stores[i], f.key, poison, f.epoch, f.slot, f.nonce, occupied, f.ambiguous[i])
				mu.Lock()
				if o.Kind == OccupantUnknown && ctx.Err() != nil && f.occ[i].Err != nil {
					// A look cut short by ctx tells nothing new: keep what
					// the previous round saw (a corrupt occupant, a fault).
					o = f.occ[i]
				}
				f.occ[i] = o
				f.ambiguous[i] = ambiguous
				if placed {
					f.placed++
				}
				mu.Unlock()
			}()
		}
		wg.Wait()
		if f.accept && Decide(k, f.set.W, f.occ) == Undecided {
			f.checkReadable(ctx)
		}
		d, overridden := decideWith(k, f.set.W, f.occ, f.accept)
		if d == Undecided && f.discard && f.allReached() {
			d, overridden = discardUnreadable(k, f.set.W, f.occ), true
		}
		if d != Undecided {
			return d, overridden, nil
		}
		refused := refusedForGood(k, f.set.W, f.occ, f.accept) // see refused.go
		if refused != nil || !bo.wait(ctx) {
			if refused != nil {
				return Undecided, false, f.undecided(refused)
			}
			return Undecided, false, f.undecided(ctx.Err())
		}
	}
}

// undecided is the error of a slot given up for err, with what each bucket
// held.
func (f *slotFence) undecided(err error) *UndecidedError {
	e := &UndecidedError{Epoch: f.epoch, Slot: f.slot, K: f.set.K(), W: f.set.W, Err: err}
	for i, o := range f.occ {
		e.Buckets = append(e.Buckets, f.set.name(i))
		e.Occupants = append(e.Occupants, o.Kind)
		e.Causes = append(e.Causes, o.Err)
	}
	return e
}

// allReached reports whether every bucket's occupant is known (none is
// unknown: down or failing), so that no readable copy can be hiding.
func (f *slotFence) allReached() bool {
	for _, o := range f.occ {
		if o.Kind == OccupantUnknown {
			return false
		}
	}
	return true
}

// discardUnreadable decides a slot with corrupt occupants counted as
// poison (FenceOptions.DiscardUnreadable).
func discardUnreadable(k, w int, occupants []Occupant) Decision {
	occ := slices.Clone(occupants)
	for i := range occ {
		if occ[i].Kind == OccupantCorrupt {
			occ[i] = Occupant{Kind: OccupantPoison}
		}
	}
	return Decide(k, w, occ)
}

// checkReadable reads whole each flight copy not yet checked, until one
// proves readable.
func (f *slotFence) checkReadable(ctx context.Context) {
	for i, o := range f.occ {
		if o.Kind != OccupantFlight {
			continue
		}
		if o.Readable {
			return
		}
		if f.checked[i] {
			continue
		}
		obj, err := f.set.Stores[i].Get(ctx, f.key, 0, -1)
		if err != nil {
			continue // transient: try again next round
		}
		f.checked[i] = true
		env, _, err := checkCopy(obj, f.epoch, f.slot)
		if err == nil && env.Nonce == o.Nonce {
			f.occ[i].Readable = true
			return
		}
	}
}

// resolveOccupant makes one bucket hold something at key and says what: it
// PutIfAbsents poison (unless the key is known occupied) and reads the
// envelope of whatever is there on ErrExists or an ambiguous failure.
// placed reports that this call's poison is the occupant; ambiguous, that a
// poison PUT to this bucket has failed ambiguously during this fence (so
// finding our nonce later means we placed it).
func resolveOccupant(ctx context.Context, b objstore.Store, key string, poison []byte, epoch, slot uint64, nonce envelope.Nonce, occupied, wasAmbiguous bool) (o Occupant, placed, ambiguous bool) {
	ambiguous = wasAmbiguous
	var putErr error
	if !occupied {
		putErr = b.PutIfAbsent(ctx, key, poison)
		switch {
		case putErr == nil:
			return Occupant{Kind: OccupantPoison, Nonce: nonce}, true, ambiguous
		case errors.Is(putErr, objstore.ErrExists):
			putErr = nil
		default:
			ambiguous = true // it may have landed: read it back
		}
	}
	env, err := ProbeEnvelope(ctx, b, key)
	switch {
	case err == nil:
		o = classify(env, epoch, slot)
		placed = ambiguous && o.Kind == OccupantPoison && env.Nonce == nonce
		if placed {
			ambiguous = false // counted once
		}
		return o, placed, ambiguous
	case envelope.IsCorruption(err):
		return Occupant{Kind: OccupantCorrupt, Err: err}, false, ambiguous
	case errors.Is(err, objstore.ErrNotFound) && putErr != nil:
		return Occupant{Kind: OccupantUnknown, Err: fmt.Errorf("poison PUT failed and the key reads empty: %w", putErr)}, false, ambiguous
	case errors.Is(err, objstore.ErrNotFound):
		return Occupant{Kind: OccupantUnknown, Err: errors.New("the key was occupied and now reads empty")}, false, ambiguous
	case putErr != nil:
		return Occupant{Kind: OccupantUnknown, Err: fmt.Errorf("poison PUT: %v; probe: %w", putErr, err)}, false, ambiguous
	}
	return Occupant{Kind: OccupantUnknown, Err: fmt.Errorf("probe: %w", err)}, false, ambiguous
}

// classify turns an occupant's envelope into an Occupant of (epoch, slot).
func classify(env envelope.Envelope, epoch, slot uint64) Occupant {
	if env.Epoch == epoch && env.Slot == slot {
		switch env.Kind {
		case envelope.KindFlight:
			return Occupant{Kind: OccupantFlight, Nonce: env.Nonce}
		case envelope.KindPoison:
			return Occupant{Kind: OccupantPoison, Nonce: env.Nonce}
		}
	}
	return Occupant{Kind: OccupantForeign, Nonce: env.Nonce,
		Err: fmt.Errorf("a %s of epoch %d slot %d", env.Kind, env.Epoch, env.Slot)}
}
