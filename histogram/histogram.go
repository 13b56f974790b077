// Package histogram is a fixed-size, lock-free histogram for latencies and
// sizes whose buckets are exactly those of a Prometheus native histogram of
// schema 5 and an OpenTelemetry exponential histogram of scale 5, so an
// exporter copies the counts across without re-bucketing.
//
// Values are non-negative integers (nanoseconds, bytes); a negative value
// counts as 0, which has a bucket of its own (ZeroCount). Bucket i holds the
// values v with
//
//	2^((i-1)/32) < v/Scale <= 2^(i/32)
//
// where Scale is the number of recorded units in one bucket unit: 1 for an
// H (bytes are bucketed in bytes) and 1e9 for a Latency (durations are
// recorded in nanoseconds and bucketed in seconds, the unit Prometheus and
// OpenTelemetry's conventions want). That is Prometheus' indexing; an
// OpenTelemetry bucket index is i-1. Each power of two holds 32 buckets, so
// a bucket's bounds are a factor 2^(1/32) = 1.0219 apart and a quantile read
// from a Snapshot is at most 2.14% below the exact one, never above.
//
// Recording is a table lookup, a comparison and three atomic adds (about as
// fast as the log-linear layout this replaced), so it can sit on the ack
// path.
package histogram

import (
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// Schema is the Prometheus native histogram schema and the OpenTelemetry
// exponential histogram scale of every histogram here: 2^Schema buckets per
// power of two.
const Schema = 5

const (
	perOctave = 1 << Schema
	// maxBuckets bounds either layout's bucket count (2017 each: from the
	// bucket holding 1 to the first whose upper bound reaches 2^63).
	maxBuckets = 2048
)

// A layout is one scale's exact bucket table.
type layout struct {
	scale float64
	first int32 // Index of the bucket upper[0] bounds (the first holding 1)
	// upper[j] is the largest integer in bucket first+j:
	// floor(scale * 2^((first+j)/32)). The last entry is >= 2^63.
	upper []uint64
	// start[g] is the slot of the smallest value of linear sub-bucket g
	// (see guess): a sub-bucket is narrower than a bucket, so a value of
	// sub-bucket g is in slot start[g] or the next.
	start []uint16
}

// guessBits splits each power of two into 64 linear sub-buckets, each at
// most 2^(1/64) wide: narrower than a bucket.
const guessBits = 6

// guess is the linear sub-bucket of v >= 1: v itself below 64, then 64 per
// power of two.
func guess(v uint64) int {
	if v < 1<<guessBits {
		return int(v)
	}
	exp := bits.Len64(v) - 1
	shift := exp - guessBits
	return (exp-guessBits+1)<<guessBits + int(v>>shift)&(1<<guessBits-1)
}

// guessFloor is the smallest value of sub-bucket g.
func guessFloor(g int) uint64 {
	if g < 1<<guessBits {
		return uint64(g)
	}
	exp := g>>guessBits + guessBits - 1
	return (1<<guessBits + uint64(g)&(1<<guessBits-1)) << (exp - guessBits)
}

// The tables take about 1.5 ms each to compute: on first use, not at
// every importing program's start.
var (
	unitLayout    = sync.OnceValue(func() *layout { return newLayout(1) })
	latencyLayout = sync.OnceValue(func() *layout { return newLayout(1e9) })
)

// newLayout computes floor(scale * 2^(i/32)) for every bucket from the one
// holding 1 up, with 256-bit arithmetic so every entry is exact (the test
// checks each against u^32 <= scale^32 * 2^i < (u+1)^32 in integers).
func newLayout(scale int64) *layout {
	const prec = 256
	// roots[r] = 2^(r/32): five square roots of 2^r.
	var roots [perOctave]*big.Float
	for r := range roots {
		x := new(big.Float).SetPrec(prec).SetMantExp(big.NewFloat(1).SetPrec(prec), r)
		for range Schema {
			x.Sqrt(x)
		}
		roots[r] = x
	}
	s := new(big.Float).SetPrec(prec).SetInt64(scale)
	upperOf := func(i int32) uint64 {
		q, r := i/perOctave, i%perOctave
		if r < 0 {
			q, r = q-1, r+perOctave
		}
		x := new(big.Float).SetPrec(prec).Mul(s, roots[r])
		x.SetMantExp(x, int(q))
		u, _ := x.Uint64() // truncates toward zero: the floor
		return u
	}
	l := &layout{scale: float64(scale)}
	// The first index whose upper bound is at least 1.
	i := int32(math.Floor(-perOctave*math.Log2(float64(scale)))) - 2
	for upperOf(i) >= 1 {
		i--
	}
	for upperOf(i) < 1 {
		i++
	}
	l.first = i
	for ; ; i++ {
		u := upperOf(i)
		l.upper = append(l.upper, u)
		if u >= 1<<63 {
			break
		}
	}
	if len(l.upper) > maxBuckets {
		panic(fmt.Sprintf("histogram: scale %d needs %d buckets, more than %d", scale, len(l.upper), maxBuckets))
	}
	l.start = make([]uint16, guess(math.MaxInt64)+1)
	j := 0
	for g := 1; g < len(l.start); g++ {
		for l.upper[j] < guessFloor(g) {
			j++
		}
		l.start[g] = uint16(j)
	}
	return l
}

// slot returns the position in upper of the bucket holding v >= 1.
func (l *layout) slot(v uint64) int {
	j := int(l.start[guess(v)])
	for v > l.upper[j] { // at most once
		j++
	}
	return j
}

// lowest is the smallest integer in bucket index i (which may hold none, if
// it is below 1 or narrower than 1; then the next one up).
func (l *layout) lowest(i int32) int64 {
	j := int(i - l.first)
	if j <= 0 {
		return 1
	}
	return int64(min(l.upper[min(j, len(l.upper))-1], math.MaxInt64-1) + 1)
}

type counts struct {
	zero  atomic.Uint64
	slots [maxBuckets]atomic.Uint64
	n     atomic.Uint64
	sum   atomic.Int64
	max   atomic.Int64
}

func (c *counts) record(l *layout, v int64) {
	if v <= 0 {
		v = 0
		c.zero.Add(1)
	} else {
		c.slots[l.slot(uint64(v))].Add(1)
	}
	c.n.Add(1)
	c.sum.Add(v)
	for {
		m := c.max.Load()
		if v <= m || c.max.CompareAndSwap(m, v) {
			return
		}
	}
}

func (c *counts) snapshot(l *layout) Snapshot {
	s := Snapshot{Sum: c.sum.Load(), Max: c.max.Load(), Scale: l.scale, ZeroCount: c.zero.Load(), layout: l}
	s.Count = s.ZeroCount
	for j := range l.upper {
		if n := c.slots[j].Load(); n > 0 {
			s.Buckets = append(s.Buckets, Bucket{Index: l.first + int32(j), Count: n})
			s.Count += n
		}
	}
	return s
}

// H is a histogram of plain values (bytes, counts), bucketed in the unit
// they are recorded in (Scale 1). The zero value is ready to use. It is safe
// for concurrent use.
type H struct{ c counts }

// Record adds one observation of v (negative values count as 0).
func (h *H) Record(v int64) { h.c.record(unitLayout(), v) }

// RecordDuration adds one observation of d in nanoseconds, bucketed in
// nanoseconds. A latency meant for export should be a Latency, whose
// buckets are in seconds.
func (h *H) RecordDuration(d time.Duration) { h.Record(int64(d)) }

// Snapshot copies the histogram. Concurrent Records may or may not be
// included; the copy is self-consistent enough for reporting.
func (h *H) Snapshot() Snapshot { return h.c.snapshot(unitLayout()) }

// Latency is a histogram of durations, recorded in nanoseconds and bucketed
// in seconds (Scale 1e9): its buckets are a native histogram's of a metric
// in seconds. The zero value is ready to use. It is safe for concurrent use.
type Latency struct{ c counts }

// RecordDuration adds one observation of d (negative counts as 0).
func (h *Latency) RecordDuration(d time.Duration) { h.c.record(latencyLayout(), int64(d)) }

// Snapshot copies the histogram, as H.Snapshot does.
func (h *Latency) Snapshot() Snapshot { return h.c.snapshot(latencyLayout()) }

// Snapshot is a point-in-time copy of a histogram. Count, Sum, Max and the
// quantiles are in the recorded unit (nanoseconds for a Latency); bucket
// bounds are in the bucket unit, Scale recorded units (seconds for a
// Latency).
type Snapshot struct {
	Count uint64 // every observation, ZeroCount included
	Sum   int64
	Max   int64
	// Scale is the recorded units in one bucket unit: 1 for an H, 1e9 for
	// a Latency.
	Scale float64
	// ZeroCount is the observations of 0 (and of negative values): the
	// zero bucket, of threshold 0.
	ZeroCount uint64
	// Buckets are the non-empty buckets, ascending by Index.
	Buckets []Bucket

	layout *layout
}

// Bucket is one bucket's count. It holds the values v with
// 2^((Index-1)/32) < v/Scale <= 2^(Index/32): Index is a Prometheus native
// bucket index of schema 5; the OpenTelemetry index of scale 5 is Index-1.
type Bucket struct {
	Index int32
	Count uint64
}

// UpperBound is the largest value bucket index i holds, in bucket units:
// 2^(i/32).
func UpperBound(i int32) float64 { return math.Exp2(float64(i) / perOctave) }

// CountAtOrBelow returns how many observations are at most 2^(i/32) bucket
// units: the cumulative count of a classic histogram bucket with that upper
// bound, exact because the bound is one of the buckets' own.
func (s Snapshot) CountAtOrBelow(i int32) uint64 {
	n := s.ZeroCount
	for _, b := range s.Buckets {
		if b.Index > i {
			break
		}
		n += b.Count
	}
	return n
}

func (s Snapshot) lowest(i int32) int64 {
	if s.layout != nil {
		return s.layout.lowest(i)
	}
	return int64(math.Floor(s.Scale*UpperBound(i-1))) + 1
}

// Quantile returns an estimate of the q-quantile (0 <= q <= 1) in the
// recorded unit: the smallest integer in the bucket holding it, never above
// Max, so at most 2.14% below the exact quantile. 0 for an empty snapshot.
func (s Snapshot) Quantile(q float64) int64 {
	if s.Count == 0 {
		return 0
	}
	q = math.Max(0, math.Min(1, q))
	rank := uint64(math.Ceil(q * float64(s.Count)))
	if rank == 0 {
		rank = 1
	}
	seen := s.ZeroCount
	if seen >= rank {
		return 0
	}
	for _, b := range s.Buckets {
		seen += b.Count
		if seen >= rank {
			return min(s.lowest(b.Index), s.Max)
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

// Summary is the figures most reports want, in the histogram's recorded
// unit.
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
