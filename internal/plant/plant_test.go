package plant

import "testing"

func TestEveryPlantStartsOffAndResets(t *testing.T) {
	if ReleaseOutOfOrder.Load() {
		t.Fatal("a planted bug is on by default")
	}
	ReleaseOutOfOrder.Store(true)
	Reset()
	if ReleaseOutOfOrder.Load() {
		t.Fatal("Reset left a planted bug on")
	}
}
