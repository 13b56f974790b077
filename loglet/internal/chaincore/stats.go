package chaincore

import (
	"time"

	absorb "github.com/flightlog/flightlog/absorb/absorbval"
	"github.com/flightlog/flightlog/histogram"
)

// histogramH is a latency histogram (the absorb round, PUT, ack and quorum
// latencies); flight sizes are a histogram.H.
type histogramH = histogram.Latency

// counters are the core's own figures; Stats copies them.
type counters struct {
	flights, flightPayload, flightObjects uint64
	acked, ackedRecords, ackedBytes       uint64
	failedUnknown, failedNotCommitted     uint64
	ghosts, foreign, underReplicated      uint64
	halts                                 uint64
	tailsRebuilds                         uint64
	stragglersAbandoned                   uint64
	haltCause                             string
	underReplSlots                        []uint64
	ackLatency, quorumLatency             histogramH
	flightSize                            histogram.H
	putLatency                            []histogramH
}

// Stats is a point-in-time view of one chain.
type Stats struct {
	Phase string
	Epoch uint64

	QueuedBytes   int64
	QueuedBatches int

	WindowSize, WindowInFlight int
	ReleasePoint               uint64

	Flights, FlightPayload, FlightObjects  uint64
	AckedBatches, AckedRecords, AckedBytes uint64
	FailedOutcomeUnknown                   uint64
	FailedNotCommitted                     uint64
	GhostPuts, ForeignOccupants            uint64
	UnderReplicated                        uint64
	UnderReplSlots                         []uint64
	Halts                                  uint64
	HaltCause                              string
	Recovering                             bool
	SuccessionStep                         string // the step a takeover or recovery is at ("" when serving)
	// SuccessionFailures counts the current step's failed attempts since
	// SuccessionFailingSince; SuccessionCause is the last failure's cause
	// (a fence blocked at a slot names it, its buckets and occupants).
	SuccessionFailures     int
	SuccessionFailingSince time.Time
	SuccessionCause        string
	Deposed                bool

	FlightIndexBytes int64
	Backlog          absorb.BacklogStats
	// WindowBytes is the payload of claimed, unreleased flights (kept for
	// a republish); Stragglers and StragglerBytes, the acked uploads with
	// copies still out and the objects they hold; StragglersAbandoned, the
	// ones cancelled over the straggler budget.
	WindowBytes         int64
	WindowObjectBytes   int64 // of which rendered objects
	Stragglers          int
	StragglerBytes      int64
	StragglersAbandoned uint64

	AbsorbRounds, AbsorbRefs, AbsorbFailures, MetastoreRequests uint64
	AbsorbRoundLatency                                          histogram.Snapshot
	// CheckpointEpoch is the checkpoint's epoch; Checkpoint its next
	// unabsorbed slot when that is the current epoch (else 0).
	CheckpointEpoch, Checkpoint uint64
	// TailsSnapshotBytes is the bytes of every tails snapshot written (one
	// copy); TailsFullSnapshots how many of them were full (the rest were
	// deltas of the streams changed since the last full one).
	TailsSnapshotBytes, TailsFullSnapshots uint64
	// TailsBaseBytes is the size of the last full snapshot, which deltas
	// build on (a delta is at most 1/16 of it).
	TailsBaseBytes int
	// TailsRebuilds counts takeovers that found the checkpoint's tails
	// snapshot damaged or missing and rebuilt the tails from the refs.
	TailsRebuilds uint64

	AckLatency, QuorumLatency, FlightSize histogram.Snapshot
	PutLatency                            []histogram.Snapshot

	Settle SettleStats
}

// SettleStats are settlement's figures for one chain (since this process
// began, but the cursor).
type SettleStats struct {
	Passes, Failures uint64
	// Objects settled objects written (or adopted), refs Repointed to them,
	// refs Reclaimed (deleted incarnations, trimmed records), slot copies
	// Deleted by trim.
	Objects, Repointed, Reclaimed, Deleted uint64
	// Merged is small settled objects absorbed into larger ones.
	Merged uint64
	// RawBytes of records settled, StoredBytes of the settled objects,
	// FreedBytes of transit copies deleted.
	RawBytes, StoredBytes, FreedBytes int64
	// TrimEpoch and TrimNext: the trim cursor (every slot before it is
	// settled and deleted, or about to be).
	TrimEpoch, TrimNext uint64
	// Lag is the age of the oldest absorbed round not yet settled;
	// UnsettledRounds how many such rounds this process committed.
	Lag             time.Duration
	UnsettledRounds int
	// TransitBytes is the bytes of flight copies (all K) those rounds
	// hold in the chain's buckets.
	TransitBytes int64
	LastError    string
}

// Stats returns the chain's figures as of now.
func (c *Core) Stats(now time.Time) Stats {
	c.advanceClock(now)
	st := &c.stats
	b, n := c.pool.Queued()
	s := Stats{
		Phase: c.phase.String(), Epoch: c.rec.Epoch,
		QueuedBytes: b, QueuedBatches: n,
		WindowSize: c.window.Size(), WindowInFlight: c.window.InFlight(), ReleasePoint: c.window.Released(),
		Flights: st.flights, FlightPayload: st.flightPayload, FlightObjects: st.flightObjects,
		AckedBatches: st.acked, AckedRecords: st.ackedRecords, AckedBytes: st.ackedBytes,
		FailedOutcomeUnknown: st.failedUnknown, FailedNotCommitted: st.failedNotCommitted,
		GhostPuts: st.ghosts, ForeignOccupants: st.foreign, UnderReplicated: st.underReplicated,
		UnderReplSlots: append([]uint64(nil), st.underReplSlots...),
		Halts:          st.halts, HaltCause: st.haltCause,
		Recovering:       c.phase == phaseRecovering,
		Deposed:          c.fate.Deposed != nil || c.sealed != nil,
		FlightIndexBytes: c.ab.indexBytes,
		Stragglers:       c.stragglers, StragglerBytes: c.stragglerBytes, StragglersAbandoned: st.stragglersAbandoned,
		Backlog:      c.backlog.Stats(c.now),
		AbsorbRounds: c.ab.rounds, AbsorbRefs: c.ab.refs, AbsorbFailures: c.ab.failures, MetastoreRequests: c.ab.requests,
		AbsorbRoundLatency: c.ab.roundLatency.Snapshot(),
		CheckpointEpoch:    c.ab.cpEpoch,
		TailsSnapshotBytes: c.ab.snapBytes, TailsFullSnapshots: c.ab.fullSnaps, TailsBaseBytes: c.ab.baseBytes, TailsRebuilds: st.tailsRebuilds,
		AckLatency:    st.ackLatency.Snapshot(),
		QuorumLatency: st.quorumLatency.Snapshot(),
		FlightSize:    st.flightSize.Snapshot(),
	}
	s.Settle = SettleStats{Passes: c.st.passes, Failures: c.st.failures, Objects: c.st.objects, Repointed: c.st.repointed,
		Reclaimed: c.st.reclaimed, Deleted: c.st.deletes, Merged: c.st.merged, RawBytes: c.st.rawBytes, StoredBytes: c.st.storedBytes, FreedBytes: c.st.freedBytes,
		TrimEpoch: c.st.at.Epoch, TrimNext: c.st.at.Next, Lag: c.st.lag(c.now), UnsettledRounds: len(c.st.rounds), TransitBytes: c.st.heldBytes}
	if c.st.lastErr != nil {
		s.Settle.LastError = c.st.lastErr.Error()
	}
	for _, f := range c.flights {
		s.WindowBytes += f.payload
		if f.up != nil {
			s.WindowBytes += f.up.objBytes
			s.WindowObjectBytes += f.up.objBytes
		}
	}
	if c.ab.cpEpoch == c.rec.Epoch {
		s.Checkpoint = c.ab.cpNext
	}
	if c.succ != nil {
		s.SuccessionStep = c.succ.step.String()
		s.SuccessionFailures, s.SuccessionFailingSince = c.succ.failures, c.succ.failingSince
		if c.succ.lastErr != nil {
			s.SuccessionCause = c.succ.lastErr.Error()
		}
	}
	for i := range st.putLatency {
		s.PutLatency = append(s.PutLatency, st.putLatency[i].Snapshot())
	}
	return s
}
