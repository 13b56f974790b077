package envelope

import (
	"fmt"
	"testing"
)

// Benchmarks quote throughput in raw (uncompressed record) bytes per second,
// beside BenchmarkCopy of the same number of bytes so a ratio to a plain
// memory copy can be read off one run. Run:
//
//	go test ./envelope -run XXX -bench . -benchtime 1s -count 5

var benchSizes = []struct {
	name  string
	bytes int
}{{"64KiB", 64 << 10}, {"1MiB", 1 << 20}, {"8MiB", 8 << 20}}

// benchStreams is how many streams a benchmark flight interleaves; each
// becomes one frame.
const benchStreams = 4

// benchFlight returns the records of a flight of about size raw bytes of
// ~1 KiB JSON-like records, split over benchStreams streams.
func benchFlight(size int) [][]Record {
	per := max(1, size/benchStreams/1100)
	flight := make([][]Record, benchStreams)
	for s := range flight {
		flight[s] = jsonRecords(uint64(s+1), per, 1024)
	}
	return flight
}

// encodeFlight is the render's work: encode each stream's records into a
// reused buffer, add it as a frame, finish the object.
func encodeFlight(w *BundleWriter, buf []byte, flight [][]Record, codec Codec) ([]byte, []byte, []FrameInfo) {
	for s, recs := range flight {
		buf = buf[:0]
		for _, r := range recs {
			buf = AppendRecord(buf, r)
		}
		lo, hi := tsBounds(recs)
		if err := w.AddFrame(benchStreamName[s], 0, len(recs), lo, hi, buf, codec); err != nil {
			panic(err)
		}
	}
	obj, frames := w.Finish(1, 1, testNonce)
	return obj, buf, frames
}

var benchStreamName = []string{"orders", "payments", "users", "audit"}

func rawSize(frames []FrameInfo) (raw, stored int) {
	for _, f := range frames {
		raw += int(f.RawLength)
		stored += int(f.Length)
	}
	return raw, stored
}

func BenchmarkEncodeBundle(b *testing.B) {
	for _, codec := range allCodecs {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("codec=%s/size=%s", codec, size.name), func(b *testing.B) {
				flight := benchFlight(size.bytes)
				w := NewBundleWriter()
				var buf []byte
				_, buf, frames := encodeFlight(w, buf, flight, codec) // warm the shared encoders
				raw, stored := rawSize(frames)
				b.SetBytes(int64(raw))
				b.ResetTimer()
				for b.Loop() {
					_, buf, _ = encodeFlight(w, buf, flight, codec)
				}
				// After the loop: ResetTimer discards reported metrics.
				b.ReportMetric(float64(stored)/float64(raw), "stored/raw")
			})
		}
	}
}

func BenchmarkDecodeBundle(b *testing.B) {
	for _, codec := range allCodecs {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("codec=%s/size=%s", codec, size.name), func(b *testing.B) {
				obj, _, frames := encodeFlight(NewBundleWriter(), nil, benchFlight(size.bytes), codec)
				raw, stored := rawSize(frames)
				b.SetBytes(int64(raw))
				b.ResetTimer()
				for b.Loop() {
					_, frames, err := ParseBundle(obj)
					if err != nil {
						b.Fatal(err)
					}
					for _, f := range frames {
						if _, err := DecodeFrame(f, obj[f.Offset:f.End()]); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.ReportMetric(float64(stored)/float64(raw), "stored/raw")
			})
		}
	}
}

// BenchmarkCopy is the baseline: a plain copy of the same number of bytes
// into a preallocated buffer.
func BenchmarkCopy(b *testing.B) {
	for _, size := range benchSizes {
		b.Run("size="+size.name, func(b *testing.B) {
			_, _, frames := encodeFlight(NewBundleWriter(), nil, benchFlight(size.bytes), CodecNone)
			raw, _ := rawSize(frames)
			src, dst := make([]byte, raw), make([]byte, raw)
			for i := range src {
				src[i] = byte(i)
			}
			b.SetBytes(int64(raw))
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}

func BenchmarkChecksum(b *testing.B) {
	for _, size := range benchSizes {
		b.Run("size="+size.name, func(b *testing.B) {
			src := make([]byte, size.bytes)
			for i := range src {
				src[i] = byte(i)
			}
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				Checksum(src)
			}
		})
	}
}
