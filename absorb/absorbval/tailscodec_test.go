package absorbval

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/flightlog/flightlog/envelope"
)

// sampleTails is a snapshot with every field in use: empty and long IDs,
// negative timestamps, fencing tokens, producer windows.
func sampleTails() Tails {
	return Tails{Epoch: 3, Next: 1 << 40, Base: "snapshots/s/standard/from/1/2.3.p0", Streams: map[string]StreamTail{
		"":                             {Next: 1},
		"a":                            {Next: 7, Timestamp: -5, FencingToken: "tok"},
		"b/ü":                          {Next: math.MaxUint64, Timestamp: math.MinInt64, Producers: []ProducerTail{{ID: "p1", Seq: 4, Start: 1, End: 3, At: 17}, {ID: "", Seq: math.MaxUint64, At: math.MaxInt64}}},
		"c" + strings.Repeat("x", 300): {Next: 2, Timestamp: 1700000000000},
	}}
}

// legacyJSON is a snapshot as older versions wrote it: JSON and its CRC-32C.
func legacyJSON(t Tails) []byte {
	b, _ := json.Marshal(t)
	return binary.LittleEndian.AppendUint32(b, envelope.Checksum(b))
}

func TestTailsRoundTrip(t *testing.T) {
	for name, want := range map[string]Tails{
		"sample": sampleTails(),
		"empty":  {Epoch: 1, Next: 0, Streams: map[string]StreamTail{}},
	} {
		t.Run(name, func(t *testing.T) {
			b := EncodeTails(want)
			if string(b[:4]) != tailsMagic || b[4] != tailsVersion {
				t.Fatalf("encoded snapshot starts %q, want magic and version %d", b[:5], tailsVersion)
			}
			got, err := DecodeTails(b)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
			}
			// The encoding is deterministic whatever the map's order.
			for range 5 {
				if b2 := EncodeTails(want); string(b2) != string(b) {
					t.Fatalf("two encodings of the same tails differ")
				}
			}
		})
	}
}

// Snapshots written by older versions (JSON) still read, with the same
// content.
func TestTailsReadsLegacyJSON(t *testing.T) {
	want := sampleTails()
	got, err := DecodeTails(legacyJSON(want))
	if err != nil {
		t.Fatalf("decode JSON snapshot: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("JSON snapshot:\n got %+v\nwant %+v", got, want)
	}
	b := legacyJSON(want)
	b[10] ^= 1
	if _, err := DecodeTails(b); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("damaged JSON snapshot: err %v, want ErrCorrupt", err)
	}
}

// Every truncation and every single-bit flip of a snapshot is refused as
// ErrCorrupt (the checksum catches them); damage behind a good checksum
// (a buggy writer) is refused by the structure's checks, never a panic.
func TestTailsRefusesDamage(t *testing.T) {
	b := EncodeTails(sampleTails())
	for n := range len(b) {
		if _, err := DecodeTails(b[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d of %d bytes: err %v, want ErrCorrupt", n, len(b), err)
		}
	}
	for i := range len(b) {
		for bit := range 8 {
			c := append([]byte(nil), b...)
			c[i] ^= 1 << bit
			if _, err := DecodeTails(c); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("bit %d of byte %d flipped: err %v, want ErrCorrupt", bit, i, err)
			}
		}
	}
	// Structural damage under a valid checksum.
	body := b[:len(b)-4]
	resum := func(body []byte) []byte {
		return binary.LittleEndian.AppendUint32(append([]byte(nil), body...), envelope.Checksum(body))
	}
	header := func(streams, block uint64) []byte {
		out := append([]byte(tailsMagic), tailsVersion)
		out = binary.AppendUvarint(out, 1)
		out = binary.AppendUvarint(out, 2)
		out = binary.AppendUvarint(out, 0)
		out = binary.AppendUvarint(out, streams)
		return binary.AppendUvarint(out, block)
	}
	dup := append(header(2, 2), "aa"...)
	for range 2 {
		dup = append(dup, 1, 1, 0, 0, 0)
	}
	for name, c := range map[string]struct {
		body []byte
		want string
	}{
		"version 3":          {append([]byte(tailsMagic), 3), "format version 3"},
		"no magic":           {[]byte("XXXX\x02"), "no magic"},
		"trailing bytes":     {append(append([]byte(nil), body...), 0), "after the last"},
		"count past entries": {header(1000, 0), "stream count"},
		"block past end":     {header(0, 1000), "string block length"},
		"block unused":       {append(header(0, 1), 'x'), "string block unused"},
		"id past block":      {append(append(header(1, 1), 'a'), 5, 1, 0, 0, 0), "stream ID length"},
		"producers past end": {append(append(header(1, 1), 'a'), 1, 1, 0, 0, 100), "producer count"},
		"bad varint":         {append(append(header(1, 1), 'a'), 1, 0x80, 0x80, 0x80, 0x80), "next"},
		"stream twice":       {dup, "twice"},
	} {
		_, err := DecodeTails(resum(c.body))
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want ErrCorrupt saying %q", name, err, c.want)
		}
	}
}

func TestTailsEncoderCountsStreams(t *testing.T) {
	e := NewTailsEncoder(TailsHeader{Streams: 2}, 0)
	e.Add("a", StreamTail{})
	if _, err := e.Finish(); err == nil {
		t.Fatal("Finish after 1 of 2 announced streams: no error")
	}
}

// FuzzDecodeTails: whatever the bytes, the decoder returns tails or
// ErrCorrupt, never panics; what it returns encodes back to a snapshot
// that decodes to the same tails.
func FuzzDecodeTails(f *testing.F) {
	f.Add(EncodeTails(sampleTails()))
	f.Add(EncodeTails(Tails{}))
	f.Add(legacyJSON(sampleTails()))
	f.Add([]byte("FLTS\x02"))
	f.Fuzz(func(t *testing.T, b []byte) {
		// Most mutations fail the checksum: fix it up half the time, so
		// the structure's checks are exercised.
		if len(b) > 4 && b[0]&1 == 0 {
			b = binary.LittleEndian.AppendUint32(b[:len(b)-4:len(b)-4], envelope.Checksum(b[:len(b)-4]))
		}
		got, err := DecodeTails(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		again, err := DecodeTails(EncodeTails(got))
		if err != nil {
			t.Fatalf("re-encoded snapshot: %v", err)
		}
		if len(again.Streams) != len(got.Streams) || again.Epoch != got.Epoch || again.Next != got.Next || again.Base != got.Base {
			t.Fatalf("re-encoded snapshot differs: %+v, want %+v", again, got)
		}
	})
}

// manyTails is n streams with IDs shaped as BenchmarkManyStreams' (the
// name, a unit separator, the incarnation), each with a tail as the
// benchmark leaves it.
func manyTails(n int) Tails {
	t := Tails{Epoch: 2, Next: 12345, Streams: make(map[string]StreamTail, n)}
	for i := range n {
		t.Streams[fmt.Sprintf("ms-%07d\x1fi%016x", i, uint64(i)*0x9E3779B97F4A7C15)] = StreamTail{Next: 1 + uint64(i%7), Timestamp: 1764700000000 + int64(i)}
	}
	return t
}

// BenchmarkTailsCodec times a full snapshot's encode and decode, binary
// against the JSON of older versions (go test ./absorb/absorbval -run '^$'
// -bench TailsCodec -benchtime 3x).
func BenchmarkTailsCodec(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		tl := manyTails(n)
		bin, js := EncodeTails(tl), legacyJSON(tl)
		b.Run(fmt.Sprintf("streams=%d/binary/encode", n), func(b *testing.B) {
			for b.Loop() {
				EncodeTails(tl)
			}
			b.ReportMetric(float64(len(bin))/1e6, "MB")
		})
		b.Run(fmt.Sprintf("streams=%d/binary/decode-each", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := DecodeTailsFunc(bin, func(TailsHeader) {}, func(string, StreamTail) {}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("streams=%d/binary/decode-map", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := DecodeTails(bin); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("streams=%d/json/encode", n), func(b *testing.B) {
			for b.Loop() {
				legacyJSON(tl)
			}
			b.ReportMetric(float64(len(js))/1e6, "MB")
		})
		b.Run(fmt.Sprintf("streams=%d/json/decode-map", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := DecodeTails(js); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
