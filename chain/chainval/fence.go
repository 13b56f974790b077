package chainval

import (
	"errors"
	"fmt"
	"strings"
)

// OccupantKind classifies what one bucket holds at a slot key, as a fencer
// finds it.
type OccupantKind uint8

const (
	// OccupantUnknown: not resolved. The bucket could not be reached, the
	// poison PUT failed and the key reads empty, or the read failed. It is
	// the only kind that is not permanent.
	OccupantUnknown OccupantKind = iota
	// OccupantFlight: a flight copy of this (epoch, slot), whatever its
	// nonce, by its envelope. Its body is not checked (see chain.Occupant.Readable).
	OccupantFlight
	// OccupantPoison: a poison of this (epoch, slot), anyone's.
	OccupantPoison
	// OccupantCorrupt: an object whose envelope does not parse (short,
	// checksum mismatch, unknown format). It counts as neither a flight nor
	// a poison: it may be a flight copy damaged at rest.
	OccupantCorrupt
	// OccupantForeign: an object with a valid envelope that is neither a
	// flight nor a poison of this (epoch, slot): another epoch or slot, or a
	// settled object. It cannot happen without a bug; it counts as neither.
	OccupantForeign
)

// String names the kind.
func (k OccupantKind) String() string {
	switch k {
	case OccupantUnknown:
		return "unknown"
	case OccupantFlight:
		return "flight"
	case OccupantPoison:
		return "poison"
	case OccupantCorrupt:
		return "corrupt"
	case OccupantForeign:
		return "foreign"
	}
	return fmt.Sprintf("OccupantKind(%d)", uint8(k))
}

// Errors of chain.Fence.
var (
	// ErrUndecided is wrapped (by *UndecidedError) when a fence slot could
	// not be decided before ctx ended.
	ErrUndecided = errors.New("chain: fence: slot undecided")
	// ErrFenceBound is wrapped when a fence decided FenceOptions.MaxSlots
	// slots committed without finding a dead one.
	ErrFenceBound = errors.New("chain: fence: safety bound reached")
)

// UndecidedError says which slot blocked a fence and what each bucket held
// when ctx ended. It unwraps to ErrUndecided and to the context's error.
type UndecidedError struct {
	Epoch, Slot uint64
	K, W        int
	// Buckets names the buckets, in set order.
	Buckets []string
	// Occupants is each bucket's last resolution, in set order.
	Occupants []OccupantKind
	// Causes says, per bucket, why it is unknown, corrupt or foreign (nil
	// for a flight or poison).
	Causes []error
	// Err is what ended the wait: ctx.Err(), or, when buckets refusing for
	// good (objstore.ErrPermanent) leave the slot undecidable, the refusal.
	Err error
}

// Error names the slot, the quorum it lacked and each bucket's state.
func (e *UndecidedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "chain: fence epoch %d slot %d: undecided (need %d flight copies or %d poisons of %d buckets):", e.Epoch, e.Slot, e.W, e.K-e.W+1, e.K)
	for i, k := range e.Occupants {
		name := "bucket " + fmt.Sprint(i)
		if i < len(e.Buckets) {
			name = e.Buckets[i]
		}
		fmt.Fprintf(&b, " %s: %s", name, k)
		if i < len(e.Causes) && e.Causes[i] != nil {
			fmt.Fprintf(&b, " (%v)", e.Causes[i])
		}
		b.WriteByte(';')
	}
	if e.Err != nil {
		fmt.Fprintf(&b, " gave up: %v", e.Err)
	}
	return b.String()
}

// Unwrap returns ErrUndecided and the context's error.
func (e *UndecidedError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrUndecided}
	}
	return []error{ErrUndecided, e.Err}
}

// DefaultFenceMaxSlots is FenceOptions.MaxSlots's default: far above any
// backlog budget plus window, so it only stops a fence chasing a writer that
// should not be running.
const DefaultFenceMaxSlots = 1 << 20

// FenceOptions tunes a fence.
type FenceOptions struct {
	// AcceptReadableFlight is the operator override: a slot that cannot be
	// decided but holds at least one readable, checksummed flight copy of
	// the epoch (ParseBundle and DecodeFrame of every frame succeed) is
	// treated as committed. Use it only for an epoch that has no recorded
	// cut, when buckets are lost for good or envelopes unreadable: it may
	// call committed a slot whose unreachable buckets hold poison, and a
	// fencer without it may then reach a different cut.
	AcceptReadableFlight bool
	// DiscardUnreadable is the stronger operator override, for a slot no
	// bucket holds a readable flight copy of: it implies
	// AcceptReadableFlight, and an undecided slot that still has no
	// readable flight copy counts its corrupt occupants (envelopes that do
	// not parse: damaged or torn objects) as poison, so it can be decided
	// dead. The records of such a slot are lost, and so is every later
	// slot of the epoch (the cut is the first dead slot), acked or not:
	// use it only when the damaged copies are known to be beyond repair.
	DiscardUnreadable bool
	// Retry paces the retries of undecided slots; zero: chain.BucketSet.Retry.
	Retry RetryPolicy
	// MaxSlots bounds the slots a fence decides committed before it gives
	// up with ErrFenceBound (0: DefaultFenceMaxSlots). The takeover's bound
	// is the backlog budget plus the window plus one.
	MaxSlots uint64
	// Parallel is how many slots are fenced at once (0:
	// DefaultFenceParallel; 1: one at a time, though slots past it are
	// still read ahead unless ReadAhead is 1). Slots are still decided in
	// order and the cut is the same; the look-ahead only overlaps round
	// trips, and may poison up to Parallel−1 slots past the cut (they are
	// dead anyway: nothing past a cut is ever acked or read). The caller
	// keeps Parallel within the epoch's window, so that poison stays inside
	// the garbage probe's range.
	Parallel int
	// ReadAhead is how many slots, counted from the first undecided one,
	// are worked on at once in all (0: DefaultFenceReadAhead; at most
	// Parallel: no read-ahead). A slot past the Parallel nearest, and once
	// a slot has been decided committed (a backlog: more are likely) any
	// slot, is first only read: one envelope GET per bucket, nothing
	// placed. A slot whose every bucket already holds an object is decided
	// from what was read, exactly as PutIfAbsents failing with ErrExists
	// and the reads of the occupants would decide it (every kind but
	// unknown is permanent), at one round trip instead of two. A slot with
	// an empty or unreadable bucket waits until it is among the Parallel
	// nearest, and is then fenced from what was read (poison into each
	// bucket not known to be occupied), so poison still lands at most
	// Parallel−1 slots past the cut. The read-ahead grows with the slots
	// decided committed (Parallel plus that count, up to ReadAhead), so a
	// fence that finds its cut at once reads no more than it fences.
	// chain.BucketSet.ReadAhead, if set, caps both Parallel and ReadAhead.
	ReadAhead int
}

// DefaultFenceParallel is FenceOptions.Parallel's default. A takeover
// fences the whole unabsorbed backlog: one slot at a time it costs about
// two round trips per slot; 16 at a time, about one per 8 slots.
const DefaultFenceParallel = 16

// DefaultFenceReadAhead is FenceOptions.ReadAhead's default. Read first, a
// committed slot costs one GET round trip, not a PUT and a GET, and 128 of
// them overlap: at 20 ms per request (BenchmarkFenceBacklog), a backlog of
// 1,024 committed slots is fenced in about 0.28 s (1.4 s with no read-ahead
// past Parallel=16, 2.7 s when every slot was fenced PUT first), with up to
// 128·K envelope GETs in flight.
const DefaultFenceReadAhead = 128

// FenceResult is what a fence found.
type FenceResult struct {
	// Cut is the first dead slot: every slot in [from, Cut) is committed.
	// Zero when chain.Fence returns an error.
	Cut uint64
	// Committed is the number of slots decided committed (Cut − from on
	// success; on error, the slots decided before it).
	Committed uint64
	// Overridden is how many of them were decided by AcceptReadableFlight.
	Overridden uint64
	// Discarded is 1 when the cut is a slot DiscardUnreadable decided dead.
	Discarded int
	// Poisoned is the number of poisons this call placed in [from, Cut]
	// (a rerun that finds its own poison already there places none).
	Poisoned int
	// PoisonedAhead is the number it placed past the cut by looking ahead
	// (FenceOptions.Parallel).
	PoisonedAhead int
}

// ProbeResult counts what a garbage probe did.
type ProbeResult struct {
	// Poisoned is the number of poisons placed (into free keys, and in
	// place of deleted flight copies).
	Poisoned int
	// DeletedFlights is the number of flight copies deleted.
	DeletedFlights int
	// Unreachable is the number of (bucket, slot) keys the probe could not
	// settle: the bucket was down or kept failing. A bucket whose attempts
	// fail a few times in all (across its keys, probed in
	// parallel) is given up, and each key it left unsettled counts here.
	Unreachable int
	// Left is the number of occupants left alone because they are neither
	// a flight nor a poison of the slot (corrupt or foreign objects).
	Left int
}
