package objstoretest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// benchSizes are the object sizes RunBenchmarks measures: a small slot, a
// typical Express flight, a typical Standard flight, and a large one.
var benchSizes = []struct {
	name string
	size int
}{
	{"1KiB", 1 << 10},
	{"64KiB", 64 << 10},
	{"1MiB", 1 << 20},
	{"8MiB", 8 << 20},
}

// RunBenchmarks measures PutIfAbsent and Get of whole objects of several
// sizes, one call at a time, over a store from h.New. Each sub-benchmark
// reports throughput (b.SetBytes) and the p50 and p99 latency of single
// calls in microseconds (metrics "p50-µs" and "p99-µs").
//
// PutIfAbsent writes a fresh key per call and deletes it outside the timed
// region, so a long run does not fill the store.
func RunBenchmarks(b *testing.B, h Harness) {
	for _, sz := range benchSizes {
		body := make([]byte, sz.size)
		for i := range body {
			body[i] = byte(i*7 + i>>9)
		}
		b.Run("op=PutIfAbsent/size="+sz.name, func(b *testing.B) {
			s := h.New(b)
			ctx := context.Background()
			lat := make([]time.Duration, 0, b.N)
			b.SetBytes(int64(sz.size))
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				key := fmt.Sprintf("bench/put/%s/%012d", sz.name, i)
				start := time.Now()
				if err := s.PutIfAbsent(ctx, key, body); err != nil {
					b.Fatalf("PutIfAbsent(%q) = %v", key, err)
				}
				lat = append(lat, time.Since(start))
				b.StopTimer()
				if err := s.Delete(ctx, key); err != nil {
					b.Fatalf("Delete(%q) = %v", key, err)
				}
				b.StartTimer()
			}
			reportLatency(b, lat)
		})
		b.Run("op=Get/size="+sz.name, func(b *testing.B) {
			s := h.New(b)
			ctx := context.Background()
			key := "bench/get/" + sz.name
			if err := s.PutIfAbsent(ctx, key, body); err != nil {
				b.Fatalf("PutIfAbsent(%q) = %v", key, err)
			}
			lat := make([]time.Duration, 0, b.N)
			b.SetBytes(int64(sz.size))
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				got, err := s.Get(ctx, key, 0, -1)
				if err != nil {
					b.Fatalf("Get(%q) = %v", key, err)
				}
				lat = append(lat, time.Since(start))
				if len(got) != sz.size {
					b.Fatalf("Get(%q) returned %d bytes, want %d", key, len(got), sz.size)
				}
			}
			reportLatency(b, lat)
		})
	}
}

// reportLatency reports the p50 and p99 of the measured call latencies.
func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	q := func(p float64) float64 {
		i := int(p * float64(len(lat)-1))
		return float64(lat[i]) / float64(time.Microsecond)
	}
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
}
