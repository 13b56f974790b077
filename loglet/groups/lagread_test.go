package groups_test

import (
	"context"
	"errors"
	"testing"

	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/loglet/groups"
)

// lagRig is a star with stream "s" of 6 records and groups g1, g2, g3
// committed at 1, 2, 3.
func lagRig(t *testing.T) *ofsRig {
	t.Helper()
	ctx := context.Background()
	r := newOfsRig(t)
	r.create(t, "s")
	r.appendN(t, "s", 0, 6)
	o := groups.OffsetsOf(r.star)
	for g, n := range map[string]uint64{"g1": 1, "g2": 2, "g3": 3} {
		off, err := o.Get(ctx, g, "s")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := o.Commit(ctx, off, n); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// TestReadLags: every group of a stream, named groups (one named twice
// across targets, reported once) and a stream that does not exist (not
// up, with ErrStreamNotFound).
func TestReadLags(t *testing.T) {
	r := lagRig(t)
	got := groups.ReadLags(context.Background(), r.star, []groups.LagTarget{
		{Stream: "s"}, {Stream: "s", Groups: []string{"g3", "g9"}}, {Stream: "nope", Groups: []string{"g1"}},
	}, groups.LagBounds{}, groups.LagOptions{})
	var names []string
	for _, l := range got.Lags {
		names = append(names, l.Offset.Group)
	}
	if len(names) != 4 || names[0] != "g1" || names[2] != "g3" || names[3] != "g9" || got.Lags[3].Records != 6 {
		t.Errorf("lags %+v, want g1 g2 g3 then g9 (6 behind)", got.Lags)
	}
	if !got.Up[0] || !got.Up[1] || got.Up[2] || got.Dropped != 1 {
		t.Errorf("up %v dropped %d, want [true true false] and 1", got.Up, got.Dropped)
	}
	if got.Errs[0] != nil || got.Errs[1] != nil || !errors.Is(got.Errs[2], loglet.ErrStreamNotFound) {
		t.Errorf("errs %v, want only the third, ErrStreamNotFound", got.Errs)
	}
}

// TestReadLagsBounds: the series bound returns the first lags and counts
// the rest (the targets after it are not read); the read bound leaves a
// target unread, with ErrLagBudget.
func TestReadLagsBounds(t *testing.T) {
	r := lagRig(t)
	got := groups.ReadLags(context.Background(), r.star, []groups.LagTarget{
		{Stream: "s"}, {Stream: "t", Groups: []string{"a", "b"}},
	}, groups.LagBounds{MaxSeries: 2}, groups.LagOptions{})
	if len(got.Lags) != 2 || got.Lags[0].Records != 5 || got.Lags[1].Records != 4 || got.Dropped != 3 {
		t.Errorf("series bound: lags %+v dropped %d, want g1 5, g2 4, 3 dropped", got.Lags, got.Dropped)
	}
	if !got.Up[0] || got.Up[1] || got.Errs[0] != nil || !errors.Is(got.Errs[1], groups.ErrLagBudget) {
		t.Errorf("series bound: up %v errs %v, want s read, t not, with ErrLagBudget", got.Up, got.Errs)
	}

	got = groups.ReadLags(context.Background(), r.star, []groups.LagTarget{{Stream: "s"}},
		groups.LagBounds{MaxReads: 1}, groups.LagOptions{})
	if got.Up[0] || !errors.Is(got.Errs[0], groups.ErrLagBudget) {
		t.Errorf("read bound: up %v errs %v; want s not read, with ErrLagBudget", got.Up, got.Errs)
	}
}

// TestReadLagsReadsAsDocumented pins the cost: a target naming its groups
// takes three metastore reads per group, a target of every group (few
// offsets) two record reads and one Scan. One read fewer leaves the
// target unread.
func TestReadLagsReadsAsDocumented(t *testing.T) {
	r := lagRig(t)
	for _, tc := range []struct {
		target groups.LagTarget
		reads  int
	}{
		{groups.LagTarget{Stream: "s", Groups: []string{"g1", "g2"}}, 6},
		{groups.LagTarget{Stream: "s"}, 3},
	} {
		for _, reads := range []int{tc.reads, tc.reads - 1} {
			got := groups.ReadLags(context.Background(), r.star, []groups.LagTarget{tc.target},
				groups.LagBounds{MaxReads: reads}, groups.LagOptions{})
			if want := reads == tc.reads; got.Up[0] != want {
				t.Errorf("%+v with %d reads: up %v (%v), want read %v", tc.target, reads, got.Up[0], got.Errs[0], want)
			}
		}
	}
}

// TestReadLagsNilLog: no log, no panic: every target is not read, with an
// error.
func TestReadLagsNilLog(t *testing.T) {
	got := groups.ReadLags(context.Background(), nil, []groups.LagTarget{{Stream: "s"}}, groups.LagBounds{}, groups.LagOptions{})
	if got.Up[0] || got.Errs[0] == nil {
		t.Errorf("nil log: up %v errs %v, want not read with an error", got.Up, got.Errs)
	}
}
