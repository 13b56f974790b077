// Package stages owns the write path's per-batch stage breakdown (issue
// 16): where each acked batch's time went between its flight's cut and its
// producer seeing the ack, and the library's own cost, the ack time past
// an ideal ordered release. The benchmarks (loglet's BenchmarkWritePath)
// and `flightlog bench` both compute it here, so the figures they report
// have one definition.
//
// It keeps one invariant: the ideal release of a flight is never earlier
// than that of any flight before it in (epoch, slot) order, as the real
// release is not (a slot acks only once every earlier slot has).
//
// The package is pure: it does no I/O and reads no clock.
package stages

import (
	"cmp"
	"slices"
	"time"

	"github.com/flightlog/flightlog/histogram"
)

// Trace is when one batch's flight passed each stage of the write path, on
// the leader's clock. Its fields are loglet.WriteTrace's, in the same
// order, so one converts to the other.
type Trace struct {
	// Submitted is when the batch was submitted.
	Submitted time.Time
	// Epoch and Slot are the flight's, as first claimed.
	Epoch, Slot uint64
	// Oldest is when the oldest batch pooled at the cut was submitted:
	// the flush deadline runs from it.
	Oldest time.Time
	// BySize: the flight was cut because the pool held a full flight.
	BySize bool
	// Claimed is the cut and claim of the flight's slot.
	Claimed time.Time
	// PutStart is when the flight was rendered and its copies' PUTs
	// asked for.
	PutStart time.Time
	// Durable is when the W-th copy was confirmed.
	Durable time.Time
	// StoreW is that W-th copy's PUT as the store took it.
	StoreW time.Duration
	// Released is when the flight was acked, in slot order.
	Released time.Time
}

// complete reports whether t has every stamp the breakdown needs: a batch
// that was not acked, or was acked by a fence without this leader seeing
// its W-th copy, has none to give.
func (t *Trace) complete() bool {
	return !t.Claimed.IsZero() && !t.PutStart.IsZero() && !t.Durable.IsZero() && !t.Released.IsZero()
}

// Stage is one figure of the breakdown.
type Stage int

// The stages, in the order a batch passes them, then the own cost.
const (
	// CutOver is the cut's overshoot of what the flush deadline asks:
	// the claim minus the oldest pooled batch's submission plus the
	// deadline (0 for a flight cut by size, or claimed before its
	// deadline).
	CutOver Stage = iota
	// ClaimPut is the claim to the first PUT asked for: the render.
	ClaimPut
	// WthCopy is the first PUT asked for to the W-th copy confirmed.
	WthCopy
	// OrderWait is the W-th copy to the release: the wait for earlier
	// slots.
	OrderWait
	// ToProducer is the release to the producer seeing its ack.
	ToProducer
	// OwnCost is the producer seeing its ack minus the ideal release: the
	// running maximum, over flights in (epoch, slot) order, of the ideal
	// cut (the oldest pooled batch's submission plus the deadline, or the
	// claim if the flight was cut by size or claimed before that) plus
	// StoreW. The ideal leader cuts each flight exactly when it must, its
	// W-th copy takes what the store took, and it releases a flight once
	// it and every earlier one are durable, at no cost of its own.
	OwnCost

	// NumStages is the number of stages.
	NumStages = int(OwnCost) + 1
)

var names = [NumStages]string{"cut-over", "claim-put", "wth-copy", "order-wait", "to-producer", "own-cost"}

// String is the stage's name, as the benchmark metrics spell it
// ("cut-over", ..., "own-cost").
func (s Stage) String() string {
	if s < 0 || int(s) >= NumStages {
		return "stage(?)"
	}
	return names[s]
}

// All returns every stage, in order.
func All() [NumStages]Stage {
	return [NumStages]Stage{CutOver, ClaimPut, WthCopy, OrderWait, ToProducer, OwnCost}
}

// Durations is one batch's time in each stage, indexed by Stage.
type Durations [NumStages]time.Duration

// Sample is one acked batch: its trace and when its producer saw the ack.
type Sample struct {
	Trace Trace
	Seen  time.Time
}

// flightKey identifies a flight among the traces of one chain: its slot as
// first claimed, and the claim (two flights never share both).
type flightKey struct {
	epoch, slot uint64
	claimed     int64
}

// flight is one flight's trace, and for each of its batches the release to
// its producer seeing the ack, in the order they were added.
type flight struct {
	t    Trace
	seen []time.Duration
}

// Collector gathers acked batches for the breakdown, keeping each flight's
// trace once and each batch's ack time: a long run's millions of batches
// cost a few bytes each. The zero value is ready to use. It is not safe for
// concurrent use: give each goroutine its own and Merge them.
type Collector struct {
	flights map[flightKey]*flight
	skipped int
}

// Add counts one batch: its trace, and when its producer saw the ack
// (after t.Released, on the same clock). A trace missing a stamp (the
// batch was not acked, or was acked by a fence without its W-th copy seen)
// is skipped and counted in Breakdown.Skipped.
func (c *Collector) Add(t Trace, seen time.Time) {
	if !t.complete() {
		c.skipped++
		return
	}
	k := flightKey{t.Epoch, t.Slot, t.Claimed.UnixNano()}
	f := c.flights[k]
	if f == nil {
		if c.flights == nil {
			c.flights = map[flightKey]*flight{}
		}
		t.Submitted = time.Time{} // per batch, not the flight's
		f = &flight{t: t}
		c.flights[k] = f
	}
	f.seen = append(f.seen, seen.Sub(f.t.Released))
}

// Merge adds o's batches to c's (after c's own in each flight).
func (c *Collector) Merge(o *Collector) {
	c.skipped += o.skipped
	for k, of := range o.flights {
		f := c.flights[k]
		if f == nil {
			if c.flights == nil {
				c.flights = map[flightKey]*flight{}
			}
			c.flights[k] = &flight{t: of.t, seen: append([]time.Duration(nil), of.seen...)}
			continue
		}
		f.seen = append(f.seen, of.seen...)
	}
}

// Each calls fn with every batch's stage durations under the flush deadline
// the flights were cut against: flights in (epoch, slot) order, each
// flight's batches in the order they were added. t is the flight's trace
// (Submitted is not kept). This is the breakdown's definition; Breakdown
// only counts what it yields.
func (c *Collector) Each(deadline time.Duration, fn func(t *Trace, d Durations)) {
	flights := make([]*flight, 0, len(c.flights))
	for _, f := range c.flights {
		flights = append(flights, f)
	}
	slices.SortFunc(flights, func(a, b *flight) int {
		return cmp.Or(cmp.Compare(a.t.Epoch, b.t.Epoch), cmp.Compare(a.t.Slot, b.t.Slot), a.t.Claimed.Compare(b.t.Claimed))
	})
	var ideal time.Time // the running ideal release
	for _, f := range flights {
		t := &f.t
		cut := t.Oldest.Add(deadline)
		if t.BySize || t.Claimed.Before(cut) {
			cut = t.Claimed // cut when the pool filled: nothing to wait for
		}
		if r := cut.Add(t.StoreW); r.After(ideal) {
			ideal = r
		}
		var d Durations
		d[CutOver] = t.Claimed.Sub(cut)
		d[ClaimPut] = t.PutStart.Sub(t.Claimed)
		d[WthCopy] = t.Durable.Sub(t.PutStart)
		d[OrderWait] = t.Released.Sub(t.Durable)
		behind := t.Released.Sub(ideal) // the release past the ideal one
		for _, s := range f.seen {
			d[ToProducer] = s
			d[OwnCost] = s + behind
			fn(t, d)
		}
	}
}

// Breakdown is the stage durations of a set of batches, one histogram of
// nanoseconds per stage. A negative duration (a clock step on a wall clock)
// counts as 0, as the histogram package records it.
type Breakdown struct {
	// Batches is the batches counted, Skipped those whose trace missed a
	// stamp (see Collector.Add).
	Batches, Skipped int
	hist             [NumStages]histogram.H
}

// Breakdown counts every batch c holds (see Each).
func (c *Collector) Breakdown(deadline time.Duration) *Breakdown {
	b := &Breakdown{Skipped: c.skipped}
	c.Each(deadline, func(_ *Trace, d Durations) {
		b.Batches++
		for s, v := range d {
			b.hist[s].RecordDuration(v)
		}
	})
	return b
}

// Compute is the breakdown of samples under the flush deadline.
func Compute(samples []Sample, deadline time.Duration) *Breakdown {
	var c Collector
	for _, s := range samples {
		c.Add(s.Trace, s.Seen)
	}
	return c.Breakdown(deadline)
}

// Snapshot is stage s's histogram, in nanoseconds.
func (b *Breakdown) Snapshot(s Stage) histogram.Snapshot { return b.hist[s].Snapshot() }
