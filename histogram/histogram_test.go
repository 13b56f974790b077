package histogram

import (
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// pow2Scaled returns scale^32 * 2^i as a fraction num/den of integers, so
// u <= scale*2^(i/32) can be checked exactly as u^32 * den <= num.
func pow2Scaled(scale int64, i int32) (num, den *big.Int) {
	num = new(big.Int).Exp(big.NewInt(scale), big.NewInt(perOctave), nil)
	den = big.NewInt(1)
	if i >= 0 {
		num.Lsh(num, uint(i))
	} else {
		den.Lsh(den, uint(-i))
	}
	return num, den
}

// atMost reports whether u <= scale * 2^(i/32), in exact integers.
func atMost(u uint64, scale int64, i int32) bool {
	num, den := pow2Scaled(scale, i)
	lhs := new(big.Int).Exp(new(big.Int).SetUint64(u), big.NewInt(perOctave), nil)
	return lhs.Mul(lhs, den).Cmp(num) <= 0
}

func TestLayoutIsExact(t *testing.T) {
	for _, c := range []struct {
		l     *layout
		scale int64
	}{{unitLayout(), 1}, {latencyLayout(), 1e9}} {
		l := c.l
		if atMost(1, c.scale, l.first-1) {
			t.Fatalf("scale %d: 1 fits below the first bucket %d", c.scale, l.first)
		}
		for j, u := range l.upper {
			i := l.first + int32(j)
			if !atMost(u, c.scale, i) || atMost(u+1, c.scale, i) {
				t.Fatalf("scale %d: upper bound of bucket %d is %d, not floor(scale*2^(i/32))", c.scale, i, u)
			}
		}
		if last := l.upper[len(l.upper)-1]; last < 1<<63 || l.upper[len(l.upper)-2] >= 1<<63 {
			t.Fatalf("scale %d: table ends at %d, %d", c.scale, l.upper[len(l.upper)-2], last)
		}
		t.Logf("scale %d: buckets %d..%d", c.scale, l.first, l.first+int32(len(l.upper))-1)
	}
}

// TestSlotIsTheDefinition checks that every value lands in the bucket the
// package doc defines: upper[j-1] < v <= upper[j].
func TestSlotIsTheDefinition(t *testing.T) {
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 2))
	for _, l := range []*layout{unitLayout(), latencyLayout()} {
		var vals []uint64
		for _, u := range l.upper {
			for _, v := range []uint64{u - 1, u, u + 1} {
				if v >= 1 && v < 1<<63 {
					vals = append(vals, v)
				}
			}
		}
		for e := range 63 {
			vals = append(vals, 1<<e, 1<<e+1, 1<<(e+1)-1)
		}
		for range 100000 {
			vals = append(vals, r.Uint64N(1<<r.IntN(63)+1)+1)
		}
		for _, v := range vals {
			j := l.slot(v)
			if v > l.upper[j] || (j > 0 && v <= l.upper[j-1]) {
				t.Fatalf("seed %d, scale %g: %d in slot %d of bounds (%d, %d]", seed, l.scale, v, j, l.upper[max(j-1, 0)], l.upper[j])
			}
		}
	}
}

// TestBucketsMatchTheFloatFormula checks the bucket index against the
// formula an exporter's reader applies, ceil(32*log2(v/scale)), away from
// the bounds where float rounding could decide either way.
// TestSlotStepsAtMostOnce checks what slot relies on for its speed: every
// linear sub-bucket's values lie in the bucket of its smallest or the next.
func TestSlotStepsAtMostOnce(t *testing.T) {
	for _, l := range []*layout{unitLayout(), latencyLayout()} {
		for g := 1; g < len(l.start); g++ {
			largest := uint64(math.MaxInt64)
			if g+1 < len(l.start) {
				largest = guessFloor(g+1) - 1
			}
			if guess(largest) != g || guess(guessFloor(g)) != g {
				t.Fatalf("sub-bucket %d: [%d, %d] guessed %d, %d", g, guessFloor(g), largest, guess(guessFloor(g)), guess(largest))
			}
			if j := l.slot(largest); j > int(l.start[g])+1 {
				t.Fatalf("scale %g: sub-bucket %d spans slots %d..%d", l.scale, g, l.start[g], j)
			}
		}
	}
}

func TestBucketsMatchTheFloatFormula(t *testing.T) {
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 3))
	var lat Latency
	var h H
	for range 2000 {
		v := int64(r.ExpFloat64() * 3e6)
		lat.RecordDuration(time.Duration(v))
		h.Record(v)
	}
	for _, s := range []Snapshot{lat.Snapshot(), h.Snapshot()} {
		for _, b := range s.Buckets {
			lo, hi := s.lowest(b.Index), s.layout.upper[b.Index-s.layout.first]
			for _, v := range []int64{lo, int64(hi)} {
				x := perOctave * math.Log2(float64(v)/s.Scale)
				if math.Abs(x-math.Round(x)) < 1e-6 {
					continue
				}
				if want := int32(math.Ceil(x)); want != b.Index {
					t.Errorf("seed %d, scale %g: %d is in bucket %d, formula says %d", seed, s.Scale, v, b.Index, want)
				}
			}
		}
	}
}

func TestQuantilesWithinRelativeError(t *testing.T) {
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 1))
	var h H
	var lat Latency
	vals := make([]int64, 20000)
	for i := range vals {
		vals[i] = int64(r.ExpFloat64() * 5e6) // ns, heavy-ish tail
		h.Record(vals[i])
		lat.RecordDuration(time.Duration(vals[i]))
	}
	slices.Sort(vals)
	bound := 1 - math.Exp2(-1.0/perOctave) // 2.14%
	for _, s := range []Snapshot{h.Snapshot(), lat.Snapshot()} {
		if s.Count != uint64(len(vals)) {
			t.Fatalf("count %d want %d", s.Count, len(vals))
		}
		for _, q := range []float64{0, 0.01, 0.5, 0.9, 0.99, 0.999, 1} {
			want := vals[max(0, int(math.Ceil(float64(len(vals))*q))-1)]
			got := s.Quantile(q)
			if d := float64(want-got) / float64(max(want, 1)); got > want || d >= bound {
				t.Errorf("seed %d, scale %g: q%.3f = %d, exact %d (%.4f below, bound %.4f)", seed, s.Scale, q, got, want, d, bound)
			}
		}
		if s.Max != vals[len(vals)-1] {
			t.Errorf("max %d want %d", s.Max, vals[len(vals)-1])
		}
	}
}

func TestSmallValuesAreExact(t *testing.T) {
	var h H
	for v := int64(-3); v <= 40; v++ {
		h.Record(v)
	}
	s := h.Snapshot()
	if s.ZeroCount != 4 || s.Count != 44 {
		t.Fatalf("zero %d count %d, want 4 and 44", s.ZeroCount, s.Count)
	}
	// 1..40 each in a bucket of its own: a base of 2^(1/32) separates
	// integers up to 46.
	if len(s.Buckets) != 40 {
		t.Fatalf("%d buckets for 1..40: %v", len(s.Buckets), s.Buckets)
	}
	for k := 1; k <= 40; k++ {
		if got := s.Quantile((float64(4+k) - 0.5) / 44); got != int64(k) {
			t.Errorf("quantile of rank %d = %d, want %d", 4+k, got, k)
		}
	}
}

func TestCountAtOrBelow(t *testing.T) {
	var lat Latency
	for _, d := range []time.Duration{0, time.Millisecond, time.Second, time.Second + 1, 2 * time.Second} {
		lat.RecordDuration(d)
	}
	s := lat.Snapshot()
	for _, c := range []struct {
		i    int32
		want uint64
	}{{-1000, 1}, {-319, 1}, {-318, 2}, {-1, 2}, {0, 3}, {1, 4}, {31, 4}, {32, 5}} {
		// 1ms = 2^(-9.97) s: bucket ceil(-318.9) = -318.
		if got := s.CountAtOrBelow(c.i); got != c.want {
			t.Errorf("CountAtOrBelow(%d) = %d, want %d (buckets %v)", c.i, got, c.want, s.Buckets)
		}
	}
}

func TestConcurrentRecord(t *testing.T) {
	var h H
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range 1000 {
				h.Record(int64(i))
			}
		})
	}
	wg.Wait()
	if s := h.Snapshot(); s.Count != 8000 || s.Max != 999 || s.ZeroCount != 8 {
		t.Fatalf("count %d max %d zero %d", s.Count, s.Max, s.ZeroCount)
	}
}

func TestEmpty(t *testing.T) {
	var h H
	if s := h.Snapshot(); s.Quantile(0.5) != 0 || s.Mean() != 0 || len(s.Buckets) != 0 {
		t.Fatal("empty histogram should report zeros")
	}
	var zero Snapshot
	if zero.Quantile(0.99) != 0 || zero.Summary() != (Summary{}) {
		t.Fatal("zero Snapshot should report zeros")
	}
}

func BenchmarkRecord(b *testing.B) {
	var h Latency
	b.RunParallel(func(pb *testing.PB) {
		v := int64(12345)
		for pb.Next() {
			h.RecordDuration(time.Duration(v))
			v = v*7 + 1&0xffffff
		}
	})
}
