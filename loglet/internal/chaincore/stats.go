package chaincore

import (
	"maps"
	"time"

	"github.com/flightlog/flightlog/histogram"
	"github.com/flightlog/flightlog/loglet/stats"
)

// histogramH is a latency histogram (the absorb round, PUT, ack and quorum
// latencies); flight sizes are a histogram.H.
type histogramH = histogram.Latency

// counters are the core's own running figures; Stats reads them into
// the exported shape, stats.Class, which the facade hands out as is.
type counters struct {
	flights, flightPayload, flightObjects uint64
	acked, ackedRecords, ackedBytes       uint64
	failedUnknown, failedNotCommitted     uint64
	ghosts, foreign, underReplicated      uint64
	halts                                 uint64
	tailsRebuilds                         uint64
	stragglersAbandoned                   uint64
	duplicates, inFlightWaits             uint64 // producer window: retries answered, retries waiting
	pastWindow, producersEvicted          uint64 // producer window: retries refused, producers forgotten
	fenced                                uint64 // batches refused for their fencing token
	haltCause                             string
	// underRepl: the slots whose flight reached W copies but not K (a
	// straggler copy given up), oldest first, at most
	// maxUnderReplicatedList; settlement forgets those it passes
	// (forgetUnderReplicated).
	underRepl                 []UploadID
	ackLatency, quorumLatency histogramH
	flightSize                histogram.H
	putLatency                []histogramH
}

// Bounds are the few figures a simulation checks after every step of a
// core: Stats copies every histogram and builds maps and strings, and
// called that often it was most of a soak's CPU.
type Bounds struct {
	WindowSize, WindowInFlight        int
	BacklogFlights, BacklogMaxFlights int
}

// Bounds returns the window's and the backlog's occupancy and bounds.
func (c *Core) Bounds() Bounds {
	flights, _ := c.backlog.Len()
	return Bounds{WindowSize: c.window.Size(), WindowInFlight: c.window.InFlight(),
		BacklogFlights: flights, BacklogMaxFlights: c.backlog.MaxFlights()}
}

// Stats returns the chain's figures as of now: every one the core keeps.
// The shell adds the pool budget's (Pool but its queue) and
// PrecompressSkipped, which it keeps.
func (c *Core) Stats(now time.Time) stats.Class {
	c.advanceClock(now)
	st := &c.stats
	s := stats.Class{
		Phase: c.phase.String(), Epoch: c.rec.Epoch,
		WindowSize: c.window.Size(), WindowInFlight: c.window.InFlight(), ReleasePoint: c.window.Released(),
		Flights: st.flights, FlightPayload: st.flightPayload, FlightObjects: st.flightObjects,
		AckedBatches: st.acked, AckedRecords: st.ackedRecords, AckedBytes: st.ackedBytes,
		FailedOutcomeUnknown: st.failedUnknown, FailedNotCommitted: st.failedNotCommitted,
		ProducerDuplicates: st.duplicates, ProducerInFlightWaits: st.inFlightWaits, ProducerPastWindow: st.pastWindow,
		ProducersEvicted: st.producersEvicted, Fenced: st.fenced,
		GhostPuts: st.ghosts, ForeignOccupants: st.foreign, UnderReplicated: st.underReplicated,
		UnderReplSlots: underReplSlots(st.underRepl),
		Halts:          st.halts, HaltCause: st.haltCause,
		Recovering:       c.phase == phaseRecovering,
		Deposed:          c.fate.Deposed != nil || c.sealed != nil,
		FlightIndexBytes: c.ab.indexBytes,
		Stragglers:       c.stragglers, StragglersAbandoned: st.stragglersAbandoned,
		Backlog:      c.backlog.Stats(c.now),
		AbsorbRounds: c.ab.rounds, AbsorbRefs: c.ab.refs, AbsorbFailures: c.ab.failures, MetastoreRequests: c.ab.requests,
		AbsorbRoundLatency: c.ab.roundLatency.Snapshot(), AbsorbEarlyRounds: c.ab.earlyRounds,
		CheckpointEpoch:    c.ab.cpEpoch,
		TailsSnapshotBytes: c.ab.snapBytes, TailsFullSnapshots: c.ab.fullSnaps, TailsBaseBytes: c.ab.baseBytes, TailsRebuilds: st.tailsRebuilds,
		AckLatency:    st.ackLatency.Snapshot(),
		QuorumLatency: st.quorumLatency.Snapshot(),
		FlightSize:    st.flightSize.Snapshot(),
		BucketNames:   append([]string(nil), c.cfg.Buckets...),
	}
	s.Pool.QueuedBytes, s.Pool.QueuedBatches = c.pool.Queued()
	s.Settle = stats.Settle{Passes: c.st.passes, Failures: c.st.failures, Objects: c.st.objects, Repointed: c.st.repointed,
		Reclaimed: c.st.reclaimed, DeletedCopies: c.st.deletes, Merged: c.st.merged,
		Retries: c.st.retries, MetaRequests: c.st.metaRequests, RefScans: c.st.refScans, SettledRefs: c.st.settledRefs, RawBytes: c.st.rawBytes, StoredBytes: c.st.storedBytes, FreedBytes: c.st.freedBytes,
		TrimEpoch: c.st.at.Epoch, TrimNext: c.st.at.Next, Lag: c.st.lag(c.now), UnsettledRounds: len(c.st.rounds), TransitBytes: c.st.heldBytes,
		PassLag: c.st.passLag.Snapshot(), PassTime: maps.Clone(c.st.passTime)}
	if c.st.lastErr != nil {
		s.Settle.LastError = c.st.lastErr.Error()
	}
	for _, f := range c.flights {
		s.WindowBytes += f.payload
		if f.up != nil {
			s.WindowBytes += f.up.objBytes
			s.Memory.Objects += f.up.objBytes
		}
	}
	s.Memory.Stragglers, s.Memory.StragglersBound = c.stragglerBytes, c.cfg.StragglerBytes
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

// underReplSlots is the exported list: the slots, in the order noted.
func underReplSlots(ids []UploadID) []uint64 {
	if len(ids) == 0 {
		return nil
	}
	out := make([]uint64, len(ids))
	for i, id := range ids {
		out[i] = id.Slot
	}
	return out
}
