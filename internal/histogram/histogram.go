// Package histogram is a fixed-size, lock-free, log-linear histogram for
// latencies and sizes: recording is two atomic adds, so it can sit on the
// ack path; a Snapshot answers percentiles to within about 3%.
//
// Values are non-negative int64 (nanoseconds, bytes). Each power of two is
// split into 32 linear sub-buckets, so the relative error of a quantile is at
// most 1/32 of the value.
package histogram

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

const (
	subBits    = 5
	subBuckets = 1 << subBits // per power of two
	// Values below subBuckets get one bucket each; above, 32 per octave.
	numBuckets = (64-subBits)*subBuckets + subBuckets
)

// H is a histogram. The zero value is ready to use. It is safe for
// concurrent use.
type H struct {
	counts [numBuckets]atomic.Uint64
	n      atomic.Uint64
	sum    atomic.Int64
	max    atomic.Int64
}

func bucketOf(v int64) int {
	if v < subBuckets {
		if v < 0 {
			return 0
		}
		return int(v)
	}
	u := uint64(v)
	exp := bits.Len64(u) - 1 // >= subBits
	shift := exp - subBits
	sub := int(u>>shift) & (subBuckets - 1)
	return (exp-subBits+1)*subBuckets + sub
}

// lowerBound is the smallest value that falls in bucket i.
func lowerBound(i int) int64 {
	if i < subBuckets {
		return int64(i)
	}
	exp := i/subBuckets + subBits - 1
	sub := i % subBuckets
	return int64((uint64(subBuckets) + uint64(sub)) << (exp - subBits))
}

// Record adds one observation of v (negative values count as 0).
func (h *H) Record(v int64) {
	if v < 0 {
		v = 0
	}
	h.counts[bucketOf(v)].Add(1)
	h.n.Add(1)
	h.sum.Add(v)
	for {
		m := h.max.Load()
		if v <= m || h.max.CompareAndSwap(m, v) {
			return
		}
	}
}

// RecordDuration adds one observation of d in nanoseconds.
func (h *H) RecordDuration(d time.Duration) { h.Record(int64(d)) }

// Snapshot is a point-in-time copy of a histogram.
type Snapshot struct {
	Count uint64
	Sum   int64
	Max   int64
	// buckets holds the non-empty buckets in ascending order.
	buckets []bucket
}

type bucket struct {
	lo    int64
	count uint64
}

// Snapshot copies the histogram. Concurrent Records may or may not be
// included; the copy is self-consistent enough for reporting.
func (h *H) Snapshot() Snapshot {
	s := Snapshot{Sum: h.sum.Load(), Max: h.max.Load()}
	for i := range h.counts {
		if c := h.counts[i].Load(); c > 0 {
			s.buckets = append(s.buckets, bucket{lowerBound(i), c})
			s.Count += c
		}
	}
	return s
}

// Quantile returns an estimate of the q-quantile (0 <= q <= 1): the lower
// bound of the bucket holding it, never above Max. 0 for an empty snapshot.
func (s Snapshot) Quantile(q float64) int64 {
	if s.Count == 0 {
		return 0
	}
	q = math.Max(0, math.Min(1, q))
	rank := uint64(math.Ceil(q * float64(s.Count)))
	if rank == 0 {
		rank = 1
	}
	var seen uint64
	for _, b := range s.buckets {
		seen += b.count
		if seen >= rank {
			return min(b.lo, s.Max)
		}
	}
	return s.Max
}

// QuantileDuration is Quantile for a histogram of nanoseconds.
func (s Snapshot) QuantileDuration(q float64) time.Duration {
	return time.Duration(s.Quantile(q))
}

// Mean returns the arithmetic mean, 0 for an empty snapshot.
func (s Snapshot) Mean() float64 {
	if s.Count == 0 {
		return 0
	}
	return float64(s.Sum) / float64(s.Count)
}

// Summary is the figures most reports want, in the histogram's unit.
type Summary struct {
	Count               uint64
	Mean                float64
	P50, P90, P99, P999 int64
	Max                 int64
}

// Summary reduces the snapshot to its usual percentiles.
func (s Snapshot) Summary() Summary {
	return Summary{
		Count: s.Count, Mean: s.Mean(),
		P50: s.Quantile(0.5), P90: s.Quantile(0.9), P99: s.Quantile(0.99), P999: s.Quantile(0.999),
		Max: s.Max,
	}
}
