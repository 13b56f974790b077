// Package plant holds deliberately planted bugs, each off unless a test
// switches it on, so that the simulation (internal/sim) can prove its checker
// catches the class of bug each one stands for. Production code consults a
// switch with one atomic load on the path concerned; nothing outside tests
// ever sets one.
package plant

import "sync/atomic"

// Switches. Each names the invariant it breaks.
var (
	// ReleaseOutOfOrder acks a flight as soon as it reaches W copies,
	// without waiting for earlier slots (breaks invariant 1: acks release
	// strictly in slot order).
	ReleaseOutOfOrder atomic.Bool

	// AbsorbOverwritesRefs writes span refs as plain puts instead of
	// creates, and never checks which refs a replayed round already wrote
	// (breaks: a span ref is created only if absent, never overwritten).
	AbsorbOverwritesRefs atomic.Bool
)

// Reset switches every planted bug off.
func Reset() {
	ReleaseOutOfOrder.Store(false)
	AbsorbOverwritesRefs.Store(false)
}
