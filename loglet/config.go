package loglet

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/loglet/internal/chaincore"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// Config configures a Star. The zero values of optional fields take the
// defaults documented beside them (see DefaultConfig and ClassConfig).
type Config struct {
	// Star names the star this process leads: 1-64 of [a-z0-9._-].
	Star string
	// Owner identifies this process in epoch records (default
	// "<hostname>/<pid>/<random>").
	Owner string
	// Meta is the metastore. Required. The write path never calls it.
	Meta metastore.Store
	// Standard and Express configure the two chains. A class with no
	// Stores is disabled: its streams cannot be created or appended to.
	Standard, Express ClassConfig
	// Stars lists every star of the deployment, for placing new streams by
	// hash (chain.PlaceStream). Default: just Star.
	Stars []string
	// CreateOnAppend creates an unknown stream on its first append, in
	// DefaultClass. It costs one metastore write per new stream, on that
	// first append's path.
	CreateOnAppend bool
	// DefaultClass is the class of streams created on append.
	DefaultClass Class
	// MaxRecordBytes bounds one record's encoded size (default 1 MiB).
	MaxRecordBytes int
	// MaxBatchRecords bounds the records of one batch (default 1000).
	MaxBatchRecords int
	// MaxBatchBytes bounds one batch's encoded size (default 1 MiB + 64 KiB,
	// so a batch can hold one maximal record).
	MaxBatchBytes int
	// AbsorbInterval is the minimum time between absorb rounds of a chain
	// (default 100ms) while its backlog is below AbsorbEarlyPercent: it
	// caps metastore requests at about 1/AbsorbInterval per chain, whatever
	// the number of streams, until ingest fills the backlog faster than
	// the interval drains it.
	AbsorbInterval time.Duration
	// AbsorbMaxSlots bounds the slots one round covers (default 256).
	AbsorbMaxSlots int
	// AbsorbEarlyPercent: once a chain's backlog holds this percent of
	// ChainBacklogFlights or ChainBacklogMiB, its next absorb round starts
	// as soon as the one out commits, without waiting for AbsorbInterval
	// (ClassStats.AbsorbEarlyRounds counts them). So a busy chain's ingest
	// is paced by the metastore's round trip, not by ChainBacklogMiB over
	// AbsorbInterval, at the cost of more metastore requests while it is
	// busy; below the mark (low ingest) rounds run on the interval only.
	// Default 50; negative: rounds on the interval only; at most 100.
	AbsorbEarlyPercent int
	// ReaderPollInterval is how often a read session on a Reader (a
	// process that leads nothing) polls the metastore for new refs
	// (default 250ms). Sessions on the leader are woken by releases.
	ReaderPollInterval time.Duration
	// ReadCacheMiB bounds the cache of recently decoded frames that history
	// reads share (default 32; negative: no cache), so a catch-up read with
	// a small MaxRecords does not fetch and decode the same frame once per
	// call.
	ReadCacheMiB int
	// SealCheckInterval is how often an idle leader reads its chain's
	// checkpoint to learn whether a successor has sealed it for a takeover
	// (default 1s; one metastore read per chain per interval, only while no
	// absorb round runs: rounds check the seal as they commit). A leader
	// that finds itself sealed stops leading the chain; its reads then
	// follow the successor's history. So a deposed leader's readers see the
	// successor's records within about this interval.
	SealCheckInterval time.Duration
	// SettleInterval paces settlement (docs/design.md, "Settlement";
	// docs/settlement.md): at most this often, each chain's leader rewrites the
	// absorbed transit slots past its trim cursor into per-stream settled
	// objects in the Standard bucket set (merging a stream's small ones as
	// it goes), repoints their refs, advances the trim cursor and deletes
	// the slots from every bucket, so transit storage is bounded by the
	// settle lag. The first pass comes one interval after the chain starts
	// serving. Default (0): DefaultSettleInterval, so settlement is on.
	// Negative: off, and transit slots are kept (Express's three
	// byte-priced copies for ever). A pass costs about one metastore
	// request per stream it settles, so about (active streams) /
	// SettleInterval requests a second; DefaultSettleInterval suits a star
	// with up to a few thousand active streams (raise it for more).
	// Settlement needs the Standard bucket set: without one, it is off.
	SettleInterval time.Duration
	// RetentionInterval paces the leader's retention pass, which trims
	// each stream of its star that has a Retention (StreamOptions) and
	// retries every failed reclaim (default a minute,
	// DefaultRetentionInterval; negative: no pass, so Retention is not
	// enforced and failed reclaims wait for the stream's next Trim). A
	// positive interval under a millisecond is refused: a pass reads the
	// record of each stream it trims, and the first one every stream
	// record of the star (to find the streams with a Retention: Open
	// loads none).
	RetentionInterval time.Duration
	// doomedGrace overrides settle's grace before deleting a merged-away
	// settled object (tests: negative deletes at once).
	doomedGrace time.Duration
	// FencePatience is how long one fence may stay blocked at a slot it
	// cannot decide before it reports the slot, its buckets and their
	// occupants (a WARN, with backoff, and ClassStats.SuccessionCause) and
	// fences again (default 10s; negative: never report, fence until the
	// context ends).
	FencePatience time.Duration
	// RefuseLiveOwner makes Open refuse a chain whose current epoch has a
	// live owner other than this one (ErrLiveOwner): an epoch record that
	// names another owner and carries no clean seal of its epoch. That owner
	// is running, or it crashed without a clean Close; the metastore cannot
	// tell which, so both count as live. Off by default: a host that Opens
	// a star means to lead it (a takeover deposes the old leader). Tools
	// that must never depose a running service by accident (the CLI's
	// append without --takeover) set it.
	RefuseLiveOwner bool
	// ExclusiveOpen says the host keeps any other process from opening
	// this star at the same time (a fleet member's claim does): Open then
	// takes every chain over at once rather than one after the other,
	// whatever their epoch records (a crashed owner's chains are fenced at
	// the same time). Without it the chains are taken over at once only
	// when RefuseLiveOwner's check finds every one sealed cleanly. Safety
	// does not rest on it: should a rival open the star anyway, each
	// chain's epoch protocol keeps every ack safe, and the opening takes
	// again a chain the rival won, or fails and leaves it. A chain lost
	// while serving is not taken back (the host moved the star: its
	// claim, not this process, says who leads); without ExclusiveOpen a
	// later chain lost to a rival while this process holds the first is.
	ExclusiveOpen bool
	// ProducerWindow bounds each stream's dedupe window of producer
	// identities (Batch.Producer): the producers a stream remembers
	// (default 1024; the least recently committed is forgotten first) and
	// how long after its last commit (default 10 minutes). A retry of a
	// batch the window holds is answered with the batch's original range
	// (Ack.Duplicate) instead of being committed again; see Producer.
	ProducerWindow ProducerWindow
	// UncappedTimestamps keeps record timestamps in the future as the
	// producer set them. By default a timestamp later than the record's
	// arrival is capped at the arrival time (S2's rule), so a producer whose
	// clock is off (or that passes microseconds for milliseconds) cannot push
	// every later timestamp of the stream into the far future, which would
	// break reads by timestamp for good. Set it for backfills that carry
	// trusted timestamps. (Timestamps never go backwards within a stream
	// either way: a record older than the last is stamped at the last.)
	UncappedTimestamps bool
	// CoarseWakeups wakes each lane's loop with the runtime's timers
	// alone. By default a wake-up due within 30 ms (a flush deadline) is
	// also slept for in nanosleep on Linux, on a goroutine of its own:
	// the runtime's timers wake up to a millisecond late there (its poller
	// waits in whole milliseconds), a third of Express's 1 ms flush
	// deadline, where nanosleep overshoots by the kernel's timer slack
	// (tens of microseconds). Set it on a host that counts its OS
	// threads. (In a testing/synctest bubble, whose fake clock cannot
	// advance while a goroutine sleeps in a system call, the wake-up is
	// slept for on the bubble's clock.)
	CoarseWakeups bool
	// CloseTimeout bounds Close when its context has no deadline (default
	// 30s): a close that cannot finish (a bucket set or the metastore down)
	// then gives up, and batches without an outcome end with one.
	CloseTimeout time.Duration
	// PreflightTimeout bounds Open's pre-flight check (default 5s,
	// DefaultPreflightTimeout): before leading anything, Open reads the
	// metastore and probes every bucket (a GET of a missing key, a
	// PutIfAbsent, a GET and a Delete of one object under preflight/), and
	// fails with a *PreflightError naming the bucket that refuses for good
	// (missing, a rejected name, wrong credentials or permissions), the
	// buckets that cannot be reached at all when they leave a class fewer
	// than W (connection refused), or a metastore that does not answer. A
	// bucket that only does not answer in time is logged at WARN. Negative: no check, for credentials confined
	// to the library's own key prefixes (chains/, settled/, snapshots/),
	// or for a host that ran Preflight once for the buckets of many stars.
	PreflightTimeout time.Duration
	// Logger receives events (halts, under-replicated slots). Default:
	// slog.Default().
	Logger *slog.Logger
	// Closers are what the host opened for this star (loglet/open's bbolt
	// file, say): Star.Close closes them after the chains have closed, in
	// reverse order, and joins their errors to its own. They stay the
	// caller's until Open returns a Star: a failed Open closes none.
	Closers []io.Closer
}

// DefaultConfig returns a Config with every default filled in, for a caller
// to edit: set Star, Meta and the classes' Stores and BucketNames (or pass
// it to open.Dir in loglet/open, which sets them), change what differs, and Open. Opening it
// behaves exactly as opening the zero Config with the same fields set.
//
// A few fields stay zero because their defaults follow from fields the
// caller sets, and Open derives them then: Owner (per process:
// "<hostname>/<pid>/<random>"), Stars (just Star), Logger (slog.Default()
// at Open), and per class W (K/2+1 of the Stores), BucketNames
// ("bucket-0", ...: set your own, see ClassConfig.BucketNames),
// StragglerMiB (half of MemoryBufferMiB) and ChainBacklogMiB (a multiple
// of MemoryBufferMiB: DefaultStandardBacklogPerPool, DefaultExpressBacklogPerPool), so that editing MemoryBufferMiB moves them with it.
// Retry's zero policy is its default (chain.RetryPolicy). The booleans are
// off, DefaultClass is Standard and FenceOverride is FenceStrict.
func DefaultConfig() Config {
	var c Config
	c.applyDefaults()
	c.Owner, c.Stars, c.Logger = "", nil, nil
	c.ReadCacheMiB = DefaultReadCacheMiB
	c.PreflightTimeout = DefaultPreflightTimeout
	for _, cc := range []*ClassConfig{&c.Standard, &c.Express} {
		cc.W, cc.BucketNames, cc.StragglerMiB, cc.ChainBacklogMiB = 0, nil, 0, 0
	}
	return c
}

// DefaultSettleInterval is Config.SettleInterval's default.
const DefaultSettleInterval = time.Second

// settleInterval is the core's pacing: off when negative (applyDefaults has
// turned 0 into DefaultSettleInterval) and without a Standard bucket set.
func (s *Star) settleInterval() time.Duration {
	if s.cfg.SettleInterval <= 0 || len(s.cfg.Standard.Stores) == 0 {
		return 0
	}
	return s.cfg.SettleInterval
}

// DefaultRetentionInterval is Config.RetentionInterval's default.
const DefaultRetentionInterval = time.Minute

// DefaultCloseTimeout is Config.CloseTimeout's default.
const DefaultCloseTimeout = 30 * time.Second

// DefaultReadCacheMiB is Config.ReadCacheMiB's default.
const DefaultReadCacheMiB = 32

// cacheBytes is the frame cache's bound for a ReadCacheMiB setting.
func cacheBytes(mib int) int64 {
	switch {
	case mib < 0:
		return 0
	case mib == 0:
		return DefaultReadCacheMiB << 20
	}
	return int64(mib) << 20
}

// FenceOverride is an operator override of the fence's rule (docs/design.md,
// "The fence"), for a slot that damaged objects or lost buckets leave
// undecidable: neither W flight copies nor K−W+1 poisons can ever be found
// there, so a takeover (or a halt's recovery) waits at it for ever.
type FenceOverride uint8

const (
	// FenceStrict decides by the rule alone (the default).
	FenceStrict FenceOverride = FenceOverride(chaincore.FenceStrict)
	// FenceAcceptReadable decides committed an undecidable slot holding
	// at least one readable, checksummed flight copy. Use it when buckets
	// are lost for good: it may call committed a slot whose unreachable
	// buckets hold poison.
	FenceAcceptReadable FenceOverride = FenceOverride(chaincore.FenceAcceptReadable)
	// FenceDiscardUnreadable also decides dead an undecidable slot none of
	// whose reachable copies is a readable flight (corrupt envelopes count
	// as poison). The slot's records are lost, and so are those of every
	// later slot of the epoch, acked or not (the cut is the first dead
	// slot). Use it only for damage nothing can repair: run fsck first.
	FenceDiscardUnreadable FenceOverride = FenceOverride(chaincore.FenceDiscardUnreadable)
)

func (o FenceOverride) String() string { return chaincore.FenceOverride(o).String() }

// ParseFenceOverride parses "strict", "accept-readable" or
// "discard-unreadable".
func ParseFenceOverride(s string) (FenceOverride, error) {
	for _, o := range []FenceOverride{FenceStrict, FenceAcceptReadable, FenceDiscardUnreadable} {
		if o.String() == s {
			return o, nil
		}
	}
	return 0, fmt.Errorf("loglet: fence override %q: want strict, accept-readable or discard-unreadable", s)
}

// DefaultFencePatience is Config.FencePatience's default.
const DefaultFencePatience = 10 * time.Second

// DefaultSealCheckInterval is Config.SealCheckInterval's default.
const DefaultSealCheckInterval = time.Second

// ClassConfig configures one class's chain. Defaults differ per class; see
// the Default* constants.
type ClassConfig struct {
	// Stores are the buckets of the class's bucket set, K = len(Stores).
	// Every flight is written to the same key in each. (Buckets, in epoch
	// records and errors, are their names: BucketNames.)
	Stores []objstore.Store
	// BucketNames names the buckets, in Stores' order, in epoch records,
	// errors and Stats. They are part of the chain's identity: the first
	// Open records them in the chain's epoch record, and every later Open
	// of the star (this program's, another host's, the CLI's) must give the
	// same names in the same order, or it fails naming the recorded and the
	// configured names (changing a chain's bucket set is not supported).
	// Set them explicitly to something stable that names the bucket itself
	// (the S3 bucket name, the directory name): the default, "bucket-0",
	// "bucket-1", ..., depends only on position, so it is stable, but the
	// CLI names buckets after --s3-bucket, --s3-express-buckets or its
	// directories and so cannot open as leader a chain recorded under the
	// defaults. open.Dir sets the names its layout uses, which the CLI's
	// --dir uses too.
	BucketNames []string
	// W is the copy quorum (default: K/2+1, so 1 for K=1 and 2 for K=3).
	// Any 1 <= W <= K is safe (W flight copies and K-W+1 poisons cannot
	// both fit in K buckets); a small W acks sooner but a fence then needs
	// K-W+1 reachable buckets to kill a slot, so fewer down buckets block a
	// takeover.
	W int
	// MemoryBufferMiB is the pool budget (Standard 256, Express 32: the
	// seed's --s3-memory-buffer-mib and --s3-express-memory-buffer-mib).
	MemoryBufferMiB int
	// ParallelUploads is the pipeline window: slots claimed and not yet
	// released (the seed's --s3-parallel-uploads).
	ParallelUploads int
	// FlushDeadline is how long the oldest pooled byte may wait before a
	// flight is cut.
	FlushDeadline time.Duration
	// FlightBytes cuts a flight once the pool holds this many bytes.
	FlightBytes int
	// FrameBytes caps one frame's raw bytes (default 4 MiB, at least
	// Config.MaxBatchBytes): a stream's batches in one flight are split
	// into frames of at most this size, which also bounds what one read
	// fetches to return one record.
	FrameBytes int
	// CommitDeadline is how long a flight may take to reach W copies from
	// its claim before the epoch halts. Keep it well above the store's
	// p99.9 PUT latency: a halt costs a fence.
	CommitDeadline time.Duration
	// StragglerTimeout bounds how long copies past W keep trying; a copy
	// still missing then is counted under-replicated.
	StragglerTimeout time.Duration
	// StragglerMiB bounds the rendered objects that copies still trying
	// after their flight was acked hold (default: half of MemoryBufferMiB):
	// past it the oldest are abandoned and counted under-replicated, so one
	// hanging bucket cannot pin memory (and goroutines) for a whole
	// StragglerTimeout of traffic.
	StragglerMiB int
	// FenceOverride is the operator's way past a slot that no fence can
	// decide (FenceStrict by default: such a slot blocks the takeover or
	// recovery, logged at WARN and shown in Stats). Set it for one Open,
	// knowingly, then go back to FenceStrict.
	FenceOverride FenceOverride
	// Codec compresses frames.
	Codec envelope.Codec
	// PrecompressBytes: a batch this large (encoded) or larger is
	// compressed by the producer that submits it, at admission, and
	// written as a frame of its own, so the render only assembles a
	// claimed flight; smaller batches are grouped per stream and
	// compressed when their flight is claimed (so is a large batch when
	// the pool's budget has no room for its compressed copy at admission:
	// ClassStats.PrecompressSkipped). Negative: never (every
	// frame is compressed at the claim, one per stream of the flight).
	// Default: 4 KiB for Express, never for Standard. It trades ratio and
	// throughput for latency: on the benchmark's 10 KiB JSON batches (S2)
	// compressing per batch stores 0.40 of the raw bytes where per stream
	// stores 0.34, and saturated throughput is about 12% lower, but the
	// claimed flight no longer waits for its compression (an Express
	// closed-loop ack 1.6 ms sooner); Standard's ack is its 20 ms deadline
	// and a 30 ms PUT, so it keeps the ratio (docs/benchmarks.md).
	PrecompressBytes int
	// Retry paces retries of ambiguous PUT failures.
	Retry chain.RetryPolicy
	// ReadAhead, if positive, bounds how many slots a takeover's (or a
	// halt recovery's) fence, walk and garbage probe, and a settle pass's
	// walk, work on at once (chain.BucketSet.ReadAhead): at most
	// ReadAhead·K requests in flight for a fence, ReadAhead GETs for a
	// walk. 0: the defaults, up to
	// 128·K envelope GETs at once in a fence and 256 in a walk, which
	// fence and walk a 1,024-flight backlog at 20 ms per request in about
	// 0.7 s (docs/guarantees.md, "The seal is binding"). Lower it for a store with a per-prefix
	// request rate or an HTTP client with a small connection pool; the
	// takeover then costs about backlog/ReadAhead round trips.
	ReadAhead int
	// ChainBacklogFlights bounds claimed-but-unabsorbed flights (the
	// seed's --s3-chain-backlog-flights, default 1024).
	ChainBacklogFlights int
	// ChainBacklogMiB bounds their payload bytes, which the leader holds in
	// its flight index until absorbed (default: twice MemoryBufferMiB for
	// Standard, eight times for Express: 512 and 256 MiB at the default
	// pools). Ingest is bounded by this over the absorb round's latency,
	// and Express's small pool at twice stalled near 640 MB/s.
	ChainBacklogMiB int
}

// Per-class defaults. The benchmark in loglet/bench_test.go and
// `flightlog bench` are how they were chosen; see docs/benchmarks.md.
const (
	DefaultStandardMemoryBufferMiB = 256
	DefaultExpressMemoryBufferMiB  = 32
	// ChainBacklogMiB's default, in MemoryBufferMiBs: the backlog's bytes
	// over the absorb round's latency bound a chain's ingest, and Express's
	// pool is small (BenchmarkThroughput's backlog=64MiB variant, the old
	// Express default, stalls where the default does not).
	DefaultStandardBacklogPerPool   = 2
	DefaultExpressBacklogPerPool    = 8
	DefaultStandardParallelUploads  = 16
	DefaultExpressParallelUploads   = 32
	DefaultStandardFlushDeadline    = 20 * time.Millisecond
	DefaultExpressFlushDeadline     = 1 * time.Millisecond
	DefaultStandardFlightBytes      = 8 << 20
	DefaultExpressFlightBytes       = 1 << 20
	DefaultStandardCommitDeadline   = 10 * time.Second
	DefaultExpressCommitDeadline    = 2 * time.Second
	DefaultStragglerTimeout         = 30 * time.Second
	DefaultChainBacklogFlights      = 1024
	DefaultFrameBytes               = 4 << 20
	DefaultStandardPrecompressBytes = -1 // never
	DefaultExpressPrecompressBytes  = 4 << 10
	DefaultStandardCodec            = envelope.CodecS2
	DefaultExpressCodec             = envelope.CodecS2
)

func (c *ClassConfig) applyDefaults(class Class) {
	std := class == Standard
	pick := func(s, e int) int {
		if std {
			return s
		}
		return e
	}
	pickD := func(s, e time.Duration) time.Duration {
		if std {
			return s
		}
		return e
	}
	if c.W == 0 {
		c.W = len(c.Stores)/2 + 1
	}
	if len(c.BucketNames) == 0 {
		for i := range c.Stores {
			c.BucketNames = append(c.BucketNames, fmt.Sprintf("bucket-%d", i))
		}
	}
	if c.MemoryBufferMiB == 0 {
		c.MemoryBufferMiB = pick(DefaultStandardMemoryBufferMiB, DefaultExpressMemoryBufferMiB)
	}
	if c.ParallelUploads == 0 {
		c.ParallelUploads = pick(DefaultStandardParallelUploads, DefaultExpressParallelUploads)
	}
	if c.FlushDeadline == 0 {
		c.FlushDeadline = pickD(DefaultStandardFlushDeadline, DefaultExpressFlushDeadline)
	}
	if c.FlightBytes == 0 {
		c.FlightBytes = pick(DefaultStandardFlightBytes, DefaultExpressFlightBytes)
	}
	if c.FrameBytes == 0 {
		c.FrameBytes = DefaultFrameBytes
	}
	if c.PrecompressBytes == 0 {
		c.PrecompressBytes = pick(DefaultStandardPrecompressBytes, DefaultExpressPrecompressBytes)
	}
	if c.CommitDeadline == 0 {
		c.CommitDeadline = pickD(DefaultStandardCommitDeadline, DefaultExpressCommitDeadline)
	}
	if c.ChainBacklogFlights == 0 {
		c.ChainBacklogFlights = DefaultChainBacklogFlights
	}
	if c.ChainBacklogMiB == 0 {
		c.ChainBacklogMiB = pick(DefaultStandardBacklogPerPool, DefaultExpressBacklogPerPool) * c.MemoryBufferMiB
	}
	if c.StragglerTimeout == 0 {
		c.StragglerTimeout = DefaultStragglerTimeout
	}
	if c.StragglerMiB == 0 {
		c.StragglerMiB = max(1, c.MemoryBufferMiB/2)
	}
	if c.Codec == 0 && std {
		c.Codec = DefaultStandardCodec
	} else if c.Codec == 0 {
		c.Codec = DefaultExpressCodec
	}
}

// CodecNone selects no compression explicitly (the zero Codec means "the
// class default").
const CodecNone = envelope.Codec(255)

func (c *ClassConfig) validate(class Class, maxBatch int) error {
	if len(c.Stores) == 0 {
		return nil
	}
	k := len(c.Stores)
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("loglet: %s: "+format, append([]any{class}, args...)...))
	}
	for i, b := range c.Stores {
		if b == nil {
			bad("bucket %d is nil", i)
		}
	}
	if len(c.BucketNames) != k {
		bad("%d bucket names for %d buckets", len(c.BucketNames), k)
	}
	if c.W < 1 || c.W > k {
		bad("W=%d must be in [1, K=%d]", c.W, k)
	}
	if c.MemoryBufferMiB < 1 {
		bad("MemoryBufferMiB=%d must be >= 1", c.MemoryBufferMiB)
	}
	if int64(c.MemoryBufferMiB)<<20 < int64(maxBatch) {
		bad("MemoryBufferMiB=%d cannot hold one maximal batch (%d bytes)", c.MemoryBufferMiB, maxBatch)
	}
	if c.ParallelUploads < 1 || c.ParallelUploads > 4096 {
		bad("ParallelUploads=%d must be in [1, 4096]", c.ParallelUploads)
	}
	if c.FlushDeadline < 0 {
		bad("FlushDeadline=%v must not be negative", c.FlushDeadline)
	}
	if c.FlightBytes < 1 || c.FlightBytes > 32<<20 {
		bad("FlightBytes=%d must be in [1, 32 MiB]", c.FlightBytes)
	}
	if c.FrameBytes < maxBatch || c.FrameBytes > envelope.MaxFrameRawBytes {
		bad("FrameBytes=%d must be in [MaxBatchBytes=%d, %d]", c.FrameBytes, maxBatch, envelope.MaxFrameRawBytes)
	}
	if c.ChainBacklogFlights < c.ParallelUploads {
		bad("ChainBacklogFlights=%d must be at least ParallelUploads=%d", c.ChainBacklogFlights, c.ParallelUploads)
	}
	if c.ReadAhead < 0 {
		bad("ReadAhead=%d must not be negative (0: the defaults)", c.ReadAhead)
	}
	if c.StragglerMiB < 1 {
		bad("StragglerMiB=%d must be >= 1", c.StragglerMiB)
	}
	if c.ChainBacklogMiB < 1 {
		bad("ChainBacklogMiB=%d must be >= 1", c.ChainBacklogMiB)
	}
	if c.CommitDeadline <= 0 || c.StragglerTimeout < c.CommitDeadline {
		bad("CommitDeadline=%v must be positive and at most StragglerTimeout=%v", c.CommitDeadline, c.StragglerTimeout)
	}
	switch c.Codec {
	case envelope.CodecS2, envelope.CodecZstd, CodecNone:
	default:
		bad("unknown codec %v", c.Codec)
	}
	return errors.Join(errs...)
}

func (c *ClassConfig) codec() envelope.Codec {
	if c.Codec == CodecNone {
		return envelope.CodecNone
	}
	return c.Codec
}

func (c *Config) applyDefaults() {
	if c.Owner == "" {
		host, _ := os.Hostname()
		n := envelope.NewNonce()
		c.Owner = fmt.Sprintf("%s/%d/%x", host, os.Getpid(), n[:4])
	}
	if len(c.Stars) == 0 && c.Star != "" {
		c.Stars = []string{c.Star}
	}
	if c.MaxRecordBytes == 0 {
		c.MaxRecordBytes = 1 << 20
	}
	if c.MaxBatchRecords == 0 {
		c.MaxBatchRecords = 1000
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = 1<<20 + 64<<10
	}
	if c.AbsorbInterval == 0 {
		c.AbsorbInterval = 100 * time.Millisecond
	}
	if c.AbsorbMaxSlots == 0 {
		c.AbsorbMaxSlots = 256
	}
	if c.AbsorbEarlyPercent == 0 {
		c.AbsorbEarlyPercent = 50
	}
	if c.ProducerWindow.Producers == 0 {
		c.ProducerWindow.Producers = chaincore.DefaultProducerWindow.Producers
	}
	if c.ProducerWindow.Age == 0 {
		c.ProducerWindow.Age = chaincore.DefaultProducerWindow.Age
	}
	if c.ReaderPollInterval == 0 {
		c.ReaderPollInterval = 250 * time.Millisecond
	}
	if c.FencePatience == 0 {
		c.FencePatience = DefaultFencePatience
	}
	if c.SealCheckInterval == 0 {
		c.SealCheckInterval = DefaultSealCheckInterval
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = DefaultCloseTimeout
	}
	if c.RetentionInterval == 0 {
		c.RetentionInterval = DefaultRetentionInterval
	}
	if c.SettleInterval == 0 {
		c.SettleInterval = DefaultSettleInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Standard.applyDefaults(Standard)
	c.Express.applyDefaults(Express)
}

// Validate applies defaults to a copy of c and reports every setting that
// makes no sense, joined into one error.
func (c Config) Validate() error {
	c.applyDefaults()
	return c.validate()
}

func (c *Config) validate() error {
	var errs []error
	if err := chain.ValidateStarName(c.Star); err != nil {
		errs = append(errs, fmt.Errorf("loglet: Star: %w", err))
	}
	if c.Meta == nil {
		errs = append(errs, errors.New("loglet: Meta (the metastore) is required"))
	} else if n := metastore.MaxCommitOps(c.Meta); n > 0 && n < metastore.MinCommitOps {
		errs = append(errs, fmt.Errorf("loglet: the metastore takes %d ops per Commit: want at least metastore.MinCommitOps (%d)", n, metastore.MinCommitOps))
	}
	if len(c.Standard.Stores) == 0 && len(c.Express.Stores) == 0 {
		errs = append(errs, errors.New("loglet: no class has buckets: configure Standard.Stores or Express.Stores"))
	}
	for i, cl := range c.Closers {
		if cl == nil {
			errs = append(errs, fmt.Errorf("loglet: Closers[%d] is nil", i))
		}
	}
	if c.MaxRecordBytes < 1 || c.MaxBatchRecords < 1 || c.MaxBatchBytes < c.MaxRecordBytes {
		errs = append(errs, fmt.Errorf("loglet: limits: MaxRecordBytes=%d, MaxBatchRecords=%d, MaxBatchBytes=%d (must be positive, batch >= record)", c.MaxRecordBytes, c.MaxBatchRecords, c.MaxBatchBytes))
	}
	if c.ProducerWindow.Producers < 0 || c.ProducerWindow.Age < 0 {
		errs = append(errs, fmt.Errorf("loglet: ProducerWindow %+v: must not be negative", c.ProducerWindow))
	}
	if c.MaxBatchRecords > envelope.MaxFrameRecords {
		errs = append(errs, fmt.Errorf("loglet: MaxBatchRecords=%d over the format's %d", c.MaxBatchRecords, envelope.MaxFrameRecords))
	}
	for _, cc := range []*ClassConfig{&c.Standard, &c.Express} {
		if cc.FenceOverride > FenceDiscardUnreadable {
			errs = append(errs, fmt.Errorf("loglet: FenceOverride %d is not one of FenceStrict, FenceAcceptReadable, FenceDiscardUnreadable", cc.FenceOverride))
		}
	}
	if c.SealCheckInterval < 0 || c.CloseTimeout < 0 {
		errs = append(errs, fmt.Errorf("loglet: SealCheckInterval=%v, CloseTimeout=%v: want >= 0", c.SealCheckInterval, c.CloseTimeout))
	}
	if c.RetentionInterval > 0 && c.RetentionInterval < time.Millisecond {
		errs = append(errs, fmt.Errorf("loglet: RetentionInterval=%v: want at least 1ms (or negative: no retention pass)", c.RetentionInterval))
	}
	if c.AbsorbInterval < 0 || c.AbsorbMaxSlots < 1 || c.ReaderPollInterval <= 0 {
		errs = append(errs, fmt.Errorf("loglet: AbsorbInterval=%v, AbsorbMaxSlots=%d, ReaderPollInterval=%v: want >= 0, >= 1, > 0", c.AbsorbInterval, c.AbsorbMaxSlots, c.ReaderPollInterval))
	}
	if c.AbsorbEarlyPercent > 100 {
		errs = append(errs, fmt.Errorf("loglet: AbsorbEarlyPercent=%d: want at most 100 (or negative: rounds on AbsorbInterval only)", c.AbsorbEarlyPercent))
	}
	errs = append(errs, c.Standard.validate(Standard, c.MaxBatchBytes), c.Express.validate(Express, c.MaxBatchBytes))
	return errors.Join(errs...)
}
