package flightprom

import (
	"testing"

	"github.com/flightlog/flightlog/fleet"
	"github.com/prometheus/client_golang/prometheus"
)

type fleetStats fleet.RouterStats

func (f *fleetStats) Stats() fleet.RouterStats { return fleet.RouterStats(*f) }

func TestFleetCollector(t *testing.T) {
	st := &fleetStats{Members: 3, Stars: 8, Unled: 2, PlacementChanges: 5, Drained: []string{"m2"}, Moves: map[string]string{"s1": "m1", "s2": "m3"}}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewFleet(st))
	want := map[string]float64{
		"flightlog_fleet_placement_changes_total": 5, "flightlog_fleet_unled_stars": 2, "flightlog_fleet_members": 3,
		"flightlog_fleet_stars": 8, "flightlog_fleet_drained_members": 1, "flightlog_fleet_moved_stars": 2,
	}
	check := func() {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		if len(mfs) != len(want) {
			t.Fatalf("%d metrics, want %d", len(mfs), len(want))
		}
		for _, mf := range mfs {
			m := mf.GetMetric()[0]
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			if w, ok := want[mf.GetName()]; !ok || v != w {
				t.Errorf("%s = %v, want %v (known: %v)", mf.GetName(), v, w, ok)
			}
		}
	}
	check()
	st.PlacementChanges, st.Unled = 9, 0
	want["flightlog_fleet_placement_changes_total"], want["flightlog_fleet_unled_stars"] = 9, 0
	check() // read at every scrape
}
