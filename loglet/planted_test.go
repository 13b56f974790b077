//go:build invariants

package loglet

import (
	"context"
	"testing"
	"time"

	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/internal/invariants"
	"github.com/flightlog/flightlog/objstore"
)

// TestPlantedOutOfOrderReleaseIsCaught: with the planted bug that acks a
// flight as soon as it has W copies, the release-order check (the rig's
// release watch, which TestWritePathInvariants relies on) reports a violation.
func TestPlantedOutOfOrderReleaseIsCaught(t *testing.T) {
	invariants.Plant(t, invariants.ReleaseOutOfOrder)
	r := newRig(t, Express, 3, 30, func(c *Config, fs []*objstore.FaultStore) {
		c.Express.FlightBytes = 16 // one batch per flight: many flights in the window
		for _, f := range fs {
			f.SetLatency(fault.LogNormal(time.Millisecond, 20*time.Millisecond), fault.Put)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sess, err := r.star.OpenAppendSession(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	var futs []*AckFuture
	for i := 0; i < 300; i++ {
		f, err := sess.Submit(ctx, Batch{Records: []Record{{Body: []byte("x")}}})
		if err != nil {
			t.Logf("submit %d: %v", i, err) // the lane may die when the absorb sees the gap
			break
		}
		futs = append(futs, f)
	}
	for _, f := range futs {
		f.Wait(ctx)
	}
	r.mu.Lock()
	bad := append([]string(nil), r.bad...)
	r.mu.Unlock() // not held across Fatal: the cleanup's Close needs the release watch
	if len(bad) == 0 {
		t.Fatal("acks released out of slot order went unnoticed")
	}
	t.Logf("caught: %s", bad[0])
}
