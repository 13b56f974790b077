package loglet

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/histogram"
	"github.com/flightlog/flightlog/internal/stages"
	"github.com/flightlog/flightlog/loglet/internal/chaincore"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// Write-path benchmarks: a star over in-memory buckets whose PUTs wait out a
// FIXED latency model, driven by benchProducers producers (one append session
// each) over benchStreams streams, appending batches of benchBatch records
// of benchRecordBytes-byte JSON-like bodies. Run:
//
//	go test ./loglet -run XXX -bench . -benchtime 2s -count 5
//
// Throughput (MB/s from b.SetBytes, records/s) counts record body bytes.
// Every figure a ratio is quoted against is measured in the same run:
//
//   - put-p50-us, put-p99-us: the buckets' own PUT latency, timed around
//     every PutIfAbsent the run made (the latency model plus the Mem).
//   - ack-p50-us, ack-p99-us: Submit to the ack being seen by the producer,
//     and ack/put-p50, ack/put-p99 their ratios to the PUT figures.
//   - overhead-p50-us, overhead-p99-us: ack latency beyond flush linger +
//     quorum latency (claim to the W-th copy, from Stats), i.e. what the
//     pool, the window, rendering and in-order release add.
//   - copy-MB/s and x-copy: a plain copy of the same record bytes, and the
//     write path's MB/s as a fraction of it.
//   - PUTs/GiB beside min-PUTs/GiB = K * GiB / FlightBytes, the fewest PUTs
//     the flight size allows; putB/B: bytes PUT (all K copies) per body
//     byte ingested.
//   - naive-*: the same workload, same b.N, same bucket model, through
//     naiveWriter (one PUT per append per bucket, acked at W), and
//     x-naive-* the write path's figure over the naive one.
//
// Latency models (per PUT, per bucket):
//
//	s3-standard: K=1/W=1, LogNormal(median 30ms, p99 120ms)
//	s3-express:  K=3/W=2, LogNormal(median 4ms,  p99 15ms)
//
// Loads: load=closed is one batch in flight per producer (latency at
// moderate load); load=saturate keeps benchDepth batches in flight per
// producer (throughput; the pool and the window are the limit).
const (
	benchProducers   = 64
	benchStreams     = 16
	benchBatch       = 10
	benchRecordBytes = 1024
	benchDepth       = 64   // batches in flight per producer under load=saturate
	benchCorpus      = 8192 // distinct records the batches are drawn from
)

// benchModel is a bucket set with a fixed latency model.
type benchModel struct {
	name        string
	class       Class
	k, w        int
	median, p99 time.Duration
}

var (
	modelStandard = benchModel{"s3-standard", Standard, 1, 1, 30 * time.Millisecond, 120 * time.Millisecond}
	modelExpress  = benchModel{"s3-express", Express, 3, 2, 4 * time.Millisecond, 15 * time.Millisecond}
)

type benchLoad struct {
	name  string
	depth int
	// producers is how many producers run (0: benchProducers).
	producers int
}

func (l benchLoad) nProducers() int {
	if l.producers > 0 {
		return l.producers
	}
	return benchProducers
}

var (
	loadClosed   = benchLoad{name: "closed", depth: 1}
	loadSaturate = benchLoad{name: "saturate", depth: benchDepth}
)

// timedStore times every PutIfAbsent of the store it wraps.
type timedStore struct {
	objstore.Store
	put *histogram.H
}

func (t timedStore) PutIfAbsent(ctx context.Context, key string, body []byte) error {
	start := time.Now()
	err := t.Store.PutIfAbsent(ctx, key, body)
	t.put.RecordDuration(time.Since(start))
	return err
}

// benchBuckets is one run's bucket set: K Mems behind the latency model,
// timed.
type benchBuckets struct {
	mems   []*objstore.Mem
	stores []objstore.Store
	put    histogram.H
}

func newBenchBuckets(m benchModel, seed uint64) *benchBuckets {
	bb := &benchBuckets{}
	for i := 0; i < m.k; i++ {
		mem := objstore.NewMem()
		f := objstore.WithFaults(mem, seed*31+uint64(i))
		f.SetLatency(fault.LogNormal(m.median, m.p99), fault.Put)
		bb.mems = append(bb.mems, mem)
		bb.stores = append(bb.stores, timedStore{Store: f, put: &bb.put})
	}
	return bb
}

func (bb *benchBuckets) counters() objstore.Counters {
	var c objstore.Counters
	for _, m := range bb.mems {
		d := m.Counters()
		c.Puts += d.Puts
		c.PutBytes += d.PutBytes
	}
	return c
}

var (
	corpusOnce sync.Once
	corpus     []Record
)

// benchCorpus returns benchCorpus distinct JSON-like records of
// benchRecordBytes-byte bodies, with two small headers and no timestamp
// (the leader stamps arrival). Drawn at random, batches compress like log
// lines do, not like one record repeated.
func benchRecords() []Record {
	corpusOnce.Do(func() {
		rng := rand.New(rand.NewPCG(1, 2))
		levels := []string{"debug", "info", "info", "info", "warn", "error"}
		routes := []string{"/api/cart", "/api/cart/{id}/items", "/api/login", "/ping", "/api/checkout/confirm"}
		vocab := []string{"request", "served", "from", "replica", "after", "backoff", "stale", "read", "lease", "renewed", "shard", "rebalanced", "queue", "depth"}
		corpus = make([]Record, benchCorpus)
		for i := range corpus {
			body := fmt.Appendf(make([]byte, 0, benchRecordBytes), `{"level":%q,"svc":"cart","pod":"cart-%x","route":%q,"code":%d,"dur_ms":%.2f,"req":"%016x","acct":%d,"note":"`,
				levels[rng.IntN(len(levels))], rng.Uint32()&0xfffff, routes[rng.IntN(len(routes))],
				[]int{200, 200, 201, 204, 301, 404, 503}[rng.IntN(7)], rng.Float64()*400, rng.Uint64(), rng.IntN(5_000_000))
			for len(body) < benchRecordBytes-2 {
				body = append(body, vocab[rng.IntN(len(vocab))]...)
				if rng.IntN(8) == 0 {
					body = fmt.Appendf(body, "=%d", rng.IntN(100000))
				}
				body = append(body, ' ')
			}
			body = append(body[:benchRecordBytes-2], '"', '}')
			corpus[i] = Record{
				Headers: []Header{
					{Name: []byte("content-type"), Value: []byte("application/json")},
					{Name: []byte("zone"), Value: fmt.Appendf(nil, "eu-west-1%c", 'a'+rng.IntN(3))},
				},
				Body: body,
			}
		}
	})
	return corpus
}

// ackFuture is what both writers hand a producer for one batch.
type ackFuture interface {
	Done() <-chan struct{}
	Wait(ctx context.Context) (Ack, error)
}

// submitFunc admits one batch to the producer's stream.
type submitFunc func(ctx context.Context, b Batch) (ackFuture, error)

// batchShape is what each batch of a run carries: records records of
// bytes-byte bodies (the corpus's bodies cut to bytes, bytes at most
// benchRecordBytes).
type batchShape struct{ records, bytes int }

// defaultShape is every write-path benchmark's batch but
// BenchmarkThroughputBatch's.
var defaultShape = batchShape{benchBatch, benchRecordBytes}

// bodyBytes is the body bytes of one batch.
func (s batchShape) bodyBytes() int { return s.records * s.bytes }

// recordsOf returns the corpus with bodies cut to s.bytes (the corpus
// itself for benchRecordBytes), made once per shape.
func (s batchShape) recordsOf() []Record {
	recs := benchRecords()
	if s.bytes >= benchRecordBytes {
		return recs
	}
	shapedMu.Lock()
	defer shapedMu.Unlock()
	if c, ok := shaped[s.bytes]; ok {
		return c
	}
	c := make([]Record, len(recs))
	for i, r := range recs {
		r.Body = r.Body[:s.bytes]
		c[i] = r
	}
	shaped[s.bytes] = c
	return c
}

var (
	shapedMu sync.Mutex
	shaped   = map[int][]Record{}
)

// runResult is what one run of the producers measured.
type runResult struct {
	ack     histogram.H
	elapsed time.Duration
	batches int64
	shape   batchShape // what each batch carried

	mu     sync.Mutex
	traced []tracedBatch // the write path's batches, for the stage breakdown
}

// tracedBatch is one acked batch of the write path: its flight's trace,
// when it was submitted, and when its producer saw the ack.
type tracedBatch struct {
	flight          *chaincore.FlightTrace
	submitted, seen time.Time
}

// runProducers runs n batches through benchProducers producers, each with
// up to depth batches in flight on its own stream's submitter, and times
// each batch from Submit to its ack being seen. The caller's b.N is n.
func runProducers(b *testing.B, n int, depth int, open func(p int) submitFunc) *runResult {
	return runProducersN(b, n, depth, benchProducers, open)
}

// runProducersN is runProducers with producers producers.
func runProducersN(b *testing.B, n int, depth, producers int, open func(p int) submitFunc) *runResult {
	return runProducersShape(b, n, depth, producers, defaultShape, true, open)
}

// runProducersShape is runProducersN with batches of shape; without trace
// it keeps no batch's flight trace (runResult.traced stays empty: no
// stage breakdown), so that a benchmark of CPU per batch does not count
// the harness's own lock, append and memory per batch (issue 26: they were
// a tenth of the CPU per batch at 1 KiB batches).
func runProducersShape(b *testing.B, n int, depth, producers int, shape batchShape, trace bool, open func(p int) submitFunc) *runResult {
	recs := shape.recordsOf()
	res := &runResult{shape: shape}
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	ctx := context.Background()
	start := time.Now()
	for p := 0; p < producers; p++ {
		submit := open(p)
		wg.Add(1)
		go func() {
			defer wg.Done()
			type inflight struct {
				f     ackFuture
				start time.Time
			}
			var q []inflight
			rng := rand.New(rand.NewPCG(uint64(p), 7))
			settle := func(block bool) bool {
				for len(q) > 0 {
					if !block {
						select {
						case <-q[0].f.Done():
						default:
							return true
						}
					}
					block = false
					if _, err := q[0].f.Wait(ctx); err != nil {
						b.Errorf("producer %d: %v", p, err)
						return false
					}
					seen := time.Now()
					res.ack.RecordDuration(seen.Sub(q[0].start))
					if af, ok := q[0].f.(*AckFuture); ok && trace && af.p.Flight != nil {
						res.mu.Lock()
						res.traced = append(res.traced, tracedBatch{flight: af.p.Flight, submitted: af.p.Submitted, seen: seen})
						res.mu.Unlock()
					}
					q = q[1:]
				}
				return true
			}
			for left.Add(-1) >= 0 {
				if len(q) >= depth && !settle(true) {
					return
				}
				off := rng.IntN(len(recs) - shape.records)
				t := time.Now()
				f, err := submit(ctx, Batch{Records: recs[off : off+shape.records]})
				if err != nil {
					b.Errorf("producer %d: submit: %v", p, err)
					return
				}
				q = append(q, inflight{f, t})
				if !settle(false) {
					return
				}
			}
			for len(q) > 0 && settle(true) {
			}
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.batches = int64(n)
	return res
}

// copyBaseline times a plain copy of the bytes n batches carry, from the
// same corpus, into one reused buffer.
func copyBaseline(n int) (mbps float64) {
	recs := benchRecords()
	dst := make([]byte, benchBatch*benchRecordBytes)
	rng := rand.New(rand.NewPCG(3, 4))
	runtime.GC() // not the garbage of the run just measured
	start := time.Now()
	for i := 0; i < n; i++ {
		off := rng.IntN(len(recs) - benchBatch)
		o := 0
		for _, r := range recs[off : off+benchBatch] {
			o += copy(dst[o:], r.Body)
		}
	}
	el := time.Since(start)
	if el <= 0 {
		el = time.Nanosecond
	}
	return float64(n) * benchBatch * benchRecordBytes / 1e6 / el.Seconds()
}

func streamName(p int) string { return fmt.Sprintf("bench-%02d", p%benchStreams) }

// openBenchStar opens a star whose class m.class runs over bb with cc
// (zero fields take the class defaults) and creates the benchmark streams.
func openBenchStar(b *testing.B, m benchModel, bb *benchBuckets, cc ClassConfig) *Star {
	cc.Stores = bb.stores
	cc.W = m.w
	cfg := Config{Star: "bench", Meta: metastore.NewMem(), Logger: slog.New(slog.DiscardHandler)}
	if m.class == Express {
		cfg.Express = cc
	} else {
		cfg.Standard = cc
	}
	s, err := Open(context.Background(), cfg)
	if err != nil {
		b.Fatalf("open: %v", err)
	}
	for i := 0; i < benchStreams; i++ {
		if _, err := s.CreateStream(context.Background(), streamName(i), StreamOptions{Class: m.class}); err != nil {
			b.Fatalf("create stream: %v", err)
		}
	}
	return s
}

// starRun is one run of the write path, with everything the reports need.
type starRun struct {
	*runResult
	cfg   ClassConfig // with defaults applied
	stats *ClassStats
	puts  objstore.Counters
	put   histogram.Summary
}

// runStar runs n batches through a fresh star over fresh buckets.
func runStar(b *testing.B, n int, m benchModel, load benchLoad, cc ClassConfig) *starRun {
	benchRecords() // outside the timer
	bb := newBenchBuckets(m, 1)
	s := openBenchStar(b, m, bb, cc)
	defer s.Close(context.Background())
	sessions := make([]*AppendSession, load.nProducers())
	for p := range sessions {
		sess, err := s.OpenAppendSession(context.Background(), streamName(p))
		if err != nil {
			b.Fatalf("session: %v", err)
		}
		sessions[p] = sess
	}
	b.ResetTimer()
	r := runProducersN(b, n, load.depth, load.nProducers(), func(p int) submitFunc {
		return func(ctx context.Context, bt Batch) (ackFuture, error) { return sessions[p].Submit(ctx, bt) }
	})
	b.StopTimer()
	s.Close(context.Background())
	st := s.Stats()
	cs := st.Standard
	if m.class == Express {
		cs = st.Express
	}
	return &starRun{runResult: r, cfg: *s.classConfig(m.class), stats: cs, puts: bb.counters(), put: bb.put.Snapshot().Summary()}
}

// naiveRun is one run of naiveWriter.
type naiveRun struct {
	*runResult
	quorum histogram.Summary
	puts   objstore.Counters
	put    histogram.Summary
}

func runNaive(b *testing.B, n int, m benchModel, load benchLoad, codec envelope.Codec) *naiveRun {
	bb := newBenchBuckets(m, 2)
	nw := newNaiveWriter(bb.stores, m.w, codec)
	r := runProducers(b, n, load.depth, func(p int) submitFunc {
		name := streamName(p)
		return func(ctx context.Context, bt Batch) (ackFuture, error) { return nw.submit(ctx, name, bt), nil }
	})
	nw.wait()
	return &naiveRun{runResult: r, quorum: nw.quorum.Snapshot().Summary(), puts: bb.counters(), put: bb.put.Snapshot().Summary()}
}

func us(ns int64) float64 { return float64(ns) / 1e3 }

func (r *runResult) bodyBytes() float64 {
	if r.shape == (batchShape{}) {
		return float64(r.batches) * float64(defaultShape.bodyBytes())
	}
	return float64(r.batches) * float64(r.shape.bodyBytes())
}

func (r *runResult) mbps() float64 { return r.bodyBytes() / 1e6 / r.elapsed.Seconds() }

func perGiB(v int64, r *runResult) float64 { return float64(v) / (r.bodyBytes() / (1 << 30)) }

// reportStar reports a write-path run: latency against the store's own,
// throughput against a copy, PUTs against the flight size's minimum.
func reportStar(b *testing.B, m benchModel, r *starRun) {
	ack := r.ack.Snapshot()
	a50, a99 := ack.Quantile(0.5), ack.Quantile(0.99)
	linger := int64(r.cfg.FlushDeadline)
	b.ReportMetric(us(a50), "ack-p50-us")
	b.ReportMetric(us(a99), "ack-p99-us")
	b.ReportMetric(us(r.put.P50), "put-p50-us")
	b.ReportMetric(us(r.put.P99), "put-p99-us")
	b.ReportMetric(float64(a50)/float64(max(r.put.P50, 1)), "ack/put-p50")
	b.ReportMetric(float64(a99)/float64(max(r.put.P99, 1)), "ack/put-p99")
	b.ReportMetric(us(r.stats.QuorumLatency.Quantile(0.5)), "quorum-p50-us")
	b.ReportMetric(us(a50-linger-r.stats.QuorumLatency.Quantile(0.5)), "overhead-p50-us")
	b.ReportMetric(us(a99-linger-r.stats.QuorumLatency.Quantile(0.99)), "overhead-p99-us")
	b.ReportMetric(float64(r.batches*benchBatch)/r.elapsed.Seconds(), "records/s")
	cp := copyBaseline(int(r.batches))
	b.ReportMetric(cp, "copy-MB/s")
	b.ReportMetric(r.mbps()/cp, "x-copy")
	b.ReportMetric(perGiB(r.puts.Puts, r.runResult), "PUTs/GiB")
	b.ReportMetric(float64(m.k)*float64(1<<30)/float64(r.cfg.FlightBytes), "min-PUTs/GiB")
	b.ReportMetric(float64(r.puts.PutBytes)/r.bodyBytes(), "putB/B")
	b.ReportMetric(float64(r.stats.FlightSize.Quantile(0.5))/1024, "flight-KiB-p50")
	if r.stats.Halts > 0 || r.stats.FailedNotCommitted+r.stats.FailedOutcomeUnknown > 0 {
		b.Errorf("%s: %d halts (%s), %d+%d failed batches", m.name, r.stats.Halts, r.stats.HaltCause, r.stats.FailedNotCommitted, r.stats.FailedOutcomeUnknown)
	}
}

// stageBreakdown is where each acked batch's time went (issue 16), as
// internal/stages defines it (flightlog bench reports the same): the cut's
// overshoot of what the flush deadline asks, claim → first PUT (the
// render), the W-th copy, the wait for earlier slots, release → the
// producer seeing its ack; and the library's own cost: the ack time past
// the ideal ordered release, where each flight is cut exactly at its
// deadline (or when it filled), its W-th copy takes what the store took,
// and it is released when it and every earlier slot are durable.
func stageBreakdown(r *runResult, deadline time.Duration) *stages.Breakdown {
	var c stages.Collector
	for _, t := range r.traced {
		c.Add(stages.Trace(writeTrace(t.submitted, t.flight)), t.seen)
	}
	return c.Breakdown(deadline)
}

// reportStages reports each stage's p50/p99/p99.9 in µs.
func reportStages(b *testing.B, r *runResult, deadline time.Duration) {
	st := stageBreakdown(r, deadline)
	for _, s := range stages.All() {
		sn := st.Snapshot(s)
		b.ReportMetric(us(sn.Quantile(0.5)), s.String()+"-p50-us")
		b.ReportMetric(us(sn.Quantile(0.99)), s.String()+"-p99-us")
		b.ReportMetric(us(sn.Quantile(0.999)), s.String()+"-p999-us")
	}
}

// BenchmarkWritePath runs the write path and, with the same b.N over the
// same latency model, the naive writer; it reports both and their ratios.
// Only the write path's run is timed (ns/op, MB/s are its own).
func BenchmarkWritePath(b *testing.B) {
	for _, m := range []benchModel{modelStandard, modelExpress} {
		for _, load := range []benchLoad{loadClosed, loadSaturate} {
			b.Run(fmt.Sprintf("model=%s/K=%d/W=%d/load=%s", m.name, m.k, m.w, load.name), func(b *testing.B) {
				b.SetBytes(benchBatch * benchRecordBytes)
				r := runStar(b, b.N, m, load, ClassConfig{})
				nv := runNaive(b, b.N, m, load, r.cfg.codec())
				reportStar(b, m, r)
				reportStages(b, r.runResult, r.cfg.FlushDeadline)
				nack := nv.ack.Snapshot()
				n50, n99 := nack.Quantile(0.5), nack.Quantile(0.99)
				b.ReportMetric(nv.mbps(), "naive-MB/s")
				b.ReportMetric(us(n50), "naive-ack-p50-us")
				b.ReportMetric(us(n99), "naive-ack-p99-us")
				b.ReportMetric(us(n50-nv.quorum.P50), "naive-overhead-p50-us")
				b.ReportMetric(perGiB(nv.puts.Puts, nv.runResult), "naive-PUTs/GiB")
				b.ReportMetric(us(nv.put.P50), "naive-put-p50-us")
				b.ReportMetric(us(nv.put.P99), "naive-put-p99-us")
				b.ReportMetric(r.mbps()/nv.mbps(), "x-naive-MB/s")
				a := r.ack.Snapshot()
				b.ReportMetric(float64(a.Quantile(0.5))/float64(max(n50, 1)), "x-naive-ack-p50")
				b.ReportMetric(float64(a.Quantile(0.99))/float64(max(n99, 1)), "x-naive-ack-p99")
				b.ReportMetric(float64(nv.puts.Puts)/float64(max(r.puts.Puts, 1)), "naive/loglet-PUTs")
			})
		}
	}
}

// BenchmarkCodec runs the write path at saturation per class and codec:
// MB/s (compression is the write path's CPU bound) against putB/B, the bytes
// PUT per body byte ingested (all K copies: what Express is billed on),
// and stored/raw per copy (object bytes per body byte: envelope, footer,
// headers and record framing included).
func BenchmarkCodec(b *testing.B) {
	codecs := []struct {
		name string
		c    envelope.Codec
	}{{"none", CodecNone}, {"s2", envelope.CodecS2}, {"zstd", envelope.CodecZstd}}
	for _, m := range []benchModel{modelStandard, modelExpress} {
		for _, c := range codecs {
			b.Run(fmt.Sprintf("model=%s/codec=%s", m.name, c.name), func(b *testing.B) {
				b.SetBytes(benchBatch * benchRecordBytes)
				r := runStar(b, b.N, m, loadSaturate, ClassConfig{Codec: c.c})
				reportStar(b, m, r)
				b.ReportMetric(float64(r.puts.PutBytes)/float64(m.k)/r.bodyBytes(), "stored/raw")
			})
		}
	}
}

// BenchmarkWindow sweeps ParallelUploads on the Standard model, at moderate
// load and at saturation.
func BenchmarkWindow(b *testing.B) {
	m := modelStandard
	for _, load := range []benchLoad{loadClosed, loadSaturate} {
		for _, w := range []int{1, 4, 16, 64} {
			b.Run(fmt.Sprintf("model=%s/load=%s/window=%d", m.name, load.name, w), func(b *testing.B) {
				b.SetBytes(benchBatch * benchRecordBytes)
				r := runStar(b, b.N, m, load, ClassConfig{ParallelUploads: w})
				reportStar(b, m, r)
				b.ReportMetric(us(r.stats.Pool.BlockedNanos)/1e3/r.elapsed.Seconds(), "pool-blocked-ms/s")
			})
		}
	}
}

// BenchmarkFlushDeadline sweeps the flush linger per class at moderate load:
// the linger buys fewer, larger flights (PUTs/GiB) with ack latency.
func BenchmarkFlushDeadline(b *testing.B) {
	for _, tc := range []struct {
		m       benchModel
		lingers []time.Duration
	}{
		{modelStandard, []time.Duration{5 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond}},
		{modelExpress, []time.Duration{500 * time.Microsecond, time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond}},
	} {
		for _, d := range tc.lingers {
			b.Run(fmt.Sprintf("model=%s/load=closed/linger=%v", tc.m.name, d), func(b *testing.B) {
				b.SetBytes(benchBatch * benchRecordBytes)
				r := runStar(b, b.N, tc.m, loadClosed, ClassConfig{FlushDeadline: d})
				reportStar(b, tc.m, r)
			})
		}
	}
}
