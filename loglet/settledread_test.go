package loglet

import (
	"context"
	"encoding/json"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/settle"
)

// settledTS is the timestamp of record seq of the streams these tests
// write: three records share each timestamp, 10 ms apart.
func settledTS(seq uint64) int64 { return settleTSBase + 10*int64(seq/3) }

func settledBody(seq uint64) string {
	return fmt.Sprintf("rec-%06d-%s", seq, strings.Repeat("abcdefgh", 8+int(seq%5)))
}

// fillSeqs appends records [from, to) of stream name (class c, created if
// from is 0) in batches of batch, through a star with settlement off, and
// closes it: every record absorbed.
func (r *settleBenchRig) fillSeqs(tb testing.TB, c Class, name string, from, to uint64, batch int) {
	tb.Helper()
	ctx := context.Background()
	s, err := Open(ctx, r.config(-1, true)) // settlement off: the records stay in transit
	if err != nil {
		tb.Fatal(err)
	}
	if from == 0 {
		if _, err := s.CreateStream(ctx, name, StreamOptions{Class: c}); err != nil {
			tb.Fatal(err)
		}
	}
	for seq := from; seq < to; {
		var b Batch
		for ; seq < to && len(b.Records) < batch; seq++ {
			b.Records = append(b.Records, Record{Timestamp: settledTS(seq), Body: []byte(settledBody(seq))})
		}
		if _, err := s.Append(ctx, name, b); err != nil {
			tb.Fatal(err)
		}
	}
	if err := s.Close(ctx); err != nil {
		tb.Fatal(err)
	}
}

// streamRefs returns the stream's refs, in order.
func (r *settleBenchRig) streamRefs(tb testing.TB, name string) []absorb.SpanRef {
	tb.Helper()
	rd, _ := r.readerOver(tb, false, -1)
	rec, _, err := rd.record(context.Background(), name)
	if err != nil {
		tb.Fatal(err)
	}
	items, err := r.meta.Scan(context.Background(), chain.RefPrefix(rec.id()), "", 0)
	if err != nil {
		tb.Fatal(err)
	}
	var out []absorb.SpanRef
	for _, it := range refsOf(rec.id(), items) {
		ref, err := absorb.DecodeRef(it.Value)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, ref)
	}
	return out
}

// checkScan reads the whole stream through a fresh Reader, in reads of
// 97 records, byte for byte.
func (r *settleBenchRig) checkScan(t *testing.T, name string, n uint64) {
	t.Helper()
	rd, _ := r.readerOver(t, false, -1)
	for next := uint64(0); next < n; {
		res, err := rd.Read(context.Background(), name, ReadQuery{Start: AtSeq(next), MaxRecords: 97})
		if err != nil || len(res.Records) == 0 {
			t.Fatalf("read %s at %d: %d records, %v", name, next, len(res.Records), err)
		}
		for _, rec := range res.Records {
			if rec.Seq != next || string(rec.Record.Body) != settledBody(next) || rec.Record.Timestamp != settledTS(next) {
				t.Fatalf("%s seq %d: got seq %d ts %d %q", name, next, rec.Seq, rec.Record.Timestamp, rec.Record.Body)
			}
			next++
		}
	}
}

// checkLookups reads by timestamp at the edges and at random timestamps,
// each through a Reader without a frame cache, and checks the record found
// and the GETs (at most one) and metastore reads (the stream record, one
// batch of refs, and a gallop and a bisection over n records) it cost.
func (r *settleBenchRig) checkLookups(t *testing.T, name string, n uint64) {
	t.Helper()
	ctx := context.Background()
	rd, meta := r.readerOver(t, false, -1)
	last := settledTS(n - 1)
	targets := []int64{settleTSBase - 5, settleTSBase, settleTSBase + 1, last - 1, last, last + 1}
	rng := rand.New(rand.NewPCG(5, 7))
	for i := 0; i < 40; i++ {
		targets = append(targets, settleTSBase+rng.Int64N(last-settleTSBase+1))
	}
	maxMeta := uint64(4 + 2*bits.Len64(n))
	for _, ms := range targets {
		want := uint64(0) // the first seq stamped at or after ms
		for want < n && settledTS(want) < ms {
			want++
		}
		gets, reads := rd.Stats().Gets, meta.reads.Load()
		res, err := rd.Read(ctx, name, ReadQuery{Start: AtTimestamp(ms), MaxRecords: 1})
		if err != nil {
			t.Fatalf("read %s at ts %d: %v", name, ms, err)
		}
		gets, reads = rd.Stats().Gets-gets, meta.reads.Load()-reads
		if want == n {
			if len(res.Records) != 0 || res.Next != n {
				t.Fatalf("ts %d past the last record: got %d records, next %d; want none, next %d", ms, len(res.Records), res.Next, n)
			}
			continue
		}
		if len(res.Records) != 1 || res.Records[0].Seq != want || string(res.Records[0].Record.Body) != settledBody(want) {
			t.Fatalf("ts %d: got %+v, want seq %d", ms, res.Records, want)
		}
		if gets != 1 {
			t.Errorf("ts %d: the read cost %d GETs, want 1", ms, gets)
		}
		if reads > maxMeta {
			t.Errorf("ts %d: the read cost %d metastore reads, want at most %d", ms, reads, maxMeta)
		}
	}
}

// TestReadByTimestampFromSettledCostsOneGet: a read by timestamp finds its
// ref by the refs' timestamps (no data GET), then costs one GET, that of
// the frame holding the record, which the read that follows reuses; from
// transit refs (one per absorb round) and from settled objects of many
// frames in many refs alike. Ties (three records per timestamp) start at
// the first.
func TestReadByTimestampFromSettledCostsOneGet(t *testing.T) {
	const n = 3000
	r := newSettleBenchRig(false)
	name := settleStreamName(Standard, 0)
	r.fillSeqs(t, Standard, name, 0, n, 20)
	transit := r.streamRefs(t, name)
	if len(transit) < 2*refScanBatch {
		t.Fatalf("only %d transit refs: the gallop is not exercised", len(transit))
	}
	r.checkLookups(t, name, n)
	r.settleWith(t, Standard, settle.Config{FrameBytes: 4 << 10, TargetBytes: 32 << 10})
	settled := r.streamRefs(t, name)
	frames := 0
	for _, ref := range settled {
		if !ref.Settled() {
			t.Fatalf("ref [%d, %d) not settled", ref.Start, ref.End)
		}
		frames += len(ref.Extents)
	}
	if len(settled) < 4 || frames < 4*len(settled) {
		t.Fatalf("%d settled refs of %d frames: want several refs of several frames", len(settled), frames)
	}
	t.Logf("%d transit refs, then %d settled refs of %d frames", len(transit), len(settled), frames)
	r.checkLookups(t, name, n)
	r.checkScan(t, name, n)
}

// TestSettledOlderRenderingStaysReadable: settled objects written with
// another codec and frame size than today's defaults (zstd, small frames)
// read back beside objects written with the defaults, and a later pass
// that merges them re-renders their records.
func TestSettledOlderRenderingStaysReadable(t *testing.T) {
	r := newSettleBenchRig(false)
	name := settleStreamName(Standard, 0)
	def := settle.Config{}.WithDefaults()
	old := settle.Config{Codec: envelope.CodecZstd, FrameBytes: 2 << 10, TargetBytes: 1 << 20}
	if old.Codec == def.Codec && old.FrameBytes == def.FrameBytes {
		t.Fatal("the older rendering is today's")
	}
	r.fillSeqs(t, Standard, name, 0, 600, 50)
	r.settleWith(t, Standard, old)
	r.fillSeqs(t, Standard, name, 600, 1200, 50)
	r.settleWith(t, Standard, settle.Config{TargetBytes: 16 << 10}) // small: nothing merges the old object
	codecs := map[envelope.Codec]int{}
	for _, ref := range r.streamRefs(t, name) {
		for _, e := range ref.Extents {
			codecs[e.Codec]++
		}
	}
	if codecs[envelope.CodecZstd] == 0 || codecs[def.Codec] == 0 {
		t.Fatalf("frames by codec %v: want both the older rendering's (zstd) and today's (%v)", codecs, def.Codec)
	}
	r.checkScan(t, name, 1200)
	r.checkLookups(t, name, 1200)
	// A pass with the defaults merges the older objects into new ones.
	r.fillSeqs(t, Standard, name, 1200, 4000, 50)
	r.settleWith(t, Standard, settle.Config{})
	r.checkScan(t, name, 4000)
	r.checkLookups(t, name, 4000)
}

// TestTimestampLookupGallopsOverRefs: over a long stream of many refs (no
// objects: the ref alone is looked for), the ref holding the first record
// at or after a timestamp is found in a logarithmic number of metastore
// reads, where a scan in order would read every ref before it; at the
// edges, before the first record and past the last, too.
func TestTimestampLookupGallopsOverRefs(t *testing.T) {
	const refs, per = 5000, 10
	ctx := context.Background()
	mem := metastore.NewMem()
	id := "long"
	ts := func(seq uint64) int64 { return int64(seq / 4) } // ties across refs too
	for i := uint64(0); i < refs; i++ {
		start, end := i*per, (i+1)*per
		ref := absorb.SpanRef{Stream: id, Class: "standard", Start: start, End: end, MinTS: ts(start), MaxTS: ts(end - 1),
			Extents: []absorb.Extent{{Key: "chains/x", Length: 1, RawLength: 1, FirstSeq: start, Count: per, MinTimestamp: ts(start), MaxTimestamp: ts(end - 1)}}}
		b, err := json.Marshal(&ref)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := mem.Put(ctx, chain.RefKey(id, end), b, metastore.NoVersion); err != nil {
			t.Fatal(err)
		}
	}
	meta := &countingMeta{Store: mem}
	h := &history{meta: meta}
	maxReads := uint64(1 + 2*bits.Len64(refs*per))
	last := ts(refs*per - 1)
	for _, ms := range []int64{-1, 0, 1, 2, 3, 37, 38, 39, 4000, 6249, last - 1, last, last + 1, 1 << 40} {
		want := uint64(0) // the first seq stamped at or after ms
		for want < refs*per && ts(want) < ms {
			want++
		}
		before := meta.reads.Load()
		it, ref, err := h.firstRefAtTimestamp(ctx, id, ms)
		reads := meta.reads.Load() - before
		if err != nil {
			t.Fatalf("ts %d: %v", ms, err)
		}
		switch {
		case want == refs*per && it != nil:
			t.Errorf("ts %d past the last record: found ref [%d, %d)", ms, ref.Start, ref.End)
		case want < refs*per && (it == nil || ref.Start > want || ref.End <= want):
			t.Errorf("ts %d: found %v [%d, %d), want the ref holding %d", ms, it != nil, ref.Start, ref.End, want)
		}
		if reads > maxReads {
			t.Errorf("ts %d: %d metastore reads, want at most %d", ms, reads, maxReads)
		}
	}
}
