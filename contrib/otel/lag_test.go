package flightotel_test

import (
	"context"
	"errors"
	"testing"

	flightotel "github.com/flightlog/flightlog/contrib/otel"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/loglet/groups"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// lagFigures collects the consumer-lag gauges Register(star, ...,
// WithConsumerLag(cl)) makes, by name and attributes ("records s/g1",
// "up s", "dropped").
func lagFigures(t *testing.T, star *loglet.Star, cl flightotel.ConsumerLag) map[string]int64 {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	reg, err := flightotel.Register(star, mp, flightotel.WithConsumerLag(cl))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			g, ok := m.Data.(metricdata.Gauge[int64])
			if !ok {
				continue
			}
			for _, p := range g.DataPoints {
				s, _ := p.Attributes.Value("flightlog.stream")
				gr, _ := p.Attributes.Value("flightlog.group")
				switch m.Name {
				case "flightlog.consumer.lag.records":
					out["records "+s.AsString()+"/"+gr.AsString()] = p.Value
				case "flightlog.consumer.lag.bytes":
					out["bytes "+s.AsString()+"/"+gr.AsString()] = p.Value
				case "flightlog.consumer.lag.up":
					out["up "+s.AsString()] = p.Value
				case "flightlog.consumer.lag.series_dropped":
					out["dropped"] = p.Value
				}
			}
		}
	}
	return out
}

// TestConsumerLag: every group of a stream, a named group with no offset
// (counted from the trim point), a stream named twice, a stream that does
// not exist (up 0, OnError says why), and the series bound.
func TestConsumerLag(t *testing.T) {
	star, _ := openStar(t, 15) // tail 30
	ctx := context.Background()
	o := groups.OffsetsOf(star)
	for g, n := range map[string]uint64{"g1": 10, "g2": 25} {
		off, err := o.Get(ctx, g, "s")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := o.Commit(ctx, off, n); err != nil {
			t.Fatal(err)
		}
	}
	var failed []error
	onError := func(_ string, err error) { failed = append(failed, err) }
	got := lagFigures(t, star, flightotel.ConsumerLag{
		Targets: []flightotel.LagTarget{{Stream: "s"}, {Stream: "s", Groups: []string{"g3", "g1"}}, {Stream: "nope", Groups: []string{"g1"}}},
		Bytes:   true, OnError: onError,
	})
	for k, want := range map[string]int64{"records s/g1": 20, "records s/g2": 5, "records s/g3": 30, "up s": 1, "up nope": 0, "dropped": 1} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v; all: %v", k, v, ok, want, got)
		}
	}
	if _, ok := got["bytes s/g1"]; !ok || got["bytes s/g1"] < got["bytes s/g2"] {
		t.Errorf("bytes behind missing or not ordered as the records are: %v", got)
	}
	if len(failed) != 1 || !errors.Is(failed[0], loglet.ErrStreamNotFound) {
		t.Errorf("OnError told %v, want one ErrStreamNotFound", failed)
	}

	failed = nil
	got = lagFigures(t, star, flightotel.ConsumerLag{Targets: []flightotel.LagTarget{{Stream: "s"}}, MaxSeries: 1, OnError: onError})
	want := map[string]int64{"records s/g1": 20, "up s": 1, "dropped": 1}
	if len(got) != len(want) || got["records s/g1"] != 20 || got["dropped"] != 1 || len(failed) != 0 {
		t.Errorf("series bound: %v (OnError %v), want %v", got, failed, want)
	}
	got = lagFigures(t, star, flightotel.ConsumerLag{Targets: []flightotel.LagTarget{{Stream: "s"}}, MaxReads: 1, OnError: onError})
	if got["up s"] != 0 || len(failed) != 1 || !errors.Is(failed[0], flightotel.ErrLagBudget) {
		t.Errorf("read bound: %v, OnError told %v; want s not read, with ErrLagBudget", got, failed)
	}
}
