// Package flightprom exports a flightlog star's Stats (and a Reader's) as
// Prometheus metrics: a prometheus.Collector that reads Stats once per
// scrape, in the manner of franz-go's kprom.
//
//	c := flightprom.New(star, flightprom.WithReader(reader))
//	prometheus.MustRegister(c)
//	http.Handle("/metrics", promhttp.Handler())
//
// Counters (_total) only grow for the star's life, so they can be rated.
// Gauges are the pool, backlog, window, memory parts against their bounds
// (each figure once: the pool's and the backlog's bytes are pool_* and
// backlog_*, memory_bytes has the other parts), and the succession state. Histograms are real ones: every flightlog
// histogram's buckets are exactly a native histogram's of schema 5
// (latencies bucketed in seconds, sizes in bytes), so the native buckets
// are copied across with no re-bucketing error; classic buckets at powers
// of two (also bucket bounds of the native layout, so also exact) come
// along for scrapers without native histograms (WithoutClassicBuckets
// drops them). The text exposition carries the classic buckets; the
// protobuf one, which Prometheus negotiates when native histograms are on,
// carries both.
//
// Per-stream figures are not in a star's Stats (finding a stream's tail is
// a lookup per stream, and stream names are unbounded label values), so
// consumer lag is exported only for the streams the host names:
// WithConsumerLag reads it from loglet/groups at every scrape, within the
// bounds ConsumerLag documents (metastore reads, series, time).
//
// Chain metrics carry the labels star and class (standard, express); PUT
// latency adds bucket (ClassConfig.BucketNames). Reader metrics are named
// flightlog_reader_*.
package flightprom

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/flightlog/flightlog/histogram"
	"github.com/flightlog/flightlog/loglet"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Option configures a Collector.
type Option func(*config)

type config struct {
	namespace   string
	constLabels prometheus.Labels
	reader      *loglet.Reader
	classic     bool
	lag         *ConsumerLag
}

// WithNamespace sets the metric name prefix (default "flightlog").
func WithNamespace(ns string) Option { return func(c *config) { c.namespace = ns } }

// WithConstLabels adds labels to every metric (say, the process's zone).
func WithConstLabels(l prometheus.Labels) Option { return func(c *config) { c.constLabels = l } }

// WithReader also exports r's counters (flightlog_reader_*).
func WithReader(r *loglet.Reader) Option { return func(c *config) { c.reader = r } }

// WithConsumerLag also exports the lag of consumer groups on the streams
// cl names, read at every scrape within cl's bounds (see ConsumerLag):
// consumer_lag_records and consumer_lag_bytes (with cl.Bytes) per stream
// and group, consumer_lag_up per stream (1: read this scrape; 0: not, for
// the reason cl.OnError is told) and consumer_lag_series_dropped (lags
// over cl.MaxSeries, or named on a stream not read).
func WithConsumerLag(cl ConsumerLag) Option { return func(c *config) { c.lag = &cl } }

// WithoutClassicBuckets exports the histograms as native histograms only
// (the text exposition then shows only their _count and _sum).
func WithoutClassicBuckets() Option { return func(c *config) { c.classic = false } }

// Collector is a prometheus.Collector over a star and, optionally, a
// Reader. It is safe for concurrent scrapes; each takes one Stats.
type Collector struct {
	star                                  *loglet.Star
	cfg                                   config
	chain                                 []chainMetric
	starWide                              []starMetric
	reader                                []readerMetric
	hists                                 []chainHist
	put                                   *prometheus.Desc
	putClassic                            []int32
	memory, memoryBound, stalls, passTime *prometheus.Desc
	lagRecords, lagBytes                  *prometheus.Desc
	lagUp, lagDropped                     *prometheus.Desc
}

type chainMetric struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
	get  func(*loglet.ClassStats) float64
}

type starMetric struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
	get  func(loglet.Stats) float64
}

type readerMetric struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
	get  func(loglet.ReaderStats) float64
}

type chainHist struct {
	desc    *prometheus.Desc
	classic []int32 // native bucket indices of the classic upper bounds
	get     func(*loglet.ClassStats) histogram.Snapshot
}

// New returns a Collector over star (nil when only WithReader's Reader is
// to be exported).
func New(star *loglet.Star, opts ...Option) *Collector {
	cfg := config{namespace: "flightlog", classic: true}
	for _, o := range opts {
		o(&cfg)
	}
	c := &Collector{star: star, cfg: cfg}
	name := func(n string) string { return prometheus.BuildFQName(cfg.namespace, "", n) }
	chainLabels := []string{"star", "class"}
	counter := func(n, help string, get func(*loglet.ClassStats) float64) {
		c.chain = append(c.chain, chainMetric{prometheus.NewDesc(name(n), help, chainLabels, cfg.constLabels), prometheus.CounterValue, get})
	}
	gauge := func(n, help string, get func(*loglet.ClassStats) float64) {
		c.chain = append(c.chain, chainMetric{prometheus.NewDesc(name(n), help, chainLabels, cfg.constLabels), prometheus.GaugeValue, get})
	}
	u := func(v uint64) float64 { return float64(v) }
	i := func(v int64) float64 { return float64(v) }
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}

	counter("flights_total", "Flights uploaded.", func(s *loglet.ClassStats) float64 { return u(s.Flights) })
	counter("flight_payload_bytes_total", "Record bytes in the flights uploaded.", func(s *loglet.ClassStats) float64 { return u(s.FlightPayload) })
	counter("flight_object_bytes_total", "Bytes of the rendered flight objects (after compression), per copy.", func(s *loglet.ClassStats) float64 { return u(s.FlightObjects) })
	counter("precompress_skipped_total", "Large batches compressed at the claim because the pool had no room for their compressed copy at admission.", func(s *loglet.ClassStats) float64 { return u(s.PrecompressSkipped) })
	counter("acked_batches_total", "Batches acknowledged durable.", func(s *loglet.ClassStats) float64 { return u(s.AckedBatches) })
	counter("acked_records_total", "Records acknowledged durable.", func(s *loglet.ClassStats) float64 { return u(s.AckedRecords) })
	counter("acked_bytes_total", "Record bytes acknowledged durable.", func(s *loglet.ClassStats) float64 { return u(s.AckedBytes) })
	counter("failed_outcome_unknown_batches_total", "Batches that ended with ErrOutcomeUnknown after admission.", func(s *loglet.ClassStats) float64 { return u(s.FailedOutcomeUnknown) })
	counter("failed_not_committed_batches_total", "Batches that ended with ErrNotCommitted after admission.", func(s *loglet.ClassStats) float64 { return u(s.FailedNotCommitted) })
	counter("producer_duplicates_total", "Retries of a committed batch answered with its original range.", func(s *loglet.ClassStats) float64 { return u(s.ProducerDuplicates) })
	counter("producer_in_flight_waits_total", "Retries of a batch in flight that waited for its outcome.", func(s *loglet.ClassStats) float64 { return u(s.ProducerInFlightWaits) })
	counter("producer_past_window_total", "Retries refused as older than the producer's remembered batches.", func(s *loglet.ClassStats) float64 { return u(s.ProducerPastWindow) })
	counter("producers_evicted_total", "Producers a stream forgot because its dedupe window was full.", func(s *loglet.ClassStats) float64 { return u(s.ProducersEvicted) })
	counter("fenced_batches_total", "Batches refused because their fencing token was not their stream's.", func(s *loglet.ClassStats) float64 { return u(s.Fenced) })
	counter("ghost_puts_total", "Copies recognised as our own by nonce after ErrExists.", func(s *loglet.ClassStats) float64 { return u(s.GhostPuts) })
	counter("foreign_occupants_total", "Copies that found someone else's object in their slot.", func(s *loglet.ClassStats) float64 { return u(s.ForeignOccupants) })
	counter("under_replicated_slots_total", "Durable slots written with fewer than K copies.", func(s *loglet.ClassStats) float64 { return u(s.UnderReplicated) })
	counter("halts_total", "Halts of the chain (each recovered in place or ending in deposition).", func(s *loglet.ClassStats) float64 { return u(s.Halts) })
	counter("stragglers_abandoned_total", "Straggling copies cancelled over the straggler budget.", func(s *loglet.ClassStats) float64 { return u(s.StragglersAbandoned) })
	counter("absorb_rounds_total", "Absorb rounds committed.", func(s *loglet.ClassStats) float64 { return u(s.AbsorbRounds) })
	counter("absorb_early_rounds_total", "Absorb rounds started before their interval: the backlog was past AbsorbEarlyPercent.", func(s *loglet.ClassStats) float64 { return u(s.AbsorbEarlyRounds) })
	counter("absorb_refs_total", "Span refs written by absorb rounds.", func(s *loglet.ClassStats) float64 { return u(s.AbsorbRefs) })
	counter("absorb_failures_total", "Failed absorb commit attempts.", func(s *loglet.ClassStats) float64 { return u(s.AbsorbFailures) })
	counter("metastore_requests_total", "Metastore requests the absorb rounds took.", func(s *loglet.ClassStats) float64 { return u(s.MetastoreRequests) })
	counter("tails_snapshot_bytes_total", "Bytes of the tails snapshots written, per copy.", func(s *loglet.ClassStats) float64 { return u(s.TailsSnapshotBytes) })
	counter("tails_full_snapshots_total", "Full tails snapshots written (the others are deltas).", func(s *loglet.ClassStats) float64 { return u(s.TailsFullSnapshots) })
	counter("tails_rebuilds_total", "Takeovers that rebuilt the tails from the span refs.", func(s *loglet.ClassStats) float64 { return u(s.TailsRebuilds) })
	counter("pool_blocked_seconds_total", "Time producers spent blocked at the pool budget.", func(s *loglet.ClassStats) float64 { return float64(s.Pool.BlockedNanos) / 1e9 })
	counter("backlog_stalled_seconds_total", "Time publishes spent stalled at the backlog bound (ended stalls).", func(s *loglet.ClassStats) float64 { return float64(s.Backlog.StalledNanos) / 1e9 })

	gauge("epoch", "The chain's current epoch.", func(s *loglet.ClassStats) float64 { return u(s.Epoch) })
	gauge("window_size", "Flights the upload window holds.", func(s *loglet.ClassStats) float64 { return float64(s.WindowSize) })
	gauge("window_in_flight", "Flights of the window still uploading.", func(s *loglet.ClassStats) float64 { return float64(s.WindowInFlight) })
	gauge("release_point", "Every slot of the epoch below it is released.", func(s *loglet.ClassStats) float64 { return u(s.ReleasePoint) })
	gauge("checkpoint", "The next unabsorbed slot of the current epoch.", func(s *loglet.ClassStats) float64 { return u(s.Checkpoint) })
	gauge("pool_budget_bytes", "The pool's budget (MemoryBufferMiB).", func(s *loglet.ClassStats) float64 { return i(s.Pool.BudgetBytes) })
	gauge("pool_reserved_bytes", "Bytes admitted to the pool and not yet cut into a flight.", func(s *loglet.ClassStats) float64 { return i(s.Pool.ReservedBytes) })
	gauge("pool_queued_bytes", "Bytes queued in the pool.", func(s *loglet.ClassStats) float64 { return i(s.Pool.QueuedBytes) })
	gauge("pool_queued_batches", "Batches queued in the pool.", func(s *loglet.ClassStats) float64 { return float64(s.Pool.QueuedBatches) })
	gauge("pool_waiting_producers", "Producers blocked at the pool budget now.", func(s *loglet.ClassStats) float64 { return i(s.Pool.Waiting) })
	gauge("backlog_flights", "Claimed, unabsorbed flights.", func(s *loglet.ClassStats) float64 { return float64(s.Backlog.Flights) })
	gauge("backlog_bytes", "Payload of claimed, unabsorbed flights.", func(s *loglet.ClassStats) float64 { return i(s.Backlog.Bytes) })
	gauge("backlog_max_flights", "The backlog's flight bound.", func(s *loglet.ClassStats) float64 { return float64(s.Backlog.MaxFlights) })
	gauge("backlog_max_bytes", "The backlog's byte bound (ChainBacklogMiB).", func(s *loglet.ClassStats) float64 { return i(s.Backlog.MaxBytes) })
	gauge("backlog_oldest_age_seconds", "Age of the oldest unabsorbed claimed flight.", func(s *loglet.ClassStats) float64 { return s.Backlog.OldestAge.Seconds() })
	gauge("backlog_stalling", "1 while publishes are blocked at the backlog bound.", func(s *loglet.ClassStats) float64 { return b(s.Backlog.Stalling) })
	gauge("flight_index_bytes", "Released, unabsorbed payload held to serve stream tails.", func(s *loglet.ClassStats) float64 { return i(s.FlightIndexBytes) })
	gauge("window_bytes", "Payload and objects of claimed, unreleased flights.", func(s *loglet.ClassStats) float64 { return i(s.WindowBytes) })
	gauge("stragglers", "Acked flights with copies still uploading.", func(s *loglet.ClassStats) float64 { return float64(s.Stragglers) })
	gauge("recovering", "1 while a halt's recovery runs.", func(s *loglet.ClassStats) float64 { return b(s.Recovering) })
	gauge("deposed", "1 once a successor has sealed or taken the chain.", func(s *loglet.ClassStats) float64 { return b(s.Deposed) })
	gauge("succession_failures", "Failed attempts of the step a recovery is at.", func(s *loglet.ClassStats) float64 { return float64(s.SuccessionFailures) })
	gauge("tails_base_bytes", "Size of the last full tails snapshot.", func(s *loglet.ClassStats) float64 { return float64(s.TailsBaseBytes) })
	gauge("checkpoint_epoch", "The epoch of the checkpoint (the next unabsorbed slot's).", func(s *loglet.ClassStats) float64 { return u(s.CheckpointEpoch) })
	gauge("backlog_stalling_seconds", "How long publishes have been blocked at the backlog bound (0 when not).", func(s *loglet.ClassStats) float64 { return s.Backlog.StallingFor.Seconds() })

	counter("settle_passes_total", "Settlement passes run.", func(s *loglet.ClassStats) float64 { return u(s.Settle.Passes) })
	counter("settle_failures_total", "Settlement passes that failed.", func(s *loglet.ClassStats) float64 { return u(s.Settle.Failures) })
	counter("settle_objects_total", "Settled objects written (or found in place after a crash).", func(s *loglet.ClassStats) float64 { return u(s.Settle.Objects) })
	counter("settle_repointed_refs_total", "Span refs moved onto settled objects.", func(s *loglet.ClassStats) float64 { return u(s.Settle.Repointed) })
	counter("settle_reclaimed_refs_total", "Refs of deleted incarnations or trimmed records deleted by settlement.", func(s *loglet.ClassStats) float64 { return u(s.Settle.Reclaimed) })
	counter("settle_deleted_copies_total", "Chain slot copies deleted by trim.", func(s *loglet.ClassStats) float64 { return u(s.Settle.DeletedCopies) })
	counter("settle_merged_objects_total", "Small settled objects absorbed into larger ones.", func(s *loglet.ClassStats) float64 { return u(s.Settle.Merged) })
	counter("settle_retries_total", "Settlement requests asked again after a transient failure.", func(s *loglet.ClassStats) float64 { return u(s.Settle.Retries) })
	counter("settle_metastore_requests_total", "Metastore requests settlement passes made.", func(s *loglet.ClassStats) float64 { return u(s.Settle.MetaRequests) })
	counter("settle_ref_scans_total", "Scans of a stream's refs by settlement (streams the leader's known refs did not cover).", func(s *loglet.ClassStats) float64 { return u(s.Settle.RefScans) })
	counter("settle_settled_refs_total", "Settled refs passes wrote and handed the leader as known.", func(s *loglet.ClassStats) float64 { return u(s.Settle.SettledRefs) })
	counter("settle_raw_bytes_total", "Record bytes settled.", func(s *loglet.ClassStats) float64 { return i(s.Settle.RawBytes) })
	counter("settle_stored_bytes_total", "Bytes of the settled objects written.", func(s *loglet.ClassStats) float64 { return i(s.Settle.StoredBytes) })
	counter("settle_freed_bytes_total", "Bytes of transit copies deleted.", func(s *loglet.ClassStats) float64 { return i(s.Settle.FreedBytes) })
	gauge("trim_epoch", "The trim cursor's epoch: every slot before the cursor is settled and deleted.", func(s *loglet.ClassStats) float64 { return u(s.Settle.TrimEpoch) })
	gauge("trim_next", "The trim cursor's slot within trim_epoch.", func(s *loglet.ClassStats) float64 { return u(s.Settle.TrimNext) })
	gauge("settle_lag_seconds", "Age of the oldest absorbed round not yet settled.", func(s *loglet.ClassStats) float64 { return s.Settle.Lag.Seconds() })
	gauge("settle_unsettled_rounds", "Absorbed rounds this process committed that are not settled yet.", func(s *loglet.ClassStats) float64 { return float64(s.Settle.UnsettledRounds) })
	gauge("settle_transit_bytes", "Bytes of flight copies (every copy) the unsettled rounds hold in the chain's buckets.", func(s *loglet.ClassStats) float64 { return i(s.Settle.TransitBytes) })

	partLabels := []string{"star", "class", "part"}
	c.memory = prometheus.NewDesc(name("memory_bytes"), "Bytes the chain holds for producers beyond the pool's (pool_reserved_bytes) and the backlog's (backlog_bytes), by part (objects, stragglers, settle).", partLabels, cfg.constLabels)
	c.memoryBound = prometheus.NewDesc(name("memory_bound_bytes"), "The bound of the memory parts stragglers (StragglerMiB) and settle (settle.MaxPassBytes or the pool budget); the pool's and the backlog's are pool_budget_bytes and backlog_max_bytes.", partLabels, cfg.constLabels)
	c.stalls = prometheus.NewDesc(name("backlog_stalls_total"), "Ended backlog stalls, by diagnosed cause.", []string{"star", "class", "cause"}, cfg.constLabels)
	c.passTime = prometheus.NewDesc(name("settle_pass_seconds_total"), "Time settlement passes spent, by the phase they were at (the I/O each phase waited on; core: the pass's own CPU).", []string{"star", "class", "phase"}, cfg.constLabels)

	latency := []int32{}
	for k := int32(-17); k <= 6; k++ { // 7.6µs .. 64s
		latency = append(latency, k*32)
	}
	size := []int32{}
	for k := int32(6); k <= 30; k++ { // 64 B .. 1 GiB
		size = append(size, k*32)
	}
	if !cfg.classic {
		latency, size = nil, nil
	}
	hist := func(n, help string, classic []int32, get func(*loglet.ClassStats) histogram.Snapshot) {
		c.hists = append(c.hists, chainHist{prometheus.NewDesc(name(n), help, chainLabels, cfg.constLabels), classic, get})
	}
	hist("ack_latency_seconds", "Admission to ack of each batch.", latency, func(s *loglet.ClassStats) histogram.Snapshot { return s.AckLatency })
	hist("quorum_latency_seconds", "Claim of a flight to its W-th copy.", latency, func(s *loglet.ClassStats) histogram.Snapshot { return s.QuorumLatency })
	hist("absorb_round_seconds", "Latency of an absorb round.", latency, func(s *loglet.ClassStats) histogram.Snapshot { return s.AbsorbRoundLatency })
	hist("settle_pass_lag_seconds", "Settle lag per pass: commit of the oldest absorbed round a pass settled to the pass's completion.", latency, func(s *loglet.ClassStats) histogram.Snapshot { return s.Settle.PassLag })
	hist("flight_size_bytes", "Size of each flight object.", size, func(s *loglet.ClassStats) histogram.Snapshot { return s.FlightSize })
	c.put = prometheus.NewDesc(name("put_latency_seconds"), "Start of a flight copy's write to the bucket's confirmation.", []string{"star", "class", "bucket"}, cfg.constLabels)
	c.putClassic = latency

	starCounter := func(n, help string, typ prometheus.ValueType, get func(loglet.Stats) float64) {
		c.starWide = append(c.starWide, starMetric{prometheus.NewDesc(name(n), help, []string{"star"}, cfg.constLabels), typ, get})
	}
	starCounter("read_cache_hits_total", "History read frame-cache hits.", prometheus.CounterValue, func(s loglet.Stats) float64 { return u(s.ReadCacheHits) })
	starCounter("read_cache_misses_total", "History read frame-cache misses.", prometheus.CounterValue, func(s loglet.Stats) float64 { return u(s.ReadCacheMisses) })
	starCounter("read_cache_bytes", "Decoded frames the history read cache holds.", prometheus.GaugeValue, func(s loglet.Stats) float64 { return i(s.ReadCacheBytes) })
	starCounter("read_cache_bound_bytes", "The history read cache's bound (ReadCacheMiB).", prometheus.GaugeValue, func(s loglet.Stats) float64 { return i(s.ReadCacheBoundBytes) })

	reader := func(n, help string, typ prometheus.ValueType, get func(loglet.ReaderStats) float64) {
		c.reader = append(c.reader, readerMetric{prometheus.NewDesc(name("reader_"+n), help, nil, cfg.constLabels), typ, get})
	}
	lagLabels := []string{"stream", "group"}
	c.lagRecords = prometheus.NewDesc(name("consumer_lag_records"), "Records a consumer group has not processed: the stream's durable tail less its offset (or the trim point, if further on).", lagLabels, cfg.constLabels)
	c.lagBytes = prometheus.NewDesc(name("consumer_lag_bytes"), "Decoded bytes of the absorbed records a consumer group has not processed (whole frame runs: a little more than exact).", lagLabels, cfg.constLabels)
	c.lagUp = prometheus.NewDesc(name("consumer_lag_up"), "1 if this scrape read the stream's consumer lag, 0 if not (an error, or a bound of the scrape reached).", []string{"stream"}, cfg.constLabels)
	c.lagDropped = prometheus.NewDesc(name("consumer_lag_series_dropped"), "Consumer lags not reported this scrape: over the series bound, or named on a stream not read.", nil, cfg.constLabels)

	reader("gets_total", "Object GETs.", prometheus.CounterValue, func(s loglet.ReaderStats) float64 { return u(s.Gets) })
	reader("get_bytes_total", "Bytes the GETs returned.", prometheus.CounterValue, func(s loglet.ReaderStats) float64 { return u(s.GetBytes) })
	reader("read_cache_hits_total", "Frame-cache hits.", prometheus.CounterValue, func(s loglet.ReaderStats) float64 { return u(s.ReadCacheHits) })
	reader("read_cache_misses_total", "Frame-cache misses.", prometheus.CounterValue, func(s loglet.ReaderStats) float64 { return u(s.ReadCacheMisses) })
	reader("read_cache_bytes", "Decoded frames cached now.", prometheus.GaugeValue, func(s loglet.ReaderStats) float64 { return i(s.ReadCacheBytes) })
	reader("skipped_copies_total", "Copies passed over (missing, short, poison, corrupt).", prometheus.CounterValue, func(s loglet.ReaderStats) float64 { return u(s.SkippedCopies) })
	reader("corrupt_copies_total", "Copies that failed a checksum or decode.", prometheus.CounterValue, func(s loglet.ReaderStats) float64 { return u(s.CorruptCopies) })
	reader("snapshot_fallbacks_total", "Tail reads that found the tails snapshot damaged or missing and read the refs.", prometheus.CounterValue, func(s loglet.ReaderStats) float64 { return u(s.SnapshotFallbacks) })
	return c
}

// Describe sends every metric's description.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.chain {
		ch <- m.desc
	}
	for _, h := range c.hists {
		ch <- h.desc
	}
	ch <- c.put
	ch <- c.memory
	ch <- c.memoryBound
	ch <- c.stalls
	ch <- c.passTime
	for _, m := range c.starWide {
		ch <- m.desc
	}
	if c.cfg.reader != nil {
		for _, m := range c.reader {
			ch <- m.desc
		}
	}
	if c.cfg.lag != nil {
		ch <- c.lagRecords
		if c.cfg.lag.Bytes {
			ch <- c.lagBytes
		}
		ch <- c.lagUp
		ch <- c.lagDropped
	}
}

// Collect takes one Stats of the star (and of the Reader) and sends it.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if c.star != nil {
		st := c.star.Stats()
		for _, m := range c.starWide {
			ch <- prometheus.MustNewConstMetric(m.desc, m.typ, m.get(st), st.Star)
		}
		for _, cl := range []struct {
			name string
			s    *loglet.ClassStats
		}{{"standard", st.Standard}, {"express", st.Express}} {
			if cl.s != nil {
				c.collectChain(ch, st.Star, cl.name, cl.s)
			}
		}
	}
	if r := c.cfg.reader; r != nil {
		st := r.Stats()
		for _, m := range c.reader {
			ch <- prometheus.MustNewConstMetric(m.desc, m.typ, m.get(st))
		}
	}
	if c.cfg.lag != nil {
		c.collectLag(ch)
	}
}

// collectLag reads the consumer lags (within the bounds of cfg.lag) and
// sends them. A label value Prometheus refuses (a stream or group name
// that is not UTF-8) is not sent: OnError is told, and the lag counts as
// dropped.
func (c *Collector) collectLag(ch chan<- prometheus.Metric) {
	cl := *c.cfg.lag
	if cl.Log == nil && c.star != nil {
		cl.Log = c.star
	}
	r := readLags(context.Background(), cl, cl.Log)
	dropped := r.dropped
	send := func(desc *prometheus.Desc, v float64, stream string, labels ...string) bool {
		m, err := prometheus.NewConstMetric(desc, prometheus.GaugeValue, v, labels...)
		if err != nil {
			if cl.OnError != nil {
				cl.OnError(stream, fmt.Errorf("consumer lag of stream %q: %w", stream, err))
			}
			return false
		}
		ch <- m
		return true
	}
	for _, l := range r.lags {
		if !send(c.lagRecords, float64(l.Records), l.Offset.Stream, l.Offset.Stream, l.Offset.Group) {
			dropped++
			continue
		}
		if cl.Bytes {
			send(c.lagBytes, float64(l.Bytes), l.Offset.Stream, l.Offset.Stream, l.Offset.Group)
		}
	}
	seen := map[string]bool{}
	for i, t := range cl.Targets {
		if seen[t.Stream] {
			continue // a stream named twice: one series (up if any of its targets was read)
		}
		seen[t.Stream] = true
		up := 0.0
		for j := i; j < len(cl.Targets); j++ {
			if cl.Targets[j].Stream == t.Stream && r.up[j] {
				up = 1
			}
		}
		send(c.lagUp, up, t.Stream, t.Stream)
	}
	ch <- prometheus.MustNewConstMetric(c.lagDropped, prometheus.GaugeValue, float64(dropped))
}

func (c *Collector) collectChain(ch chan<- prometheus.Metric, star, class string, s *loglet.ClassStats) {
	for _, m := range c.chain {
		ch <- prometheus.MustNewConstMetric(m.desc, m.typ, m.get(s), star, class)
	}
	for _, h := range c.hists {
		ch <- newHistogram(h.desc, h.get(s), h.classic, star, class)
	}
	for b, snap := range s.PutLatency {
		name := ""
		if b < len(s.BucketNames) {
			name = s.BucketNames[b]
		}
		ch <- newHistogram(c.put, snap, c.putClassic, star, class, name)
	}
	m := s.Memory
	for _, p := range []struct {
		part string
		v    int64
	}{{"objects", m.Objects}, {"stragglers", m.Stragglers}, {"settle", m.Settle}} {
		ch <- prometheus.MustNewConstMetric(c.memory, prometheus.GaugeValue, float64(p.v), star, class, p.part)
	}
	ch <- prometheus.MustNewConstMetric(c.memoryBound, prometheus.GaugeValue, float64(m.StragglersBound), star, class, "stragglers")
	ch <- prometheus.MustNewConstMetric(c.memoryBound, prometheus.GaugeValue, float64(m.SettleBound), star, class, "settle")
	causes := make([]string, 0, len(s.Backlog.Stalls))
	for cause := range s.Backlog.Stalls {
		causes = append(causes, cause)
	}
	sort.Strings(causes)
	for _, cause := range causes {
		ch <- prometheus.MustNewConstMetric(c.stalls, prometheus.CounterValue, float64(s.Backlog.Stalls[cause]), star, class, strings.ReplaceAll(cause, " ", "_"))
	}
	phases := make([]string, 0, len(s.Settle.PassTime))
	for phase := range s.Settle.PassTime {
		phases = append(phases, phase)
	}
	sort.Strings(phases)
	for _, phase := range phases {
		ch <- prometheus.MustNewConstMetric(c.passTime, prometheus.CounterValue, s.Settle.PassTime[phase].Seconds(), star, class, phase)
	}
}

// newHistogram is snap as a native histogram of schema 5 (its buckets
// copied one to one, the zero bucket of threshold 0 included) with classic
// buckets at the upper bounds 2^(i/32) for each i of classic, whose
// cumulative counts are exact because those bounds are native bounds too.
func newHistogram(desc *prometheus.Desc, snap histogram.Snapshot, classic []int32, labels ...string) prometheus.Metric {
	pos := make(map[int]int64, len(snap.Buckets))
	for _, b := range snap.Buckets {
		pos[int(b.Index)] = int64(b.Count)
	}
	scale := snap.Scale
	if scale == 0 {
		scale = 1
	}
	native, err := prometheus.NewConstNativeHistogram(desc, snap.Count, float64(snap.Sum)/scale, pos, nil,
		snap.ZeroCount, histogram.Schema, 0, time.Time{}, labels...)
	if err != nil {
		return prometheus.NewInvalidMetric(desc, err)
	}
	return withClassic{native, snap, classic}
}

// withClassic adds classic buckets to a constant native histogram and
// leaves its created timestamp unset: a star's Stats do not say when its
// counters started.
type withClassic struct {
	prometheus.Metric
	snap    histogram.Snapshot
	classic []int32
}

func (m withClassic) Write(out *dto.Metric) error {
	if err := m.Metric.Write(out); err != nil {
		return err
	}
	h := out.Histogram
	h.CreatedTimestamp = nil
	for _, i := range m.classic {
		n, ub := m.snap.CountAtOrBelow(i), histogram.UpperBound(i)
		h.Bucket = append(h.Bucket, &dto.Bucket{CumulativeCount: &n, UpperBound: &ub})
	}
	return nil
}

var _ prometheus.Collector = (*Collector)(nil)
