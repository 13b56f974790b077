package loglet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/metastore/bbolt"
	"github.com/flightlog/flightlog/metastore/etcd"
)

// BenchmarkSettleMetastore: settleMetaStreams active streams (1,000 and
// 10,000; 100,000 too with FLIGHTLOG_BENCH_100K_STREAMS set), each
// appending one record a second, for settleMetaFor after settleMetaWarm
// (FLIGHTLOG_BENCH_SETTLE_WARM, a duration, overrides it: the first pass
// over a stream reads its record once, which a short warm-up still counts),
// on the latency models (bench_test.go's), with settlement on (1 s
// interval) and off, for each class. It reports the metastore requests a
// second with settlement on and off (the difference is settlement's), of
// them the Gets (a pass's liveness reads of streams not in the cache), the
// settle lag (ClassStats.Settle.Lag, sampled every 250ms: p50 and p99) and
// the transit bytes held (ClassStats.Settle.TransitBytes, mean). The
// metastore is bbolt in a temporary directory, or the etcd at
// FLIGHTLOG_ETCD_ENDPOINTS (scripts/test.sh starts one). For example:
//
//	go test -run '^$' -bench 'BenchmarkSettleMetastore/streams=1000/' -benchtime 1x ./loglet
func BenchmarkSettleMetastore(b *testing.B) {
	ns := []int{1000, 10000}
	if os.Getenv("FLIGHTLOG_BENCH_100K_STREAMS") != "" {
		ns = append(ns, 100000)
	}
	for _, n := range ns {
		for _, c := range []Class{Express, Standard} {
			for _, on := range []bool{true, false} {
				b.Run(fmt.Sprintf("streams=%d/class=%s/settle=%v", n, c, on), func(b *testing.B) {
					var m settleMetaRun
					for b.Loop() {
						m = settleMetastore(b, n, c, on)
					}
					b.ReportMetric(m.reqPerSec, "meta-req/s")
					b.ReportMetric(m.getsPerSec, "meta-get/s")
					b.ReportMetric(m.lagP50.Seconds(), "lag-p50-s")
					b.ReportMetric(m.lagP99.Seconds(), "lag-p99-s")
					b.ReportMetric(m.heldMB, "held-MB")
				})
			}
		}
	}
}

const (
	settleMetaWarm  = 3 * time.Second
	settleMetaFor   = 6 * time.Second
	settleMetaEvery = time.Second
)

type settleMetaRun struct {
	reqPerSec      float64
	getsPerSec     float64
	lagP50, lagP99 time.Duration
	heldMB         float64
}

// requestCounter counts a store's requests, keeping its limits, and, by
// kind and the kinds of keys they touch (keyKind), how many of each
// (byKind: the breakdown FLIGHTLOG_BENCH_SETTLE_BREAKDOWN prints).
type requestCounter struct {
	metastore.Store
	n, gets atomic.Int64
	mu      sync.Mutex
	byKind  map[string]int64
}

func (m *requestCounter) note(kind string, keys ...string) {
	m.n.Add(1)
	var ks []string
	for _, k := range keys {
		if kk := keyKind(k); !slices.Contains(ks, kk) {
			ks = append(ks, kk)
		}
	}
	slices.Sort(ks)
	label := kind + " " + strings.Join(ks, "+")
	m.mu.Lock()
	if m.byKind == nil {
		m.byKind = map[string]int64{}
	}
	m.byKind[label]++
	m.mu.Unlock()
}

// breakdown returns the counts by label since the last call.
func (m *requestCounter) breakdown() map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.byKind
	m.byKind = nil
	return b
}

// keyKind names what a key is: its first path element, and for star keys
// the last.
func keyKind(key string) string {
	parts := strings.Split(key, "/")
	if parts[0] == "stars" && len(parts) > 2 {
		if len(parts) > 3 && parts[3] == "doomed" {
			return "doomed"
		}
		return parts[len(parts)-1]
	}
	return parts[0]
}

func (m *requestCounter) Get(ctx context.Context, key string) (metastore.Item, error) {
	m.note("get", key)
	m.gets.Add(1)
	return m.Store.Get(ctx, key)
}

func (m *requestCounter) Put(ctx context.Context, key string, v []byte, expect metastore.Version) (metastore.Version, error) {
	m.note("put", key)
	return m.Store.Put(ctx, key, v, expect)
}

func (m *requestCounter) Delete(ctx context.Context, key string, expect metastore.Version) error {
	m.note("delete", key)
	return m.Store.Delete(ctx, key, expect)
}

func (m *requestCounter) Scan(ctx context.Context, prefix, after string, limit int) ([]metastore.Item, error) {
	m.note("scan", prefix)
	return m.Store.Scan(ctx, prefix, after, limit)
}

func (m *requestCounter) Commit(ctx context.Context, ops []metastore.Op) ([]metastore.Version, error) {
	keys := make([]string, len(ops))
	for i, op := range ops {
		keys[i] = op.Key
	}
	vs, err := m.Store.Commit(ctx, ops)
	kind := "commit"
	if errors.Is(err, metastore.ErrConflict) {
		kind = "commit-conflict"
	}
	m.note(kind, keys...)
	return vs, err
}

func (m *requestCounter) MaxCommitOps() int           { return metastore.MaxCommitOps(m.Store) }
func (m *requestCounter) MaxCommitBytes() int         { return metastore.MaxCommitBytes(m.Store) }
func (m *requestCounter) OpBytes(op metastore.Op) int { return metastore.OpBytes(m.Store, op) }

// settleMetaStore is bbolt in a temporary directory, or etcd under a
// prefix of its own.
func settleMetaStore(b *testing.B) metastore.Store {
	if eps := os.Getenv("FLIGHTLOG_ETCD_ENDPOINTS"); eps != "" {
		s, err := etcd.New(etcd.Config{Endpoints: strings.Split(eps, ","), Prefix: fmt.Sprintf("bench-settle-%d/", time.Now().UnixNano())})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		return s
	}
	s, err := bbolt.Open(filepath.Join(b.TempDir(), "meta.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

func settleMetastore(b *testing.B, n int, c Class, on bool) settleMetaRun {
	ctx := context.Background()
	r := newSettleBenchRig(true)
	cm := &requestCounter{Store: settleMetaStore(b)}
	interval := time.Second
	if !on {
		interval = -1
	}
	cfg := r.config(interval, false)
	cfg.Meta = cm
	s, err := Open(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(ctx)
	sessions := make([]*AppendSession, n)
	var wg sync.WaitGroup
	var failed atomic.Value
	for w := 0; w < 16; w++ { // the streams are created 16 at a time
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 16 {
				name := fmt.Sprintf("%s-%06d", c, i)
				if _, err := s.CreateStream(ctx, name, StreamOptions{Class: c}); err != nil {
					failed.Store(err)
					return
				}
				sess, err := s.OpenAppendSession(ctx, name)
				if err != nil {
					failed.Store(err)
					return
				}
				sessions[i] = sess
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	stop := make(chan struct{})
	recs := benchRecords()
	var producers sync.WaitGroup
	producers.Add(1)
	go func() { // one record a stream a second, spread over the second
		defer producers.Done()
		tick := time.NewTicker(settleMetaEvery / time.Duration(max(1, n/100)))
		defer tick.Stop()
		for i := 0; ; i += 100 {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for j := i; j < i+100; j++ {
				if _, err := sessions[j%n].Submit(ctx, Batch{Records: recs[j%len(recs) : j%len(recs)+1]}); err != nil {
					failed.Store(err)
				}
			}
		}
	}()
	warm := settleMetaWarm
	if d, err := time.ParseDuration(os.Getenv("FLIGHTLOG_BENCH_SETTLE_WARM")); err == nil {
		warm = d
	}
	time.Sleep(warm) // the warm-up is a duration of load, not a wait for a condition
	cm.breakdown()
	classStats := func() *ClassStats {
		if c == Express {
			return s.Stats().Express
		}
		return s.Stats().Standard
	}
	st0 := classStats().Settle
	start, n0, g0 := time.Now(), cm.n.Load(), cm.gets.Load()
	var lags []time.Duration
	var held float64
	samples := 0
	sample := time.NewTicker(250 * time.Millisecond)
	for time.Since(start) < settleMetaFor {
		<-sample.C
		cs := s.Stats().Standard
		if c == Express {
			cs = s.Stats().Express
		}
		st := cs.Settle
		lags = append(lags, st.Lag)
		held += float64(st.TransitBytes)
		samples++
	}
	sample.Stop()
	reqs, gets, elapsed := cm.n.Load()-n0, cm.gets.Load()-g0, time.Since(start)
	if os.Getenv("FLIGHTLOG_BENCH_SETTLE_BREAKDOWN") != "" {
		bd := cm.breakdown()
		labels := slices.Collect(maps.Keys(bd))
		slices.SortFunc(labels, func(a, b string) int { return cmp.Compare(bd[b], bd[a]) })
		for _, l := range labels {
			fmt.Fprintf(os.Stderr, "  %-50s %8.1f/s\n", l, float64(bd[l])/elapsed.Seconds())
		}
		st := s.Stats()
		for _, cs := range []*ClassStats{st.Express, st.Standard} {
			fmt.Fprintf(os.Stderr, "  settle: passes %d, meta requests %d, ref scans %d, settled refs %d, objects %d", cs.Settle.Passes, cs.Settle.MetaRequests, cs.Settle.RefScans, cs.Settle.SettledRefs, cs.Settle.Objects)
			fmt.Fprintln(os.Stderr)
		}
		// The time of the passes that ended in the window, by phase.
		st1 := classStats().Settle
		if passes := st1.Passes - st0.Passes; passes > 0 {
			phases := slices.Collect(maps.Keys(st1.PassTime))
			slices.SortFunc(phases, func(a, b string) int {
				return cmp.Compare(st1.PassTime[b]-st0.PassTime[b], st1.PassTime[a]-st0.PassTime[a])
			})
			var total time.Duration
			line := ""
			for _, ph := range phases {
				d := (st1.PassTime[ph] - st0.PassTime[ph]) / time.Duration(passes)
				total += d
				line += fmt.Sprintf(" %s %.2fs", ph, d.Seconds())
			}
			fmt.Fprintf(os.Stderr, "  a pass (%d in the window): %.2fs:%s\n", passes, total.Seconds(), line)
			per := func(a, b int64) float64 { return float64(a-b) / float64(passes) / 1e6 }
			fmt.Fprintf(os.Stderr, "  a pass settled %.0f objects, %.1f MB raw into %.1f MB stored, freed %.1f MB of transit (every copy)\n",
				float64(st1.Objects-st0.Objects)/float64(passes), per(st1.RawBytes, st0.RawBytes), per(st1.StoredBytes, st0.StoredBytes), per(st1.FreedBytes, st0.FreedBytes))
		}
	}
	close(stop)
	producers.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	slices.Sort(lags)
	q := func(p float64) time.Duration { return lags[min(len(lags)-1, int(p*float64(len(lags))))] }
	return settleMetaRun{reqPerSec: float64(reqs) / elapsed.Seconds(), getsPerSec: float64(gets) / elapsed.Seconds(), lagP50: q(0.5), lagP99: q(0.99), heldMB: held / float64(samples) / 1e6}
}
