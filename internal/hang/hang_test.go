package hang

import (
	"testing"
	"time"
)

type deadline struct {
	at time.Time
	ok bool
}

func (d deadline) Deadline() (time.Time, bool) { return d.at, d.ok }

// TestBound: a wait may take until Margin before the deadline, at least a
// second, and has no bound without a deadline.
func TestBound(t *testing.T) {
	if b := Bound(deadline{time.Now().Add(10 * time.Minute), true}); b <= 9*time.Minute || b > 10*time.Minute-Margin {
		t.Errorf("10 minutes before the deadline: bound %v, want about %v", b, 10*time.Minute-Margin)
	}
	if b := Bound(deadline{time.Now().Add(Margin / 2), true}); b != time.Second {
		t.Errorf("past the margin: bound %v, want 1s", b)
	}
	if b := Bound(deadline{}); b != 0 {
		t.Errorf("no deadline: bound %v, want 0 (none)", b)
	}
	if After(deadline{}) != nil {
		t.Error("no deadline: After returned a channel that can fire")
	}
}
