package loglet

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"

	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/histogram"
	"github.com/flightlog/flightlog/internal/stages"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// The write path at the physical limit (issue 16): a star over instant
// buckets, saturated, so that what is measured is the library's own CPU
// cost per byte. Run:
//
//	go test ./loglet -run '^$' -bench BenchmarkThroughput -benchtime 100000x -count 5
//
// An instant bucket (sinkStore) answers a PutIfAbsent at once and keeps
// only the key and the size of a chain slot (every other object, such as
// tails snapshots, in full): a store that keeps the bytes (Mem copies them)
// would add its own copy per byte to what is measured. Baselines in the
// same run, on the same batches:
//
//   - copy-MB/s: one copy of the batches' encoded records (memmove speed);
//   - s2-MB/s: S2 block encoding of the same encoded records, in frames of
//     the size the write path's frames have (one stream's batches of one
//     flight), on one core;
//   - x-copy, x-s2: the write path's MB/s over them (codec none is held
//     against the copy, S2 against S2's own encode);
//   - two-pass-MB/s, x-two-pass (codec none): the design's floor, each
//     batch encoded into fresh memory and copied into an object buffer,
//     on every core, and the write path's MB/s over it;
//   - two-pass-flight-MB/s, x-two-pass-flight (codec none): the same two
//     passes in the design's order, the copy made once a flight's worth
//     of payloads is held (so from memory, not from the cache);
//   - cpu-us/batch, x-two-pass-cpu, x-two-pass-flight-cpu (codec none):
//     the process's CPU per batch during the run (the producers' own
//     included), and each floor's CPU over it (the ratio that a busy
//     machine disturbs least);
//   - allocs/batch: heap allocations in the whole process per batch, the
//     benchmark's own included (it allocates none per batch but its
//     futures).
func BenchmarkThroughput(b *testing.B) {
	codecs := []struct {
		name string
		c    envelope.Codec
	}{{"none", CodecNone}, {"s2", envelope.CodecS2}}
	for _, mb := range []struct {
		m benchModel
		// backlogMiB, when set, is ChainBacklogMiB (the class default
		// otherwise), with "/backlog=…MiB" in the name.
		backlogMiB int
	}{
		{m: benchModel{name: "instant", class: Standard, k: 1, w: 1}},
		{m: benchModel{name: "instant", class: Standard, k: 3, w: 2}}, // K alone changed: same flights as K=1
		{m: benchModel{name: "instant", class: Express, k: 3, w: 2}},  // Express's own defaults: 1 MiB flights
		// The same with a quarter of the backlog's bytes (64 MiB, the
		// Express default before DefaultExpressBacklogPerPool): it stalls
		// where the default does not, the byte bound over the absorb
		// round's latency.
		{m: benchModel{name: "instant", class: Express, k: 3, w: 2}, backlogMiB: 64},
	} {
		m := mb.m
		for _, c := range codecs {
			name := fmt.Sprintf("model=%s/class=%s/K=%d/W=%d/codec=%s", m.name, m.class, m.k, m.w, c.name)
			if mb.backlogMiB > 0 {
				name += fmt.Sprintf("/backlog=%dMiB", mb.backlogMiB)
			}
			b.Run(name, func(b *testing.B) {
				b.SetBytes(benchBatch * benchRecordBytes)
				benchRecords()
				sinks := make([]*sinkStore, m.k)
				stores := make([]objstore.Store, m.k)
				for i := range sinks {
					sinks[i] = newSinkStore()
					stores[i] = sinks[i]
				}
				bb := &benchBuckets{stores: stores}
				s := openBenchStar(b, m, bb, ClassConfig{Codec: c.c, ChainBacklogMiB: mb.backlogMiB})
				defer s.Close(context.Background())
				r, cpu, before, after := saturate(b, s, defaultShape)
				st := s.Stats()
				cs := st.Standard
				if m.class == Express {
					cs = st.Express
				}
				if cs.Halts > 0 || cs.FailedNotCommitted+cs.FailedOutcomeUnknown > 0 {
					b.Fatalf("%d halts (%s), %d+%d failed batches", cs.Halts, cs.HaltCause, cs.FailedNotCommitted, cs.FailedOutcomeUnknown)
				}
				var puts, putBytes int64
				for _, sk := range sinks {
					p, pb := sk.counters()
					puts += p
					putBytes += pb
				}
				ack := r.ack.Snapshot()
				b.ReportMetric(us(ack.Quantile(0.5)), "ack-p50-us")
				b.ReportMetric(us(ack.Quantile(0.99)), "ack-p99-us")
				b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(r.batches), "allocs/batch")
				b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/r.bodyBytes(), "heapB/B")
				b.ReportMetric(float64(cs.FlightSize.Quantile(0.5))/1024, "flight-KiB-p50")
				b.ReportMetric(float64(putBytes)/float64(m.k)/r.bodyBytes(), "stored/raw")
				b.ReportMetric(perGiB(puts, r), "PUTs/GiB")
				// Where producers waited: the pool's budget (admission) and
				// the chain's backlog (claims waiting for the absorb).
				b.ReportMetric(float64(cs.Pool.BlockedNanos)/1e6/r.elapsed.Seconds(), "pool-blocked-ms/s")
				b.ReportMetric(float64(cs.Backlog.StalledNanos)/1e6/r.elapsed.Seconds(), "backlog-stalled-ms/s")
				// The absorb's pace: metastore requests per second, and the
				// rounds that started early (the backlog past its mark,
				// Config.AbsorbEarlyPercent) rather than on the interval.
				b.ReportMetric(float64(cs.MetastoreRequests)/r.elapsed.Seconds(), "meta-req/s")
				b.ReportMetric(float64(cs.AbsorbEarlyRounds)/r.elapsed.Seconds(), "early-rounds/s")
				b.ReportMetric(float64(cs.AbsorbRoundLatency.Quantile(0.5))/1e6, "round-p50-ms")
				b.ReportMetric(float64(cs.AbsorbRoundLatency.Quantile(0.99))/1e6, "round-p99-ms")
				frame := max(1, int(cs.FlightSize.Quantile(0.5))/benchStreams)
				switch c.c {
				case envelope.CodecS2:
					base := s2Baseline(int(r.batches), frame)
					b.ReportMetric(base, "s2-MB/s")
					b.ReportMetric(r.mbps()/base, "x-s2")
				default:
					cp := copyBaseline(int(r.batches))
					b.ReportMetric(cp, "copy-MB/s")
					b.ReportMetric(r.mbps()/cp, "x-copy")
					// CPU per batch beside MB/s: on a busy machine the
					// wall clock of each side varies with what else runs,
					// the CPU it took much less (ratios floor/ours).
					perBatch := func(d time.Duration) float64 { return float64(d) / 1e3 / float64(r.batches) }
					b.ReportMetric(perBatch(cpu), "cpu-us/batch")
					c0 := processCPU()
					fl := twoPassBaseline(int(r.batches), int(cs.FlightSize.Quantile(0.5)))
					c1 := processCPU()
					b.ReportMetric(fl, "two-pass-MB/s")
					b.ReportMetric(r.mbps()/fl, "x-two-pass")
					ff := twoPassFlightBaseline(int(r.batches), int(cs.FlightSize.Quantile(0.5)))
					c2 := processCPU()
					b.ReportMetric(ff, "two-pass-flight-MB/s")
					b.ReportMetric(r.mbps()/ff, "x-two-pass-flight")
					if cpu > 0 {
						b.ReportMetric(float64(c1-c0)/float64(cpu), "x-two-pass-cpu")
						b.ReportMetric(float64(c2-c1)/float64(cpu), "x-two-pass-flight-cpu")
					}
				}
			})
		}
	}
}

// twoPassBaseline is the floor of the write path's design for codec none
// on this machine, in the same run: every batch's records encoded into a
// new buffer (as admission does: fresh memory from the allocator), then
// copied into a reused object buffer of flightBytes (as the render does),
// on GOMAXPROCS goroutines; nothing else (no sequencing, no frames, no
// CRC, no hand-offs). It returns body MB/s.
func twoPassBaseline(n, flightBytes int) float64 {
	return twoPassBaselineShape(n, flightBytes, defaultShape)
}

// twoPassBaselineShape is twoPassBaseline over batches of shape.
func twoPassBaselineShape(n, flightBytes int, shape batchShape) float64 {
	recs := shape.recordsOf()
	batch := shape.records
	procs := runtime.GOMAXPROCS(0)
	flightBytes = max(flightBytes, 64<<10)
	runtime.GC()
	var wg sync.WaitGroup
	start := time.Now()
	for p := 0; p < procs; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(p), 8))
			obj := make([]byte, 0, flightBytes+batch*(shape.bytes+128))
			ts := time.Now().UnixMilli()
			for i := p; i < n; i += procs {
				off := rng.IntN(len(recs) - batch)
				size := 0
				for _, r := range recs[off : off+batch] {
					size += envelope.EncodedRecordSize(Record{Timestamp: ts, Headers: r.Headers, Body: r.Body})
				}
				payload := make([]byte, 0, size)
				for _, r := range recs[off : off+batch] {
					r.Timestamp = ts
					payload = envelope.AppendRecord(payload, r)
				}
				if len(obj)+len(payload) > cap(obj) {
					obj = obj[:0]
				}
				obj = append(obj, payload...)
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	return float64(n) * float64(shape.bodyBytes()) / 1e6 / max(el, time.Nanosecond).Seconds()
}

// twoPassFlightBaseline is twoPassBaseline in the design's order: the
// payloads encoded into fresh memory wait for their flight (flightBytes
// in all, shared by the goroutines as producers share a flight) and are
// then copied into the object together, as the render copies them long
// after they were written (from memory, not from the cache the encode
// just filled: twoPassBaseline copies each payload while it is hot, which
// the write path never can). Nothing else (no sequencing, no frames, no
// CRC, no hand-offs). It returns body MB/s.
func twoPassFlightBaseline(n, flightBytes int) float64 {
	recs := benchRecords()
	procs := runtime.GOMAXPROCS(0)
	flightBytes = max(flightBytes, 64<<10)
	share := max(flightBytes/procs, benchBatch*benchRecordBytes)
	runtime.GC()
	var wg sync.WaitGroup
	start := time.Now()
	for p := 0; p < procs; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(p), 9))
			obj := make([]byte, 0, share+benchBatch*(benchRecordBytes+128))
			var held [][]byte
			heldBytes := 0
			render := func() {
				obj = obj[:0]
				for _, h := range held {
					obj = append(obj, h...)
				}
				clear(held)
				held, heldBytes = held[:0], 0
			}
			ts := time.Now().UnixMilli()
			for i := p; i < n; i += procs {
				off := rng.IntN(len(recs) - benchBatch)
				size := 0
				for _, r := range recs[off : off+benchBatch] {
					size += envelope.EncodedRecordSize(Record{Timestamp: ts, Headers: r.Headers, Body: r.Body})
				}
				payload := make([]byte, 0, size)
				for _, r := range recs[off : off+benchBatch] {
					r.Timestamp = ts
					payload = envelope.AppendRecord(payload, r)
				}
				held, heldBytes = append(held, payload), heldBytes+len(payload)
				if heldBytes >= share {
					render()
				}
			}
			render()
		}()
	}
	wg.Wait()
	el := time.Since(start)
	return float64(n) * benchBatch * benchRecordBytes / 1e6 / max(el, time.Nanosecond).Seconds()
}

// s2Baseline times S2 block encoding of the encoded records n batches
// carry, drawn from the same corpus, in frames of about frameBytes, on one
// core; it returns body MB/s (the unit the write path's MB/s counts).
func s2Baseline(n, frameBytes int) float64 {
	recs := benchRecords()
	rng := rand.New(rand.NewPCG(5, 6))
	// Encode the frames' input first: the baseline is S2's encode alone.
	var frames [][]byte
	var bodies []int // body bytes in each frame
	var cur []byte
	curBody := 0
	for i := 0; i < n && len(frames) < 64; i++ { // 64 frames, reused below: bounded memory
		off := rng.IntN(len(recs) - benchBatch)
		for _, r := range recs[off : off+benchBatch] {
			r.Timestamp = time.Now().UnixMilli()
			cur = envelope.AppendRecord(cur, r)
			curBody += len(r.Body)
		}
		if len(cur) >= frameBytes {
			frames, bodies = append(frames, cur), append(bodies, curBody)
			cur, curBody = nil, 0
		}
	}
	if len(cur) > 0 {
		frames, bodies = append(frames, cur), append(bodies, curBody)
	}
	var enc []byte
	runtime.GC()
	body := 0
	start := time.Now()
	for body < n*benchBatch*benchRecordBytes {
		for i, f := range frames {
			enc = s2.Encode(enc[:cap(enc)], f)
			body += bodies[i]
		}
	}
	el := time.Since(start)
	return float64(body) / 1e6 / max(el, time.Nanosecond).Seconds()
}

// sinkStore is an instant bucket: PutIfAbsent succeeds at once unless the
// key exists (it is a conditional create as every Store is), and a chain
// slot's bytes are not kept (only its size); everything else is kept in a
// Mem. A Get of a discarded slot fails loudly: nothing in a saturated
// write must read one.
type sinkStore struct {
	*objstore.Mem
	mu       sync.Mutex
	slots    map[string]int
	puts     int64
	putBytes int64
}

func newSinkStore() *sinkStore {
	return &sinkStore{Mem: objstore.NewMem(), slots: map[string]int{}}
}

func (s *sinkStore) PutIfAbsent(ctx context.Context, key string, body []byte) error {
	if !strings.HasPrefix(key, "chains/") {
		return s.Mem.PutIfAbsent(ctx, key, body)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.puts++
	if _, ok := s.slots[key]; ok {
		return fmt.Errorf("sink: put %q: %w", key, objstore.ErrExists)
	}
	s.slots[key] = len(body)
	s.putBytes += int64(len(body))
	return nil
}

func (s *sinkStore) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	s.mu.Lock()
	_, discarded := s.slots[key]
	s.mu.Unlock()
	if discarded {
		return nil, fmt.Errorf("sink: get %q: the instant bucket keeps no slot bytes", key)
	}
	return s.Mem.Get(ctx, key, off, n)
}

func (s *sinkStore) Delete(ctx context.Context, key string) error {
	s.mu.Lock()
	delete(s.slots, key)
	s.mu.Unlock()
	return s.Mem.Delete(ctx, key)
}

func (s *sinkStore) counters() (puts, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.puts, s.putBytes
}

// BenchmarkOwnCost is BenchmarkWritePath's closed loop per codec and
// producer count: the library's own cost (own-cost: the ack past the ideal
// ordered release) and each stage, with compression (S2, compressed on the
// producers' goroutines for batches of PrecompressBytes and more) and
// without, with 64 producers (as BenchmarkWritePath) and with 8 (fewer
// producers competing for the cores with the shell: on 2 cores, 64
// producers each compressing their next batch delay the goroutines that
// deliver and observe acks). Run:
//
//	go test ./loglet -run '^$' -bench BenchmarkOwnCost -benchtime 3000x -count 5
func BenchmarkOwnCost(b *testing.B) {
	for _, m := range []benchModel{modelStandard, modelExpress} {
		for _, c := range []struct {
			name string
			c    envelope.Codec
		}{{"none", CodecNone}, {"s2", envelope.CodecS2}} {
			for _, producers := range []int{8, 64} {
				b.Run(fmt.Sprintf("model=%s/K=%d/W=%d/codec=%s/producers=%d", m.name, m.k, m.w, c.name, producers), func(b *testing.B) {
					b.SetBytes(benchBatch * benchRecordBytes)
					load := loadClosed
					load.producers = producers
					r := runStar(b, b.N, m, load, ClassConfig{Codec: c.c})
					reportStages(b, r.runResult, r.cfg.FlushDeadline)
					ack := r.ack.Snapshot()
					b.ReportMetric(us(ack.Quantile(0.5)), "ack-p50-us")
					b.ReportMetric(us(ack.Quantile(0.99)), "ack-p99-us")
					b.ReportMetric(us(r.put.P50), "put-p50-us")
					// The scheduler's floor on these cores with this many
					// producers, in the same run, and the own cost over it.
					own := stageBreakdown(r.runResult, r.cfg.FlushDeadline).Snapshot(stages.OwnCost)
					ho := handoffBaseline(producers, b.N, r.cfg.FlushDeadline, m.median).Snapshot()
					b.ReportMetric(us(ho.Quantile(0.5)), "handoff-p50-us")
					b.ReportMetric(us(ho.Quantile(0.99)), "handoff-p99-us")
					b.ReportMetric(float64(own.Quantile(0.5))/float64(max(ho.Quantile(0.5), 1)), "x-handoff-p50")
					b.ReportMetric(float64(own.Quantile(0.99))/float64(max(ho.Quantile(0.99), 1)), "x-handoff-p99")
				})
			}
		}
	}
}

// handoffBaseline is the scheduler's floor under the write path's own cost
// (BenchmarkOwnCost's handoff-*), measured in the same run: producers
// goroutines each do a Submit's own work (encode benchBatch corpus records
// into fresh memory), queue the request (a mutex-guarded append and a
// non-blocking kick, as admission pokes the lane) and wait on a channel of
// its own (a batch's future). One leader goroutine cuts what is queued
// deadline after its oldest request (a runtime timer) and hands the flight
// to a goroutine of its own that sleeps put (the store), which hands it
// back; the leader then closes each request's channel (the release). No
// sequencing, render, store or bookkeeping: what a request holds past its
// flight's sleep is the hand-off back to the leader, the release, and the
// wait for a processor among producers runnable goroutines each encoding
// its next batch on GOMAXPROCS Ps. It returns that time, the put's end to
// the producer running again, for n requests.
func handoffBaseline(producers, n int, deadline, put time.Duration) *histogram.H {
	type request struct {
		ch     chan struct{}
		start  time.Time
		putEnd time.Time // set before ch is closed
		body   []byte    // the encoded batch, held until the release as a batch's is
	}
	type flight struct {
		reqs   []*request
		putEnd time.Time
	}
	var (
		h     histogram.H
		mu    sync.Mutex
		queue []*request
		left  atomic.Int64
		wg    sync.WaitGroup
	)
	kick := make(chan struct{}, 1)
	stop := make(chan struct{})
	back := make(chan flight, 64)
	leaderDone := make(chan struct{})
	go func() {
		defer close(leaderDone)
		var pending []*request
		timer := time.NewTimer(time.Hour)
		defer timer.Stop()
		armed := false
		take := func() {
			mu.Lock()
			pending = append(pending, queue...)
			queue = queue[:0]
			mu.Unlock()
			if len(pending) > 0 && !armed {
				timer.Reset(time.Until(pending[0].start.Add(deadline)))
				armed = true
			}
		}
		for {
			select {
			case <-kick:
				take()
			case <-timer.C:
				take() // armed: it does not re-arm for what it takes now
				f := pending
				pending = nil
				armed = false // the next kick arms it for what comes next
				go func() {
					time.Sleep(put)
					back <- flight{reqs: f, putEnd: time.Now()}
				}()
			case f := <-back:
				for _, r := range f.reqs {
					r.putEnd = f.putEnd
					close(r.ch)
				}
			case <-stop:
				return
			}
		}
	}()
	left.Store(int64(n))
	recs := benchRecords()
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(p), 11))
			for left.Add(-1) >= 0 {
				r := &request{ch: make(chan struct{}), start: time.Now()}
				off := rng.IntN(len(recs) - benchBatch)
				size := 0
				for _, rec := range recs[off : off+benchBatch] {
					size += envelope.EncodedRecordSize(rec)
				}
				r.body = make([]byte, 0, size+benchBatch*10)
				for _, rec := range recs[off : off+benchBatch] {
					rec.Timestamp = r.start.UnixMilli()
					r.body = envelope.AppendRecord(r.body, rec)
				}
				mu.Lock()
				queue = append(queue, r)
				mu.Unlock()
				select {
				case kick <- struct{}{}:
				default:
				}
				<-r.ch
				h.RecordDuration(time.Since(r.putEnd))
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-leaderDone
	return &h
}

// BenchmarkAckFloor is the library's own cost with nothing else in the
// way: one producer, one small batch at a time, instant buckets (sinkStore)
// so the ideal ordered release is the flush deadline itself; ack-over-us
// is the ack past the deadline (what the library adds: the cut's wake-up,
// render, the copies' hand-offs, delivery), with its stages. Run:
//
//	go test ./loglet -run '^$' -bench BenchmarkAckFloor -benchtime 2000x -count 5
func BenchmarkAckFloor(b *testing.B) {
	for _, k := range []int{1, 3} {
		b.Run(fmt.Sprintf("model=instant/class=express/K=%d/codec=none", k), func(b *testing.B) {
			stores := make([]objstore.Store, k)
			for i := range stores {
				stores[i] = newSinkStore()
			}
			cfg := Config{Star: "floor", Meta: metastore.NewMem(), Logger: slog.New(slog.DiscardHandler), CreateOnAppend: true, DefaultClass: Express,
				Express: ClassConfig{Stores: stores, Codec: CodecNone}}
			s, err := Open(context.Background(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close(context.Background())
			sess, err := s.OpenAppendSession(context.Background(), "floor")
			if err != nil {
				b.Fatal(err)
			}
			deadline := s.classConfig(Express).FlushDeadline
			var over, cutOver, claimPut, copies, toProducer histogram.H
			rec := []Record{{Body: []byte("a small record")}}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				f, err := sess.Submit(context.Background(), Batch{Records: rec})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := f.Wait(context.Background()); err != nil {
					b.Fatal(err)
				}
				seen := time.Now()
				over.RecordDuration(seen.Sub(start) - deadline)
				if w, ok := f.Trace(); ok {
					cutOver.RecordDuration(w.Claimed.Sub(w.Oldest.Add(deadline)))
					claimPut.RecordDuration(w.PutStart.Sub(w.Claimed))
					copies.RecordDuration(w.Durable.Sub(w.PutStart))
					toProducer.RecordDuration(seen.Sub(w.Released))
				}
			}
			b.StopTimer()
			for _, m := range []struct {
				name string
				h    *histogram.H
			}{{"ack-over", &over}, {"cut-over", &cutOver}, {"claim-put", &claimPut}, {"copies", &copies}, {"to-producer", &toProducer}} {
				sn := m.h.Snapshot()
				b.ReportMetric(us(sn.Quantile(0.5)), m.name+"-p50-us")
				b.ReportMetric(us(sn.Quantile(0.99)), m.name+"-p99-us")
			}
		})
	}
}

// BenchmarkThroughputBatch is BenchmarkThroughput's Standard K=1 codec
// none run swept over the batch's shape (records per batch and record
// size), to split the write path's CPU into a cost per byte and a cost per
// batch: the design's two-pass floor (twoPassBaselineShape) is measured in
// the same run on the same shape, and over-floor-us/batch (our CPU per
// batch less the floor's) is what the write path adds to the floor's two
// passes at that shape. A cost per byte keeps it proportional to the
// batch's bytes; a cost per batch (the future, admission's validation and
// lock, the core's step, the outcome's delivery, their allocations) keeps
// it flat, and x-two-pass-cpu then approaches its large-batch limit as
// the batch grows. Run:
//
//	go test ./loglet -run '^$' -bench BenchmarkThroughputBatch -benchtime 1s -count 3
func BenchmarkThroughputBatch(b *testing.B) {
	m := benchModel{name: "instant", class: Standard, k: 1, w: 1}
	for _, shape := range []batchShape{
		{1, 1024}, {4, 1024}, {10, 1024}, {40, 1024}, {100, 1024}, {400, 1024},
		{10, 128}, {80, 128},
	} {
		b.Run(fmt.Sprintf("records=%d/bytes=%d", shape.records, shape.bytes), func(b *testing.B) {
			b.SetBytes(int64(shape.bodyBytes()))
			shape.recordsOf() // outside the timer
			sink := newSinkStore()
			bb := &benchBuckets{stores: []objstore.Store{sink}}
			s := openBenchStar(b, m, bb, ClassConfig{Codec: CodecNone})
			defer s.Close(context.Background())
			r, cpu, before, after := saturate(b, s, shape)
			cs := s.Stats().Standard
			if cs.Halts > 0 || cs.FailedNotCommitted+cs.FailedOutcomeUnknown > 0 {
				b.Fatalf("%d halts (%s), %d+%d failed batches", cs.Halts, cs.HaltCause, cs.FailedNotCommitted, cs.FailedOutcomeUnknown)
			}
			perBatch := func(d time.Duration) float64 { return float64(d) / 1e3 / float64(r.batches) }
			c0 := processCPU()
			fl := twoPassBaselineShape(int(r.batches), int(cs.FlightSize.Quantile(0.5)), shape)
			floorCPU := processCPU() - c0
			b.ReportMetric(float64(shape.bodyBytes())/1024, "batch-KiB")
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(r.batches), "allocs/batch")
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/r.bodyBytes(), "heapB/B")
			b.ReportMetric(perBatch(cpu), "cpu-us/batch")
			b.ReportMetric(perBatch(floorCPU), "floor-cpu-us/batch")
			b.ReportMetric(perBatch(cpu-floorCPU), "over-floor-us/batch")
			b.ReportMetric(fl, "two-pass-MB/s")
			b.ReportMetric(r.mbps()/fl, "x-two-pass")
			if cpu > 0 {
				b.ReportMetric(float64(floorCPU)/float64(cpu), "x-two-pass-cpu")
			}
		})
	}
}

// saturate runs b.N batches of shape through s from benchProducers
// append sessions, benchDepth in flight each, timed, and closes s: the
// run, the process's CPU over it, and the heap's figures before and after.
func saturate(b *testing.B, s *Star, shape batchShape) (r *runResult, cpu time.Duration, before, after runtime.MemStats) {
	b.Helper()
	sessions := make([]*AppendSession, benchProducers)
	for p := range sessions {
		sess, err := s.OpenAppendSession(context.Background(), streamName(p))
		if err != nil {
			b.Fatalf("session: %v", err)
		}
		sessions[p] = sess
	}
	runtime.GC()
	runtime.ReadMemStats(&before)
	cpu = processCPU()
	b.ResetTimer()
	r = runProducersShape(b, b.N, benchDepth, benchProducers, shape, false, func(p int) submitFunc {
		return func(ctx context.Context, bt Batch) (ackFuture, error) { return sessions[p].Submit(ctx, bt) }
	})
	b.StopTimer()
	cpu = processCPU() - cpu
	runtime.ReadMemStats(&after)
	if err := s.Close(context.Background()); err != nil {
		b.Fatalf("close: %v", err)
	}
	return r, cpu, before, after
}
