package loglet

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/metastore/metastoretest"
	"github.com/flightlog/flightlog/objstore"
)

// BenchmarkManyStreams (issue 13, item 7): one Standard star with a million
// streams, each created and appended once, of which 1% are then active. Run:
//
//	go test ./loglet -run XXX -bench BenchmarkManyStreams -benchtime 1x -count 3 -timeout 30m
//	go test ./loglet -run XXX -bench BenchmarkManyStreams -benchtime 1x -manystreams=10000   # quick
//
// -manystreams sets the stream count (default 1,000,000; the active share is
// always 1 in manyActiveShare); -manystreams.every the interval at which each
// active stream appends one batch (default 1s: 10,000 batches/s offered at a
// million streams, which these 2-core machines sustain; 100ms, the
// AbsorbInterval, puts every active stream in every round and offers
// 100,000/s, more than they do at that size); -manystreams.metamem runs over
// metastore.Mem instead of scaleMeta (see below; only for small counts).
// One op is the whole scenario below, whatever b.N (its phases are fixed in
// size and time), so -benchtime 1x is one full measurement; every figure is
// measured in the run, none is assumed.
//
// Storage: one objstore.Mem with no injected latency (PUTs cost what the Mem
// costs: the aim is the star's own cost at scale) behind a wrapper counting
// PUT bytes by key (chains/: flights; snapshots/: tails snapshots; settled/:
// settlement's objects, settled-KB/s over the window), and an
// in-memory metastore counting requests as metastore.Mem does
// (MemCounters.Requests: every Get, Put, Delete, Scan and Commit). The
// metastore is scaleMeta, not metastore.Mem: Mem keeps its keys in one
// sorted slice, so every new key copies every key after it and creating n
// streams is O(n²) (measured on this machine: 50k streams 0.96s, 100k 10.6s,
// 200k 65s, 400k 257s), which would bury the star's cost under the fake's.
// scaleMeta has Mem's semantics (it passes metastoretest) over an index of
// sorted chunks. Every process of the scenario shares the same stores, as
// processes share a bucket and a metastore. The star runs with the defaults
// (AbsorbInterval 100ms, FlushDeadline 20ms, FlightBytes 8 MiB, K=1/W=1).
//
// The scenario, and what it reports:
//
//  1. Setup, star "creator": CreateStream for every stream (manyCreators
//     goroutines), then one batch of one manyBodyBytes record appended to
//     each (through a throwaway append session per stream), then wait until
//     all of it is absorbed. create/s: creations over the creation time;
//     setup-s: Open to everything absorbed; setup-batches/flight: the
//     setup's batches (one per stream) over the flights that carried them;
//     setup-halts: the creator's halts (a halt recovers: producers see
//     latency, not errors; with this bucket there should be none).
//  2. Memory: heap in use (runtime.MemStats.HeapAlloc after two
//     runtime.GC()) with the creator open and everything absorbed, minus
//     the same after it closed cleanly and was dropped (which leaves the
//     stores' contents): leader-MiB and leader-B/stream. stores-MiB is the
//     latter minus the heap before anything opened (what the in-memory
//     metastore and bucket hold; meta-payload-MiB and obj-payload-MiB are
//     the bytes of their keys and values). close-setup-ms times the
//     creator's Close.
//  3. Active phase, star "leader": a clean Open after that Close
//     (open-after-close-ms, and open-after-close-chain-ms its chain's part,
//     as for takeover-chain-ms below; loaded-MiB is its heap, measured as
//     above: the state a leader rebuilds from the metastore and the tails
//     snapshot),
//     then manyProducers producers append one batch per -manystreams.every
//     to each of the active streams (every manyActiveShare-th stream, each
//     with its own append session) for manyWindow. The leader is a fresh
//     star, so its Stats cover exactly this phase: round-p50-ms /
//     round-p99-ms (ClassStats.AbsorbRoundLatency: snapshot PUT and Commit,
//     retries included, over every round of the leader's life up to the end
//     of the window; its first round writes the leader's first full tails
//     snapshot, as every new owner's does) and ack-p50-ms / ack-p99-ms.
//     Over the window (leader's Open return to its end), all from deltas of
//     counters taken at both ends: rounds/s and refs/round (Stats),
//     flight-KB/round (bytes PUT to the bucket under chains/, over the
//     rounds committed), snap-KB/round (tails snapshot bytes of the rounds
//     committed, ClassStats.TailsSnapshotBytes, checked against the bytes
//     PUT under snapshots/, which may be ahead by the one round in flight),
//     full-snaps (full tails snapshots among them, TailsFullSnapshots),
//     max-snap-MB (the largest snapshot PUT), metastore-req/s (requests the
//     metastore served, from its counters, over the window's wall time),
//     appends/s (batches acked), min-appends/stream (every active stream
//     must have appended), and gc-cycles (GC cycles completed in the
//     window, runtime/metrics: the process's heap holds the in-memory
//     stores too, so a collection there is partly the rig's cost).
//  4. Takeover of the live leader: right after the producers stop (their
//     acks in), a "successor" process Opens the star while the leader still
//     runs (it is deposed). takeover-open-ms: Open call to its return;
//     takeover-ack-ms: from then to the ack of one append to an active
//     stream (its sequence number is checked: every acked record counts);
//     takeover-chain-ms: the chain's part of the Open (seal, fence, mint,
//     walk: the "took over" event's took), the rest being the load of the
//     stream records; takeover-walked: slots it walked; and the Open's
//     split, from the successor's log events: takeover-fence-ms (Open to
//     "fenced": seal and fence), takeover-mint-ms ("fenced" to "minted"),
//     takeover-walk-ms ("minted" to the chain's "took over": the tails
//     snapshot read and the walk's rounds, the first writing the successor's
//     full snapshot) and takeover-load-ms (from there to Open's return:
//     loading the stream records).
//  5. Clean handoff: the successor Closes (close-ms), and a "next" process
//     Opens (clean-open-ms, clean-chain-ms) and appends once
//     (clean-ack-ms), checked the same way.
//
// A full run at a million streams takes about three minutes here, so
// -count 3 needs -timeout above go test's default 10m.
//
// Each process's goroutines carry the pprof label manystreams=<phase>
// (setup, active, takeover, clean), so a -cpuprofile of the run can be split
// by phase with pprof's -tagfocus; -manystreams.heapprofile=<prefix> writes
// a heap profile at each heap measurement (compare creator and loaded with
// -base <prefix>-stores.pprof). Warnings the processes log are printed at
// the end (the deposed leader's are expected).
var (
	flagManyStreams = flag.Int("manystreams", 1_000_000, "BenchmarkManyStreams: streams on the star (1 in 100 active)")
	flagManyEvery   = flag.Duration("manystreams.every", time.Second, "BenchmarkManyStreams: each active stream appends one batch per this interval")
	flagManyMetaMem = flag.Bool("manystreams.metamem", false, "BenchmarkManyStreams: use metastore.Mem (O(n) per new key: small counts only)")
	flagManyHeap    = flag.String("manystreams.heapprofile", "", "BenchmarkManyStreams: write heap profiles <prefix>-{creator,stores,loaded}.pprof where the heap is measured")
	flagManySettle  = flag.Duration("manystreams.settle", 0, "BenchmarkManyStreams: every process's Config.SettleInterval (0: the library's default, on; negative: off), to tell settlement's share of the rounds apart")
)

const (
	manyStar          = "many"
	manyActiveShare   = 100 // 1 stream in manyActiveShare is active
	manyBodyBytes     = 128
	manyCreators      = 16               // goroutines creating streams
	manyAppenders     = 4                // goroutines appending the setup's batches
	manySetupInFlight = 1 << 14          // setup batches in flight per appender
	manyProducers     = 16               // active-phase producers
	manyMaxInFlight   = 1024             // active-phase batches in flight per producer
	manyWindow        = 10 * time.Second // the active phase
	manySettleTimeout = 5 * time.Minute  // bound on waiting for the setup's absorb
	manyOpenTimeout   = time.Minute      // bound on each Open
)

func manyName(i int) string { return fmt.Sprintf("ms-%07d", i) }

// countedMeta is a metastore that counts its requests (metastore.Mem,
// scaleMeta).
type countedMeta interface {
	metastore.Store
	Counters() metastore.MemCounters
}

// ---- scaleMeta --------------------------------------------------------------

// scaleMeta is metastore.Mem with an ordered index that scales: the same
// semantics (one lock, linearizable; versions from one store-wide revision
// counter, never reused; values up to metastore.MemMaxValueLen; no limit on
// a Commit's ops) and the same request counters, but new keys go into a
// list of sorted chunks of at most scaleChunk keys, so an insert costs a
// binary search and a copy within one chunk instead of a copy of every
// later key.
type scaleMeta struct {
	mu   sync.RWMutex
	rev  uint64
	data map[string]scaleEntry
	idx  chunkIndex

	gets, puts, deletes, scans    atomic.Uint64
	commits, commitOps, conflicts atomic.Uint64
}

type scaleEntry struct {
	value   []byte
	version metastore.Version
}

var _ metastore.Store = (*scaleMeta)(nil)

func newScaleMeta() *scaleMeta { return &scaleMeta{data: map[string]scaleEntry{}} }

// Counters returns the request counters, as metastore.Mem counts them.
func (m *scaleMeta) Counters() metastore.MemCounters {
	return metastore.MemCounters{Gets: m.gets.Load(), Puts: m.puts.Load(), Deletes: m.deletes.Load(), Scans: m.scans.Load(),
		Commits: m.commits.Load(), CommitOps: m.commitOps.Load(), Conflicts: m.conflicts.Load()}
}

// payloadBytes is the bytes of every key and value held.
func (m *scaleMeta) payloadBytes() int64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var n int64
	for k, e := range m.data {
		n += int64(len(k) + len(e.value) + len(e.version))
	}
	return n
}

func (m *scaleMeta) Get(ctx context.Context, key string) (metastore.Item, error) {
	m.gets.Add(1)
	if err := ctx.Err(); err != nil {
		return metastore.Item{}, fmt.Errorf("metastore: get %q: %w", key, err)
	}
	if err := metastore.ValidateKey(key); err != nil {
		return metastore.Item{}, fmt.Errorf("metastore: get %q: %w", key, err)
	}
	m.mu.RLock()
	e, ok := m.data[key]
	m.mu.RUnlock()
	if !ok {
		return metastore.Item{}, fmt.Errorf("metastore: get %q: %w", key, metastore.ErrNotFound)
	}
	return metastore.Item{Key: key, Value: slices.Clone(e.value), Version: e.version}, nil
}

func (m *scaleMeta) Put(ctx context.Context, key string, value []byte, expect metastore.Version) (metastore.Version, error) {
	m.puts.Add(1)
	if err := ctx.Err(); err != nil {
		return metastore.NoVersion, fmt.Errorf("metastore: put %q: %w", key, err)
	}
	if err := metastore.ValidateKey(key); err != nil {
		return metastore.NoVersion, fmt.Errorf("metastore: put %q: %w", key, err)
	}
	if len(value) > metastore.MemMaxValueLen {
		return metastore.NoVersion, fmt.Errorf("metastore: put %q: value of %d bytes: %w", key, len(value), metastore.ErrTooLarge)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.expectLocked(key, expect); err != nil {
		return metastore.NoVersion, fmt.Errorf("metastore: put %q: %w", key, err)
	}
	m.rev++
	v := metastore.Version(strconv.FormatUint(m.rev, 10))
	m.putLocked(key, cloneValue(value), v)
	return v, nil
}

func (m *scaleMeta) Delete(ctx context.Context, key string, expect metastore.Version) error {
	m.deletes.Add(1)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("metastore: delete %q: %w", key, err)
	}
	if err := metastore.ValidateKey(key); err != nil {
		return fmt.Errorf("metastore: delete %q: %w", key, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.expectLocked(key, expect); err != nil {
		return fmt.Errorf("metastore: delete %q: %w", key, err)
	}
	if _, ok := m.data[key]; ok {
		m.rev++
		m.deleteLocked(key)
	}
	return nil
}

func (m *scaleMeta) Scan(ctx context.Context, prefix, startAfter string, limit int) ([]metastore.Item, error) {
	m.scans.Add(1)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("metastore: scan %q: %w", prefix, err)
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	var items []metastore.Item
	m.idx.ascend(max(prefix, startAfter), func(k string) bool {
		if limit > 0 && len(items) >= limit || !strings.HasPrefix(k, prefix) {
			return false
		}
		if k > startAfter {
			e := m.data[k]
			items = append(items, metastore.Item{Key: k, Value: slices.Clone(e.value), Version: e.version})
		}
		return true
	})
	return items, nil
}

func (m *scaleMeta) Commit(ctx context.Context, ops []metastore.Op) ([]metastore.Version, error) {
	m.commits.Add(1)
	m.commitOps.Add(uint64(len(ops)))
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("metastore: commit: %w", err)
	}
	seen := make(map[string]struct{}, len(ops))
	for i, op := range ops {
		if op.Kind != metastore.OpPut && op.Kind != metastore.OpDelete && op.Kind != metastore.OpCheck {
			return nil, fmt.Errorf("metastore: commit: op %d on %q has unknown kind %d", i, op.Key, op.Kind)
		}
		if err := metastore.ValidateKey(op.Key); err != nil {
			return nil, fmt.Errorf("metastore: commit: op %d on %q: %w", i, op.Key, err)
		}
		if op.Kind == metastore.OpPut && len(op.Value) > metastore.MemMaxValueLen {
			return nil, fmt.Errorf("metastore: commit: op %d on %q: value of %d bytes: %w", i, op.Key, len(op.Value), metastore.ErrTooLarge)
		}
		if _, dup := seen[op.Key]; dup {
			return nil, fmt.Errorf("metastore: commit: key %q appears more than once: %w", op.Key, metastore.ErrInvalidKey)
		}
		seen[op.Key] = struct{}{}
	}
	if len(ops) == 0 {
		return nil, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, op := range ops {
		if err := m.expectLocked(op.Key, op.Expect); err != nil {
			return nil, fmt.Errorf("metastore: commit: op on %q: %w", op.Key, err)
		}
	}
	m.rev++
	v := metastore.Version(strconv.FormatUint(m.rev, 10))
	out := make([]metastore.Version, len(ops))
	for i, op := range ops {
		switch op.Kind {
		case metastore.OpPut:
			m.putLocked(op.Key, cloneValue(op.Value), v)
			out[i] = v
		case metastore.OpDelete:
			m.deleteLocked(op.Key)
		case metastore.OpCheck:
			if e, ok := m.data[op.Key]; ok {
				out[i] = e.version
			}
		}
	}
	return out, nil
}

func (m *scaleMeta) expectLocked(key string, expect metastore.Version) error {
	e, ok := m.data[key]
	switch {
	case expect == metastore.AnyVersion:
		return nil
	case expect == metastore.NoVersion && !ok:
		return nil
	case ok && e.version == expect:
		return nil
	}
	m.conflicts.Add(1)
	if ok {
		return fmt.Errorf("at version %s, expected %q: %w", e.version, expect, metastore.ErrConflict)
	}
	return fmt.Errorf("absent, expected version %q: %w", expect, metastore.ErrConflict)
}

func (m *scaleMeta) putLocked(key string, value []byte, v metastore.Version) {
	if _, ok := m.data[key]; !ok {
		m.idx.insert(key)
	}
	m.data[key] = scaleEntry{value: value, version: v}
}

func (m *scaleMeta) deleteLocked(key string) {
	if _, ok := m.data[key]; ok {
		delete(m.data, key)
		m.idx.remove(key)
	}
}

func cloneValue(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}

// scaleChunk bounds a chunk of chunkIndex.
const scaleChunk = 1024

// chunkIndex is an ordered set of strings: non-empty sorted chunks, in
// order, each of at most scaleChunk keys.
type chunkIndex struct{ chunks [][]string }

// chunkOf returns the chunk key belongs in: the first whose last key is >=
// key, else the last. There must be one.
func (x *chunkIndex) chunkOf(key string) int {
	i := sort.Search(len(x.chunks), func(i int) bool { c := x.chunks[i]; return c[len(c)-1] >= key })
	return min(i, len(x.chunks)-1)
}

func (x *chunkIndex) insert(key string) {
	if len(x.chunks) == 0 {
		x.chunks = [][]string{{key}}
		return
	}
	i := x.chunkOf(key)
	c := x.chunks[i]
	j, found := slices.BinarySearch(c, key)
	if found {
		return
	}
	c = slices.Insert(c, j, key)
	if len(c) <= scaleChunk {
		x.chunks[i] = c
		return
	}
	h := len(c) / 2
	x.chunks[i] = slices.Clone(c[:h])
	x.chunks = slices.Insert(x.chunks, i+1, slices.Clone(c[h:]))
}

func (x *chunkIndex) remove(key string) {
	if len(x.chunks) == 0 {
		return
	}
	i := x.chunkOf(key)
	c := x.chunks[i]
	j, found := slices.BinarySearch(c, key)
	if !found {
		return
	}
	if c = slices.Delete(c, j, j+1); len(c) == 0 {
		x.chunks = slices.Delete(x.chunks, i, i+1)
		return
	}
	x.chunks[i] = c
}

// ascend calls fn for every key >= from, in order, until fn returns false.
func (x *chunkIndex) ascend(from string, fn func(string) bool) {
	if len(x.chunks) == 0 {
		return
	}
	i := x.chunkOf(from)
	j, _ := slices.BinarySearch(x.chunks[i], from)
	for ; i < len(x.chunks); i, j = i+1, 0 {
		for _, k := range x.chunks[i][j:] {
			if !fn(k) {
				return
			}
		}
	}
}

// TestScaleMetaConformance checks that the benchmark's metastore is a
// metastore: the conformance kit every backend runs.
func TestScaleMetaConformance(t *testing.T) {
	metastoretest.Run(t, metastoretest.Harness{
		New:         func(testing.TB) metastore.Store { return newScaleMeta() },
		MaxValueLen: metastore.MemMaxValueLen,
	})
}

// TestChunkIndexOrder checks chunkIndex against a sorted slice over enough
// random inserts and removes to split and empty many chunks.
func TestChunkIndexOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var x chunkIndex
	set := map[string]bool{}
	for i := 0; i < 40*scaleChunk; i++ {
		k := fmt.Sprintf("k%05d", rng.IntN(20*scaleChunk))
		if rng.IntN(3) == 0 {
			x.remove(k)
			delete(set, k)
		} else {
			x.insert(k)
			set[k] = true
		}
	}
	want := make([]string, 0, len(set))
	for k := range set {
		want = append(want, k)
	}
	slices.Sort(want)
	for _, from := range []string{"", "k00000", "k10000", want[len(want)/2], "k99999", "z"} {
		var got []string
		x.ascend(from, func(k string) bool { got = append(got, k); return true })
		i, _ := slices.BinarySearch(want, from)
		if !slices.Equal(got, want[i:]) {
			t.Fatalf("ascend(%q): %d keys, want %d", from, len(got), len(want)-i)
		}
	}
	for _, c := range x.chunks {
		if len(c) == 0 || len(c) > scaleChunk {
			t.Fatalf("chunk of %d keys", len(c))
		}
	}
}

// ---- PUT tally ----------------------------------------------------------------

// manyTally counts the bytes of successful PUTs by what they hold.
type manyTally struct {
	flightBytes, snapBytes, settledBytes, otherBytes atomic.Int64
	flightPuts, snapPuts                             atomic.Int64
	snapMax                                          atomic.Int64 // largest snapshot PUT since the last reset
}

type manyTallyCounts struct {
	flightBytes, snapBytes, otherBytes, flightPuts, snapPuts, settledBytes int64
}

func (t *manyTally) counts() manyTallyCounts {
	return manyTallyCounts{t.flightBytes.Load(), t.snapBytes.Load(), t.otherBytes.Load(), t.flightPuts.Load(), t.snapPuts.Load(), t.settledBytes.Load()}
}

// tallyStore counts what is PUT through it into a manyTally.
type tallyStore struct {
	objstore.Store
	t *manyTally
}

func (s tallyStore) PutIfAbsent(ctx context.Context, key string, body []byte) error {
	err := s.Store.PutIfAbsent(ctx, key, body)
	if err != nil {
		return err
	}
	n := int64(len(body))
	switch {
	case strings.HasPrefix(key, "chains/"):
		s.t.flightBytes.Add(n)
		s.t.flightPuts.Add(1)
	case strings.HasPrefix(key, "snapshots/"):
		s.t.snapBytes.Add(n)
		s.t.snapPuts.Add(1)
		for m := s.t.snapMax.Load(); n > m && !s.t.snapMax.CompareAndSwap(m, n); m = s.t.snapMax.Load() {
		}
	case strings.HasPrefix(key, "settled/"):
		s.t.settledBytes.Add(n)
	default:
		s.t.otherBytes.Add(n)
	}
	return nil
}

// ---- the scenario -------------------------------------------------------------

// manyEvents keeps a process's log events at Info and above (so the star
// does not log every release), for timing its Open, and its warnings, for
// the report.
type manyEvents struct {
	logEvents
	wmu   *sync.Mutex
	warns *[]string
}

func newManyEvents() manyEvents {
	return manyEvents{logEvents: newLogEvents(), wmu: &sync.Mutex{}, warns: &[]string{}}
}

func (h manyEvents) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h manyEvents) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		var sb strings.Builder
		fmt.Fprintf(&sb, "%s %s", r.Level, r.Message)
		for _, a := range h.attrs {
			fmt.Fprintf(&sb, " %s=%v", a.Key, a.Value)
		}
		r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&sb, " %s=%v", a.Key, a.Value); return true })
		h.wmu.Lock()
		*h.warns = append(*h.warns, sb.String())
		h.wmu.Unlock()
	}
	return h.logEvents.Handle(ctx, r)
}

func (h manyEvents) WithAttrs(as []slog.Attr) slog.Handler {
	h.logEvents = h.logEvents.WithAttrs(as).(logEvents)
	return h
}

func (h manyEvents) WithGroup(string) slog.Handler { return h }

// warnings returns the first max warnings logged, and how many there were.
func (h manyEvents) warnings(max int) ([]string, int) {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	return slices.Clone((*h.warns)[:min(max, len(*h.warns))]), len(*h.warns)
}

// tookOver returns the star's "took over" event (the one with the chain's
// opening time, took) and that time.
func (h manyEvents) tookOver() (logEvent, time.Duration, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ev := range *h.events {
		if v, ok := ev.attrs["took"]; ok && ev.msg == "took over" && v.Kind() == slog.KindDuration {
			return ev, v.Duration(), true
		}
	}
	return logEvent{}, 0, false
}

// split times a takeover's Open (start to end) from its log events: Open to
// "fenced", "fenced" to "minted", "minted" to the chain's "took over", and
// from there to end.
func (h manyEvents) split(b *testing.B, start, end time.Time) [4]time.Duration {
	fenced, ok1 := h.first("fenced")
	minted, ok2 := h.first("minted")
	took, ok3 := h.first("took over") // the chain's, before the star's
	if !ok1 || !ok2 || !ok3 {
		b.Errorf("takeover log events missing (fenced %v, minted %v, took over %v)", ok1, ok2, ok3)
		return [4]time.Duration{}
	}
	return [4]time.Duration{fenced.at.Sub(start), minted.at.Sub(fenced.at), took.at.Sub(minted.at), end.Sub(took.at)}
}

// describeTails follows the chain of tails snapshots the checkpoint names
// (a snapshot, then the base it builds on, ...), for a failure report.
func describeTails(meta metastore.Store, store objstore.Store) string {
	return describeTailsOf(meta, store, manyStar)
}

func describeTailsOf(meta metastore.Store, store objstore.Store, star string) string {
	ctx := context.Background()
	cp, _, err := absorb.ReadCheckpoint(ctx, meta, star, Standard)
	if err != nil {
		return err.Error()
	}
	out := fmt.Sprintf("checkpoint: epoch %d next %d owner %s/%d tails %s", cp.Epoch, cp.Next, cp.Owner, cp.OwnerEpoch, cp.Tails)
	for key, i := cp.Tails, 0; key != "" && i < 4; i++ {
		t, err := absorb.ReadSnapshot(ctx, []objstore.Store{store}, key)
		if err != nil {
			return out + fmt.Sprintf("; %s: %v", key, err)
		}
		out += fmt.Sprintf("; %s: epoch %d next %d, %d streams, base %q", key, t.Epoch, t.Next, len(t.Streams), t.Base)
		key = t.Base
	}
	return out
}

// manyHeap is the heap in use after two collections; with
// -manystreams.heapprofile it also writes a heap profile named for what.
func manyHeap(b *testing.B, what string) int64 {
	runtime.GC()
	runtime.GC() // objects allocated during the first one's mark survive it
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	if *flagManyHeap != "" && what != "" {
		f, err := os.Create(*flagManyHeap + "-" + what + ".pprof")
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
			b.Fatal(err)
		}
	}
	return int64(m.HeapAlloc)
}

// manyGCs returns the GC cycles completed so far (runtime/metrics).
func manyGCs() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// manyRun is what one run of the scenario measured.
type manyRun struct {
	streams, active int

	create, setup, closeSetup time.Duration
	setupFlights, setupHalts  uint64
	heapBefore, heapLeader    int64
	heapStores, heapLoaded    int64
	metaPayload, objPayload   int64

	openAfterClose time.Duration
	openChain      time.Duration
	window         time.Duration
	rounds, refs   uint64
	put            manyTallyCounts // over the window
	statSnapBytes  uint64          // ClassStats.TailsSnapshotBytes over the window
	fullSnaps      uint64
	maxSnap        int64
	metaReqs       uint64
	roundLat       [2]int64 // p50, p99 (ns)
	ackLat         [2]int64
	acked          uint64 // batches acked in the window
	minAppends     int
	gcCycles       uint64

	takeoverOpen, takeoverAck, takeoverChain time.Duration
	takeoverSplit                            [4]time.Duration // fence, mint, tails+walk, load
	takeoverWalked                           uint64
	closeSucc, cleanOpen, cleanAck           time.Duration
	cleanChain                               time.Duration
}

// manyProc opens a process of the scenario over the shared stores, its
// goroutines labelled with phase.
func manyProc(b *testing.B, phase, owner string, meta metastore.Store, store objstore.Store, ev manyEvents) (*Star, time.Duration) {
	var s *Star
	var err error
	var took time.Duration
	pprof.Do(context.Background(), pprof.Labels("manystreams", phase), func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, manyOpenTimeout)
		defer cancel()
		start := time.Now()
		s, err = Open(ctx, Config{Star: manyStar, Owner: owner, Meta: meta, Logger: slog.New(ev),
			Standard: ClassConfig{Stores: []objstore.Store{store}, W: 1}, SettleInterval: *flagManySettle})
		took = time.Since(start)
	})
	if err != nil {
		warns, n := ev.warnings(5)
		b.Fatalf("%s: open: %v\n%d warnings, the first: %s\ntails: %s", owner, err, n, strings.Join(warns, "\n  "), describeTails(meta, store))
	}
	return s, took
}

func manyRecords() []Record {
	src := benchRecords()
	out := make([]Record, len(src))
	for i, r := range src {
		out[i] = Record{Headers: r.Headers, Body: r.Body[:manyBodyBytes]}
	}
	return out
}

// manySetup creates n streams on s and appends one batch to each, and waits
// until all of it is absorbed. It returns the creation time.
func manySetup(b *testing.B, s *Star, n int, recs []Record) time.Duration {
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for g := 0; g < manyCreators; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if _, err := s.CreateStream(ctx, manyName(i), StreamOptions{Class: Standard}); err != nil {
					b.Errorf("create %s: %v", manyName(i), err)
					return
				}
			}
		}()
	}
	wg.Wait()
	created := time.Since(start)
	if b.Failed() {
		b.FailNow()
	}
	next.Store(0)
	for g := 0; g < manyAppenders; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var q []*AckFuture
			wait := func() bool {
				ack, err := q[0].Wait(ctx)
				q[0] = nil
				q = q[1:]
				if err != nil || ack.Start != 0 || ack.End != 1 {
					b.Errorf("setup append: ack %+v, %v; want [0, 1)", ack, err)
					return false
				}
				return true
			}
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				sess, err := s.OpenAppendSession(ctx, manyName(i))
				if err != nil {
					b.Errorf("session %s: %v", manyName(i), err)
					return
				}
				f, err := sess.Submit(ctx, Batch{Records: recs[i%len(recs) : i%len(recs)+1]})
				if err != nil {
					b.Errorf("setup submit %s: %v", manyName(i), err)
					return
				}
				q = append(q, f)
				if len(q) > manySetupInFlight && !wait() {
					return
				}
			}
			for len(q) > 0 {
				if !wait() {
					return
				}
			}
		}()
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	deadline := time.Now().Add(manySettleTimeout)
	for {
		st := s.Stats().Standard
		if st.AckedBatches == uint64(n) && st.Checkpoint == st.ReleasePoint && st.FlightIndexBytes == 0 && st.Backlog.Flights == 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("setup not absorbed after %v: %d acked, checkpoint %d, release point %d", manySettleTimeout, st.AckedBatches, st.Checkpoint, st.ReleasePoint)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return created
}

// manyActive runs the active phase on s for window: producers appending one
// batch per every to each active stream. It returns the batches acked per
// active stream (each stream's tail is 1 + that).
func manyActive(b *testing.B, s *Star, active, stride int, every, window time.Duration, recs []Record) []int {
	ctx := context.Background()
	sessions := make([]*AppendSession, active)
	for j := range sessions {
		var err error
		if sessions[j], err = s.OpenAppendSession(ctx, manyName(j*stride)); err != nil {
			b.Fatalf("session: %v", err)
		}
	}
	producers := min(manyProducers, active)
	appends := make([]int, active) // stream j is producer j%producers's alone
	stop := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	for p := 0; p < producers; p++ {
		mine := (active - p + producers - 1) / producers // streams p, p+producers, ...
		interval := every / time.Duration(mine)
		wg.Add(1)
		go pprof.Do(ctx, pprof.Labels("manystreams", "active"), func(ctx context.Context) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(p), 13))
			type pending struct {
				f *AckFuture
				j int
			}
			var q []pending
			wait := func() bool {
				_, err := q[0].f.Wait(ctx)
				if err != nil {
					b.Errorf("producer %d: %v", p, err)
					return false
				}
				appends[q[0].j]++
				q = q[1:]
				return true
			}
			defer func() {
				for len(q) > 0 && wait() {
				}
			}()
			next := start.Add(interval * time.Duration(p) / time.Duration(producers))
			for j := p; ; j += producers {
				if j >= active {
					j = p
				}
				if d := time.Until(next); d > 0 {
					t := time.NewTimer(d)
					select {
					case <-t.C:
					case <-stop:
						t.Stop()
						return
					}
				}
				select {
				case <-stop:
					return
				default:
				}
				off := rng.IntN(len(recs))
				f, err := sessions[j].Submit(ctx, Batch{Records: recs[off : off+1]})
				if err != nil {
					b.Errorf("producer %d: submit: %v", p, err)
					return
				}
				q = append(q, pending{f, j})
				for len(q) > 0 {
					select {
					case <-q[0].f.Done():
						if !wait() {
							return
						}
						continue
					default:
					}
					if len(q) <= manyMaxInFlight {
						break
					}
					if !wait() {
						return
					}
				}
				next = next.Add(interval)
			}
		})
	}
	time.Sleep(time.Until(start.Add(window)))
	close(stop)
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	return appends
}

// manyFirstAck appends one record to stream and checks it lands at seq
// want.
func manyFirstAck(b *testing.B, s *Star, stream string, want uint64, recs []Record) time.Duration {
	start := time.Now()
	ack, err := s.Append(context.Background(), stream, Batch{Records: recs[:1]})
	took := time.Since(start)
	if err != nil {
		b.Fatalf("first append to %s: %v", stream, err)
	}
	if ack.Start != want {
		b.Fatalf("first append to %s acked at %d, want %d (every acked record before it counts)", stream, ack.Start, want)
	}
	return took
}

func runManyStreams(b *testing.B, n int, every time.Duration) *manyRun {
	ctx := context.Background()
	r := &manyRun{streams: n, active: max(1, n/manyActiveShare)}
	stride := n / r.active
	recs := manyRecords()
	var meta countedMeta
	sm := newScaleMeta()
	if *flagManyMetaMem {
		meta = metastore.NewMem()
	} else {
		meta = sm
	}
	mem := objstore.NewMem()
	var tally manyTally
	store := tallyStore{Store: mem, t: &tally}

	// 1. Setup.
	r.heapBefore = manyHeap(b, "")
	start := time.Now()
	evs := map[string]manyEvents{}
	defer func() {
		for _, name := range []string{"creator", "leader", "successor", "next"} {
			if ev, ok := evs[name]; ok {
				if warns, n := ev.warnings(3); n > 0 {
					b.Logf("%s logged %d warnings; the first: %s", name, n, strings.Join(warns, "\n  "))
				}
			}
		}
	}()
	proc := func(phase, owner string) (*Star, time.Duration) {
		evs[owner] = newManyEvents()
		return manyProc(b, phase, owner, meta, store, evs[owner])
	}
	creator, _ := proc("setup", "creator")
	r.create = manySetup(b, creator, n, recs)
	r.setup = time.Since(start)

	cs := creator.Stats().Standard
	r.setupFlights, r.setupHalts = cs.Flights, cs.Halts

	// 2. The creator's memory.
	r.heapLeader = manyHeap(b, "creator")
	t := time.Now()
	if err := creator.Close(ctx); err != nil {
		b.Fatalf("creator close: %v", err)
	}
	r.closeSetup = time.Since(t)
	creator = nil
	if !*flagManyMetaMem {
		r.metaPayload = sm.payloadBytes()
	}
	for _, k := range mem.Keys() {
		if body, err := mem.Get(ctx, k, 0, -1); err == nil {
			r.objPayload += int64(len(body))
		}
	}
	r.heapStores = manyHeap(b, "stores")

	// 3. The active phase, on a fresh leader.
	leader, took := proc("active", "leader")
	r.openAfterClose = took
	if _, chainTook, ok := evs["leader"].tookOver(); ok {
		r.openChain = chainTook
	} else {
		b.Errorf("leader: no \"took over\" event")
	}
	r.heapLoaded = manyHeap(b, "loaded")
	snap := func() (metastore.MemCounters, manyTallyCounts, *ClassStats, time.Time) {
		return meta.Counters(), tally.counts(), leader.Stats().Standard, time.Now()
	}
	tally.snapMax.Store(0)
	m0, p0, s0, t0 := snap()
	g0 := manyGCs()
	appends := manyActive(b, leader, r.active, stride, every, manyWindow, recs)
	r.gcCycles = manyGCs() - g0
	m1, p1, s1, t1 := snap()
	r.maxSnap = tally.snapMax.Load()
	if s1.Halts > 0 || s1.FailedNotCommitted+s1.FailedOutcomeUnknown > 0 {
		b.Fatalf("leader: %d halts (%s), %d+%d failed batches", s1.Halts, s1.HaltCause, s1.FailedNotCommitted, s1.FailedOutcomeUnknown)
	}
	r.window = t1.Sub(t0)
	r.rounds, r.refs = s1.AbsorbRounds-s0.AbsorbRounds, s1.AbsorbRefs-s0.AbsorbRefs
	r.put = manyTallyCounts{flightBytes: p1.flightBytes - p0.flightBytes, snapBytes: p1.snapBytes - p0.snapBytes,
		otherBytes: p1.otherBytes - p0.otherBytes, flightPuts: p1.flightPuts - p0.flightPuts, snapPuts: p1.snapPuts - p0.snapPuts,
		settledBytes: p1.settledBytes - p0.settledBytes}
	r.statSnapBytes = s1.TailsSnapshotBytes - s0.TailsSnapshotBytes
	r.fullSnaps = s1.TailsFullSnapshots - s0.TailsFullSnapshots
	r.metaReqs = m1.Requests() - m0.Requests()
	r.roundLat = [2]int64{s1.AbsorbRoundLatency.Quantile(0.5), s1.AbsorbRoundLatency.Quantile(0.99)}
	r.ackLat = [2]int64{s1.AckLatency.Quantile(0.5), s1.AckLatency.Quantile(0.99)}
	r.acked = s1.AckedBatches - s0.AckedBatches
	r.minAppends = math.MaxInt
	for _, a := range appends {
		r.minAppends = min(r.minAppends, a)
	}
	if s0.AbsorbRounds != 0 {
		b.Errorf("the leader ran %d absorb rounds before the active phase", s0.AbsorbRounds)
	}

	// 4. Takeover of the live leader.
	tTake := time.Now()
	succ, took := proc("takeover", "successor")
	r.takeoverOpen = took
	r.takeoverSplit = evs["successor"].split(b, tTake, tTake.Add(took))
	r.takeoverAck = manyFirstAck(b, succ, manyName(0), 1+uint64(appends[0]), recs)
	if ev, chainTook, ok := evs["successor"].tookOver(); ok {
		r.takeoverChain, r.takeoverWalked = chainTook, ev.uint("walked_slots")
	} else {
		b.Errorf("successor: no \"took over\" event")
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	if err := leader.Close(cctx); err != nil && !errors.Is(err, ErrNotLeader) {
		b.Logf("deposed leader's close: %v", err)
	}
	cancel()
	if st := leader.Stats().Standard; !st.Deposed {
		b.Errorf("the leader is not deposed after the takeover")
	}
	leader = nil

	// 5. Clean handoff.
	t = time.Now()
	if err := succ.Close(ctx); err != nil {
		b.Fatalf("successor close: %v", err)
	}
	r.closeSucc = time.Since(t)
	nextStar, took := proc("clean", "next")
	r.cleanOpen = took
	r.cleanAck = manyFirstAck(b, nextStar, manyName(0), 2+uint64(appends[0]), recs)
	if _, chainTook, ok := evs["next"].tookOver(); ok {
		r.cleanChain = chainTook
	} else {
		b.Errorf("next: no \"took over\" event")
	}
	if err := nextStar.Close(ctx); err != nil {
		b.Fatalf("next close: %v", err)
	}
	return r
}

// BenchmarkManyStreams reports a star's costs with -manystreams streams, 1%
// of them active (see the comment at the top of the file).
func BenchmarkManyStreams(b *testing.B) {
	n := *flagManyStreams
	if n < 1 {
		b.Fatalf("-manystreams=%d", n)
	}
	b.Run(fmt.Sprintf("streams=%d/active=%d/every=%v", n, max(1, n/manyActiveShare), *flagManyEvery), func(b *testing.B) {
		r := runManyStreams(b, n, *flagManyEvery)
		mib := func(v int64) float64 { return float64(v) / (1 << 20) }
		rounds := float64(max(r.rounds, 1))
		sec := r.window.Seconds()
		b.ReportMetric(float64(r.streams)/r.create.Seconds(), "create/s")
		b.ReportMetric(r.setup.Seconds(), "setup-s")
		b.ReportMetric(float64(r.streams)/float64(max(r.setupFlights, 1)), "setup-batches/flight")
		b.ReportMetric(mib(r.heapLeader-r.heapStores), "leader-MiB")
		b.ReportMetric(float64(r.heapLeader-r.heapStores)/float64(r.streams), "leader-B/stream")
		b.ReportMetric(mib(r.heapLoaded-r.heapStores), "loaded-MiB")
		b.ReportMetric(mib(r.heapStores-r.heapBefore), "stores-MiB")
		b.ReportMetric(mib(r.metaPayload), "meta-payload-MiB")
		b.ReportMetric(mib(r.objPayload), "obj-payload-MiB")
		b.ReportMetric(ms(r.closeSetup), "close-setup-ms")
		b.ReportMetric(ms(r.openAfterClose), "open-after-close-ms")
		b.ReportMetric(ms(r.openChain), "open-after-close-chain-ms")
		b.ReportMetric(float64(r.setupHalts), "setup-halts")

		b.ReportMetric(float64(r.roundLat[0])/1e6, "round-p50-ms")
		b.ReportMetric(float64(r.roundLat[1])/1e6, "round-p99-ms")
		b.ReportMetric(float64(r.ackLat[0])/1e6, "ack-p50-ms")
		b.ReportMetric(float64(r.ackLat[1])/1e6, "ack-p99-ms")
		b.ReportMetric(float64(r.rounds)/sec, "rounds/s")
		b.ReportMetric(float64(r.refs)/rounds, "refs/round")
		b.ReportMetric(float64(r.put.flightBytes)/1e3/rounds, "flight-KB/round")
		b.ReportMetric(float64(r.put.settledBytes)/1e3/sec, "settled-KB/s")
		b.ReportMetric(float64(r.statSnapBytes)/1e3/rounds, "snap-KB/round")
		b.ReportMetric(float64(r.fullSnaps), "full-snaps")
		b.ReportMetric(float64(r.maxSnap)/1e6, "max-snap-MB")
		b.ReportMetric(float64(r.metaReqs)/sec, "metastore-req/s")
		b.ReportMetric(float64(r.acked)/sec, "appends/s")
		b.ReportMetric(float64(r.minAppends), "min-appends/stream")
		b.ReportMetric(float64(r.gcCycles), "gc-cycles")

		b.ReportMetric(ms(r.takeoverOpen), "takeover-open-ms")
		b.ReportMetric(ms(r.takeoverChain), "takeover-chain-ms")
		b.ReportMetric(ms(r.takeoverAck), "takeover-ack-ms")
		b.ReportMetric(float64(r.takeoverWalked), "takeover-walked")
		b.ReportMetric(ms(r.takeoverSplit[0]), "takeover-fence-ms")
		b.ReportMetric(ms(r.takeoverSplit[1]), "takeover-mint-ms")
		b.ReportMetric(ms(r.takeoverSplit[2]), "takeover-walk-ms")
		b.ReportMetric(ms(r.takeoverSplit[3]), "takeover-load-ms")
		b.ReportMetric(ms(r.closeSucc), "close-ms")
		b.ReportMetric(ms(r.cleanOpen), "clean-open-ms")
		b.ReportMetric(ms(r.cleanChain), "clean-chain-ms")
		b.ReportMetric(ms(r.cleanAck), "clean-ack-ms")

		// The bucket sees a round's snapshot when it is PUT, Stats when the
		// round commits: at most the one round in flight apart.
		if d := r.put.snapBytes - int64(r.statSnapBytes); d < 0 || d > r.maxSnap {
			b.Errorf("snapshot bytes: %d PUT to the bucket, %d in Stats", r.put.snapBytes, r.statSnapBytes)
		}
		if r.put.otherBytes != 0 {
			b.Errorf("%d bytes PUT outside chains/, snapshots/ and settled/ in the window", r.put.otherBytes)
		}
		if r.minAppends == 0 {
			b.Errorf("an active stream got no append in the window: the run is not %d active streams", r.active)
		}
	})
}
