//go:build invariants

package invariants

import "fmt"

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
