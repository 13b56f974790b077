package flightotel_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"testing"

	flightotel "github.com/flightlog/flightlog/contrib/otel"
	"github.com/flightlog/flightlog/histogram"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func openStar(t *testing.T, n int) (*loglet.Star, *loglet.Reader) {
	t.Helper()
	ctx := context.Background()
	meta := metastore.NewMem()
	buckets := []objstore.Store{objstore.NewMem(), objstore.NewMem()}
	star, err := loglet.Open(ctx, loglet.Config{
		Star: "orders", Meta: meta,
		Standard: loglet.ClassConfig{Stores: buckets, BucketNames: []string{"a", "b"}, W: 2},
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { star.Close(context.Background()) })
	if _, err := star.CreateStream(ctx, "s", loglet.StreamOptions{Class: loglet.Standard}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := star.Append(ctx, "s", loglet.Batch{Records: []loglet.Record{{Body: fmt.Appendf(nil, "r%d", i)}, {Body: []byte("x")}}}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := loglet.NewReader(loglet.ReaderConfig{Meta: meta, Standard: buckets})
	if err != nil {
		t.Fatal(err)
	}
	return star, r
}

func find(t *testing.T, rm metricdata.ResourceMetrics, name string) metricdata.Metrics {
	t.Helper()
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				if sm.Scope.Name != flightotel.ScopeName {
					t.Errorf("%s in scope %q", name, sm.Scope.Name)
				}
				return m
			}
		}
	}
	t.Fatalf("no metric %s", name)
	return metricdata.Metrics{}
}

func classOf(set attribute.Set) string {
	v, _ := set.Value("flightlog.class")
	return v.AsString()
}

func TestManualReaderMatchesStats(t *testing.T) {
	star, _ := openStar(t, 12)
	reader := sdkmetric.NewManualReader(sdkmetric.WithProducer(flightotel.NewProducer(star)))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	reg, err := flightotel.Register(star, mp)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()

	before := star.Stats().Standard
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	after := star.Stats().Standard
	if before.AckedBatches != 12 {
		t.Fatalf("Stats: %d batches acked, want 12", before.AckedBatches)
	}

	for _, c := range []struct {
		name   string
		lo, hi uint64
	}{
		{"flightlog.acked.batches", before.AckedBatches, after.AckedBatches},
		{"flightlog.acked.records", before.AckedRecords, after.AckedRecords},
		{"flightlog.flights", before.Flights, after.Flights},
		{"flightlog.absorb.rounds", before.AbsorbRounds, after.AbsorbRounds},
	} {
		sum, ok := find(t, rm, c.name).Data.(metricdata.Sum[int64])
		if !ok || !sum.IsMonotonic || sum.Temporality != metricdata.CumulativeTemporality || len(sum.DataPoints) != 1 {
			t.Fatalf("%s: %#v, want one cumulative monotonic int64 sum", c.name, find(t, rm, c.name).Data)
		}
		dp := sum.DataPoints[0]
		if v := uint64(dp.Value); v < c.lo || v > c.hi || classOf(dp.Attributes) != "standard" {
			t.Errorf("%s = %d (class %q), Stats say %d..%d", c.name, v, classOf(dp.Attributes), c.lo, c.hi)
		}
	}
	g, ok := find(t, rm, "flightlog.pool.budget").Data.(metricdata.Gauge[int64])
	if !ok || len(g.DataPoints) != 1 || g.DataPoints[0].Value != before.Pool.BudgetBytes || before.Pool.BudgetBytes == 0 {
		t.Errorf("pool budget %#v, Stats say %d", find(t, rm, "flightlog.pool.budget").Data, before.Pool.BudgetBytes)
	}

	ack, ok := find(t, rm, "flightlog.ack.latency").Data.(metricdata.ExponentialHistogram[float64])
	if !ok || len(ack.DataPoints) != 1 || ack.Temporality != metricdata.CumulativeTemporality {
		t.Fatalf("ack latency: %#v", find(t, rm, "flightlog.ack.latency").Data)
	}
	checkPoint(t, "ack", ack.DataPoints[0], before.AckLatency, 1e9)
	size := find(t, rm, "flightlog.flight.size").Data.(metricdata.ExponentialHistogram[int64])
	checkPoint(t, "flight size", size.DataPoints[0], before.FlightSize, 1)
	put := find(t, rm, "flightlog.put.latency").Data.(metricdata.ExponentialHistogram[float64])
	if len(put.DataPoints) != 2 {
		t.Fatalf("%d PUT latency points, want one per bucket", len(put.DataPoints))
	}
	for _, dp := range put.DataPoints {
		b, _ := dp.Attributes.Value("flightlog.bucket")
		i := map[string]int{"a": 0, "b": 1}[b.AsString()]
		if dp.Count < before.PutLatency[i].Count || dp.Count > after.PutLatency[i].Count || dp.Count == 0 {
			t.Errorf("PUT latency of bucket %q: count %d, Stats say %d..%d", b.AsString(), dp.Count, before.PutLatency[i].Count, after.PutLatency[i].Count)
		}
	}
	if unit := find(t, rm, "flightlog.ack.latency").Unit; unit != "s" {
		t.Errorf("ack latency unit %q", unit)
	}
}

// checkPoint compares an exponential histogram point with the snapshot:
// OpenTelemetry's bucket k is flightlog's Index k+1.
func checkPoint[N int64 | float64](t *testing.T, what string, dp metricdata.ExponentialHistogramDataPoint[N], s histogram.Snapshot, scale float64) {
	t.Helper()
	if s.Count == 0 {
		t.Fatalf("%s: empty snapshot", what)
	}
	if dp.Scale != 5 || dp.Count != s.Count || dp.ZeroCount != s.ZeroCount || dp.ZeroThreshold != 0 {
		t.Errorf("%s: scale %d count %d zero %d/%g; want 5, %d, %d/0", what, dp.Scale, dp.Count, dp.ZeroCount, dp.ZeroThreshold, s.Count, s.ZeroCount)
	}
	if want := float64(s.Sum) / scale; math.Abs(float64(dp.Sum)-want) > 1e-9*want {
		t.Errorf("%s: sum %v, want %g", what, dp.Sum, want)
	}
	if m, ok := dp.Max.Value(); !ok || float64(m) != float64(s.Max)/scale {
		t.Errorf("%s: max %v %v, want %g", what, m, ok, float64(s.Max)/scale)
	}
	got := map[int32]uint64{}
	var total uint64
	for k, n := range dp.PositiveBucket.Counts {
		if n > 0 {
			got[dp.PositiveBucket.Offset+int32(k)+1] = n
		}
		total += n
	}
	want := map[int32]uint64{}
	for _, b := range s.Buckets {
		want[b.Index] = b.Count
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || total+dp.ZeroCount != dp.Count {
		t.Errorf("%s: buckets (shifted to flightlog's index)\n got %v\nwant %v", what, got, want)
	}
	// Each recorded value lies in OpenTelemetry's bucket bounds:
	// (base^k, base^(k+1)] with base 2^(2^-5).
	if n := len(dp.PositiveBucket.Counts); n > 0 {
		top := math.Exp2(float64(dp.PositiveBucket.Offset+int32(n)) / 32)
		if m, _ := dp.Max.Value(); float64(m) > top || float64(m) <= top/math.Exp2(1.0/32) {
			t.Errorf("%s: max %v not in the last bucket's bounds (%g, %g]", what, m, top/math.Exp2(1.0/32), top)
		}
	}
}

func TestReaderCounters(t *testing.T) {
	star, r := openStar(t, 4)
	if err := star.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if res, err := r.Read(context.Background(), "s", loglet.ReadQuery{Start: loglet.AtSeq(0)}); err != nil || len(res.Records) != 8 {
		t.Fatalf("read %d records, %v; want 8", len(res.Records), err)
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	reg, err := flightotel.Register(nil, mp, flightotel.WithReader(r))
	if err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	st := r.Stats()
	gets := find(t, rm, "flightlog.reader.gets").Data.(metricdata.Sum[int64]).DataPoints[0].Value
	if uint64(gets) != st.Gets || gets == 0 {
		t.Errorf("reader gets %d, Stats say %d", gets, st.Gets)
	}
	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	rm = metricdata.ResourceMetrics{}
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		if len(sm.Metrics) != 0 {
			t.Errorf("after Unregister: %d metrics in %s", len(sm.Metrics), sm.Scope.Name)
		}
	}
}
