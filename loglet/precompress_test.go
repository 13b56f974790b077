package loglet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// TestPrecompressDefaults: Express compresses large batches at admission
// by default, Standard never does.
func TestPrecompressDefaults(t *testing.T) {
	c := DefaultConfig()
	if c.Standard.PrecompressBytes != DefaultStandardPrecompressBytes || c.Standard.PrecompressBytes >= 0 {
		t.Fatalf("Standard PrecompressBytes %d, want %d (never)", c.Standard.PrecompressBytes, DefaultStandardPrecompressBytes)
	}
	if c.Express.PrecompressBytes != DefaultExpressPrecompressBytes || c.Express.PrecompressBytes <= 0 {
		t.Fatalf("Express PrecompressBytes %d, want %d", c.Express.PrecompressBytes, DefaultExpressPrecompressBytes)
	}
}

// TestPrecompressedBatches: a batch of PrecompressBytes or more is
// compressed at admission and written as a frame of its own (compressed,
// or stored as is when compressing does not pay); smaller batches of the
// same stream are grouped and compressed at the claim. Every record reads
// back byte for byte through the leader and, after a clean close, through
// a Reader from the objects alone; the extra charge for the compressed
// copy is returned to the pool. A batch whose timestamps would go
// backwards is re-stamped by the leader, and its stored form (made of the
// old encoding) is not used.
func TestPrecompressedBatches(t *testing.T) {
	for _, tc := range []struct {
		codec envelope.Codec
		pre   int
	}{{envelope.CodecS2, 4 << 10}, {envelope.CodecZstd, 4 << 10}, {envelope.CodecS2, -1}} {
		codec := tc.codec
		t.Run(fmt.Sprintf("%s/precompress=%d", codec, tc.pre), func(t *testing.T) {
			ctx := context.Background()
			meta, mem := metastore.NewMem(), objstore.NewMem()
			cfg := Config{Star: "pc", Owner: "p1", Meta: meta, Logger: testLogger(),
				Standard: ClassConfig{Stores: []objstore.Store{mem}, Codec: codec, PrecompressBytes: tc.pre}}
			s, err := Open(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.CreateStream(ctx, "logs", StreamOptions{}); err != nil {
				t.Fatal(err)
			}
			if got := s.classConfig(Standard).PrecompressBytes; got != tc.pre {
				t.Fatalf("PrecompressBytes %d in force, want %d", got, tc.pre)
			}
			rnd := rand.New(rand.NewPCG(9, 9))
			type sent struct {
				start, n int
				kind     string
			}
			var want []Record
			var batches []sent
			random := func(n int) []byte {
				b := make([]byte, n)
				for i := range b {
					b[i] = byte(rnd.Uint32())
				}
				return b
			}
			sess, err := s.OpenAppendSession(ctx, "logs")
			if err != nil {
				t.Fatal(err)
			}
			var futures []*AckFuture
			for i := 0; i < 60; i++ {
				var recs []Record
				kind := []string{"large", "incompressible", "small", "backwards"}[i%4]
				switch kind {
				case "large":
					for j := 0; j < 8; j++ {
						recs = append(recs, Record{Body: []byte(strings.Repeat(fmt.Sprintf("line %d.%d ", i, j), 60))})
					}
				case "incompressible":
					recs = []Record{{Body: random(6000)}}
				case "small":
					recs = []Record{{Body: []byte(fmt.Sprintf("small %d", i))}}
				case "backwards":
					// Explicit timestamps, the second before the first: the
					// leader re-stamps the batch at admission.
					now := int64(1_700_000_000_000)
					recs = []Record{
						{Timestamp: now + 10, Body: []byte(strings.Repeat("b", 3000))},
						{Timestamp: now, Body: []byte(strings.Repeat("c", 3000))},
					}
				}
				f, err := sess.Submit(ctx, Batch{Records: recs})
				if err != nil {
					t.Fatal(err)
				}
				futures = append(futures, f)
				batches = append(batches, sent{len(want), len(recs), kind})
				want = append(want, recs...)
			}
			for i, f := range futures {
				ack, err := f.Wait(ctx)
				if err != nil {
					t.Fatalf("batch %d: %v", i, err)
				}
				if int(ack.Start) != batches[i].start {
					t.Fatalf("batch %d acked at %d, want %d", i, ack.Start, batches[i].start)
				}
			}
			check := func(who string, got []SequencedRecord) {
				t.Helper()
				if len(got) != len(want) {
					t.Fatalf("%s: %d records, want %d", who, len(got), len(want))
				}
				for i, r := range got {
					if r.Seq != uint64(i) || !bytes.Equal(r.Body, want[i].Body) {
						t.Fatalf("%s: record %d is seq %d, %d bytes: not what was appended", who, i, r.Seq, len(r.Body))
					}
					if i > 0 && r.Timestamp < got[i-1].Timestamp {
						t.Fatalf("%s: record %d's timestamp %d precedes %d", who, i, r.Timestamp, got[i-1].Timestamp)
					}
				}
			}
			check("leader", readAll(t, s, "logs"))
			if st := s.Stats().Standard.Pool; st.ReservedBytes != 0 {
				t.Fatalf("every batch acked, yet %d pool bytes reserved", st.ReservedBytes)
			}
			if err := s.Close(ctx); err != nil {
				t.Fatal(err)
			}

			// The objects: a batch compressed at admission is a frame of
			// its own; an incompressible one is stored as is.
			alone := map[uint64]envelope.FrameInfo{}
			for _, k := range mem.Keys() {
				if !strings.HasPrefix(k, "chains/") {
					continue
				}
				obj, err := mem.Get(ctx, k, 0, -1)
				if err != nil {
					t.Fatal(err)
				}
				env, frames, err := envelope.ParseBundle(obj)
				if err != nil || env.Kind != envelope.KindFlight {
					continue // a poison or a seal
				}
				for _, f := range frames {
					alone[f.FirstSeq] = f
				}
			}
			if tc.pre < 0 {
				// Nothing compressed ahead: a flight's batches of the
				// stream are grouped into frames.
				if len(alone) >= len(batches) {
					t.Fatalf("%d frames for %d batches: nothing grouped", len(alone), len(batches))
				}
			}
			for i, b := range batches {
				if (b.kind != "large" && b.kind != "incompressible") || tc.pre < 0 {
					continue
				}
				f, ok := alone[uint64(b.start)]
				if !ok || int(f.Count) != b.n {
					t.Fatalf("batch %d (%s, seq %d, %d records) is not a frame of its own: %+v", i, b.kind, b.start, b.n, f)
				}
				if wantCodec := map[string]envelope.Codec{"large": codec, "incompressible": envelope.CodecNone}[b.kind]; f.Codec != wantCodec {
					t.Fatalf("batch %d (%s) stored with %s, want %s", i, b.kind, f.Codec, wantCodec)
				}
			}

			rd, err := NewReader(ReaderConfig{Meta: meta, Standard: []objstore.Store{mem}, ReadCacheMiB: -1})
			if err != nil {
				t.Fatal(err)
			}
			var got []SequencedRecord
			for next := uint64(0); next < uint64(len(want)); {
				res, err := rd.Read(ctx, "logs", ReadQuery{Start: AtSeq(next)})
				if err != nil {
					t.Fatalf("reader at %d: %v", next, err)
				}
				if len(res.Records) == 0 {
					t.Fatalf("reader at %d: nothing", next)
				}
				got = append(got, res.Records...)
				next = res.Next
			}
			check("reader", got)
		})
	}
}

// TestRecycledObjectsAreNotReusedEarly: flight objects are recycled into
// the next render once every copy's PUT has returned, never before. With
// one bucket of three slow, a recycle at the W-th copy would hand the slow
// copy's bytes to the next flight (under -tags invariants, overwrite them
// at once): every slot's three copies must be byte-identical and decode.
func TestRecycledObjectsAreNotReusedEarly(t *testing.T) {
	synctest.Test(t, testRecycledObjectsAreNotReusedEarly)
}

func testRecycledObjectsAreNotReusedEarly(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, Express, 3, 5, func(c *Config, fs []*objstore.FaultStore) {
		fs[2].SetLatency(fault.Fixed(3*time.Millisecond), fault.Put)
		c.Express.Codec = CodecNone
		c.Express.FlightBytes = 4 << 10 // many flights
	})
	sess, err := r.star.OpenAppendSession(ctx, "rec")
	if err != nil {
		t.Fatal(err)
	}
	var futures []*AckFuture
	for i := 0; i < 300; i++ {
		f, err := sess.Submit(ctx, Batch{Records: []Record{{Body: []byte(fmt.Sprintf("record %d %s", i, strings.Repeat("z", i%300)))}}})
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Wait for the slow bucket's copies (stragglers past W) to land:
	// Close would cancel them.
	chainKeys := func(m *objstore.Mem) int {
		n := 0
		for _, k := range m.Keys() {
			if strings.HasPrefix(k, "chains/") {
				n++
			}
		}
		return n
	}
	if !quiesceUntil(20*time.Second, time.Millisecond, func() bool { return chainKeys(r.mems[2]) >= chainKeys(r.mems[0]) }) {
		t.Fatalf("the slow bucket holds %d slots of %d", chainKeys(r.mems[2]), chainKeys(r.mems[0]))
	}
	if err := r.star.Close(ctx); err != nil {
		t.Fatal(err)
	}
	slots := 0
	for _, k := range r.mems[0].Keys() {
		if !strings.HasPrefix(k, "chains/") {
			continue
		}
		var first []byte
		for i, m := range r.mems {
			obj, err := m.Get(ctx, k, 0, -1)
			if errors.Is(err, objstore.ErrNotFound) && i == 2 {
				continue // a straggler Close cancelled (the seal's slot)
			}
			if err != nil {
				t.Fatalf("%s copy %d: %v", k, i, err)
			}
			if i == 0 {
				first = obj
			} else if !bytes.Equal(obj, first) {
				t.Fatalf("%s: copy %d differs from copy 0", k, i)
			}
		}
		env, frames, err := envelope.ParseBundle(first)
		if err != nil || env.Kind != envelope.KindFlight {
			continue
		}
		for _, f := range frames {
			if _, err := envelope.DecodeFrame(f, first[f.Offset:f.End()]); err != nil {
				t.Fatalf("%s: %v", k, err)
			}
		}
		slots++
	}
	if slots < 10 {
		t.Fatalf("only %d flights: the test did not exercise recycling", slots)
	}
}

// TestPrecompressNeverWaitsWhileHolding: a batch whose payload and
// compressed copy together exceed what is left of the pool's budget is
// admitted and acked at once, compressed at the claim: admission never
// waits for the compressed copy's charge while holding the payload's
// (with the payload alone filling most of the budget, that wait could
// never end). The skip is counted, and the budget is whole afterwards.
func TestPrecompressNeverWaitsWhileHolding(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	mem := objstore.NewMem()
	cfg := Config{Star: "pc", Owner: "p1", Meta: metastore.NewMem(), Logger: testLogger(), MaxBatchBytes: 1 << 20, MaxRecordBytes: 1 << 20,
		Standard: ClassConfig{Stores: []objstore.Store{mem}, Codec: envelope.CodecS2, PrecompressBytes: 4 << 10, MemoryBufferMiB: 1}}
	s, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if _, err := s.CreateStream(ctx, "big", StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	// 720 KB that S2 halves: payload + compressed copy > 1 MiB.
	rnd := rand.New(rand.NewPCG(3, 3))
	body := make([]byte, 0, 720<<10)
	for len(body) < cap(body) {
		chunk := make([]byte, 64)
		for i := range chunk {
			chunk[i] = byte(rnd.Uint32())
		}
		body = append(body, chunk...)
		body = append(body, bytes.Repeat([]byte{'a'}, 64)...)
	}
	for i := 0; i < 3; i++ {
		ack, err := s.Append(ctx, "big", Batch{Records: []Record{{Body: body}}})
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		if ack.Start != uint64(i) {
			t.Fatalf("append %d acked at %d", i, ack.Start)
		}
	}
	st := s.Stats().Standard
	if st.PrecompressSkipped != 3 {
		t.Fatalf("%d batches compressed at the claim for want of budget, want 3", st.PrecompressSkipped)
	}
	if st.Pool.ReservedBytes != 0 {
		t.Fatalf("%d pool bytes still reserved", st.Pool.ReservedBytes)
	}
	got := readAll(t, s, "big")
	if len(got) != 3 || !bytes.Equal(got[2].Body, body) {
		t.Fatalf("read back %d records", len(got))
	}
}
