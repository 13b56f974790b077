package invariants

import (
	"fmt"
	"sync/atomic"
)

// A Bug is one planted bug: a deliberate break of an invariant, compiled
// in only with -tags invariants, that a test switches on to prove the
// checker catches it. Product code asks Bug.On at the place the bug
// lives; tests switch a bug on for themselves alone with Plant.
type Bug uint8

// The planted bugs. Each names the invariant it breaks;
// loglet/internal/sim's planted tests plant one at a time and require the
// checker to catch it.
const (
	// ReleaseOutOfOrder acks a flight as soon as it reaches W copies,
	// without waiting for earlier slots (breaks invariant 1: acks release
	// strictly in slot order).
	ReleaseOutOfOrder Bug = iota + 1

	// AbsorbOverwritesRefs writes span refs as plain puts instead of
	// creates, and never checks which refs a replayed round already wrote
	// (breaks: a span ref is created only if absent, never overwritten).
	AbsorbOverwritesRefs

	// MintIgnoresSeal mints even when the checkpoint carries another
	// owner's seal, overwriting it (breaks the binding seal: an epoch is
	// minted only by the process whose seal the checkpoint carries; the old
	// Reseal did this).
	MintIgnoresSeal

	// RecreateReusesKeys gives every incarnation of a name the same
	// incarnation id, so a re-created stream's keys are its predecessor's
	// (breaks: no record of an old incarnation is ever readable through a
	// new one).
	RecreateReusesKeys

	// DedupeOff admits every batch with a producer identity as if its
	// producer were new (breaks exactly once across retries: a retry of a
	// committed batch is never committed again, and is answered with the
	// original range).
	DedupeOff

	// FencingOff admits every batch whatever its fencing token (breaks
	// fencing: no batch with a stale token is committed after the fence
	// batch that replaced it).
	FencingOff

	numBugs
)

// planted is which bugs are on; only Plant changes it.
var planted [numBugs]atomic.Bool

// On reports whether the bug is planted. Without -tags invariants it is
// false, and the check compiles away.
func (b Bug) On() bool { return Enabled && b < numBugs && planted[b].Load() }

// String returns the bug's name.
func (b Bug) String() string {
	switch b {
	case ReleaseOutOfOrder:
		return "ReleaseOutOfOrder"
	case AbsorbOverwritesRefs:
		return "AbsorbOverwritesRefs"
	case MintIgnoresSeal:
		return "MintIgnoresSeal"
	case RecreateReusesKeys:
		return "RecreateReusesKeys"
	case DedupeOff:
		return "DedupeOff"
	case FencingOff:
		return "FencingOff"
	}
	return fmt.Sprintf("Bug(%d)", uint8(b))
}

// TB is what Plant needs of a test: testing.TB has it. (invariants is
// compiled into the product, so it does not import testing.)
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// Plant switches bug on for the rest of t and registers a cleanup that
// switches it off when t ends, so no test leaves a bug planted for the
// next. It fails t if the build has no -tags invariants, if bug is not a
// planted bug, or if it is planted already (by a parallel test: planted
// bugs are process-wide, so tests that plant one must not run in
// parallel).
func Plant(t TB, bug Bug) {
	t.Helper()
	if !Enabled {
		t.Fatalf("invariants: planting %v needs -tags invariants", bug)
		return
	}
	if bug == 0 || bug >= numBugs {
		t.Fatalf("invariants: %v is not a planted bug", bug)
		return
	}
	if !planted[bug].CompareAndSwap(false, true) {
		t.Fatalf("invariants: %v is planted already (by a parallel test?)", bug)
		return
	}
	t.Cleanup(func() { planted[bug].Store(false) })
}
