package loglet

import (
	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/internal/histogram"
	"github.com/flightlog/flightlog/pool"
)

// Stats is a point-in-time view of a star: one plain struct, cheap to take.
type Stats struct {
	Star     string
	Standard *ClassStats // nil when the class is disabled
	Express  *ClassStats
}

// ClassStats are one chain's gauges, counters and histograms. Latencies are
// in nanoseconds, sizes in bytes.
type ClassStats struct {
	Epoch uint64
	Pool  pool.Stats // budget, reserved and queued bytes, blocked admission time

	WindowSize, WindowInFlight int
	ReleasePoint               uint64 // every slot below it is released

	Flights       uint64 // flights uploaded
	FlightPayload uint64 // record bytes in them
	FlightObjects uint64 // bytes of the rendered objects (after compression), per copy

	AckedBatches, AckedRecords, AckedBytes uint64
	// FailedOutcomeUnknown and FailedNotCommitted count batches that
	// ended with those errors after admission.
	FailedOutcomeUnknown, FailedNotCommitted uint64

	GhostPuts        uint64   // copies recognised by nonce after ErrExists
	ForeignOccupants uint64   // copies that found someone else's object
	UnderReplicated  uint64   // durable slots with fewer than K copies
	UnderReplSlots   []uint64 // the most recent such slots (for a repair pass)
	Halts            uint64
	HaltCause        string
	// Recovering: a halt's recovery (fence, late acks, mint, republish)
	// runs now, at SuccessionStep.
	Recovering     bool
	SuccessionStep string
	// Deposed: a successor has sealed or taken the chain; this process no
	// longer leads it.
	Deposed bool

	// FlightIndexBytes: released, unabsorbed payload the leader holds to
	// serve the tail of each stream.
	FlightIndexBytes int64
	// WindowBytes: payload and rendered objects of claimed, unreleased
	// flights (kept for a republish). Stragglers, StragglerBytes: acked
	// flights with copies still trying, and the objects they hold (bounded
	// by ClassConfig.StragglerMiB); StragglersAbandoned: cancelled over it.
	WindowBytes         int64
	Stragglers          int
	StragglerBytes      int64
	StragglersAbandoned uint64
	// Backlog: claimed-but-unabsorbed flights and bytes, the age of the
	// oldest, and stalls by diagnosed cause.
	Backlog absorb.BacklogStats
	// Absorb rounds, refs written, failed commit attempts, the metastore
	// requests they took, and round latency (ns).
	AbsorbRounds, AbsorbRefs, AbsorbFailures, MetastoreRequests uint64
	AbsorbRoundLatency                                          histogram.Summary
	// Checkpoint is the next unabsorbed slot of the current epoch.
	Checkpoint uint64
	// TailsSnapshotBytes is the bytes of every tails snapshot written (per
	// copy); TailsFullSnapshots counts the full ones (the others are deltas
	// of the streams changed since the last full one).
	TailsSnapshotBytes, TailsFullSnapshots uint64
	// TailsBaseBytes is the size of the last full snapshot (a delta is at
	// most 1/16 of it).
	TailsBaseBytes int

	AckLatency    histogram.Summary   // admission to ack
	QuorumLatency histogram.Summary   // claim to W copies
	FlightSize    histogram.Summary   // object bytes
	PutLatency    []histogram.Summary // per bucket: start of the write to our copy confirmed
	BucketNames   []string
}

// Stats returns the star's current figures.
func (s *Star) Stats() Stats {
	out := Stats{Star: s.cfg.Star}
	if l := s.lanes[Standard]; l != nil {
		out.Standard = l.snapshot()
	}
	if l := s.lanes[Express]; l != nil {
		out.Express = l.snapshot()
	}
	return out
}
