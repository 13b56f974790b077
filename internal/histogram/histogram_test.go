package histogram

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

func TestBucketBoundsAreMonotoneAndTight(t *testing.T) {
	prev := int64(-1)
	for i := 0; i < numBuckets; i++ {
		lo := lowerBound(i)
		if lo <= prev {
			t.Fatalf("bucket %d lower bound %d not above previous %d", i, lo, prev)
		}
		if got := bucketOf(lo); got != i {
			t.Fatalf("bucketOf(lowerBound(%d)=%d) = %d", i, lo, got)
		}
		if i > 0 && bucketOf(lo-1) != i-1 {
			t.Fatalf("bucketOf(%d) = %d, want %d", lo-1, bucketOf(lo-1), i-1)
		}
		prev = lo
		if lo > 1<<62 {
			break
		}
	}
}

func TestQuantilesWithinRelativeError(t *testing.T) {
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 1))
	var h H
	vals := make([]int64, 20000)
	for i := range vals {
		vals[i] = int64(r.ExpFloat64() * 5e6) // ns, heavy-ish tail
		h.Record(vals[i])
	}
	slices.Sort(vals)
	s := h.Snapshot()
	if s.Count != uint64(len(vals)) {
		t.Fatalf("count %d want %d", s.Count, len(vals))
	}
	for _, q := range []float64{0.01, 0.5, 0.9, 0.99, 0.999, 1} {
		want := vals[max(0, int(float64(len(vals))*q+0.5)-1)]
		got := s.Quantile(q)
		if d := float64(got-want) / float64(max(want, 1)); d > 0.04 || d < -0.04 {
			t.Errorf("seed %d: q%.3f = %d, exact %d (rel err %.3f)", seed, q, got, want, d)
		}
	}
	if s.Max != vals[len(vals)-1] {
		t.Errorf("max %d want %d", s.Max, vals[len(vals)-1])
	}
}

func TestConcurrentRecord(t *testing.T) {
	var h H
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				h.Record(int64(i))
			}
		}()
	}
	wg.Wait()
	if s := h.Snapshot(); s.Count != 8000 || s.Max != 999 {
		t.Fatalf("count %d max %d", s.Count, s.Max)
	}
}

func TestEmpty(t *testing.T) {
	var h H
	if s := h.Snapshot(); s.Quantile(0.5) != 0 || s.Mean() != 0 {
		t.Fatal("empty histogram should report zeros")
	}
}

func BenchmarkRecord(b *testing.B) {
	var h H
	b.RunParallel(func(pb *testing.PB) {
		v := int64(12345)
		for pb.Next() {
			h.Record(v)
			v = v*7 + 1&0xffffff
		}
	})
}
