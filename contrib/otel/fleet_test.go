package flightotel_test

import (
	"context"
	"testing"

	flightotel "github.com/flightlog/flightlog/contrib/otel"
	"github.com/flightlog/flightlog/fleet"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

type fleetStats fleet.RouterStats

func (f *fleetStats) Stats() fleet.RouterStats { return fleet.RouterStats(*f) }

func TestRegisterFleet(t *testing.T) {
	st := &fleetStats{Members: 3, Stars: 8, Unled: 2, PlacementChanges: 5, Drained: []string{"m2"}, Moves: map[string]string{"s1": "m1"}}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	reg, err := flightotel.RegisterFleet(st, mp)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	sum, ok := find(t, rm, "flightlog.fleet.placement_changes").Data.(metricdata.Sum[int64])
	if !ok || !sum.IsMonotonic || len(sum.DataPoints) != 1 || sum.DataPoints[0].Value != 5 {
		t.Fatalf("placement_changes: %#v", find(t, rm, "flightlog.fleet.placement_changes").Data)
	}
	for name, want := range map[string]int64{
		"flightlog.fleet.unled_stars": 2, "flightlog.fleet.members": 3, "flightlog.fleet.stars": 8,
		"flightlog.fleet.drained_members": 1, "flightlog.fleet.moved_stars": 1,
	} {
		g, ok := find(t, rm, name).Data.(metricdata.Gauge[int64])
		if !ok || len(g.DataPoints) != 1 || g.DataPoints[0].Value != want {
			t.Errorf("%s: %#v, want %d", name, find(t, rm, name).Data, want)
		}
	}
}
