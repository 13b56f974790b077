package flightprom_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	flightprom "github.com/flightlog/flightlog/contrib/prometheus"
	"github.com/flightlog/flightlog/histogram"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// openStar opens a star of one standard chain over three in-memory buckets
// and appends n batches of 3 records to stream "s".
func openStar(t *testing.T, n int) (*loglet.Star, *loglet.Reader) {
	t.Helper()
	ctx := context.Background()
	meta := metastore.NewMem()
	buckets := []objstore.Store{objstore.NewMem(), objstore.NewMem(), objstore.NewMem()}
	star, err := loglet.Open(ctx, loglet.Config{
		Star: "orders", Meta: meta,
		Standard: loglet.ClassConfig{Stores: buckets, BucketNames: []string{"a", "b", "c"}, W: 2},
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := star.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	if _, err := star.CreateStream(ctx, "s", loglet.StreamOptions{Class: loglet.Standard}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := star.Append(ctx, "s", loglet.Batch{Records: []loglet.Record{
			{Body: fmt.Appendf(nil, "a%d", i)}, {Body: []byte("b")}, {Body: []byte("c")},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	reader, err := loglet.NewReader(loglet.ReaderConfig{Meta: meta, Standard: buckets})
	if err != nil {
		t.Fatal(err)
	}
	return star, reader
}

// scrape fetches /metrics from a promhttp server over reg in the given
// format and parses it.
func scrape(t *testing.T, reg *prometheus.Registry, accept string) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL, nil)
	req.Header.Set("Accept", accept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("scrape: %s: %s", resp.Status, b)
	}
	dec := expfmt.NewDecoder(resp.Body, expfmt.ResponseFormat(resp.Header))
	out := map[string]*dto.MetricFamily{}
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		out[mf.GetName()] = &mf
	}
	return out
}

const protoAccept = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"

// one returns the single metric of family name whose labels include want.
func one(t *testing.T, fams map[string]*dto.MetricFamily, name string, want ...string) *dto.Metric {
	t.Helper()
	mf := fams[name]
	if mf == nil {
		t.Fatalf("no family %s", name)
	}
	var found []*dto.Metric
	for _, m := range mf.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		ok := true
		for i := 0; i+1 < len(want); i += 2 {
			ok = ok && have[want[i]] == want[i+1]
		}
		if ok {
			found = append(found, m)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s%v: %d metrics", name, want, len(found))
	}
	return found[0]
}

func TestScrapeMatchesStats(t *testing.T) {
	star, _ := openStar(t, 20)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(flightprom.New(star))

	before := star.Stats()
	fams := scrape(t, reg, protoAccept)
	after := star.Stats()
	b, a := before.Standard, after.Standard

	// Counters lie between the Stats taken before and after the scrape
	// (the absorb may run in between); the appends are over, so theirs
	// are exact.
	for _, c := range []struct {
		name     string
		lo, hi   uint64
		nonEmpty bool
	}{
		{"flightlog_acked_batches_total", b.AckedBatches, a.AckedBatches, true},
		{"flightlog_acked_records_total", b.AckedRecords, a.AckedRecords, true},
		{"flightlog_acked_bytes_total", b.AckedBytes, a.AckedBytes, true},
		{"flightlog_flights_total", b.Flights, a.Flights, true},
		{"flightlog_flight_object_bytes_total", b.FlightObjects, a.FlightObjects, true},
		{"flightlog_absorb_rounds_total", b.AbsorbRounds, a.AbsorbRounds, false},
		{"flightlog_metastore_requests_total", b.MetastoreRequests, a.MetastoreRequests, false},
		{"flightlog_halts_total", b.Halts, a.Halts, false},
	} {
		m := one(t, fams, c.name, "star", "orders", "class", "standard")
		v := m.GetCounter().GetValue()
		if v < float64(c.lo) || v > float64(c.hi) || (c.nonEmpty && v == 0) {
			t.Errorf("%s = %g, Stats say %d..%d", c.name, v, c.lo, c.hi)
		}
	}
	if b.AckedBatches != 20 || b.AckedRecords != 60 {
		t.Fatalf("Stats: %d batches, %d records acked; want 20, 60", b.AckedBatches, b.AckedRecords)
	}
	for _, g := range []struct {
		name string
		want float64
	}{
		{"flightlog_epoch", float64(b.Epoch)},
		{"flightlog_pool_budget_bytes", float64(b.Pool.BudgetBytes)},
		{"flightlog_backlog_max_bytes", float64(b.Backlog.MaxBytes)},
	} {
		if v := one(t, fams, g.name, "class", "standard").GetGauge().GetValue(); v != g.want || v == 0 {
			t.Errorf("%s = %g, Stats say %g", g.name, v, g.want)
		}
	}
	if v := one(t, fams, "flightlog_memory_bound_bytes", "class", "standard", "part", "stragglers").GetGauge().GetValue(); v != float64(b.Memory.StragglersBound) {
		t.Errorf("stragglers bound %g, Stats say %d", v, b.Memory.StragglersBound)
	}

	// The ack latency histogram is the snapshot's, bucket for bucket.
	checkHistogram(t, "ack", one(t, fams, "flightlog_ack_latency_seconds", "class", "standard").GetHistogram(), b.AckLatency)
	checkHistogram(t, "flight size", one(t, fams, "flightlog_flight_size_bytes", "class", "standard").GetHistogram(), b.FlightSize)
	for i, name := range []string{"a", "b", "c"} {
		h := one(t, fams, "flightlog_put_latency_seconds", "class", "standard", "bucket", name).GetHistogram()
		if h.GetSampleCount() < b.PutLatency[i].Count || h.GetSampleCount() > a.PutLatency[i].Count || h.GetSampleCount() == 0 {
			t.Errorf("put latency %s: count %d, Stats say %d..%d", name, h.GetSampleCount(), b.PutLatency[i].Count, a.PutLatency[i].Count)
		}
	}
}

// TestReaderMetrics reads a closed star's history with a Reader (a clean
// Close absorbs everything) and checks its counters in the scrape.
func TestReaderMetrics(t *testing.T) {
	star, reader := openStar(t, 5)
	if err := star.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	res, err := reader.Read(context.Background(), "s", loglet.ReadQuery{Start: loglet.AtSeq(0)})
	if err != nil || len(res.Records) != 15 {
		t.Fatalf("read %d records, %v; want 15", len(res.Records), err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(flightprom.New(nil, flightprom.WithReader(reader)))
	fams := scrape(t, reg, protoAccept)
	st := reader.Stats()
	for _, c := range []struct {
		name string
		want uint64
	}{
		{"flightlog_reader_gets_total", st.Gets},
		{"flightlog_reader_get_bytes_total", st.GetBytes},
		{"flightlog_reader_read_cache_misses_total", st.ReadCacheMisses},
		{"flightlog_reader_corrupt_copies_total", st.CorruptCopies},
	} {
		if v := one(t, fams, c.name).GetCounter().GetValue(); v != float64(c.want) {
			t.Errorf("%s = %g, Stats say %d", c.name, v, c.want)
		}
	}
	if st.Gets == 0 || st.GetBytes == 0 {
		t.Errorf("reader Stats %+v: a read of 15 records made no GET", st)
	}
	if fams["flightlog_acked_batches_total"] != nil {
		t.Error("a Collector without a star exported chain metrics")
	}
}

// checkHistogram compares an exposed native histogram (spans and deltas)
// and its classic buckets with the snapshot it came from.
func checkHistogram(t *testing.T, what string, h *dto.Histogram, s histogram.Snapshot) {
	t.Helper()
	if s.Count == 0 {
		t.Fatalf("%s: empty snapshot", what)
	}
	if h.GetSchema() != 5 || h.GetZeroThreshold() != 0 || h.GetZeroCount() != s.ZeroCount || h.GetSampleCount() != s.Count {
		t.Errorf("%s: schema %d zero %g/%d count %d; want 5, 0/%d, %d", what, h.GetSchema(), h.GetZeroThreshold(), h.GetZeroCount(), h.GetSampleCount(), s.ZeroCount, s.Count)
	}
	if want := float64(s.Sum) / s.Scale; math.Abs(h.GetSampleSum()-want) > 1e-9*want {
		t.Errorf("%s: sum %g, want %g", what, h.GetSampleSum(), want)
	}
	got := nativeBuckets(h)
	want := map[int32]uint64{}
	for _, b := range s.Buckets {
		want[b.Index] = b.Count
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s: native buckets\n got %v\nwant %v", what, got, want)
	}
	if len(h.Bucket) == 0 {
		t.Errorf("%s: no classic buckets", what)
	}
	for _, cb := range h.Bucket {
		i := int32(math.Round(32 * math.Log2(cb.GetUpperBound())))
		if n := s.CountAtOrBelow(i); cb.GetCumulativeCount() != n {
			t.Errorf("%s: classic le=%g: %d, snapshot has %d", what, cb.GetUpperBound(), cb.GetCumulativeCount(), n)
		}
	}
}

// nativeBuckets decodes spans and deltas into index -> count, leaving out
// empty buckets.
func nativeBuckets(h *dto.Histogram) map[int32]uint64 {
	out := map[int32]uint64{}
	idx, k := int32(0), 0
	var count int64
	for _, sp := range h.PositiveSpan {
		idx += sp.GetOffset()
		for range sp.GetLength() {
			count += h.PositiveDelta[k]
			k++
			if count != 0 {
				out[idx] = uint64(count)
			}
			idx++
		}
	}
	return out
}

// TestBucketsAreClientGolangs records the same durations in a flightlog
// Latency and in client_golang's own native histogram of schema 5 and
// checks the buckets agree: the export needs no re-bucketing.
func TestBucketsAreClientGolangs(t *testing.T) {
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 9))
	ref := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "ref", NativeHistogramBucketFactor: 1.022, NativeHistogramZeroThreshold: prometheus.NativeHistogramZeroThresholdZero,
		NativeHistogramMaxBucketNumber: 0,
	})
	var lat histogram.Latency
	for range 20000 {
		d := time.Duration(math.Exp(r.Float64()*25)) + time.Duration(r.IntN(2)) // 1ns .. 72s, zeros too
		if r.IntN(100) == 0 {
			d = 0
		}
		x := 32 * math.Log2(d.Seconds())
		if d > 0 && math.Abs(x-math.Round(x)) < 1e-6 {
			continue // float64 seconds may round across the bound
		}
		lat.RecordDuration(d)
		ref.Observe(d.Seconds())
	}
	var m dto.Metric
	if err := ref.Write(&m); err != nil {
		t.Fatal(err)
	}
	h := m.GetHistogram()
	s := lat.Snapshot()
	if h.GetSchema() != histogram.Schema {
		t.Fatalf("client_golang chose schema %d", h.GetSchema())
	}
	if h.GetZeroCount() != s.ZeroCount || h.GetSampleCount() != s.Count {
		t.Errorf("seed %d: zero %d count %d, flightlog %d %d", seed, h.GetZeroCount(), h.GetSampleCount(), s.ZeroCount, s.Count)
	}
	want := map[int32]uint64{}
	for _, b := range s.Buckets {
		want[b.Index] = b.Count
	}
	if got := nativeBuckets(h); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("seed %d: client_golang's buckets\n%v\nflightlog's\n%v", seed, got, want)
	}
}

// TestTextExposition checks what a scraper without native histograms
// gets: classic buckets, and every counter named _total.
func TestTextExposition(t *testing.T) {
	star, _ := openStar(t, 3)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(flightprom.New(star))
	fams := scrape(t, reg, "text/plain; version=0.0.4")
	h := one(t, fams, "flightlog_ack_latency_seconds", "class", "standard").GetHistogram()
	// 2^-17 .. 2^6 seconds, and the parser's +Inf.
	if len(h.Bucket) != 25 || h.GetSampleCount() != 3 {
		t.Fatalf("text ack histogram: %d classic buckets, count %d; want 25, 3", len(h.Bucket), h.GetSampleCount())
	}
	if b := h.Bucket[23]; b.GetUpperBound() != 64 || b.GetCumulativeCount() != 3 {
		t.Errorf("le=%g holds %d, want le=64 holding 3", b.GetUpperBound(), b.GetCumulativeCount())
	}
	if b := h.Bucket[0]; b.GetUpperBound() != math.Exp2(-17) || b.GetCumulativeCount() != 0 {
		t.Errorf("le=%g holds %d, want le=2^-17 holding none (an ack takes longer)", b.GetUpperBound(), b.GetCumulativeCount())
	}
	for name, mf := range fams {
		if mf.GetType() == dto.MetricType_COUNTER && !strings.HasSuffix(name, "_total") {
			t.Errorf("counter %s is not named _total", name)
		}
	}

	reg = prometheus.NewPedanticRegistry()
	reg.MustRegister(flightprom.New(star, flightprom.WithoutClassicBuckets()))
	fams = scrape(t, reg, protoAccept)
	h = one(t, fams, "flightlog_ack_latency_seconds", "class", "standard").GetHistogram()
	if len(h.Bucket) != 0 || len(h.PositiveSpan) == 0 {
		t.Errorf("WithoutClassicBuckets: %d classic buckets, %d spans", len(h.Bucket), len(h.PositiveSpan))
	}
}
