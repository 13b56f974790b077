// Package hang gives tests a bound on a wait for something that may never
// come (a reply, an exit, a record) that a loaded machine cannot overrun:
// the wait gives up shortly before go test's -timeout would end the whole
// binary, not after a fixed span of wall time. A slow run then passes; a
// real hang still fails the test that waits, with its own message, instead
// of the timeout's panic. Only tests import it, and not inside a
// testing/synctest bubble: there the fake clock already bounds a wait
// (time.After is virtual time), and testing.T's Deadline panics.
package hang

import "time"

// Margin is how long before the test binary's deadline a wait gives up,
// leaving time to report the failure and clean up.
const Margin = 30 * time.Second

// Deadliner is what After needs of a test: *testing.T has it.
type Deadliner interface {
	Deadline() (deadline time.Time, ok bool)
}

// Bound is how long a wait that starts now may take: until Margin before
// t's deadline (at least a second), or 0 when the binary has no deadline
// (-timeout 0), meaning no bound.
func Bound(t Deadliner) time.Duration {
	d, ok := t.Deadline()
	if !ok {
		return 0
	}
	return max(time.Until(d)-Margin, time.Second)
}

// After returns a channel that receives when a wait that starts now has
// taken Bound(t); with no bound it never receives.
func After(t Deadliner) <-chan time.Time {
	b := Bound(t)
	if b == 0 {
		return nil
	}
	return time.After(b)
}
