package plant

import (
	"sync/atomic"
	"testing"
)

func TestEveryPlantStartsOffAndResets(t *testing.T) {
	switches := map[string]*atomic.Bool{
		"ReleaseOutOfOrder":    &ReleaseOutOfOrder,
		"AbsorbOverwritesRefs": &AbsorbOverwritesRefs,
	}
	for name, b := range switches {
		if b.Load() {
			t.Fatalf("%s is on by default", name)
		}
		b.Store(true)
	}
	Reset()
	for name, b := range switches {
		if b.Load() {
			t.Fatalf("Reset left %s on", name)
		}
	}
}
