package metastoretest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/flightlog/flightlog/metastore"
)

// RunBenchmarks measures the calls flightlog makes of a metastore: Get, a
// CAS Put, a Commit of 1, 16 and 64 CAS puts (an absorb round's shape), and
// a Scan of 100 keys. Each reports ops/s (calls per second, one goroutine)
// and the p50 and p99 latency of one call in microseconds.
func RunBenchmarks(b *testing.B, h Harness) {
	if h.New == nil {
		b.Fatal("metastoretest: Harness.New is nil")
	}
	value := make([]byte, 256) // a span ref or checkpoint is a few hundred bytes

	b.Run("Get", func(b *testing.B) {
		s := h.New(b)
		benchPut(b, s, "bench/k", value, metastore.NoVersion)
		measure(b, func() error {
			_, err := s.Get(b.Context(), "bench/k")
			return err
		})
	})

	b.Run("PutCAS", func(b *testing.B) {
		s := h.New(b)
		v := benchPut(b, s, "bench/k", value, metastore.NoVersion)
		measure(b, func() (err error) {
			v, err = s.Put(b.Context(), "bench/k", value, v)
			return err
		})
	})

	for _, n := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("Commit/ops=%d", n), func(b *testing.B) {
			s := h.New(b)
			if lim := metastore.MaxCommitOps(s); lim > 0 && n > lim {
				b.Skipf("backend takes at most %d ops per Commit", lim)
			}
			ops := make([]metastore.Op, n)
			for i := range ops {
				ops[i] = metastore.Op{Kind: metastore.OpPut, Key: fmt.Sprintf("bench/%03d", i), Value: value, Expect: metastore.NoVersion}
			}
			measure(b, func() error {
				vs, err := s.Commit(b.Context(), ops)
				for i := range vs {
					ops[i].Expect = vs[i]
				}
				return err
			})
		})
	}

	b.Run("Scan/keys=100", func(b *testing.B) {
		s := h.New(b)
		for i := range 100 {
			benchPut(b, s, fmt.Sprintf("bench/%03d", i), value, metastore.NoVersion)
		}
		benchPut(b, s, "other", value, metastore.NoVersion)
		measure(b, func() error {
			items, err := s.Scan(b.Context(), "bench/", "", 0)
			if err == nil && len(items) != 100 {
				err = fmt.Errorf("Scan returned %d items, want 100", len(items))
			}
			return err
		})
	})
}

func benchPut(b *testing.B, s metastore.Store, key string, value []byte, expect metastore.Version) metastore.Version {
	b.Helper()
	v, err := s.Put(b.Context(), key, value, expect)
	if err != nil {
		b.Fatalf("Put(%q): %v", key, err)
	}
	return v
}

// measure runs op in a b.Loop, timing each call, and reports ops/s (calls
// over the loop's wall-clock time), p50-µs and p99-µs (of single calls).
func measure(b *testing.B, op func() error) {
	b.Helper()
	lat := make([]time.Duration, 0, 1<<12)
	for b.Loop() {
		t0 := time.Now()
		err := op()
		d := time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, d)
	}
	elapsed := b.Elapsed() // wall clock of the loop, timing overhead included
	if len(lat) == 0 || elapsed <= 0 {
		return
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[int(p*float64(len(lat)-1))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "ops/s")
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}
