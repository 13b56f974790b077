// Package flightotel exports a flightlog star's Stats (and a Reader's)
// through OpenTelemetry metrics, in the manner of franz-go's kotel.
//
// Counters and gauges are observable instruments made with the metric API,
// so any MeterProvider takes them; one callback reads Stats once per
// collection:
//
//	reg, err := flightotel.Register(star, provider, flightotel.WithReader(reader))
//	defer reg.Unregister()
//
// The metric API has no asynchronous histogram (a histogram instrument
// records single values, and the SDK would re-aggregate them), so the
// histograms come from a Producer for the SDK's readers, which hands the
// already aggregated buckets over as exponential histograms of scale 5:
// flightlog's histogram layout is that scale's, so the buckets are copied
// with no re-bucketing error (latencies in seconds, sizes in bytes).
//
//	reader := sdkmetric.NewPeriodicReader(exporter,
//		sdkmetric.WithProducer(flightotel.NewProducer(star)))
//	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
//
// Sums are cumulative and only grow for the star's life. Their start time
// is when Register (or NewProducer) was called: Stats do not say when the
// star opened, so open the star and register together.
//
// Attributes: flightlog.star and flightlog.class on chain metrics, plus
// flightlog.bucket on the PUT latency. Per-stream tails are not exported
// (Stats has no per-stream figures; a tail is a lookup per stream);
// consumer lag is, for the streams the host names (WithConsumerLag, with
// the attributes flightlog.stream and flightlog.group, within the bounds
// ConsumerLag documents).
//
// Tracing: a Tracer appends with a span per append (AppendSpanName), whose
// events are the write path's stages from the batch's loglet.WriteTrace
// (EventSubmitted, EventClaimed, EventPutStart, EventDurable,
// EventReleased), each at the leader's time:
//
//	tr := flightotel.NewTracer(star, tracerProvider)
//	ack, err := tr.Append(ctx, "orders", batch)
//
// A flight's PUTs carry many callers' appends and run on the chain's
// workers, so they are not spans of their own: the stages are the part of
// them each append waited for.
package flightotel

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/flightlog/flightlog/histogram"
	"github.com/flightlog/flightlog/loglet"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// ScopeName is the instrumentation scope of every metric here.
const ScopeName = "github.com/flightlog/flightlog/contrib/otel"

// Option configures Register.
type Option func(*config)

type config struct {
	reader *loglet.Reader
	lag    *ConsumerLag
}

// WithReader also exports r's counters (flightlog.reader.*).
func WithReader(r *loglet.Reader) Option { return func(c *config) { c.reader = r } }

// WithConsumerLag also exports the lag of consumer groups on the streams
// cl names, read at every collection within cl's bounds (see
// ConsumerLag): the gauges flightlog.consumer.lag.records and
// flightlog.consumer.lag.bytes (with cl.Bytes) with the attributes
// flightlog.stream and flightlog.group, flightlog.consumer.lag.up per
// stream (1: read this collection; 0: not, for the reason cl.OnError is
// told) and flightlog.consumer.lag.series_dropped (lags over
// cl.MaxSeries, or named on a stream not read).
func WithConsumerLag(cl ConsumerLag) Option { return func(c *config) { c.lag = &cl } }

type kind int

const (
	counter kind = iota // monotonic sum
	gauge
)

type chainInstr struct {
	name, unit, desc string
	kind             kind
	get              func(*loglet.ClassStats) int64
}

type chainSeconds struct {
	name, desc string
	kind       kind
	get        func(*loglet.ClassStats) float64
}

func u(v uint64) int64 { return int64(v) }

func b(v bool) int64 {
	if v {
		return 1
	}
	return 0
}

var chainInstrs = []chainInstr{
	{"flightlog.flights", "{flight}", "Flights uploaded.", counter, func(s *loglet.ClassStats) int64 { return u(s.Flights) }},
	{"flightlog.flight.payload", "By", "Record bytes in the flights uploaded.", counter, func(s *loglet.ClassStats) int64 { return u(s.FlightPayload) }},
	{"flightlog.flight.objects", "By", "Bytes of the rendered flight objects, per copy.", counter, func(s *loglet.ClassStats) int64 { return u(s.FlightObjects) }},
	{"flightlog.precompress.skipped", "{batch}", "Large batches compressed at the claim because the pool had no room for their compressed copy at admission.", counter, func(s *loglet.ClassStats) int64 { return u(s.PrecompressSkipped) }},
	{"flightlog.acked.batches", "{batch}", "Batches acknowledged durable.", counter, func(s *loglet.ClassStats) int64 { return u(s.AckedBatches) }},
	{"flightlog.acked.records", "{record}", "Records acknowledged durable.", counter, func(s *loglet.ClassStats) int64 { return u(s.AckedRecords) }},
	{"flightlog.acked.bytes", "By", "Record bytes acknowledged durable.", counter, func(s *loglet.ClassStats) int64 { return u(s.AckedBytes) }},
	{"flightlog.failed.outcome_unknown", "{batch}", "Batches that ended with ErrOutcomeUnknown after admission.", counter, func(s *loglet.ClassStats) int64 { return u(s.FailedOutcomeUnknown) }},
	{"flightlog.failed.not_committed", "{batch}", "Batches that ended with ErrNotCommitted after admission.", counter, func(s *loglet.ClassStats) int64 { return u(s.FailedNotCommitted) }},
	{"flightlog.producer.duplicates", "{batch}", "Retries of a committed batch answered with its original range.", counter, func(s *loglet.ClassStats) int64 { return u(s.ProducerDuplicates) }},
	{"flightlog.producer.in_flight_waits", "{batch}", "Retries of a batch in flight that waited for its outcome.", counter, func(s *loglet.ClassStats) int64 { return u(s.ProducerInFlightWaits) }},
	{"flightlog.producer.past_window", "{batch}", "Retries refused as older than the producer's remembered batches.", counter, func(s *loglet.ClassStats) int64 { return u(s.ProducerPastWindow) }},
	{"flightlog.producer.evicted", "{producer}", "Producers a stream forgot because its dedupe window was full.", counter, func(s *loglet.ClassStats) int64 { return u(s.ProducersEvicted) }},
	{"flightlog.fenced.batches", "{batch}", "Batches refused because their fencing token was not their stream's.", counter, func(s *loglet.ClassStats) int64 { return u(s.Fenced) }},
	{"flightlog.ghost_puts", "{copy}", "Copies recognised as our own by nonce after ErrExists.", counter, func(s *loglet.ClassStats) int64 { return u(s.GhostPuts) }},
	{"flightlog.foreign_occupants", "{copy}", "Copies that found someone else's object in their slot.", counter, func(s *loglet.ClassStats) int64 { return u(s.ForeignOccupants) }},
	{"flightlog.under_replicated", "{slot}", "Durable slots written with fewer than K copies.", counter, func(s *loglet.ClassStats) int64 { return u(s.UnderReplicated) }},
	{"flightlog.halts", "{halt}", "Halts of the chain.", counter, func(s *loglet.ClassStats) int64 { return u(s.Halts) }},
	{"flightlog.stragglers.abandoned", "{copy}", "Straggling copies cancelled over the straggler budget.", counter, func(s *loglet.ClassStats) int64 { return u(s.StragglersAbandoned) }},
	{"flightlog.absorb.rounds", "{round}", "Absorb rounds committed.", counter, func(s *loglet.ClassStats) int64 { return u(s.AbsorbRounds) }},
	{"flightlog.absorb.early_rounds", "{round}", "Absorb rounds started before their interval: the backlog was past AbsorbEarlyPercent.", counter, func(s *loglet.ClassStats) int64 { return u(s.AbsorbEarlyRounds) }},
	{"flightlog.absorb.refs", "{ref}", "Span refs written by absorb rounds.", counter, func(s *loglet.ClassStats) int64 { return u(s.AbsorbRefs) }},
	{"flightlog.absorb.failures", "{attempt}", "Failed absorb commit attempts.", counter, func(s *loglet.ClassStats) int64 { return u(s.AbsorbFailures) }},
	{"flightlog.metastore.requests", "{request}", "Metastore requests the absorb rounds took.", counter, func(s *loglet.ClassStats) int64 { return u(s.MetastoreRequests) }},
	{"flightlog.tails.snapshot.bytes", "By", "Bytes of the tails snapshots written, per copy.", counter, func(s *loglet.ClassStats) int64 { return u(s.TailsSnapshotBytes) }},
	{"flightlog.tails.full_snapshots", "{snapshot}", "Full tails snapshots written.", counter, func(s *loglet.ClassStats) int64 { return u(s.TailsFullSnapshots) }},
	{"flightlog.tails.rebuilds", "{rebuild}", "Takeovers that rebuilt the tails from the span refs.", counter, func(s *loglet.ClassStats) int64 { return u(s.TailsRebuilds) }},

	{"flightlog.epoch", "1", "The chain's current epoch.", gauge, func(s *loglet.ClassStats) int64 { return u(s.Epoch) }},
	{"flightlog.window.size", "{flight}", "Flights the upload window holds.", gauge, func(s *loglet.ClassStats) int64 { return int64(s.WindowSize) }},
	{"flightlog.window.in_flight", "{flight}", "Flights of the window still uploading.", gauge, func(s *loglet.ClassStats) int64 { return int64(s.WindowInFlight) }},
	{"flightlog.window.bytes", "By", "Payload and objects of claimed, unreleased flights.", gauge, func(s *loglet.ClassStats) int64 { return s.WindowBytes }},
	{"flightlog.checkpoint", "1", "The next unabsorbed slot of the current epoch.", gauge, func(s *loglet.ClassStats) int64 { return u(s.Checkpoint) }},
	{"flightlog.pool.budget", "By", "The pool's budget (MemoryBufferMiB).", gauge, func(s *loglet.ClassStats) int64 { return s.Pool.BudgetBytes }},
	{"flightlog.pool.reserved", "By", "Bytes admitted to the pool and not yet cut into a flight.", gauge, func(s *loglet.ClassStats) int64 { return s.Pool.ReservedBytes }},
	{"flightlog.pool.queued_batches", "{batch}", "Batches queued in the pool.", gauge, func(s *loglet.ClassStats) int64 { return int64(s.Pool.QueuedBatches) }},
	{"flightlog.pool.waiting", "{producer}", "Producers blocked at the pool budget now.", gauge, func(s *loglet.ClassStats) int64 { return s.Pool.Waiting }},
	{"flightlog.backlog.flights", "{flight}", "Claimed, unabsorbed flights.", gauge, func(s *loglet.ClassStats) int64 { return int64(s.Backlog.Flights) }},
	{"flightlog.backlog.bytes", "By", "Payload of claimed, unabsorbed flights.", gauge, func(s *loglet.ClassStats) int64 { return s.Backlog.Bytes }},
	{"flightlog.backlog.max_bytes", "By", "The backlog's byte bound (ChainBacklogMiB).", gauge, func(s *loglet.ClassStats) int64 { return s.Backlog.MaxBytes }},
	{"flightlog.backlog.stalling", "1", "1 while publishes are blocked at the backlog bound.", gauge, func(s *loglet.ClassStats) int64 { return b(s.Backlog.Stalling) }},
	{"flightlog.flight_index.bytes", "By", "Released, unabsorbed payload held to serve stream tails.", gauge, func(s *loglet.ClassStats) int64 { return s.FlightIndexBytes }},
	{"flightlog.stragglers", "{flight}", "Acked flights with copies still uploading.", gauge, func(s *loglet.ClassStats) int64 { return int64(s.Stragglers) }},
	{"flightlog.memory.objects", "By", "Memory part: rendered objects of the window.", gauge, func(s *loglet.ClassStats) int64 { return s.Memory.Objects }},
	{"flightlog.memory.stragglers", "By", "Memory part: objects of straggling copies.", gauge, func(s *loglet.ClassStats) int64 { return s.Memory.Stragglers }},
	{"flightlog.memory.settle", "By", "Memory part: slot objects a settle pass holds (reserved from the pool's budget).", gauge, func(s *loglet.ClassStats) int64 { return s.Memory.Settle }},
	{"flightlog.recovering", "1", "1 while a halt's recovery runs.", gauge, func(s *loglet.ClassStats) int64 { return b(s.Recovering) }},
	{"flightlog.deposed", "1", "1 once a successor has sealed or taken the chain.", gauge, func(s *loglet.ClassStats) int64 { return b(s.Deposed) }},
	{"flightlog.succession.failures", "{attempt}", "Failed attempts of the step a recovery is at.", gauge, func(s *loglet.ClassStats) int64 { return int64(s.SuccessionFailures) }},
	{"flightlog.release_point", "1", "Every slot of the epoch below it is released.", gauge, func(s *loglet.ClassStats) int64 { return u(s.ReleasePoint) }},
	{"flightlog.checkpoint.epoch", "1", "The epoch of the checkpoint (the next unabsorbed slot's).", gauge, func(s *loglet.ClassStats) int64 { return u(s.CheckpointEpoch) }},
	{"flightlog.pool.queued_bytes", "By", "Bytes queued in the pool.", gauge, func(s *loglet.ClassStats) int64 { return s.Pool.QueuedBytes }},
	{"flightlog.backlog.max_flights", "{flight}", "The backlog's flight bound.", gauge, func(s *loglet.ClassStats) int64 { return int64(s.Backlog.MaxFlights) }},
	{"flightlog.memory.stragglers.bound", "By", "Bound of the memory part stragglers (StragglerMiB).", gauge, func(s *loglet.ClassStats) int64 { return s.Memory.StragglersBound }},
	{"flightlog.memory.settle.bound", "By", "Bound of the memory part settle (settle.MaxPassBytes or the pool's budget).", gauge, func(s *loglet.ClassStats) int64 { return s.Memory.SettleBound }},
	{"flightlog.tails.base_bytes", "By", "Size of the last full tails snapshot.", gauge, func(s *loglet.ClassStats) int64 { return int64(s.TailsBaseBytes) }},

	{"flightlog.settle.passes", "{pass}", "Settlement passes run.", counter, func(s *loglet.ClassStats) int64 { return u(s.Settle.Passes) }},
	{"flightlog.settle.failures", "{pass}", "Settlement passes that failed.", counter, func(s *loglet.ClassStats) int64 { return u(s.Settle.Failures) }},
	{"flightlog.settle.objects", "{object}", "Settled objects written (or found in place after a crash).", counter, func(s *loglet.ClassStats) int64 { return u(s.Settle.Objects) }},
	{"flightlog.settle.repointed", "{ref}", "Span refs moved onto settled objects.", counter, func(s *loglet.ClassStats) int64 { return u(s.Settle.Repointed) }},
	{"flightlog.settle.reclaimed", "{ref}", "Refs of deleted incarnations or trimmed records deleted by settlement.", counter, func(s *loglet.ClassStats) int64 { return u(s.Settle.Reclaimed) }},
	{"flightlog.settle.deleted_copies", "{copy}", "Chain slot copies deleted by trim.", counter, func(s *loglet.ClassStats) int64 { return u(s.Settle.DeletedCopies) }},
	{"flightlog.settle.merged", "{object}", "Small settled objects absorbed into larger ones.", counter, func(s *loglet.ClassStats) int64 { return u(s.Settle.Merged) }},
	{"flightlog.settle.retries", "{request}", "Settlement requests asked again after a transient failure.", counter, func(s *loglet.ClassStats) int64 { return u(s.Settle.Retries) }},
	{"flightlog.settle.metastore_requests", "{request}", "Metastore requests settlement passes made.", counter, func(s *loglet.ClassStats) int64 { return u(s.Settle.MetaRequests) }},
	{"flightlog.settle.ref_scans", "{request}", "Scans of a stream's refs by settlement (streams the leader's known refs did not cover).", counter, func(s *loglet.ClassStats) int64 { return u(s.Settle.RefScans) }},
	{"flightlog.settle.settled_refs", "{ref}", "Settled refs passes wrote and handed the leader as known.", counter, func(s *loglet.ClassStats) int64 { return u(s.Settle.SettledRefs) }},
	{"flightlog.settle.raw_bytes", "By", "Record bytes settled.", counter, func(s *loglet.ClassStats) int64 { return s.Settle.RawBytes }},
	{"flightlog.settle.stored_bytes", "By", "Bytes of the settled objects written.", counter, func(s *loglet.ClassStats) int64 { return s.Settle.StoredBytes }},
	{"flightlog.settle.freed_bytes", "By", "Bytes of transit copies deleted.", counter, func(s *loglet.ClassStats) int64 { return s.Settle.FreedBytes }},
	{"flightlog.trim.epoch", "1", "The trim cursor's epoch: every slot before the cursor is settled and deleted.", gauge, func(s *loglet.ClassStats) int64 { return u(s.Settle.TrimEpoch) }},
	{"flightlog.trim.next", "1", "The trim cursor's slot within its epoch.", gauge, func(s *loglet.ClassStats) int64 { return u(s.Settle.TrimNext) }},
	{"flightlog.settle.unsettled_rounds", "{round}", "Absorbed rounds this process committed that are not settled yet.", gauge, func(s *loglet.ClassStats) int64 { return int64(s.Settle.UnsettledRounds) }},
	{"flightlog.settle.transit_bytes", "By", "Bytes of flight copies (every copy) the unsettled rounds hold in the chain's buckets.", gauge, func(s *loglet.ClassStats) int64 { return s.Settle.TransitBytes }},
}

var chainSecs = []chainSeconds{
	{"flightlog.pool.blocked", "Time producers spent blocked at the pool budget.", counter, func(s *loglet.ClassStats) float64 { return float64(s.Pool.BlockedNanos) / 1e9 }},
	{"flightlog.backlog.stalled", "Time publishes spent stalled at the backlog bound (ended stalls).", counter, func(s *loglet.ClassStats) float64 { return float64(s.Backlog.StalledNanos) / 1e9 }},
	{"flightlog.backlog.oldest_age", "Age of the oldest unabsorbed claimed flight.", gauge, func(s *loglet.ClassStats) float64 { return s.Backlog.OldestAge.Seconds() }},
	{"flightlog.backlog.stalling_for", "How long publishes have been blocked at the backlog bound (0 when not).", gauge, func(s *loglet.ClassStats) float64 { return s.Backlog.StallingFor.Seconds() }},
	{"flightlog.settle.lag", "Age of the oldest absorbed round not yet settled.", gauge, func(s *loglet.ClassStats) float64 { return s.Settle.Lag.Seconds() }},
}

type readerInstr struct {
	name, unit, desc string
	kind             kind
	get              func(loglet.ReaderStats) int64
}

var readerInstrs = []readerInstr{
	{"flightlog.reader.gets", "{request}", "Object GETs.", counter, func(s loglet.ReaderStats) int64 { return u(s.Gets) }},
	{"flightlog.reader.get_bytes", "By", "Bytes the GETs returned.", counter, func(s loglet.ReaderStats) int64 { return u(s.GetBytes) }},
	{"flightlog.reader.read_cache.hits", "{lookup}", "Frame-cache hits.", counter, func(s loglet.ReaderStats) int64 { return u(s.ReadCacheHits) }},
	{"flightlog.reader.read_cache.misses", "{lookup}", "Frame-cache misses.", counter, func(s loglet.ReaderStats) int64 { return u(s.ReadCacheMisses) }},
	{"flightlog.reader.read_cache.bytes", "By", "Decoded frames cached now.", gauge, func(s loglet.ReaderStats) int64 { return s.ReadCacheBytes }},
	{"flightlog.reader.skipped_copies", "{copy}", "Copies passed over (missing, short, poison, corrupt).", counter, func(s loglet.ReaderStats) int64 { return u(s.SkippedCopies) }},
	{"flightlog.reader.corrupt_copies", "{copy}", "Copies that failed a checksum or decode.", counter, func(s loglet.ReaderStats) int64 { return u(s.CorruptCopies) }},
	{"flightlog.reader.snapshot_fallbacks", "{read}", "Tail reads that read the refs for a damaged or missing tails snapshot.", counter, func(s loglet.ReaderStats) int64 { return u(s.SnapshotFallbacks) }},
}

func int64Instr(m metric.Meter, name, unit, desc string, k kind) (metric.Int64Observable, error) {
	if k == counter {
		return m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	}
	return m.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
}

// Register creates the counters and gauges of star (nil when only
// WithReader's Reader is to be exported) on mp's meter (nil: the global
// MeterProvider) and one callback that fills them from one Stats per
// collection. Unregister the returned Registration to stop.
func Register(star *loglet.Star, mp metric.MeterProvider, opts ...Option) (metric.Registration, error) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(ScopeName)
	var all []metric.Observable
	var chain, readers []metric.Int64Observable
	var secs []metric.Float64Observable
	var hits, misses, cacheBytes metric.Int64Observable
	var passTime metric.Float64Observable
	var err error
	if star != nil {
		for _, in := range chainInstrs {
			o, err := int64Instr(m, in.name, in.unit, in.desc, in.kind)
			if err != nil {
				return nil, err
			}
			chain, all = append(chain, o), append(all, o)
		}
		for _, in := range chainSecs {
			var o metric.Float64Observable
			if in.kind == counter {
				o, err = m.Float64ObservableCounter(in.name, metric.WithUnit("s"), metric.WithDescription(in.desc))
			} else {
				o, err = m.Float64ObservableGauge(in.name, metric.WithUnit("s"), metric.WithDescription(in.desc))
			}
			if err != nil {
				return nil, err
			}
			secs, all = append(secs, o), append(all, o)
		}
		if hits, err = m.Int64ObservableCounter("flightlog.read_cache.hits", metric.WithUnit("{lookup}"), metric.WithDescription("History read frame-cache hits.")); err != nil {
			return nil, err
		}
		if misses, err = m.Int64ObservableCounter("flightlog.read_cache.misses", metric.WithUnit("{lookup}"), metric.WithDescription("History read frame-cache misses.")); err != nil {
			return nil, err
		}
		if cacheBytes, err = m.Int64ObservableGauge("flightlog.read_cache.bytes", metric.WithUnit("By"), metric.WithDescription("Decoded frames the history read cache holds.")); err != nil {
			return nil, err
		}
		if passTime, err = m.Float64ObservableCounter("flightlog.settle.pass.time", metric.WithUnit("s"),
			metric.WithDescription("Time settlement passes spent, by the phase they were at (the I/O each phase waited on; core: the pass's own CPU).")); err != nil {
			return nil, err
		}
		all = append(all, hits, misses, cacheBytes, passTime)
	}
	if cfg.reader != nil {
		for _, in := range readerInstrs {
			o, err := int64Instr(m, in.name, in.unit, in.desc, in.kind)
			if err != nil {
				return nil, err
			}
			readers, all = append(readers, o), append(all, o)
		}
	}
	var lag *lagInstrs
	if cfg.lag != nil {
		if lag, err = newLagInstrs(m, cfg.lag.Bytes); err != nil {
			return nil, err
		}
		all = append(all, lag.all()...)
	}
	return m.RegisterCallback(func(ctx context.Context, obs metric.Observer) error {
		if star != nil {
			st := star.Stats()
			starAttr := metric.WithAttributes(attribute.String("flightlog.star", st.Star))
			obs.ObserveInt64(hits, int64(st.ReadCacheHits), starAttr)
			obs.ObserveInt64(misses, int64(st.ReadCacheMisses), starAttr)
			obs.ObserveInt64(cacheBytes, st.ReadCacheBytes, starAttr)
			eachClass(st, func(class string, s *loglet.ClassStats) {
				attrs := metric.WithAttributes(attribute.String("flightlog.star", st.Star), attribute.String("flightlog.class", class))
				for i, in := range chainInstrs {
					obs.ObserveInt64(chain[i], in.get(s), attrs)
				}
				for i, in := range chainSecs {
					obs.ObserveFloat64(secs[i], in.get(s), attrs)
				}
				for _, p := range passPhases(s) {
					obs.ObserveFloat64(passTime, p.secs, metric.WithAttributes(attribute.String("flightlog.star", st.Star),
						attribute.String("flightlog.class", class), attribute.String("flightlog.phase", p.phase)))
				}
			})
		}
		if r := cfg.reader; r != nil {
			st := r.Stats()
			for i, in := range readerInstrs {
				obs.ObserveInt64(readers[i], in.get(st))
			}
		}
		if lag != nil {
			cl := *cfg.lag
			if cl.Log == nil && star != nil {
				cl.Log = star
			}
			lag.observe(obs, cl, readLags(ctx, cl, cl.Log))
		}
		return nil
	}, all...)
}

// phaseSecs is one phase's time in settlement passes.
type phaseSecs struct {
	phase string
	secs  float64
}

// passPhases is s.Settle.PassTime by phase name.
func passPhases(s *loglet.ClassStats) []phaseSecs {
	out := make([]phaseSecs, 0, len(s.Settle.PassTime))
	for phase, d := range s.Settle.PassTime {
		out = append(out, phaseSecs{phase, d.Seconds()})
	}
	slices.SortFunc(out, func(a, b phaseSecs) int { return strings.Compare(a.phase, b.phase) })
	return out
}

func eachClass(st loglet.Stats, f func(string, *loglet.ClassStats)) {
	if st.Standard != nil {
		f("standard", st.Standard)
	}
	if st.Express != nil {
		f("express", st.Express)
	}
}

// Producer hands a star's histograms to an SDK reader as cumulative
// exponential histograms of scale 5.
type Producer struct {
	star  *loglet.Star
	start time.Time
}

// NewProducer returns a Producer over star; pass it to a reader with
// sdkmetric.WithProducer.
func NewProducer(star *loglet.Star) *Producer { return &Producer{star: star, start: time.Now()} }

var _ sdkmetric.Producer = (*Producer)(nil)

// Produce takes one Stats and returns its histograms: flightlog.ack.latency,
// flightlog.quorum.latency, flightlog.absorb.round.latency,
// flightlog.put.latency (per bucket) and flightlog.settle.pass_lag in
// seconds, flightlog.flight.size in bytes.
func (p *Producer) Produce(context.Context) ([]metricdata.ScopeMetrics, error) {
	out := metricdata.ScopeMetrics{Scope: instrumentation.Scope{Name: ScopeName}, Metrics: histograms(p.star.Stats(), p.start, time.Now())}
	return []metricdata.ScopeMetrics{out}, nil
}

// histograms are st's histograms as Produce returns them.
func histograms(st loglet.Stats, start, now time.Time) []metricdata.Metrics {
	type latency struct {
		name, desc string
		points     []metricdata.ExponentialHistogramDataPoint[float64]
	}
	lat := []*latency{
		{name: "flightlog.ack.latency", desc: "Admission to ack of each batch."},
		{name: "flightlog.quorum.latency", desc: "Claim of a flight to its W-th copy."},
		{name: "flightlog.absorb.round.latency", desc: "Latency of an absorb round."},
		{name: "flightlog.put.latency", desc: "Start of a flight copy's write to the bucket's confirmation."},
		{name: "flightlog.settle.pass_lag", desc: "Settle lag per pass: commit of the oldest absorbed round a pass settled to the pass's completion."},
	}
	var sizes []metricdata.ExponentialHistogramDataPoint[int64]
	eachClass(st, func(class string, s *loglet.ClassStats) {
		kv := []attribute.KeyValue{attribute.String("flightlog.star", st.Star), attribute.String("flightlog.class", class)}
		set := attribute.NewSet(kv...)
		seconds := func(ns int64) float64 { return float64(ns) / 1e9 }
		for i, snap := range []histogram.Snapshot{s.AckLatency, s.QuorumLatency, s.AbsorbRoundLatency} {
			lat[i].points = append(lat[i].points, point(snap, set, start, now, seconds))
		}
		for b, snap := range s.PutLatency {
			name := ""
			if b < len(s.BucketNames) {
				name = s.BucketNames[b]
			}
			set := attribute.NewSet(append(kv[:2:2], attribute.String("flightlog.bucket", name))...)
			lat[3].points = append(lat[3].points, point(snap, set, start, now, seconds))
		}
		lat[4].points = append(lat[4].points, point(s.Settle.PassLag, set, start, now, seconds))
		sizes = append(sizes, point(s.FlightSize, set, start, now, func(v int64) int64 { return v }))
	})
	var out []metricdata.Metrics
	for _, l := range lat {
		out = append(out, metricdata.Metrics{Name: l.name, Description: l.desc, Unit: "s",
			Data: metricdata.ExponentialHistogram[float64]{DataPoints: l.points, Temporality: metricdata.CumulativeTemporality}})
	}
	out = append(out, metricdata.Metrics{Name: "flightlog.flight.size", Description: "Size of each flight object.", Unit: "By",
		Data: metricdata.ExponentialHistogram[int64]{DataPoints: sizes, Temporality: metricdata.CumulativeTemporality}})
	return out
}

// point is snap as an exponential histogram data point: OpenTelemetry's
// bucket index is flightlog's (Prometheus') minus one, so the dense counts
// start at the first non-empty bucket's Index-1. Min is unknown (the
// histogram keeps none); Max and Sum are converted by conv from the
// recorded unit.
func point[N int64 | float64](snap histogram.Snapshot, set attribute.Set, start, now time.Time, conv func(int64) N) metricdata.ExponentialHistogramDataPoint[N] {
	dp := metricdata.ExponentialHistogramDataPoint[N]{
		Attributes: set, StartTime: start, Time: now,
		Count: snap.Count, Sum: conv(snap.Sum), Scale: histogram.Schema,
		ZeroCount: snap.ZeroCount,
	}
	if snap.Count > 0 {
		dp.Max = metricdata.NewExtrema(conv(snap.Max))
	}
	if n := len(snap.Buckets); n > 0 {
		first := snap.Buckets[0].Index
		counts := make([]uint64, snap.Buckets[n-1].Index-first+1)
		for _, b := range snap.Buckets {
			counts[b.Index-first] = b.Count
		}
		dp.PositiveBucket = metricdata.ExponentialBucket{Offset: first - 1, Counts: counts}
	}
	return dp
}
