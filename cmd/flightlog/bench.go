package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/histogram"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// latencyModel is a bucket set whose PUTs wait out a latency distribution,
// named for what it imitates. Only PUTs are delayed (the write path does no
// GETs unless a PUT is ambiguous).
type latencyModel struct {
	Name        string        `json:"name"`
	Class       string        `json:"class"`
	K           int           `json:"k"`
	W           int           `json:"w"`
	Median, P99 time.Duration `json:"-"`
}

// The named models: figures commonly reported for small PUTs from an
// instance in the same region; adjust with --model custom.
var latencyModels = map[string]latencyModel{
	"s3-standard": {"s3-standard", "standard", 1, 1, 30 * time.Millisecond, 120 * time.Millisecond},
	"s3-express":  {"s3-express", "express", 3, 2, 4 * time.Millisecond, 15 * time.Millisecond},
}

// timedStore counts and times the PutIfAbsent calls of the store it wraps.
type timedStore struct {
	objstore.Store
	m *putMeter
}

type putMeter struct {
	lat        histogram.H
	slotPuts   atomic.Int64 // PUTs of chain slots
	puts       atomic.Int64 // every PUT
	bytes      atomic.Int64 // body bytes of every PUT
	slotBytes  atomic.Int64
	collecting atomic.Bool
}

func (t timedStore) PutIfAbsent(ctx context.Context, key string, body []byte) error {
	start := time.Now()
	err := t.Store.PutIfAbsent(ctx, key, body)
	if t.m.collecting.Load() {
		t.m.lat.RecordDuration(time.Since(start))
		t.m.puts.Add(1)
		t.m.bytes.Add(int64(len(body)))
		if strings.HasPrefix(key, "chains/") {
			t.m.slotPuts.Add(1)
			t.m.slotBytes.Add(int64(len(body)))
		}
	}
	return err
}

// heldStore tracks the chain slot bytes held in the bucket it wraps: every
// chains/ object PUT adds its size, its delete (settlement's trim)
// subtracts it. Exact, with no listing and no extra request, for any
// backend.
type heldStore struct {
	objstore.Store
	m      *heldMeter
	bucket int
}

// heldMeter is the transit bytes held across a bucket set.
type heldMeter struct {
	mu    sync.Mutex
	sizes map[string]int64 // "<bucket>/<key>" of each chains/ object held
	bytes int64
}

func (h heldStore) PutIfAbsent(ctx context.Context, key string, body []byte) error {
	err := h.Store.PutIfAbsent(ctx, key, body)
	if err == nil && strings.HasPrefix(key, "chains/") {
		h.m.mu.Lock()
		k := fmt.Sprint(h.bucket, "/", key)
		if _, ok := h.m.sizes[k]; !ok {
			h.m.sizes[k] = int64(len(body))
			h.m.bytes += int64(len(body))
		}
		h.m.mu.Unlock()
	}
	return err
}

func (h heldStore) Delete(ctx context.Context, key string) error {
	err := h.Store.Delete(ctx, key)
	if err == nil && strings.HasPrefix(key, "chains/") {
		h.m.mu.Lock()
		k := fmt.Sprint(h.bucket, "/", key)
		if n, ok := h.m.sizes[k]; ok {
			h.m.bytes -= n
			delete(h.m.sizes, k)
		}
		h.m.mu.Unlock()
	}
	return err
}

func (h *heldMeter) held() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.bytes
}

// countedMeta counts the requests made to the metastore it wraps.
type countedMeta struct {
	metastore.Store
	n atomic.Int64
}

func (m *countedMeta) Get(ctx context.Context, key string) (metastore.Item, error) {
	m.n.Add(1)
	return m.Store.Get(ctx, key)
}

func (m *countedMeta) Put(ctx context.Context, key string, value []byte, expect metastore.Version) (metastore.Version, error) {
	m.n.Add(1)
	return m.Store.Put(ctx, key, value, expect)
}

func (m *countedMeta) Delete(ctx context.Context, key string, expect metastore.Version) error {
	m.n.Add(1)
	return m.Store.Delete(ctx, key, expect)
}

func (m *countedMeta) Scan(ctx context.Context, prefix, startAfter string, limit int) ([]metastore.Item, error) {
	m.n.Add(1)
	return m.Store.Scan(ctx, prefix, startAfter, limit)
}

func (m *countedMeta) Commit(ctx context.Context, ops []metastore.Op) ([]metastore.Version, error) {
	m.n.Add(1)
	return m.Store.Commit(ctx, ops)
}

// MaxCommitOps passes the inner store's limit through.
func (m *countedMeta) MaxCommitOps() int { return metastore.MaxCommitOps(m.Store) }

// MaxCommitBytes passes the inner store's byte limit through.
func (m *countedMeta) MaxCommitBytes() int { return metastore.MaxCommitBytes(m.Store) }

// OpBytes passes the inner store's op size through.
func (m *countedMeta) OpBytes(op metastore.Op) int { return metastore.OpBytes(m.Store, op) }

// benchOpts is the workload.
type benchOpts struct {
	model              string
	class              string
	k, w               int
	median, p99        time.Duration
	producers, streams int
	batch, recordSize  int
	depth              int
	duration           time.Duration
	transitHours       float64
	settleInterval     time.Duration
	seed               uint64
	json               bool
	plot, cdf          string
	cpuProfile         string
}

// latency is one latency figure set, in microseconds.
type latency struct {
	P50  float64 `json:"p50_us"`
	P99  float64 `json:"p99_us"`
	P999 float64 `json:"p999_us"`
}

// ratios are unitless, per percentile.
type ratios struct {
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
}

// versus compares ack latency with a latency it contains.
type versus struct {
	Ratio ratios  `json:"ratio"`    // ack / other, per percentile
	Added latency `json:"added_us"` // ack - other, per percentile
}

// benchResult is what `flightlog bench --json` prints.
type benchResult struct {
	Model      string  `json:"model"`
	Class      string  `json:"class"`
	K          int     `json:"k"`
	W          int     `json:"w"`
	PutMedian  string  `json:"put_model_median,omitempty"`
	PutP99     string  `json:"put_model_p99,omitempty"`
	Producers  int     `json:"producers"`
	Streams    int     `json:"streams"`
	Batch      int     `json:"batch_records"`
	Record     int     `json:"record_bytes"`
	Depth      int     `json:"batches_in_flight_per_producer"`
	Seconds    float64 `json:"seconds"`
	GOMAXPROCS int     `json:"gomaxprocs"`

	Records     int64   `json:"records"`
	MBps        float64 `json:"mb_per_s"`
	RecordsPS   float64 `json:"records_per_s"`
	CopyMBps    float64 `json:"copy_mb_per_s"`
	XCopy       float64 `json:"x_copy"`
	Ack         latency `json:"ack"`
	Put         latency `json:"put"`
	Quorum      latency `json:"quorum"`
	AckVsPut    versus  `json:"ack_vs_put"`
	AckVsQuorum versus  `json:"ack_vs_quorum"`

	FlightBytes   int     `json:"flight_bytes_config"`
	FlightP50     int64   `json:"flight_object_bytes_p50"`
	Flights       uint64  `json:"flights"`
	PutsPerGB     float64 `json:"puts_per_gb"`
	MinPutsPerGB  float64 `json:"min_puts_per_gb"`
	PutBytesPerB  float64 `json:"put_bytes_per_body_byte"`
	MetaReqPerSec float64 `json:"metastore_requests_per_s"`
	// TransitHours is the storage time charged per transit copy:
	// TransitStorage says whether it was "assumed" (--transit-hours,
	// settlement off) or "measured" (settlement on: the mean transit bytes
	// held over the second half of the run, TransitHeldBytes, over the rate
	// slot bytes were PUT, all copies).
	TransitHours     float64   `json:"transit_hours"`
	TransitStorage   string    `json:"transit_storage"`
	SettleInterval   string    `json:"settle_interval,omitempty"`
	TransitHeldBytes float64   `json:"transit_held_bytes_mean,omitempty"`
	TransitResidency float64   `json:"transit_residency_s,omitempty"`
	SettleLagMs      float64   `json:"settle_lag_ms_end,omitempty"`
	Cost             costPerGB `json:"usd_per_gb_ingested"`
	Halts            uint64    `json:"halts"`
	FailedBatches    uint64    `json:"failed_batches"`
	// Stages is where the acked batches' time went (see stageFigures).
	Stages *stageFigures `json:"stages,omitempty"`
	// PutBaseline is a real backend's bare PUT latency, measured after
	// the load in the same run (--model real only).
	PutBaseline *putBaseline `json:"put_baseline,omitempty"`

	cdf []cdfPoint
}

// benchCmd: flightlog bench.
func benchCmd(fs *flag.FlagSet, g *globalOpts) func(context.Context, *cmdEnv, []string) int {
	o := &benchOpts{}
	fs.StringVar(&o.model, "model", "s3-standard", "s3-standard (K=1 W=1, PUT LogNormal median 30ms p99 120ms), s3-express (K=3 W=2, median 4ms p99 15ms), custom (--k --w --put-median --put-p99 --class), or real (the configured backends)")
	fs.StringVar(&o.class, "class", "", "class for --model custom or real (standard or express)")
	fs.IntVar(&o.k, "k", 3, "custom model: buckets")
	fs.IntVar(&o.w, "w", 2, "custom model: copy quorum")
	fs.DurationVar(&o.median, "put-median", 10*time.Millisecond, "custom model: PUT latency median")
	fs.DurationVar(&o.p99, "put-p99", 40*time.Millisecond, "custom model: PUT latency p99")
	fs.IntVar(&o.producers, "producers", 64, "producers, each with one append session")
	fs.IntVar(&o.streams, "streams", 16, "streams (producer p appends to stream p mod streams)")
	fs.IntVar(&o.batch, "batch", 10, "records per batch")
	fs.IntVar(&o.recordSize, "record-size", 1024, "record body bytes (JSON-like log lines)")
	fs.IntVar(&o.depth, "depth", 1, "batches in flight per producer (1: closed loop; more: saturation)")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "how long producers submit")
	fs.Float64Var(&o.transitHours, "transit-hours", 1, "hours transit data is assumed stored before settle, for the storage cost when settlement is off")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the latency model and the workload")
	fs.BoolVar(&o.json, "json", false, "print one JSON object instead of the table")
	fs.StringVar(&o.plot, "plot", "", "write the ack-latency CDF as an SVG to this file (latency on a log axis, the fraction on a tail scale, -log10(1-q))")
	fs.StringVar(&o.cdf, "cdf", "", "write the ack-latency CDF as data to this file: CSV (q,ack_us) if it ends in .csv, JSON if in .json")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the producers' window (not the setup) to this file, for go tool pprof")
	return func(ctx context.Context, env *cmdEnv, _ []string) int {
		// The run settles as the star would: the backend flag
		// --settle-interval (0: the library's default, on; negative: off).
		o.settleInterval = g.SettleInterval
		if o.cdf != "" {
			if _, err := encodeCDF(&benchResult{}, o.cdf); err != nil {
				return env.fail(err) // before the run, not after it
			}
		}
		res, err := runBench(ctx, env, o)
		if err != nil {
			return env.fail(err)
		}
		if o.cdf != "" {
			data, err := encodeCDF(res, o.cdf)
			if err == nil {
				err = os.WriteFile(o.cdf, data, 0o644)
			}
			if err != nil {
				return env.fail(err)
			}
		}
		if o.plot != "" {
			if err := os.WriteFile(o.plot, plotCDF(res), 0o644); err != nil {
				return env.fail(err)
			}
		}
		if o.json {
			b, _ := json.MarshalIndent(res, "", "  ")
			fmt.Fprintf(env.stdout, "%s\n", b)
		} else {
			printBench(env.stdout, res)
		}
		if res.Halts > 0 || res.FailedBatches > 0 {
			env.errorf("bench: %d halts, %d failed batches", res.Halts, res.FailedBatches)
			return exitProblems
		}
		return exitOK
	}
}

func (o *benchOpts) validate() error {
	switch {
	case o.producers < 1 || o.streams < 1 || o.batch < 1 || o.recordSize < 1 || o.depth < 1:
		return fmt.Errorf("bench: --producers, --streams, --batch, --record-size and --depth must be positive")
	case o.duration <= 0:
		return fmt.Errorf("bench: --duration must be positive")
	}
	return nil
}

// corpus returns n distinct JSON-like records of size-byte bodies: batches
// drawn from it compress like log lines, not like one repeated record.
func corpus(n, size int, seed uint64) []loglet.Record {
	rng := mrand.New(mrand.NewPCG(seed, 2))
	levels := []string{"debug", "info", "info", "info", "warn", "error"}
	routes := []string{"/api/cart", "/api/cart/{id}/items", "/api/login", "/ping", "/api/checkout/confirm"}
	vocab := []string{"request", "served", "from", "replica", "after", "backoff", "stale", "read", "lease", "renewed", "shard", "rebalanced", "queue", "depth"}
	out := make([]loglet.Record, n)
	for i := range out {
		body := fmt.Appendf(make([]byte, 0, size+64), `{"level":%q,"svc":"cart","route":%q,"code":%d,"dur_ms":%.2f,"req":"%016x","note":"`,
			levels[rng.IntN(len(levels))], routes[rng.IntN(len(routes))], []int{200, 200, 201, 204, 404, 503}[rng.IntN(6)], rng.Float64()*400, rng.Uint64())
		for len(body) < size {
			body = append(body, vocab[rng.IntN(len(vocab))]...)
			body = append(body, ' ')
		}
		out[i] = loglet.Record{Body: body[:size]}
	}
	return out
}

func randomStar() string {
	var b [4]byte
	rand.Read(b[:])
	return "bench-" + hex.EncodeToString(b[:])
}

func runBench(ctx context.Context, env *cmdEnv, o *benchOpts) (*benchResult, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	meter := &putMeter{}
	// Whether the run settles: the flag, or the library's default for 0.
	settleEvery := o.settleInterval
	if settleEvery == 0 {
		settleEvery = loglet.DefaultConfig().SettleInterval
	}
	var (
		m     latencyModel
		meta  *countedMeta
		bare  objstore.Store // a real backend's first bucket, unwrapped, for the PUT baseline
		sets  [2][]objstore.Store
		names [2][]string
	)
	wrap := func(ss []objstore.Store) []objstore.Store {
		out := make([]objstore.Store, len(ss))
		for i, s := range ss {
			out[i] = timedStore{s, meter}
		}
		return out
	}
	star := randomStar()
	switch o.model {
	case "s3-standard", "s3-express", "custom":
		if o.model == "custom" {
			if o.class == "" {
				o.class = "express"
			}
			m = latencyModel{"custom", o.class, o.k, o.w, o.median, o.p99}
		} else {
			m = latencyModels[o.model]
		}
		c, err := chain.ParseClass(m.Class)
		if err != nil {
			return nil, err
		}
		for i := 0; i < m.K; i++ {
			f := objstore.WithFaults(objstore.NewMem(), o.seed*31+uint64(i))
			f.SetLatency(fault.LogNormal(m.Median, m.P99), fault.Put)
			sets[c] = append(sets[c], f)
			names[c] = append(names[c], fmt.Sprintf("mem-%d", i))
		}
		sets[c] = wrap(sets[c])
		if settleEvery > 0 && c != chain.Standard {
			// Settled objects go to the Standard set: give it one bucket
			// of the s3-standard model, untimed (it is not the set
			// measured).
			sm := latencyModels["s3-standard"]
			f := objstore.WithFaults(objstore.NewMem(), o.seed*31+99)
			f.SetLatency(fault.LogNormal(sm.Median, sm.P99), fault.Put)
			sets[chain.Standard], names[chain.Standard] = []objstore.Store{f}, []string{"mem-standard"}
		}
		meta = &countedMeta{Store: metastore.NewMem()}
		star = "bench"
	case "real":
		if o.class == "" {
			o.class = "standard"
		}
		c, err := chain.ParseClass(o.class)
		if err != nil {
			return nil, err
		}
		b, err := env.g.open(ctx, false)
		if err != nil {
			return nil, err
		}
		defer b.Close()
		if len(b.sets[c]) == 0 {
			return nil, fmt.Errorf("bench: no %s buckets configured", c)
		}
		bare = b.sets[c][0]
		sets[c], names[c] = wrap(b.sets[c]), b.names[c]
		if settleEvery > 0 && c != chain.Standard {
			if len(b.sets[chain.Standard]) == 0 && o.settleInterval > 0 {
				return nil, fmt.Errorf("bench: --settle-interval needs standard buckets to settle into")
			}
			sets[chain.Standard], names[chain.Standard] = b.sets[chain.Standard], b.names[chain.Standard]
		}
		meta = &countedMeta{Store: b.meta}
		m = latencyModel{Name: "real: " + b.describe, Class: c.String(), K: len(b.sets[c]), W: len(b.sets[c])/2 + 1}
	default:
		return nil, fmt.Errorf("bench: unknown --model %q (want s3-standard, s3-express, custom or real)", o.model)
	}
	class, _ := chain.ParseClass(m.Class)
	held := &heldMeter{sizes: map[string]int64{}}
	for i, st := range sets[class] {
		sets[class][i] = heldStore{Store: st, m: held, bucket: i}
	}
	g := env.g
	g.Star = star
	bk := &backends{meta: meta, sets: sets, names: names}
	cfg := g.starConfig(bk, env.stderr)
	cfg.Logger = slog.New(slog.DiscardHandler)
	if g.Verbose {
		cfg.Logger = g.logger(env.stderr)
	}
	cc := &cfg.Standard
	if class == chain.Express {
		cc = &cfg.Express
	}
	cc.W = m.W
	cfg.SettleInterval = o.settleInterval
	s, err := loglet.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer s.Close(context.Background())
	// Stream names carry the star's: a real backend keeps the streams of
	// every earlier run, each on its own random star, and a name is
	// deployment-wide (bench-000 on a model's fresh in-memory star).
	streamName := func(p int) string { return fmt.Sprintf("%s-%03d", star, p%o.streams) }
	for i := 0; i < o.streams; i++ {
		if _, err := s.CreateStream(ctx, streamName(i), loglet.StreamOptions{Class: class, Star: star}); err != nil {
			return nil, err
		}
	}
	recs := corpus(4096, o.recordSize, o.seed)
	var ack histogram.H
	traces := make(stageCollectors, o.producers)
	var acked, failed atomic.Int64
	var firstErr atomic.Value
	stopAt := time.Now().Add(o.duration)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopProfile, err := startCPUProfile(o.cpuProfile)
	if err != nil {
		return nil, err
	}
	defer stopProfile()
	meter.collecting.Store(true)
	meta0 := meta.n.Load()
	start := time.Now()
	var wg sync.WaitGroup
	for p := 0; p < o.producers; p++ {
		sess, err := s.OpenAppendSession(ctx, streamName(p))
		if err != nil {
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := mrand.New(mrand.NewPCG(o.seed, uint64(p)))
			type inflight struct {
				f *loglet.AckFuture
				t time.Time
			}
			var q []inflight
			wait := func() bool {
				a, err := q[0].f.Wait(context.Background())
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
					return false
				}
				seen := time.Now()
				ack.RecordDuration(seen.Sub(q[0].t))
				traces.add(p, q[0].f, seen)
				acked.Add(int64(a.End - a.Start))
				q = q[1:]
				return true
			}
			for time.Now().Before(stopAt) && runCtx.Err() == nil {
				if len(q) >= o.depth && !wait() {
					return
				}
				off := rng.IntN(len(recs) - o.batch)
				t := time.Now()
				f, err := sess.Submit(runCtx, loglet.Batch{Records: recs[off : off+o.batch]})
				if err != nil {
					if runCtx.Err() == nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err)
					}
					break
				}
				q = append(q, inflight{f, t})
			}
			for len(q) > 0 && wait() {
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	prog := newProgress(env.stderr)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	// The transit bytes held, sampled over the second half of the run
	// (the first fills the settle lag from nothing).
	sample := time.NewTicker(50 * time.Millisecond)
	defer sample.Stop()
	var heldSum float64
	var heldN int
wait:
	for {
		select {
		case <-done:
			break wait
		case <-sample.C:
			if time.Since(start) >= o.duration/2 && time.Now().Before(stopAt) {
				heldSum += float64(held.held())
				heldN++
			}
		case <-tick.C:
			el := time.Since(start).Seconds()
			prog.update("bench %s: %.1fs, %d records acked, %.1f MB/s", m.Name, el, acked.Load(), float64(acked.Load())*float64(o.recordSize)/1e6/el)
		}
	}
	prog.done()
	elapsed := time.Since(start)
	stopProfile()
	meter.collecting.Store(false)
	metaN := meta.n.Load() - meta0
	if err, _ := firstErr.Load().(error); err != nil {
		env.errorf("bench: first failure: %v", err)
	}
	lagStats := s.Stats()
	s.Close(context.Background())
	st := s.Stats()
	cs := st.Standard
	if class == chain.Express {
		cs = st.Express
	}

	records := acked.Load()
	body := float64(records) * float64(o.recordSize)
	if body == 0 {
		return nil, fmt.Errorf("bench: nothing was acked in %v", elapsed)
	}
	res := &benchResult{
		Model: m.Name, Class: m.Class, K: m.K, W: m.W,
		Producers: o.producers, Streams: o.streams, Batch: o.batch, Record: o.recordSize, Depth: o.depth,
		Seconds: round(elapsed.Seconds(), 3), GOMAXPROCS: runtime.GOMAXPROCS(0),
		Records: records, TransitHours: o.transitHours, TransitStorage: "assumed",
	}
	if m.Median > 0 {
		res.PutMedian, res.PutP99 = m.Median.String(), m.P99.String()
	}
	res.MBps = round(body/1e6/elapsed.Seconds(), 2)
	res.RecordsPS = round(float64(records)/elapsed.Seconds(), 0)
	res.CopyMBps = round(copyBaseline(recs, o.batch, records, o.seed), 0)
	res.XCopy = round(res.MBps/res.CopyMBps, 6)
	as := ack.Snapshot()
	ps := meter.lat.Snapshot()
	res.Ack = latency{us(as.Quantile(0.5)), us(as.Quantile(0.99)), us(as.Quantile(0.999))}
	res.Put = latency{us(ps.Quantile(0.5)), us(ps.Quantile(0.99)), us(ps.Quantile(0.999))}
	res.Quorum = latency{us(cs.QuorumLatency.Quantile(0.5)), us(cs.QuorumLatency.Quantile(0.99)), us(cs.QuorumLatency.Quantile(0.999))}
	res.AckVsPut = compare(res.Ack, res.Put)
	res.AckVsQuorum = compare(res.Ack, res.Quorum)
	cfgC := cc.FlightBytes
	if cfgC == 0 {
		cfgC = loglet.DefaultStandardFlightBytes
		if class == chain.Express {
			cfgC = loglet.DefaultExpressFlightBytes
		}
	}
	res.FlightBytes = cfgC
	res.FlightP50 = cs.FlightSize.Quantile(0.5)
	res.Flights = cs.Flights
	gb := body / 1e9
	res.PutsPerGB = round(float64(meter.slotPuts.Load())/gb, 0)
	res.MinPutsPerGB = round(float64(m.K)*1e9/float64(cfgC), 0)
	res.PutBytesPerB = round(float64(meter.slotBytes.Load())/body, 4)
	res.MetaReqPerSec = round(float64(metaN)/elapsed.Seconds(), 1)
	if settleEvery > 0 && len(sets[chain.Standard]) > 0 {
		res.SettleInterval = settleEvery.String()
		lcs := lagStats.Standard
		if class == chain.Express {
			lcs = lagStats.Express
		}
		res.SettleLagMs = round(float64(lcs.Settle.Lag)/float64(time.Millisecond), 1)
		if putRate := float64(meter.slotBytes.Load()) / elapsed.Seconds(); heldN > 0 && putRate > 0 && cs.Settle.Passes > 0 {
			// Residency: the mean bytes held over the rate they arrive
			// (Little's law), per copy as --transit-hours is.
			mean := heldSum / float64(heldN)
			res.TransitStorage = "measured"
			res.TransitHeldBytes = round(mean, 0)
			res.TransitResidency = round(mean/putRate, 3)
			res.TransitHours = round(mean/putRate/3600, 9)
		} else {
			res.TransitStorage = "assumed (settlement on but nothing measured: no pass ran, or the run was too short)"
		}
	}
	res.Cost = cost(m.Class, res.PutsPerGB, res.PutBytesPerB, res.TransitHours)
	res.Cost.Puts, res.Cost.Upload, res.Cost.Storage, res.Cost.Total = round(res.Cost.Puts, 6), round(res.Cost.Upload, 6), round(res.Cost.Storage, 12), round(res.Cost.Total, 6)
	res.Halts = cs.Halts
	res.FailedBatches = uint64(failed.Load())
	res.Stages = traces.figures(flushDeadline(cc, class))
	if bare != nil {
		if res.PutBaseline, err = measurePutBaseline(ctx, bare, star, int(res.FlightP50)); err != nil {
			return nil, err
		}
	}
	for _, q := range cdfQuantiles() {
		res.cdf = append(res.cdf, cdfPoint{q, us(as.Quantile(q))})
	}
	return res, nil
}

func us(ns int64) float64 { return round(float64(ns)/1e3, 1) }

func round(v float64, places int) float64 {
	p := 1.0
	for i := 0; i < places; i++ {
		p *= 10
	}
	if v < 0 {
		return -float64(int64(-v*p+0.5)) / p
	}
	return float64(int64(v*p+0.5)) / p
}

func compare(a, b latency) versus {
	ratio := func(x, y float64) float64 {
		if y == 0 {
			return 0
		}
		return round(x/y, 3)
	}
	return versus{
		Ratio: ratios{ratio(a.P50, b.P50), ratio(a.P99, b.P99), ratio(a.P999, b.P999)},
		Added: latency{round(a.P50-b.P50, 1), round(a.P99-b.P99, 1), round(a.P999-b.P999, 1)},
	}
}

// copyBaseline times a plain copy of the record bytes the run acked, from
// the same corpus, into one reused buffer: the ceiling any ingest path
// is measured against on this machine.
func copyBaseline(recs []loglet.Record, batch int, records int64, seed uint64) float64 {
	size := len(recs[0].Body)
	dst := make([]byte, batch*size)
	rng := mrand.New(mrand.NewPCG(seed, 99))
	runtime.GC()
	start := time.Now()
	for n := int64(0); n < records; n += int64(batch) {
		off := rng.IntN(len(recs) - batch)
		o := 0
		for _, r := range recs[off : off+batch] {
			o += copy(dst[o:], r.Body)
		}
	}
	el := max(time.Since(start), time.Microsecond)
	return float64(records) * float64(size) / 1e6 / el.Seconds()
}

func printBench(w io.Writer, r *benchResult) {
	fmt.Fprintf(w, "flightlog bench: model %s (class %s, K=%d W=%d", r.Model, r.Class, r.K, r.W)
	if r.PutMedian != "" {
		fmt.Fprintf(w, ", PUT LogNormal median %s p99 %s", r.PutMedian, r.PutP99)
	}
	fmt.Fprintf(w, ")\n  %d producers x %d in flight, %d streams, %d records of %d B per batch, %.1fs, GOMAXPROCS %d\n\n",
		r.Producers, r.Depth, r.Streams, r.Batch, r.Record, r.Seconds, r.GOMAXPROCS)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "latency (µs)\tp50\tp99\tp99.9\t")
	row := func(name string, l latency) {
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t\n", name, l.P50, l.P99, l.P999)
	}
	row("ack (producer)", r.Ack)
	row("store PUT", r.Put)
	row("quorum (W copies)", r.Quorum)
	fmt.Fprintf(tw, "ack / PUT\t%.2fx\t%.2fx\t%.2fx\t\n", r.AckVsPut.Ratio.P50, r.AckVsPut.Ratio.P99, r.AckVsPut.Ratio.P999)
	row("ack - PUT", r.AckVsPut.Added)
	fmt.Fprintf(tw, "ack / quorum\t%.2fx\t%.2fx\t%.2fx\t\n", r.AckVsQuorum.Ratio.P50, r.AckVsQuorum.Ratio.P99, r.AckVsQuorum.Ratio.P999)
	row("ack - quorum", r.AckVsQuorum.Added)
	tw.Flush()
	fmt.Fprintln(w)
	printStages(w, r.Stages)
	if b := r.PutBaseline; b != nil {
		fmt.Fprintf(w, "%-18s %d PUTs of %d B one at a time after the load, p50/p99 µs: raw PutObject %.0f/%.0f, through the store %.0f/%.0f\n",
			"PUT baseline", b.N, b.Bytes, b.Raw.P50, b.Raw.P99, b.Store.P50, b.Store.P99)
	}
	fmt.Fprintf(w, "%-18s %.2f MB/s, %.0f records/s (copy baseline %.0f MB/s; ratio %.5f)\n", "throughput", r.MBps, r.RecordsPS, r.CopyMBps, r.XCopy)
	fmt.Fprintf(w, "%-18s %.0f (the minimum flight size %d B allows: %.0f)\n", "PUTs per GB", r.PutsPerGB, r.FlightBytes, r.MinPutsPerGB)
	fmt.Fprintf(w, "%-18s %d (object p50 %d B; %.3f bytes PUT per body byte, all copies)\n", "flights", r.Flights, r.FlightP50, r.PutBytesPerB)
	fmt.Fprintf(w, "%-18s %.1f requests/s\n", "metastore", r.MetaReqPerSec)
	if r.TransitStorage == "measured" {
		fmt.Fprintf(w, "%-18s settle interval %s: %.2f MB held in transit on average (all copies), a residency of %.3fs; lag at the end %.0f ms\n", "settlement", r.SettleInterval, r.TransitHeldBytes/1e6, r.TransitResidency, r.SettleLagMs)
	}
	fmt.Fprintf(w, "%-18s %.6f = PUTs %.6f + upload %.6f + storage %.3g (%gh in transit, %s)\n", "$ per GB ingested", r.Cost.Total, r.Cost.Puts, r.Cost.Upload, r.Cost.Storage, r.TransitHours, transitNote(r))
	fmt.Fprintf(w, "%-18s %s\n", "", r.Cost.Prices)
}

// transitNote says where the transit storage time came from.
func transitNote(r *benchResult) string {
	if r.TransitStorage == "measured" {
		return "measured with settlement on"
	}
	if r.SettleInterval != "" {
		return r.TransitStorage + ", --transit-hours"
	}
	return "assumed: --transit-hours, settlement off"
}

// startCPUProfile starts a CPU profile into path ("" : none) and returns
// what stops it; stopping twice is fine.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("bench: --cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("bench: --cpuprofile: %w", err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			f.Close()
		})
	}, nil
}
