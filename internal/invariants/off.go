//go:build !invariants

package invariants

// Enabled reports whether this build checks invariants (-tags invariants).
const Enabled = false

// Assert does nothing without -tags invariants.
func Assert(cond bool, format string, args ...any) {}
