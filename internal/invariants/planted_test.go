package invariants

import (
	"fmt"
	"testing"
)

// fakeT records what Plant does to a test.
type fakeT struct {
	fatal    string
	cleanups []func()
}

func (f *fakeT) Helper()                           {}
func (f *fakeT) Cleanup(fn func())                 { f.cleanups = append(f.cleanups, fn) }
func (f *fakeT) Fatalf(format string, args ...any) { f.fatal = fmt.Sprintf(format, args...) }
func (f *fakeT) end() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

// TestPlantIsScopedToItsTest: a planted bug is on for its test and off
// once the test ends; planting it twice at once, or planting what is not a
// bug, fails the test; without -tags invariants planting fails the test
// and nothing is on.
func TestPlantIsScopedToItsTest(t *testing.T) {
	var a fakeT
	Plant(&a, MintIgnoresSeal)
	if !Enabled {
		if a.fatal == "" || MintIgnoresSeal.On() {
			t.Fatalf("without -tags invariants: Plant failed the test with %q, On = %v; want a failure and off", a.fatal, MintIgnoresSeal.On())
		}
		return
	}
	if a.fatal != "" || !MintIgnoresSeal.On() || ReleaseOutOfOrder.On() {
		t.Fatalf("planted: fatal %q, MintIgnoresSeal %v, ReleaseOutOfOrder %v; want on, the other off", a.fatal, MintIgnoresSeal.On(), ReleaseOutOfOrder.On())
	}
	var b fakeT
	Plant(&b, MintIgnoresSeal)
	if b.fatal == "" {
		t.Fatal("planting a planted bug again did not fail the second test")
	}
	b.end()
	if !MintIgnoresSeal.On() {
		t.Fatal("the second test's failed Plant switched the first test's bug off")
	}
	a.end()
	if MintIgnoresSeal.On() {
		t.Fatal("the bug stayed planted after its test ended")
	}
	for _, bug := range []Bug{0, numBugs, 200} {
		var c fakeT
		Plant(&c, bug)
		if c.fatal == "" || bug.On() {
			t.Errorf("Plant(%v): fatal %q, On %v; want a failure and off", bug, c.fatal, bug.On())
		}
	}
}
