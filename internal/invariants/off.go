//go:build !invariants

package invariants

// Enabled reports whether this build checks invariants (-tags invariants).
const Enabled = false

// Assert does nothing without -tags invariants.
func Assert(cond bool, format string, args ...any) {}

// A Switch is one planted bug; without -tags invariants it is always off.
type Switch struct{}

// On reports false: planted bugs need -tags invariants.
func (*Switch) On() bool { return false }

// Set panics: planted bugs cannot be switched on without -tags invariants.
func (*Switch) Set(on bool) {
	if on {
		panic("invariants: planted bugs need -tags invariants")
	}
}
