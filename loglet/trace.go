package loglet

import (
	"time"

	"github.com/flightlog/flightlog/internal/stages"
	"github.com/flightlog/flightlog/loglet/internal/chaincore"
)

// WriteTrace is when one batch, and the flight it was written in, passed
// each stage of the write path, on the leader's clock (time.Now, with its
// monotonic reading, so durations between the stamps are exact). It is for
// benchmarks and diagnostics, such as `flightlog bench`'s stage breakdown:
// the stamps are the leader's own bookkeeping, not part of the log, and
// nothing about them is durable.
//
// The stages come in this order for an acked batch: Submitted <= Claimed
// <= PutStart <= Durable <= Released. Every batch of a flight shares the
// flight's stamps (all but Submitted).
type WriteTrace struct {
	// Submitted is when Submit (or Append) admitted the batch's records
	// for encoding.
	Submitted time.Time
	// Epoch and Slot are the chain epoch and slot the flight was first
	// claimed at (a flight republished after a recovery keeps them).
	Epoch, Slot uint64
	// Oldest is when the oldest batch pooled at the cut was submitted: the
	// flush deadline (ClassConfig.FlushDeadline) runs from it.
	Oldest time.Time
	// BySize: the flight was cut because the pool held FlightBytes, not
	// because the flush deadline passed.
	BySize bool
	// Claimed is when the flight was cut from the pool and claimed its
	// slot.
	Claimed time.Time
	// PutStart is when the flight was rendered and its copies' PUTs were
	// asked for (zero if it never was).
	PutStart time.Time
	// Durable is when the W-th copy of this leader's was confirmed (zero
	// if none was: the batch failed, or a fence found the slot committed
	// first).
	Durable time.Time
	// StoreW is that W-th copy's PUT as the store took it.
	StoreW time.Duration
	// Released is when the flight was acked, in slot order (zero if its
	// batches were not acked).
	Released time.Time
}

// The breakdown's trace is a WriteTrace, field for field: adding a field to
// one and not the other fails here.
var _ = stages.Trace(WriteTrace{})

// Trace returns the batch's write trace once its outcome is delivered (Done
// is closed). It returns false before that, and for a batch that was never
// cut into a flight (it failed while pooled). For benchmarks and
// diagnostics: see WriteTrace.
//
// A failed batch that was cut has a trace too; its Released (and maybe
// Durable and PutStart) is zero.
func (f *AckFuture) Trace() (WriteTrace, bool) {
	select {
	case <-f.p.Done:
	default:
		// The core is still writing the trace: reading it now would race.
		return WriteTrace{}, false
	}
	// The core writes an acked flight's trace before it decides the
	// flight's batches, and never after (a released flight's straggling
	// copies are only counted, its render is dropped), and the shell
	// closes Done after the decision: this read follows every write. A
	// failed batch's flight may still have copies out that stamp it, so
	// its trace is read under the lock the core is stepped with.
	if f.p.Fate.Kind != chaincore.Acked {
		f.lane.mu.Lock()
		defer f.lane.mu.Unlock()
	}
	if f.p.Flight == nil {
		return WriteTrace{}, false
	}
	return writeTrace(f.p.Submitted, f.p.Flight), true
}

// writeTrace is the trace of a batch submitted at submitted in the flight
// ft traced.
func writeTrace(submitted time.Time, ft *chaincore.FlightTrace) WriteTrace {
	return WriteTrace{
		Submitted: submitted,
		Epoch:     ft.Epoch, Slot: ft.Slot,
		Oldest: ft.Oldest, BySize: ft.BySize,
		Claimed: ft.Claimed, PutStart: ft.PutStart, Durable: ft.Durable,
		StoreW: ft.StoreW, Released: ft.Released,
	}
}
