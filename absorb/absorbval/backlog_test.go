package absorbval

import (
	"testing"
	"time"
)

func TestBacklogBoundAndStallCause(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := NewBacklog(2, 100)
	if !b.Fits(1e9) {
		t.Fatal("an empty backlog must fit one flight, however large")
	}
	b.Add(1, 40, t0)
	b.Add(2, 40, t0)
	if b.Fits(10) {
		t.Fatal("fits past the flight bound")
	}
	if !b.Stall(CauseMetastoreSlow, t0) || b.Stall(CauseAbsorbLagging, t0.Add(time.Millisecond)) {
		t.Fatal("Stall reports began only for the first call of a stall")
	}
	if n := b.Release(2); n != 1 || !b.Fits(10) {
		t.Fatalf("release below 2 freed %d; fits %v", n, b.Fits(10))
	}
	b.EndStall(t0.Add(time.Second))
	// The byte bound: 80 held after this Add, 30 more does not fit.
	b.Add(3, 40, t0)
	b.Release(3) // frees position 2
	b.Add(4, 40, t0)
	if b.Fits(30) {
		t.Fatal("fits past the byte bound")
	}
	b.Stall(CauseAbsorbLagging, t0)
	// A stall that begins as "absorb lagging" and goes on while the
	// metastore fails is counted as "metastore slow"; epoch settling does
	// not outrank it.
	if st := b.Stats(t0.Add(time.Second)); !st.Stalling || st.StallingCause != "absorb lagging" || st.StallingFor != time.Second {
		t.Fatalf("during a stall: %+v", st)
	}
	b.Stall(CauseMetastoreSlow, t0.Add(2*time.Second))
	b.Stall(CauseEpochSettling, t0.Add(3*time.Second))
	b.EndStall(t0.Add(4 * time.Second))
	st := b.Stats(t0.Add(5 * time.Second))
	if st.Stalls["metastore slow"] != 2 || st.Stalls["absorb lagging"] != 0 || st.Stalling || st.StalledNanos != int64(5*time.Second) {
		t.Fatalf("stats %+v", st)
	}
	if st.Flights != 2 || st.Bytes != 80 || st.OldestAge != 5*time.Second {
		t.Fatalf("gauges %+v", st)
	}
	b.EndStall(t0) // no stall under way: nothing counted
	if b.Stats(t0).Stalls["metastore slow"] != 2 {
		t.Fatal("EndStall without a stall counted one")
	}
}
