package loglet

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/histogram"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// Absorb and read-path benchmarks (issue 4). Run:
//
//	go test ./loglet -run XXX -bench 'Absorb|History|Tail' -benchtime 1x -count 5
//
// Every sub-benchmark is bounded in time whatever b.N: one op is a fixed
// measured window (BenchmarkAbsorbMetastore), one full read pass over a fixed
// data set (BenchmarkHistoryRead), or a fixed block of samples
// (BenchmarkTailRead), so -benchtime 1x gives one window, pass or block.
//
// BenchmarkAbsorbMetastore checks invariant 6: metastore requests per star
// grow neither with ingest nor with the number of active streams. A
// Standard star (K=1/W=1, PUTs on the s3-standard latency model of
// bench_test.go, every other setting the default, AbsorbInterval 100ms)
// over a metastore.Mem takes load from rate-limited producers offering
// ingest=1x/10x/100x of absorbBaseRate (1, 10, 100 MB/s of record bodies)
// to streams=1/1000/10000 streams, each stream with its own append session.
// Each producer cycles over its own streams, and batches (and, for 10,000
// streams, the bodies) shrink so that the offered rate gives every stream
// about absorbAppendsPerStream batches per window (see absorbSizing): every
// stream is active in the window (min-appends/stream >= 1, checked). After
// absorbWarmup, it counts over the window:
//
//   - metastore-req/s: every request the metastore.Mem served (its
//     Counters().Requests()), over the window's wall time;
//   - absorb-rounds/s, refs/round: from Stats;
//   - commit-ops/s: ops inside those requests (a ref is one op): they grow
//     with active streams, the requests must not;
//   - ingest-MB/s: body bytes admitted in the window (offered-MB/s is the
//     producers' target; on these 2-core machines 100x may not be reached),
//     and acked-MB/s (encoded record bytes acked, from Stats);
//   - min-appends/stream: the fewest batches any stream got in the window;
//   - round-p50-ms, round-p99-ms: absorb round latency (snapshot PUT and
//     Commit, retries included) over the whole run, from Stats;
//   - snapshot-MB/s: bytes of tails snapshots PUT to the object store (not
//     the metastore: each round writes every stream's tail there).
//
// BenchmarkHistoryRead appends benchHistoryBatches batches (of benchBatch
// benchRecordBytes-byte records, over benchStreams streams, as in
// bench_test.go) to a Standard star over one objstore.Mem, closes it (which
// absorbs everything), and then reads every stream back from history through
// a Reader (MaxRecords/MaxBytes effectively unlimited). The baseline is the
// store's own throughput on the same extents: one Get per extent of every
// ref, in the same order, one at a time like the Reader, through the same
// store. get=mem is the Mem with no latency; get=fixed-10ms wraps it in a
// FaultStore whose every GET waits a Fixed 10ms (the metastore has no
// latency in either). MB/s (and read-MB/s) count record bytes (body and
// headers) delivered; get-MB/s counts stored (compressed) bytes fetched, and
// get-rec-MB/s the same record bytes over the baseline's time, so
// read/get = read-MB/s / get-rec-MB/s is the Reader's throughput as a
// fraction of the store's on the same extents. get-amp@default-limits
// (get=mem only, untimed) is the stored bytes fetched when reading the same
// streams with the default limits (1000 records or 1 MiB per Read) over
// those of one pass: a Read that starts inside an extent fetches all of it.
//
// BenchmarkTailRead measures reads the flight index serves, on a Standard
// star over one Mem with no latency and FlushDeadline 1ms:
//
//   - from=ack/to=recv: one producer Appends one record at a time (closed
//     loop) to a stream a ReadSession follows; tail-p50-us/tail-p99-us is
//     the time from Append returning to Recv returning that record (a Recv
//     that returned first counts as 0, and recv-first is the fraction that
//     did: the release wakes sessions before it closes the ack), beside
//     ack-p50-us (Append call to return).
//   - read=last-unabsorbed: with AbsorbInterval 1h, after a first absorbed
//     batch, benchTailIndexBatches batches sit in the flight index; read-p50-us
//     and read-p99-us time Star.Read of the last record (MaxRecords 1),
//     beside hist-read-p50-us/hist-read-p99-us, Star.Read of record 0
//     (absorbed: refs and a GET) in the same run, and index/history, their
//     p50 ratio.
const (
	absorbBaseRate         = 1e6 // bytes of record bodies per second at ingest=1x
	absorbWarmup           = 500 * time.Millisecond
	absorbWindow           = 2 * time.Second // measured per op
	absorbProducers        = 16
	absorbMaxBatchBytes    = 64 << 10
	absorbAppendsPerStream = 2   // batches offered per stream per window
	absorbMaxInFlight      = 512 // batches in flight per producer before it waits

	benchHistoryBatches   = 3200 // 32.8 MB of bodies over benchStreams streams
	benchHistoryGetDelay  = 10 * time.Millisecond
	benchTailSamples      = 1000  // appends (and Recvs) per op
	benchTailReads        = 10000 // Star.Reads per op
	benchTailIndexBatches = 1000
)

// absorbSizing picks the batch so that, at rate bytes/s over window, each of
// streams streams gets absorbAppendsPerStream batches: batches of up to
// absorbMaxBatchBytes, records of up to benchRecordBytes bytes.
func absorbSizing(rate float64, streams int, window time.Duration) (bodyBytes, perBatch int) {
	batch := int(rate * window.Seconds() / float64(absorbAppendsPerStream*streams))
	batch = max(16, min(absorbMaxBatchBytes, batch))
	bodyBytes = min(benchRecordBytes, batch)
	return bodyBytes, max(1, batch/bodyBytes)
}

// absorbRun is what one run of BenchmarkAbsorbMetastore measured over its
// window.
type absorbRun struct {
	window                 time.Duration
	metaReqs, commitOps    uint64
	rounds, refs           uint64
	admitted, ackedPayload int64
	snapshotBytes          int64             // tails snapshots PUT (all copies)
	roundLatency           histogram.Summary // over the whole run
	minAppends             int
	bodyBytes, perBatch    int
}

// snapshotCounter counts the bytes of tails snapshots PUT to the store it
// wraps.
type snapshotCounter struct {
	objstore.Store
	bytes *atomic.Int64
}

func (c snapshotCounter) PutIfAbsent(ctx context.Context, key string, body []byte) error {
	if strings.HasPrefix(key, "snapshots/") {
		c.bytes.Add(int64(len(body)))
	}
	return c.Store.PutIfAbsent(ctx, key, body)
}

func runAbsorbLoad(b *testing.B, rate float64, streams int, window time.Duration) *absorbRun {
	ctx := context.Background()
	bodyBytes, perBatch := absorbSizing(rate, streams, window)
	batchBytes := bodyBytes * perBatch
	src := benchRecords()
	recs := make([]Record, len(src))
	for i, r := range src {
		recs[i] = Record{Headers: r.Headers, Body: r.Body[:bodyBytes]}
	}

	meta := metastore.NewMem()
	bb := newBenchBuckets(modelStandard, 1)
	var snapBytes atomic.Int64
	stores := make([]objstore.Store, len(bb.stores))
	for i, st := range bb.stores {
		stores[i] = snapshotCounter{Store: st, bytes: &snapBytes}
	}
	s, err := Open(ctx, Config{Star: "absorb", Meta: meta, Logger: quietLogger(),
		Standard: ClassConfig{Stores: stores, W: modelStandard.w}})
	if err != nil {
		b.Fatalf("open: %v", err)
	}
	defer s.Close(context.Background())
	sessions := make([]*AppendSession, streams)
	for i := range sessions {
		name := fmt.Sprintf("abs-%05d", i)
		if _, err := s.CreateStream(ctx, name, StreamOptions{Class: Standard}); err != nil {
			b.Fatalf("create %s: %v", name, err)
		}
		if sessions[i], err = s.OpenAppendSession(ctx, name); err != nil {
			b.Fatalf("session %s: %v", name, err)
		}
	}

	producers := min(absorbProducers, streams)
	interval := time.Duration(float64(batchBytes) / (rate / float64(producers)) * 1e9)
	appends := make([]int, streams) // in the window; stream i is producer i%producers's alone
	var admitted atomic.Int64       // body bytes admitted in the window
	var inWindow atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(p), 11))
			var q []*AckFuture
			wait := func(f *AckFuture) bool {
				if _, err := f.Wait(ctx); err != nil {
					b.Errorf("producer %d: %v", p, err)
					return false
				}
				return true
			}
			defer func() {
				for _, f := range q {
					if !wait(f) {
						return
					}
				}
			}()
			next := start.Add(interval * time.Duration(p) / time.Duration(producers))
			for k := p; ; k += producers {
				if k >= streams {
					k = p
				}
				if d := time.Until(next); d > 0 {
					t := time.NewTimer(d)
					select {
					case <-t.C:
					case <-stop:
						t.Stop()
						return
					}
				}
				select {
				case <-stop:
					return
				default:
				}
				off := rng.IntN(len(recs) - perBatch)
				f, err := sessions[k].Submit(ctx, Batch{Records: recs[off : off+perBatch]})
				if err != nil {
					b.Errorf("producer %d: submit: %v", p, err)
					return
				}
				if inWindow.Load() {
					admitted.Add(int64(batchBytes))
					appends[k]++
				}
				q = append(q, f)
				for len(q) > 0 {
					select {
					case <-q[0].Done():
						if !wait(q[0]) {
							return
						}
						q = q[1:]
						continue
					default:
					}
					if len(q) <= absorbMaxInFlight {
						break
					}
					if !wait(q[0]) {
						return
					}
					q = q[1:]
				}
				next = next.Add(interval)
			}
		}()
	}
	snap := func() (metastore.MemCounters, *ClassStats, int64, int64, time.Time) {
		return meta.Counters(), s.Stats().Standard, admitted.Load(), snapBytes.Load(), time.Now()
	}
	time.Sleep(time.Until(start.Add(absorbWarmup)))
	inWindow.Store(true)
	m0, s0, a0, sb0, t0 := snap()
	time.Sleep(time.Until(t0.Add(window)))
	m1, s1, a1, sb1, t1 := snap()
	inWindow.Store(false)
	b.StopTimer()
	close(stop)
	wg.Wait()
	s.Close(context.Background())
	if st := s.Stats().Standard; st.Halts > 0 || st.FailedNotCommitted+st.FailedOutcomeUnknown > 0 {
		b.Errorf("%d halts (%s), %d+%d failed batches", st.Halts, st.HaltCause, st.FailedNotCommitted, st.FailedOutcomeUnknown)
	}
	final := s.Stats().Standard
	r := &absorbRun{roundLatency: final.AbsorbRoundLatency.Summary(),
		window:   t1.Sub(t0),
		metaReqs: m1.Requests() - m0.Requests(), commitOps: m1.CommitOps - m0.CommitOps,
		rounds: s1.AbsorbRounds - s0.AbsorbRounds, refs: s1.AbsorbRefs - s0.AbsorbRefs,
		admitted: a1 - a0, ackedPayload: int64(s1.AckedBytes - s0.AckedBytes), snapshotBytes: sb1 - sb0,
		minAppends: math.MaxInt, bodyBytes: bodyBytes, perBatch: perBatch,
	}
	for _, n := range appends {
		r.minAppends = min(r.minAppends, n)
	}
	return r
}

// BenchmarkAbsorbMetastore reports metastore requests per second of one star
// at 1x, 10x and 100x ingest and 1, 1,000 and 10,000 active streams.
func BenchmarkAbsorbMetastore(b *testing.B) {
	for _, mult := range []int{1, 10, 100} {
		for _, streams := range []int{1, 1000, 10000} {
			b.Run(fmt.Sprintf("ingest=%dx/streams=%d", mult, streams), func(b *testing.B) {
				rate := float64(mult) * absorbBaseRate
				r := runAbsorbLoad(b, rate, streams, time.Duration(b.N)*absorbWindow)
				sec := r.window.Seconds()
				b.ReportMetric(float64(r.metaReqs)/sec, "metastore-req/s")
				b.ReportMetric(float64(r.rounds)/sec, "absorb-rounds/s")
				b.ReportMetric(float64(r.refs)/float64(max(r.rounds, 1)), "refs/round")
				b.ReportMetric(float64(r.commitOps)/sec, "commit-ops/s")
				b.ReportMetric(float64(r.admitted)/1e6/sec, "ingest-MB/s")
				b.ReportMetric(rate/1e6, "offered-MB/s")
				b.ReportMetric(float64(r.ackedPayload)/1e6/sec, "acked-MB/s")
				b.ReportMetric(float64(r.minAppends), "min-appends/stream")
				b.ReportMetric(float64(r.bodyBytes*r.perBatch), "batch-B")
				b.ReportMetric(float64(r.snapshotBytes)/1e6/sec, "snapshot-MB/s")
				b.ReportMetric(float64(r.roundLatency.P50)/1e6, "round-p50-ms")
				b.ReportMetric(float64(r.roundLatency.P99)/1e6, "round-p99-ms")
				if r.minAppends == 0 {
					b.Errorf("a stream got no append in the window: the run is not %d active streams", streams)
				}
			})
		}
	}
}

// historyExtent is one extent of one stream's refs, in read order.
type historyExtent struct {
	key         string
	off, length int64
}

// historyExtents lists the extents of every ref of stream, in sequence
// order: what a full read of the stream fetches.
func historyExtents(b *testing.B, meta metastore.Store, stream string) []historyExtent {
	var out []historyExtent
	prefix := "refs/" + chain.StreamKey(stream) + "/"
	after := ""
	for {
		items, err := meta.Scan(context.Background(), prefix, after, 1000)
		if err != nil {
			b.Fatalf("scan refs: %v", err)
		}
		for _, it := range items {
			ref, err := absorb.DecodeRef(it.Value)
			if err != nil {
				b.Fatalf("ref %s: %v", it.Key, err)
			}
			for _, e := range ref.Extents {
				out = append(out, historyExtent{e.Key, int64(e.Offset), int64(e.Length)})
			}
		}
		if len(items) < 1000 {
			return out
		}
		after = items[len(items)-1].Key
	}
}

// BenchmarkHistoryRead reports the Reader's throughput reading absorbed
// history beside the store's own GET throughput on the same extents.
func BenchmarkHistoryRead(b *testing.B) {
	for _, g := range []struct {
		name  string
		delay time.Duration
	}{{"mem", 0}, {fmt.Sprintf("fixed-%v", benchHistoryGetDelay), benchHistoryGetDelay}} {
		b.Run("get="+g.name, func(b *testing.B) {
			ctx := context.Background()
			mem := objstore.NewMem()
			meta := metastore.NewMem()
			s, err := Open(ctx, Config{Star: "hist", Meta: meta, Logger: quietLogger(),
				Standard: ClassConfig{Stores: []objstore.Store{mem}, W: 1}})
			if err != nil {
				b.Fatalf("open: %v", err)
			}
			defer s.Close(context.Background())
			sessions := make([]*AppendSession, benchProducers)
			for i := 0; i < benchStreams; i++ {
				if _, err := s.CreateStream(ctx, streamName(i), StreamOptions{Class: Standard}); err != nil {
					b.Fatal(err)
				}
			}
			for p := range sessions {
				if sessions[p], err = s.OpenAppendSession(ctx, streamName(p)); err != nil {
					b.Fatal(err)
				}
			}
			runProducers(b, benchHistoryBatches, benchDepth, func(p int) submitFunc {
				return func(ctx context.Context, bt Batch) (ackFuture, error) { return sessions[p].Submit(ctx, bt) }
			})
			s.Close(context.Background())
			st := s.Stats().Standard
			if st.Checkpoint != st.ReleasePoint || st.FlightIndexBytes != 0 || st.AckedRecords != benchHistoryBatches*benchBatch {
				b.Fatalf("after Close: checkpoint %d, release point %d, index %d bytes, %d records acked", st.Checkpoint, st.ReleasePoint, st.FlightIndexBytes, st.AckedRecords)
			}

			store := objstore.Store(mem)
			if g.delay > 0 {
				f := objstore.WithFaults(mem, 7)
				f.SetLatency(fault.Fixed(g.delay), fault.Get)
				store = f
			}
			rd, err := NewReader(ReaderConfig{Meta: meta, Standard: []objstore.Store{store}})
			if err != nil {
				b.Fatal(err)
			}
			tails := make([]uint64, benchStreams)
			var extents []historyExtent
			for i := range tails {
				t, err := rd.CheckTail(ctx, streamName(i))
				if err != nil {
					b.Fatal(err)
				}
				tails[i] = t.Seq
				extents = append(extents, historyExtents(b, meta, streamName(i))...)
			}
			rs0 := rd.Stats()

			var recBytes int64 // per pass
			b.ResetTimer()
			for n := 0; n < b.N; n++ {
				recBytes = 0
				for i, tail := range tails {
					res, err := rd.Read(ctx, streamName(i), ReadQuery{Start: AtSeq(0), MaxRecords: math.MaxInt32, MaxBytes: math.MaxInt})
					if err != nil {
						b.Fatalf("read %s: %v", streamName(i), err)
					}
					if uint64(len(res.Records)) != tail || res.Next != tail {
						b.Fatalf("read %s: %d records, next %d; want %d", streamName(i), len(res.Records), res.Next, tail)
					}
					for _, r := range res.Records {
						recBytes += int64(recordSize(r.Record))
					}
				}
			}
			b.StopTimer()
			readEl := b.Elapsed()
			rs := rd.Stats()

			var getBytes int64
			getStart := time.Now()
			for n := 0; n < b.N; n++ {
				for _, e := range extents {
					data, err := store.Get(ctx, e.key, e.off, e.length)
					if err != nil || int64(len(data)) != e.length {
						b.Fatalf("get %s [%d+%d): %d bytes, %v", e.key, e.off, e.length, len(data), err)
					}
					getBytes += int64(len(data))
				}
			}
			getEl := time.Since(getStart)

			// Read amplification at the default limits (1000 records or
			// 1 MiB per Read, as a ReadSession on a Reader pages): stored
			// bytes fetched over one pass's. Untimed; GET counts do not
			// depend on latency, so only without it.
			if g.delay == 0 {
				c0 := mem.Counters()
				for i, tail := range tails {
					for next := uint64(0); next < tail; {
						res, err := rd.Read(ctx, streamName(i), ReadQuery{Start: AtSeq(next)})
						if err != nil || len(res.Records) == 0 {
							b.Fatalf("read %s at %d: %d records, %v", streamName(i), next, len(res.Records), err)
						}
						next = res.Next
					}
				}
				b.ReportMetric(float64(mem.Counters().GetBytes-c0.GetBytes)/(float64(getBytes)/float64(b.N)), "get-amp@default-limits")
			}

			b.SetBytes(recBytes)
			readMBps := float64(recBytes) * float64(b.N) / 1e6 / readEl.Seconds()
			getRecMBps := float64(recBytes) * float64(b.N) / 1e6 / getEl.Seconds()
			b.ReportMetric(readMBps, "read-MB/s")
			b.ReportMetric(float64(getBytes)/1e6/getEl.Seconds(), "get-MB/s")
			b.ReportMetric(getRecMBps, "get-rec-MB/s")
			b.ReportMetric(readMBps/getRecMBps, "read/get")
			b.ReportMetric(float64(len(extents)), "extents")
			b.ReportMetric(float64(rs.Gets-rs0.Gets)/float64(b.N), "reader-gets/pass")
			b.ReportMetric(float64(getBytes)/float64(b.N)/float64(len(extents))/1024, "extent-KiB")
			b.ReportMetric(float64(recBytes)/(float64(getBytes)/float64(b.N)), "rec/stored")
		})
	}
}

// openTailStar opens a Standard star over one Mem with no latency and a 1ms
// flush deadline, with one stream "tail".
func openTailStar(b *testing.B, absorbInterval time.Duration) *Star {
	s, err := Open(context.Background(), Config{Star: "tail", Meta: metastore.NewMem(), Logger: quietLogger(), AbsorbInterval: absorbInterval,
		Standard: ClassConfig{Stores: []objstore.Store{objstore.NewMem()}, W: 1, FlushDeadline: time.Millisecond}})
	if err != nil {
		b.Fatalf("open: %v", err)
	}
	if _, err := s.CreateStream(context.Background(), "tail", StreamOptions{Class: Standard}); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkTailRead reports tail reads served by the flight index.
func BenchmarkTailRead(b *testing.B) {
	b.Run("from=ack/to=recv", func(b *testing.B) {
		ctx := context.Background()
		recs := benchRecords()
		s := openTailStar(b, 0)
		defer s.Close(context.Background())
		sess, err := s.OpenReadSession(ctx, "tail", ReadQuery{Start: AtSeq(0)})
		if err != nil {
			b.Fatal(err)
		}
		type recv struct {
			seq uint64
			at  time.Time
		}
		got := make(chan recv, 64)
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			defer close(got)
			for {
				rs, err := sess.Recv(rctx)
				at := time.Now()
				if err != nil {
					return
				}
				for _, r := range rs {
					got <- recv{r.Seq, at}
				}
			}
		}()
		var tail, ack histogram.H
		early := 0
		b.ResetTimer()
		for i := 0; i < b.N*benchTailSamples; i++ {
			t0 := time.Now()
			a, err := s.Append(ctx, "tail", Batch{Records: recs[i%len(recs) : i%len(recs)+1]})
			tAck := time.Now()
			if err != nil {
				b.Fatal(err)
			}
			ack.RecordDuration(tAck.Sub(t0))
			r, ok := <-got
			if !ok || r.seq != a.Start {
				b.Fatalf("recv: seq %d (ok %v), want %d", r.seq, ok, a.Start)
			}
			d := r.at.Sub(tAck)
			if d < 0 {
				early++
				d = 0
			}
			tail.RecordDuration(d)
		}
		b.StopTimer()
		cancel()
		ts, as := tail.Snapshot(), ack.Snapshot()
		b.ReportMetric(us(ts.Quantile(0.5)), "tail-p50-us")
		b.ReportMetric(us(ts.Quantile(0.99)), "tail-p99-us")
		b.ReportMetric(float64(early)/float64(b.N*benchTailSamples), "recv-first")
		b.ReportMetric(us(as.Quantile(0.5)), "ack-p50-us")
		b.ReportMetric(us(as.Quantile(0.99)), "ack-p99-us")
	})

	b.Run("read=last-unabsorbed", func(b *testing.B) {
		ctx := context.Background()
		recs := benchRecords()
		s := openTailStar(b, time.Hour)
		defer s.Close(context.Background())
		// The first round runs at once; every later one waits an hour.
		if _, err := s.Append(ctx, "tail", Batch{Records: recs[:benchBatch]}); err != nil {
			b.Fatal(err)
		}
		for deadline := time.Now().Add(5 * time.Second); s.Stats().Standard.AbsorbRounds == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatal("the first absorb round did not run")
			}
		}
		as, err := s.OpenAppendSession(ctx, "tail")
		if err != nil {
			b.Fatal(err)
		}
		var last *AckFuture
		for i := 0; i < benchTailIndexBatches; i++ {
			off := (i * benchBatch) % (len(recs) - benchBatch)
			if last, err = as.Submit(ctx, Batch{Records: recs[off : off+benchBatch]}); err != nil {
				b.Fatal(err)
			}
		}
		a, err := last.Wait(ctx)
		if err != nil {
			b.Fatal(err)
		}
		lastSeq := a.End - 1
		st := s.Stats().Standard
		if st.AbsorbRounds != 1 || st.FlightIndexBytes == 0 {
			b.Fatalf("want one round and a full index: %d rounds, index %d bytes", st.AbsorbRounds, st.FlightIndexBytes)
		}
		timeReads := func(seq uint64, n int) histogram.Snapshot {
			var h histogram.H
			for i := 0; i < n; i++ {
				t0 := time.Now()
				res, err := s.Read(ctx, "tail", ReadQuery{Start: AtSeq(seq), MaxRecords: 1})
				h.RecordDuration(time.Since(t0))
				if err != nil || len(res.Records) != 1 || res.Records[0].Seq != seq {
					b.Fatalf("read %d: %d records, %v", seq, len(res.Records), err)
				}
			}
			return h.Snapshot()
		}
		b.ResetTimer()
		idx := timeReads(lastSeq, b.N*benchTailReads)
		b.StopTimer()
		hist := timeReads(0, b.N*benchTailReads)
		if st := s.Stats().Standard; st.AbsorbRounds != 1 {
			b.Fatalf("an absorb round ran during the reads: %d rounds", st.AbsorbRounds)
		}
		b.ReportMetric(us(idx.Quantile(0.5)), "read-p50-us")
		b.ReportMetric(us(idx.Quantile(0.99)), "read-p99-us")
		b.ReportMetric(us(hist.Quantile(0.5)), "hist-read-p50-us")
		b.ReportMetric(us(hist.Quantile(0.99)), "hist-read-p99-us")
		b.ReportMetric(float64(idx.Quantile(0.5))/float64(max(hist.Quantile(0.5), 1)), "index/history")
		b.ReportMetric(float64(st.FlightIndexBytes)/(1<<20), "index-MiB")
	})
}
