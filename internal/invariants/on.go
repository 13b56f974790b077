//go:build invariants

package invariants

import (
	"fmt"
	"sync/atomic"
)

// Enabled reports whether this build checks invariants (-tags invariants).
const Enabled = true

// Assert panics with the formatted message when cond is false. Call it as
// `if invariants.Enabled { invariants.Assert(...) }` where building the
// arguments costs something.
func Assert(cond bool, format string, args ...any) {
	if !cond {
		panic(fmt.Sprintf("invariant violated: "+format, args...))
	}
}

// A Switch is one planted bug: off unless a test turns it on.
type Switch struct{ on atomic.Bool }

// On reports whether the planted bug is switched on.
func (s *Switch) On() bool { return s.on.Load() }

// Set switches the planted bug on or off (tests only).
func (s *Switch) Set(on bool) { s.on.Store(on) }
