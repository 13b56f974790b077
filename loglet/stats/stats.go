// Package stats defines a chain's figures once: the chain's core fills
// them where it keeps them, the facade adds what only it holds (the pool's
// budget), and loglet.Star.Stats hands them out unchanged. loglet names
// these types ClassStats, SettleStats and MemoryStats; contrib/prometheus
// and contrib/otel export them.
//
// Latencies are in nanoseconds, sizes in bytes. Counters only grow for the
// process's life (a halt, a recovery or a new epoch does not reset them),
// so they can be rated. The histograms are snapshots with their buckets
// (histogram.Snapshot): Summary gives the usual percentiles, its buckets
// map one to one onto a Prometheus native histogram of schema 5 and an
// OpenTelemetry exponential histogram of scale 5 (latencies bucketed in
// seconds).
package stats

import (
	"time"

	"github.com/flightlog/flightlog/absorb/absorbval"
	"github.com/flightlog/flightlog/histogram"
	"github.com/flightlog/flightlog/pool"
)

// Class is one chain's gauges, counters and histograms (the chain of one
// class of a star).
type Class struct {
	// Phase is the chain's state: serving, recovering, closing, and so on.
	Phase string
	Epoch uint64
	// Pool is the pool's budget, reserved and queued bytes and blocked
	// admission time.
	Pool pool.Stats

	WindowSize, WindowInFlight int
	ReleasePoint               uint64 // every slot below it is released

	Flights       uint64 // flights uploaded
	FlightPayload uint64 // record bytes in them
	FlightObjects uint64 // bytes of the rendered objects (after compression), per copy
	// PrecompressSkipped counts batches of PrecompressBytes or more that
	// were compressed at the claim instead of at admission: the pool's
	// budget had no room for their compressed copy then.
	PrecompressSkipped uint64

	AckedBatches, AckedRecords, AckedBytes uint64
	// FailedOutcomeUnknown and FailedNotCommitted count batches that
	// ended with those errors after admission.
	FailedOutcomeUnknown, FailedNotCommitted uint64

	// ProducerDuplicates counts retries of a committed batch answered with
	// its original range (nothing admitted); ProducerInFlightWaits,
	// retries of a batch still in flight that waited for its outcome;
	// ProducerPastWindow, retries refused as older than the producer's
	// remembered batches; ProducersEvicted, producers a stream forgot
	// because its window held ProducerWindow.Producers others (a rising
	// count means retries may go unrecognised).
	ProducerDuplicates, ProducerInFlightWaits, ProducerPastWindow, ProducersEvicted uint64
	// Fenced counts batches refused because their fencing token was not
	// their stream's.
	Fenced uint64

	GhostPuts        uint64   // copies recognised by nonce after ErrExists
	ForeignOccupants uint64   // copies that found someone else's object
	UnderReplicated  uint64   // durable slots with fewer than K copies
	UnderReplSlots   []uint64 // the most recent such slots (for a repair pass), less those settlement has passed
	Halts            uint64
	HaltCause        string
	// Recovering: a halt's recovery (fence, late acks, mint, republish)
	// runs now, at SuccessionStep.
	Recovering bool
	// SuccessionStep is the step a takeover or recovery is at ("" when
	// serving).
	SuccessionStep string
	// SuccessionFailures counts the failed attempts of the step a recovery
	// is at since SuccessionFailingSince, and SuccessionCause says what
	// the last one met: a fence blocked at a slot names the slot, each
	// bucket and what it holds. (An Open that cannot finish its takeover
	// logs the same at WARN, with backoff, and its error names it.)
	SuccessionFailures     int
	SuccessionFailingSince time.Time
	SuccessionCause        string
	// Deposed: a successor has sealed or taken the chain; this process no
	// longer leads it.
	Deposed bool

	// FlightIndexBytes: released, unabsorbed payload the leader holds to
	// serve the tail of each stream.
	FlightIndexBytes int64
	// WindowBytes: payload and rendered objects of claimed, unreleased
	// flights (kept for a republish). Stragglers: acked flights with
	// copies still trying (the objects they hold are Memory.Stragglers);
	// StragglersAbandoned: cancelled over the class's StragglerMiB.
	WindowBytes         int64
	Stragglers          int
	StragglersAbandoned uint64
	// Memory is what the chain holds for producers and readers beyond the
	// pool and the backlog, each part against its bound (HeldBytes sums
	// every part).
	Memory Memory
	// Backlog: claimed-but-unabsorbed flights and bytes, the age of the
	// oldest, and stalls by diagnosed cause.
	Backlog absorbval.BacklogStats
	// Absorb rounds, refs written, failed commit attempts, the metastore
	// requests they took, and round latency (ns).
	AbsorbRounds, AbsorbRefs, AbsorbFailures, MetastoreRequests uint64
	AbsorbRoundLatency                                          histogram.Snapshot
	// AbsorbEarlyRounds counts the rounds (of AbsorbRounds' kind, started,
	// not necessarily committed) that began before AbsorbInterval had
	// passed because the backlog was past Config.AbsorbEarlyPercent of its
	// bound: a steady count means ingest outruns the interval.
	AbsorbEarlyRounds uint64
	// CheckpointEpoch is the checkpoint's epoch; Checkpoint its next
	// unabsorbed slot when that is the current epoch (else 0).
	CheckpointEpoch, Checkpoint uint64
	// TailsSnapshotBytes is the bytes of every tails snapshot written (per
	// copy); TailsFullSnapshots counts the full ones (the others are deltas
	// of the streams changed since the last full one).
	TailsSnapshotBytes, TailsFullSnapshots uint64
	// TailsBaseBytes is the size of the last full snapshot this owner
	// wrote (a delta is about 1/16 of it at most); 0 while its deltas
	// build on the base a takeover inherited, whose size it did not read.
	TailsBaseBytes int
	// TailsRebuilds counts takeovers that found the checkpoint's tails
	// snapshot damaged or missing and rebuilt the tails from the span refs
	// (a scan of every ref; logged at WARN).
	TailsRebuilds uint64
	// Settle is settlement's figures.
	Settle Settle

	AckLatency    histogram.Snapshot   // admission to ack
	QuorumLatency histogram.Snapshot   // claim to W copies
	FlightSize    histogram.Snapshot   // object bytes
	PutLatency    []histogram.Snapshot // per bucket: start of the write to our copy confirmed
	BucketNames   []string             // the buckets PutLatency is indexed by, in set order
}

// Memory is the part of what one chain holds on behalf of producers, in
// bytes, that neither Pool nor Backlog counts. Every part, each against the
// bound that limits it (HeldBytes sums them):
//
//	pool        admitted batches not yet cut into a flight, encodes
//	            included (reserved before encoding):
//	            Pool.ReservedBytes, bound Pool.BudgetBytes (MemoryBufferMiB)
//	backlog     payload of cut, unabsorbed flights: the window's
//	            (kept for a republish) and the flight index's (served to
//	            reads until absorbed): Backlog.Bytes, bound
//	            Backlog.MaxBytes (ChainBacklogMiB)
//	objects     rendered objects of the window's flights: about the
//	            payload they hold, compressed, plus framing; bounded
//	            with the window (ParallelUploads flights): Memory.Objects
//	stragglers  objects of acked flights whose remaining copies still
//	            upload: Memory.Stragglers, bound Memory.StragglersBound
//	            (StragglerMiB)
//	settle      the slot objects a settle pass has read and holds until
//	            it ends: Memory.Settle, reserved from the pool's budget
//	            (Pool.ReservedBytes + Memory.Settle <= Pool.BudgetBytes),
//	            bound Memory.SettleBound (settle.MaxPassBytes or the
//	            budget, the smaller)
//
// At a bound, admission blocks (the pool directly; the backlog by stopping
// the claims, which leaves the pool full) and Backlog.Stalls names the
// cause; stragglers over theirs are abandoned to the under-replicated
// list. History reads (the star's frame cache) are the star's, in
// loglet.Stats.ReadCacheBytes against ReadCacheMiB.
type Memory struct {
	Objects                     int64
	Stragglers, StragglersBound int64
	Settle, SettleBound         int64
}

// HeldBytes is the bytes the chain holds, every part of Memory's table
// summed.
func (c *Class) HeldBytes() int64 {
	return c.Pool.ReservedBytes + c.Backlog.Bytes + c.Memory.Objects + c.Memory.Stragglers + c.Memory.Settle
}

// Settle is one chain's settlement figures: what the auditor rewrote into
// settled objects and what trim reclaimed (since this process began), the
// trim cursor, and the settle lag.
type Settle struct {
	Passes, Failures uint64
	// Objects is settled objects written (or found in place after a
	// crash); Repointed, refs moved onto them; Reclaimed, refs of deleted
	// incarnations or trimmed records deleted instead; DeletedCopies, chain
	// slot copies deleted by trim.
	Objects, Repointed, Reclaimed, DeletedCopies uint64
	// Merged is small settled objects absorbed into a larger one (a slow
	// stream's objects grow toward the target size; the absorbed ones are
	// deleted).
	Merged uint64
	// Retries is requests passes asked again after a transient failure;
	// MetaRequests the metastore requests passes made, RefScans those of
	// them that scanned a stream's refs (a stream the leader's known refs
	// did not cover); SettledRefs the settled refs passes wrote and handed
	// the leader as known (settle.Result's figures summed).
	Retries, MetaRequests, RefScans, SettledRefs uint64
	// RawBytes is the record bytes settled, StoredBytes the settled
	// objects' size, FreedBytes the transit copies' bytes deleted.
	RawBytes, StoredBytes, FreedBytes int64
	// TrimEpoch and TrimNext are the trim cursor: every slot before it is
	// settled and deleted (or its deletes are due).
	TrimEpoch, TrimNext uint64
	// Lag is the age of the oldest absorbed round this process committed
	// that is not settled yet; UnsettledRounds counts those rounds. Transit
	// storage is bounded by the lag: what arrived in that time.
	Lag             time.Duration
	UnsettledRounds int
	// TransitBytes is what those rounds' flights hold in the chain's
	// buckets (every copy): the transit storage settlement has yet to free
	// (rounds a takeover walked are not counted).
	TransitBytes int64
	LastError    string
	// PassTime is how long passes took, by the phase they were at
	// (read-slots, read-merged, write-settled, mark-pending, repoint,
	// advance, reclaim-scan, ...: the I/O each phase waited on) and
	// "core" (the pass's own CPU: rendering, mostly), summed over the
	// passes since this process began.
	PassTime map[string]time.Duration
	// PassLag is the settle lag per pass (ns): for each pass that settled
	// at least one absorbed round this process committed, the time from
	// the commit of the oldest such round to the pass's completion. Lag
	// is the same figure for what waits now.
	PassLag histogram.Snapshot
}
