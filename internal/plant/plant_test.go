package plant

import "testing"

func TestEveryPlantStartsOffAndResets(t *testing.T) {
	if ReleaseOutOfOrder.Load() || FenceAcceptsWMinus1.Load() {
		t.Fatal("a planted bug is on by default")
	}
	ReleaseOutOfOrder.Store(true)
	FenceAcceptsWMinus1.Store(true)
	Reset()
	if ReleaseOutOfOrder.Load() || FenceAcceptsWMinus1.Load() {
		t.Fatal("Reset left a planted bug on")
	}
}
