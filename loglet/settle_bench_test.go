package loglet

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// Settlement benchmarks (README "Benchmarks"). Run:
//
//	go test -run '^$' -bench BenchmarkSettle -count 3 ./loglet
//
// BenchmarkSettledRead and BenchmarkSettledFrames (settledread_bench_test.go)
// read the records these benchmarks write.
//
// BenchmarkSettleRatio: settled object bytes over the raw record bytes
// settled (ClassStats.Settle.StoredBytes / RawBytes), and the transit
// bundles' bytes (one copy) over the same raw bytes, for the JSON-like
// corpus.
//
// BenchmarkSettleSteady: steady ingest (settleSteadyStreams producers,
// settleSteadyBatch records every settleSteadyEvery each) for
// settleSteadyFor after settleSteadyWarm, with every bucket's PUT, GET and
// DELETE waiting out the class's latency model (bench_test.go's), at
// SettleInterval 1s and 100ms: the settle lag (ClassStats.Settle.Lag,
// sampled), and the transit bytes held in the class's buckets (every
// chains/ object, all copies, sampled): held-MB and held-s, the mean held
// over the ingest rate of bodies (seconds of ingest the class stores in
// transit, all copies).
const (
	settleStreams = 8
	settleRecords = 2000
	settleTSBase  = 1_700_000_000_000 // record i of a stream is stamped settleTSBase + i

	settleSteadyStreams = 8
	settleSteadyBatch   = 10
	settleSteadyEvery   = 20 * time.Millisecond
	settleSteadyWarm    = 2 * time.Second
	settleSteadyFor     = 6 * time.Second
)

// settleBenchRig is a star's stores: a metastore and Mem buckets, possibly
// behind a latency model.
type settleBenchRig struct {
	meta     *metastore.Mem
	std, exp []*objstore.Mem
	stdS     []objstore.Store
	expS     []objstore.Store
}

// newSettleBenchRig: with latency, each bucket's PUT, GET and DELETE wait
// out its class's model.
func newSettleBenchRig(latency bool) *settleBenchRig {
	r := &settleBenchRig{meta: metastore.NewMem()}
	add := func(m benchModel, mems *[]*objstore.Mem, stores *[]objstore.Store, n int) {
		for i := 0; i < n; i++ {
			mem := objstore.NewMem()
			*mems = append(*mems, mem)
			if !latency {
				*stores = append(*stores, mem)
				continue
			}
			f := objstore.WithFaults(mem, uint64(7*len(*mems)+i))
			for _, op := range []fault.Op{fault.Put, fault.Get, fault.Delete} {
				f.SetLatency(fault.LogNormal(m.median, m.p99), op)
			}
			*stores = append(*stores, f)
		}
	}
	add(modelStandard, &r.std, &r.stdS, 1)
	add(modelExpress, &r.exp, &r.expS, 3)
	return r
}

func (r *settleBenchRig) config(settle time.Duration, fast bool) Config {
	cfg := Config{Star: "b", Owner: "bench", Meta: r.meta, Logger: slog.New(slog.DiscardHandler), SettleInterval: settle,
		Standard: ClassConfig{Stores: r.stdS}, Express: ClassConfig{Stores: r.expS}}
	if fast {
		cfg.AbsorbInterval = 2 * time.Millisecond
		cfg.Standard.FlushDeadline, cfg.Express.FlushDeadline = time.Millisecond, time.Millisecond
	}
	return cfg
}

func (r *settleBenchRig) reader(b *testing.B, cacheMiB int) *Reader {
	rd, err := NewReader(ReaderConfig{Meta: r.meta, Standard: r.stdS, Express: r.expS, ReadCacheMiB: cacheMiB})
	if err != nil {
		b.Fatal(err)
	}
	return rd
}

// transit returns the objects and bytes under chains/ in the buckets of
// class c (all copies), read from the Mems directly (not requests).
func (r *settleBenchRig) transit(c Class) (objects int, bytes int64) {
	mems := r.std
	if c == Express {
		mems = r.exp
	}
	ctx := context.Background()
	for _, m := range mems {
		for _, k := range m.Keys() {
			if strings.HasPrefix(k, "chains/") {
				if obj, err := m.Get(ctx, k, 0, -1); err == nil {
					objects++
					bytes += int64(len(obj))
				}
			}
		}
	}
	return objects, bytes
}

// allSettled reports whether every ref in the metastore points at settled
// objects only.
func (r *settleBenchRig) allSettled(b *testing.B) bool {
	items, err := r.meta.Scan(context.Background(), "refs/", "", 0)
	if err != nil {
		b.Fatal(err)
	}
	for _, it := range items {
		ref, err := absorb.DecodeRef(it.Value)
		if err != nil {
			b.Fatal(err)
		}
		if !ref.Settled() {
			return false
		}
	}
	return len(items) > 0
}

func settleStreamName(c Class, i int) string { return fmt.Sprintf("%s-%02d", c, i) }

// fill writes settleRecords records to each of settleStreams streams of
// class c, batches of 100, stamped settleTSBase + seq, and closes the star
// (every record absorbed). It returns the body bytes written.
func (r *settleBenchRig) fill(b *testing.B, c Class) int64 {
	ctx := context.Background()
	s, err := Open(ctx, r.config(-1, true)) // settlement off: the records stay in transit
	if err != nil {
		b.Fatal(err)
	}
	recs := benchRecords()
	var body int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < settleStreams; i++ {
		name := settleStreamName(c, i)
		if _, err := s.CreateStream(ctx, name, StreamOptions{Class: c}); err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var n int64
			for seq := 0; seq < settleRecords; seq += 100 {
				var batch Batch
				for j := seq; j < seq+100; j++ {
					rec := recs[(i*settleRecords+j)%len(recs)]
					rec.Timestamp = settleTSBase + int64(j)
					batch.Records = append(batch.Records, rec)
					n += int64(len(rec.Body))
				}
				if _, err := s.Append(ctx, name, batch); err != nil {
					b.Error(err)
					return
				}
			}
			mu.Lock()
			body += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if err := s.Close(ctx); err != nil {
		b.Fatal(err)
	}
	return body
}

// settleAll opens the star with settlement on and waits, polling the refs
// (a condition bounded by a deadline, not a sleep), until every ref is
// settled, then closes it and returns its figures for class c.
func (r *settleBenchRig) settleAll(b *testing.B, c Class) SettleStats {
	ctx := context.Background()
	s, err := Open(ctx, r.config(5*time.Millisecond, true))
	if err != nil {
		b.Fatal(err)
	}
	stats := func() SettleStats {
		if c == Express {
			return s.Stats().Express.Settle
		}
		return s.Stats().Standard.Settle
	}
	// Done: every ref settled, every transit object deleted, and the
	// figures are the last pass's (its result lands after its writes, so
	// its cursor in the figures matches the metastore's).
	done := func() bool {
		if !r.allSettled(b) {
			return false
		}
		if n, _ := r.transit(c); n != 0 {
			return false
		}
		cur, _, err := chain.ReadTrimCursor(ctx, r.meta, "b", c)
		if err != nil {
			b.Fatal(err)
		}
		st := stats()
		return st.Objects > 0 && cur.Deleted == cur.At && st.TrimEpoch == cur.At.Epoch && st.TrimNext == cur.At.Next
	}
	deadline := time.Now().Add(2 * time.Minute)
	for !done() {
		if time.Now().After(deadline) {
			b.Fatalf("settlement did not finish: %+v", stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	st := stats()
	if err := s.Close(ctx); err != nil {
		b.Fatal(err)
	}
	return st
}

// readAll reads every record of the class's streams through a fresh Reader
// and returns the Reader's figures.
func (r *settleBenchRig) readAll(b *testing.B, c Class) ReaderStats {
	ctx := context.Background()
	rd := r.reader(b, 0)
	for i := 0; i < settleStreams; i++ {
		name := settleStreamName(c, i)
		for next := uint64(0); next < settleRecords; {
			res, err := rd.Read(ctx, name, ReadQuery{Start: AtSeq(next), MaxRecords: 1000, MaxBytes: 1 << 20})
			if err != nil {
				b.Fatal(err)
			}
			if len(res.Records) == 0 || res.Records[0].Seq != next {
				b.Fatalf("%s at %d: %d records", name, next, len(res.Records))
			}
			next += uint64(len(res.Records))
		}
	}
	return rd.Stats()
}

func BenchmarkSettleRatio(b *testing.B) {
	for _, c := range []Class{Standard, Express} {
		b.Run("class="+c.String(), func(b *testing.B) {
			var st SettleStats
			var transit int64
			for b.Loop() {
				r := newSettleBenchRig(false)
				r.fill(b, c)
				_, transit = r.transit(c)
				k := int64(len(r.std))
				if c == Express {
					k = int64(len(r.exp))
				}
				transit /= k // one copy
				st = r.settleAll(b, c)
			}
			if st.RawBytes == 0 {
				b.Fatalf("nothing settled: %+v", st)
			}
			b.ReportMetric(float64(st.StoredBytes)/float64(st.RawBytes), "stored/raw")
			b.ReportMetric(float64(transit)/float64(st.RawBytes), "transit/raw")
			b.ReportMetric(float64(st.RawBytes)/1e6, "raw-MB")
		})
	}
}

func BenchmarkSettleSteady(b *testing.B) {
	for _, c := range []Class{Standard, Express} {
		for _, interval := range []time.Duration{time.Second, 100 * time.Millisecond} {
			b.Run(fmt.Sprintf("class=%s/interval=%v", c, interval), func(b *testing.B) {
				var lags, held []float64
				var ingested int64
				var elapsed time.Duration
				for b.Loop() {
					lags, held, ingested, elapsed = settleSteady(b, c, interval)
				}
				slices.Sort(lags)
				slices.Sort(held)
				q := func(v []float64, p float64) float64 { return v[min(len(v)-1, int(p*float64(len(v))))] }
				mean := 0.0
				for _, h := range held {
					mean += h
				}
				mean /= float64(len(held))
				rate := float64(ingested) / elapsed.Seconds()
				b.ReportMetric(q(lags, 0.5), "lag-p50-ms")
				b.ReportMetric(lags[len(lags)-1], "lag-max-ms")
				b.ReportMetric(mean/1e6, "held-MB")
				b.ReportMetric(held[len(held)-1]/1e6, "held-max-MB")
				b.ReportMetric(mean/rate, "held-s")
				b.ReportMetric(rate/1e6, "ingest-MB/s")
			})
		}
	}
}

// settleSteady runs one steady ingest and returns the lag (ms) and the
// transit bytes held, sampled every 100ms after the warm-up, the body
// bytes acked meanwhile and how long that took.
func settleSteady(b *testing.B, c Class, interval time.Duration) (lags, held []float64, ingested int64, elapsed time.Duration) {
	ctx := context.Background()
	r := newSettleBenchRig(true)
	s, err := Open(ctx, r.config(interval, false))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(ctx)
	recs := benchRecords()
	stop := make(chan struct{})
	var mu sync.Mutex
	measuring := false
	var wg sync.WaitGroup
	for i := 0; i < settleSteadyStreams; i++ {
		name := settleStreamName(c, i)
		if _, err := s.CreateStream(ctx, name, StreamOptions{Class: c}); err != nil {
			b.Fatal(err)
		}
		sess, err := s.OpenAppendSession(ctx, name)
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(settleSteadyEvery)
			defer tick.Stop()
			var pending []*AckFuture
			for n := 0; ; n++ {
				select {
				case <-stop:
					for _, f := range pending {
						f.Wait(ctx)
					}
					return
				case <-tick.C:
				}
				off := (i*7919 + n*settleSteadyBatch) % (len(recs) - settleSteadyBatch)
				f, err := sess.Submit(ctx, Batch{Records: recs[off : off+settleSteadyBatch]})
				if err != nil {
					b.Error(err)
					return
				}
				pending = append(pending, f)
				for len(pending) > 0 {
					select {
					case <-pending[0].Done():
						if _, err := pending[0].Wait(ctx); err == nil {
							mu.Lock()
							if measuring {
								ingested += int64(settleSteadyBatch * benchRecordBytes)
							}
							mu.Unlock()
						}
						pending = pending[1:]
						continue
					default:
					}
					break
				}
			}
		}()
	}
	time.Sleep(settleSteadyWarm) // the warm-up is a duration of load, not a wait for a condition
	mu.Lock()
	measuring = true
	mu.Unlock()
	start := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	for time.Since(start) < settleSteadyFor {
		<-tick.C
		st := s.Stats()
		cs := st.Standard
		if c == Express {
			cs = st.Express
		}
		lags = append(lags, float64(cs.Settle.Lag)/float64(time.Millisecond))
		_, h := r.transit(c)
		held = append(held, float64(h))
	}
	tick.Stop()
	mu.Lock()
	measuring = false
	elapsed = time.Since(start)
	mu.Unlock()
	close(stop)
	wg.Wait()
	st := s.Stats()
	cs := st.Standard
	if c == Express {
		cs = st.Express
	}
	if cs.Settle.Objects == 0 {
		b.Fatalf("nothing settled in the run: %+v", cs.Settle)
	}
	return lags, held, ingested, elapsed
}
