package loglet

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/loglet/internal/work"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
	"github.com/flightlog/flightlog/settle"
)

// Reads from settled objects against reads from transit (README
// "Benchmarks", "Settlement"). Run:
//
//	go test -run '^$' -bench 'BenchmarkSettled(Read|Frames)' -count 3 ./loglet
//
// BenchmarkSettledRead: the same records (settleStreams streams of
// settleRecords 1 KiB JSON-like records, benchRecords) read through a fresh
// Reader from transit bundles, then again after settlement (the default
// codec and frame size) from settled objects, each over instant buckets
// (store=instant: MB/s is the read path's CPU) and over buckets whose GETs
// wait out the class's latency model (store=latency; a settled object is
// read from the Standard set, so with the Standard model). scan: every
// record, MB/s of bodies, GETs/MB and getB/B (bytes fetched per body
// byte), from the Reader's own counters. lookup: one read by timestamp
// (AtTimestamp, MaxRecords 1) on a Reader without a frame cache: GETs/op
// and meta/op (metastore requests, the stream record's Get included).
// Both report the process's CPU time (cpu-ms/MB of bodies, cpu-µs/op),
// steadier than MB/s and ns/op when the machine is busy.
//
// BenchmarkSettledFrames: the Standard streams settled with each codec and
// frame size (settle.Config.Codec, FrameBytes), then scanned and looked up
// as above, instant and latency; stored/raw is the settled objects' bytes
// over the raw record bytes.

// countingMeta counts a store's reads (Get, Scan).
type countingMeta struct {
	metastore.Store
	reads atomic.Uint64
}

func (m *countingMeta) Get(ctx context.Context, key string) (metastore.Item, error) {
	m.reads.Add(1)
	return m.Store.Get(ctx, key)
}

func (m *countingMeta) Scan(ctx context.Context, prefix, after string, limit int) ([]metastore.Item, error) {
	m.reads.Add(1)
	return m.Store.Scan(ctx, prefix, after, limit)
}

// readerOver is a Reader of the rig's metastore (counted) whose GETs, with
// latency, wait out each class's model. cacheMiB is ReaderConfig.ReadCacheMiB.
func (r *settleBenchRig) readerOver(tb testing.TB, latency bool, cacheMiB int) (*Reader, *countingMeta) {
	wrap := func(mems []*objstore.Mem, m benchModel) []objstore.Store {
		var out []objstore.Store
		for i, mem := range mems {
			if !latency {
				out = append(out, mem)
				continue
			}
			f := objstore.WithFaults(mem, uint64(31+i))
			f.SetLatency(fault.LogNormal(m.median, m.p99), fault.Get)
			out = append(out, f)
		}
		return out
	}
	meta := &countingMeta{Store: r.meta}
	rd, err := NewReader(ReaderConfig{Meta: meta, Standard: wrap(r.std, modelStandard), Express: wrap(r.exp, modelExpress), ReadCacheMiB: cacheMiB})
	if err != nil {
		tb.Fatal(err)
	}
	return rd, meta
}

// scan reads every record of the class's streams through rd.
func scanAll(b *testing.B, rd *Reader, c Class) {
	ctx := context.Background()
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
}

// benchScan is a scan sub-benchmark: a fresh Reader per scan.
func (r *settleBenchRig) benchScan(b *testing.B, c Class, latency bool, body int64) {
	b.SetBytes(body)
	var gets, getBytes uint64
	cpu := processCPU()
	for b.Loop() {
		rd, _ := r.readerOver(b, latency, 0)
		scanAll(b, rd, c)
		st := rd.Stats()
		gets, getBytes = gets+st.Gets, getBytes+st.GetBytes
	}
	cpu = processCPU() - cpu
	mb := float64(body) * float64(b.N) / 1e6
	b.ReportMetric(float64(cpu)/float64(time.Millisecond)/mb, "cpu-ms/MB")
	b.ReportMetric(float64(gets)/mb, "GETs/MB")
	b.ReportMetric(float64(getBytes)/(mb*1e6), "getB/B")
}

// benchLookup is a lookup sub-benchmark: reads by timestamp of one record,
// on a Reader without a frame cache, so each lookup's GETs are its own.
func (r *settleBenchRig) benchLookup(b *testing.B, c Class, latency bool) {
	ctx := context.Background()
	rd, meta := r.readerOver(b, latency, -1)
	rng := rand.New(rand.NewPCG(1, 3))
	cpu := processCPU()
	for b.Loop() {
		name := settleStreamName(c, rng.IntN(settleStreams))
		seq := rng.Uint64N(settleRecords)
		res, err := rd.Read(ctx, name, ReadQuery{Start: AtTimestamp(settleTSBase + int64(seq)), MaxRecords: 1})
		if err != nil || len(res.Records) != 1 || res.Records[0].Seq != seq {
			b.Fatalf("%s at ts of %d: %+v %v", name, seq, res.Records, err)
		}
	}
	b.ReportMetric(float64(processCPU()-cpu)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
	b.ReportMetric(float64(rd.Stats().Gets)/float64(b.N), "GETs/op")
	b.ReportMetric(float64(meta.reads.Load())/float64(b.N), "meta/op")
}

func BenchmarkSettledRead(b *testing.B) {
	for _, c := range []Class{Standard, Express} {
		r := newSettleBenchRig(false)
		body := r.fill(b, c)
		for _, from := range []string{"transit", "settled"} {
			if from == "settled" {
				r.settleAll(b, c)
				if n, _ := r.transit(c); n != 0 {
					b.Fatalf("%d transit objects left after settlement", n)
				}
			}
			for _, store := range []string{"instant", "latency"} {
				latency := store == "latency"
				b.Run(fmt.Sprintf("class=%s/from=%s/store=%s/scan", c, from, store), func(b *testing.B) {
					r.benchScan(b, c, latency, body)
				})
				b.Run(fmt.Sprintf("class=%s/from=%s/store=%s/lookup", c, from, store), func(b *testing.B) {
					r.benchLookup(b, c, latency)
				})
			}
		}
	}
}

func BenchmarkSettledFrames(b *testing.B) {
	for _, codec := range []envelope.Codec{envelope.CodecS2, envelope.CodecZstd} {
		for _, frame := range []int{64 << 10, 128 << 10, 256 << 10} {
			r := newSettleBenchRig(false)
			body := r.fill(b, Standard)
			raw, stored := r.settleWith(b, Standard, settle.Config{Codec: codec, FrameBytes: frame})
			for _, store := range []string{"instant", "latency"} {
				latency := store == "latency"
				name := fmt.Sprintf("codec=%s/frame=%dKiB/store=%s", codec, frame>>10, store)
				b.Run(name+"/scan", func(b *testing.B) {
					r.benchScan(b, Standard, latency, body)
					b.ReportMetric(float64(stored)/float64(raw), "stored/raw")
				})
				b.Run(name+"/lookup", func(b *testing.B) {
					r.benchLookup(b, Standard, latency)
				})
			}
		}
	}
}

// settleWith settles every absorbed record of class c (the star closed)
// with settle passes run here, rendering with cfg's Codec and FrameBytes
// (zero: the defaults), and returns the raw record bytes settled and the
// settled objects' bytes.
func (r *settleBenchRig) settleWith(tb testing.TB, c Class, cfg settle.Config) (raw, stored int64) {
	ctx := context.Background()
	transit := r.stdS
	if c == Express {
		transit = r.expS
	}
	for pass := 0; ; pass++ {
		if pass > 1000 {
			tb.Fatalf("settlement did not finish in %d passes", pass)
		}
		rec, _, err := chain.ReadEpoch(ctx, r.meta, "b", c)
		if err != nil {
			tb.Fatal(err)
		}
		cp, _, err := absorb.ReadCheckpoint(ctx, r.meta, "b", c)
		if err != nil {
			tb.Fatal(err)
		}
		t, ver, err := chain.ReadTrimCursor(ctx, r.meta, "b", c)
		if err != nil {
			tb.Fatal(err)
		}
		pos := chain.Position{Epoch: cp.Epoch, Next: cp.Next}
		if t.At == pos && t.Deleted == pos {
			return raw, stored
		}
		pc := cfg
		pc.Meta, pc.Star, pc.Class, pc.Owner, pc.Epoch = r.meta, "b", c, cp.Owner, cp.OwnerEpoch
		pc.Transit = chain.BucketSet{Stores: transit, W: len(transit), Retry: chain.RetryPolicy{MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}}
		pc.Settled, pc.DoomedGrace = r.stdS, -1
		res, err := work.RunSettle(ctx, pc, settle.Pass{Trim: t, TrimVersion: ver, Upto: pos, Checkpoint: pos, Cuts: rec.Cuts})
		if err != nil {
			tb.Fatal(err)
		}
		raw, stored = raw+res.RawBytes, stored+res.StoredBytes
	}
}
