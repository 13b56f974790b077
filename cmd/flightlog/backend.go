package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/loglet/open"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/metastore/bbolt"
	"github.com/flightlog/flightlog/metastore/etcd"
	"github.com/flightlog/flightlog/objstore"
	"github.com/flightlog/flightlog/objstore/file"
	"github.com/flightlog/flightlog/objstore/s3"
)

// The embedded layout inside --dir: one directory per bucket, and the
// bbolt metastore, named as loglet/open names them, so this tool opens what
// open.Dir (and examples/quickstart) wrote.
const (
	metaFile        = open.MetastoreFile
	standardDir     = open.StandardBucket
	defaultDataDir  = "./flightlog-data"
	defaultStarName = open.DefaultStar
)

var expressDirs = open.ExpressBuckets()

// globalOpts are the backend and configuration flags every command takes.
type globalOpts struct {
	dir         string
	star        string
	lockTimeout time.Duration
	verbose     bool

	s3Endpoint, s3Region     string
	s3AccessKey, s3SecretKey string
	s3Bucket, s3Express      string
	s3PathStyle              bool

	etcd, etcdPrefix                   string
	etcdMaxTxnOps, etcdMaxRequestBytes int

	memMiB, expressMemMiB             int
	parallelUploads, expressParallel  int
	backlogFlights                    int
	flushDeadline, expressFlushDeadln time.Duration
	readAhead                         int
	settleInterval                    time.Duration

	envFlags []string // the flags register added, which fromEnv may set
}

// envOverrides names the variable of a flag whose name, in capitals, would
// not be the name deployments already use.
var envOverrides = map[string]string{
	"etcd": "FLIGHTLOG_ETCD_ENDPOINTS", // as scripts/test.sh and examples/s3 set it
	"v":    "FLIGHTLOG_VERBOSE",
}

// envName is the environment variable that stands in for the backend flag
// name: FLIGHTLOG_ and the name in capitals, '-' as '_'.
func envName(name string) string {
	if v, ok := envOverrides[name]; ok {
		return v
	}
	return "FLIGHTLOG_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// register adds the backend flags to fs, each usage naming its variable.
func (g *globalOpts) register(fs *flag.FlagSet) {
	before := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { before[f.Name] = true })
	g.registerFlags(fs)
	g.envFlags = nil
	fs.VisitAll(func(f *flag.Flag) {
		if !before[f.Name] {
			g.envFlags = append(g.envFlags, f.Name)
			f.Usage += " [$" + envName(f.Name) + "]"
		}
	})
}

// fromEnv sets each backend flag the command line did not give from its
// variable, if that is set: an explicit flag wins. A value the flag
// rejects is an error naming the variable.
func (g *globalOpts) fromEnv(fs *flag.FlagSet, lookupEnv func(string) (string, bool)) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, name := range g.envFlags {
		if given[name] {
			continue
		}
		v, ok := lookupEnv(envName(name))
		if !ok {
			continue
		}
		if err := fs.Set(name, v); err != nil {
			return fmt.Errorf("$%s=%q (for --%s): %v", envName(name), v, name, err)
		}
	}
	return nil
}

func (g *globalOpts) registerFlags(fs *flag.FlagSet) {
	fs.StringVar(&g.dir, "dir", defaultDataDir, "embedded data directory: a bucket directory per bucket and the bbolt metastore "+metaFile+" (one process at a time)")
	fs.StringVar(&g.star, "star", defaultStarName, "star name")
	fs.DurationVar(&g.lockTimeout, "lock-timeout", time.Second, "how long to wait for the embedded metastore's file lock")
	fs.BoolVar(&g.verbose, "v", false, "log the library's events to stderr")
	fs.StringVar(&g.s3Endpoint, "s3-endpoint", "", "S3 endpoint URL (an S3-compatible server; empty with --s3-bucket: AWS)")
	fs.StringVar(&g.s3Region, "s3-region", "", "S3 region (default: the SDK's configuration)")
	fs.StringVar(&g.s3AccessKey, "s3-access-key", "", "S3 access key (with --s3-secret-key; neither: the SDK's default chain)")
	fs.StringVar(&g.s3SecretKey, "s3-secret-key", "", "S3 secret key")
	fs.StringVar(&g.s3Bucket, "s3-bucket", "", "S3 bucket of the Standard class (K=1)")
	fs.StringVar(&g.s3Express, "s3-express-buckets", "", "comma-separated S3 buckets of the Express class (one per zone, K=3, W=2)")
	fs.BoolVar(&g.s3PathStyle, "s3-path-style", true, "path-style S3 addressing (S3-compatible servers; false for S3 directory buckets)")
	fs.StringVar(&g.etcd, "etcd", "", "comma-separated etcd endpoints: use etcd as the metastore instead of bbolt in --dir")
	fs.StringVar(&g.etcdPrefix, "etcd-prefix", "", "prefix of every etcd key (several deployments on one cluster)")
	fs.IntVar(&g.etcdMaxTxnOps, "etcd-max-txn-ops", etcd.DefaultMaxCommitOps, "the etcd cluster's --max-txn-ops (absorb rounds split to fit)")
	fs.IntVar(&g.etcdMaxRequestBytes, "etcd-max-request-bytes", etcd.DefaultMaxRequestBytes, "the etcd cluster's --max-request-bytes (absorb rounds split to fit)")
	fs.IntVar(&g.memMiB, "s3-memory-buffer-mib", loglet.DefaultStandardMemoryBufferMiB, "Standard pool budget in MiB")
	fs.IntVar(&g.expressMemMiB, "s3-express-memory-buffer-mib", loglet.DefaultExpressMemoryBufferMiB, "Express pool budget in MiB")
	fs.IntVar(&g.parallelUploads, "s3-parallel-uploads", loglet.DefaultStandardParallelUploads, "Standard pipeline window: slots claimed and not yet released")
	fs.IntVar(&g.expressParallel, "s3-express-parallel-uploads", loglet.DefaultExpressParallelUploads, "Express pipeline window")
	fs.IntVar(&g.backlogFlights, "s3-chain-backlog-flights", loglet.DefaultChainBacklogFlights, "backlog budget: released-but-unabsorbed flights per chain")
	fs.DurationVar(&g.flushDeadline, "flush-deadline", loglet.DefaultStandardFlushDeadline, "Standard flush deadline (how long the oldest pooled byte waits)")
	fs.DurationVar(&g.expressFlushDeadln, "express-flush-deadline", loglet.DefaultExpressFlushDeadline, "Express flush deadline")
	fs.DurationVar(&g.settleInterval, "settle-interval", 0, "settlement's interval (loglet.Config.SettleInterval): 0 takes the library's default (loglet.DefaultSettleInterval); negative turns settlement off, and transit slots are then kept")
	fs.IntVar(&g.readAhead, "read-ahead", 0, "slots a takeover's fence and walk work on at once, both classes (0: the library's defaults, up to 128·K requests in flight; lower it for a store that limits request rates)")
}

func (g *globalOpts) embedded() bool {
	return g.s3Endpoint == "" && g.s3Bucket == "" && g.s3Express == ""
}

func (g *globalOpts) logger(stderr io.Writer) *slog.Logger {
	if g.verbose {
		return slog.New(slog.NewTextHandler(stderr, nil))
	}
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// backends are the opened stores of one command run.
type backends struct {
	meta     metastore.Store
	sets     [2][]objstore.Store // by class
	names    [2][]string
	closers  []func() error
	describe string
}

func (b *backends) Close() {
	for i := len(b.closers) - 1; i >= 0; i-- {
		b.closers[i]()
	}
}

// set returns a class's bucket set for the successor-side primitives.
func (b *backends) set(c chain.Class, w int) chain.BucketSet {
	return chain.BucketSet{Stores: b.sets[c], Names: b.names[c], W: w}
}

// errNoData: a read-only command found no embedded store in --dir.
var errNoData = errors.New("no flightlog data")

// open opens the metastore and the bucket sets. With mustExist (every
// command but append and bench), a missing embedded store is an error
// rather than created empty.
func (g *globalOpts) open(ctx context.Context, mustExist bool) (*backends, error) {
	b := &backends{}
	ok := false
	defer func() {
		if !ok {
			b.Close()
		}
	}()
	metaPath := filepath.Join(g.dir, metaFile)
	if mustExist && (g.etcd == "" || g.embedded()) {
		// A read must not create what is not there: the bbolt metastore,
		// or, with etcd as the metastore, the bucket directories in --dir.
		need := metaPath
		if g.etcd != "" {
			need = filepath.Join(g.dir, standardDir)
		}
		if _, err := os.Stat(need); err != nil {
			return nil, fmt.Errorf("%w in %s (%s: %v); write some with `flightlog append` or `go run ./examples/quickstart --dir %s`", errNoData, g.dir, filepath.Base(need), err, g.dir)
		}
	}
	switch {
	case g.etcd != "":
		st, err := etcd.New(etcd.Config{Endpoints: strings.Split(g.etcd, ","), Prefix: g.etcdPrefix,
			MaxCommitOps: g.etcdMaxTxnOps, MaxRequestBytes: g.etcdMaxRequestBytes})
		if err != nil {
			return nil, err
		}
		b.meta = st
		b.closers = append(b.closers, st.Close)
		b.describe = "etcd " + g.etcd
	default:
		if err := os.MkdirAll(g.dir, 0o755); err != nil {
			return nil, err
		}
		st, err := bbolt.Open(metaPath, &bbolt.Options{LockTimeout: g.lockTimeout})
		if errors.Is(err, bbolt.ErrInUse) {
			return nil, fmt.Errorf("%w\n  bbolt allows one process at a time: the embedded store is for one process; stop the service using %s first", err, g.dir)
		}
		if err != nil {
			return nil, err
		}
		b.meta = st
		b.closers = append(b.closers, st.Close)
		b.describe = "bbolt " + metaPath
	}
	if g.embedded() {
		s, err := file.Open(filepath.Join(g.dir, standardDir))
		if err != nil {
			return nil, err
		}
		b.sets[chain.Standard], b.names[chain.Standard] = []objstore.Store{s}, []string{standardDir}
		for _, d := range expressDirs {
			s, err := file.Open(filepath.Join(g.dir, d))
			if err != nil {
				return nil, err
			}
			b.sets[chain.Express] = append(b.sets[chain.Express], s)
			b.names[chain.Express] = append(b.names[chain.Express], d)
		}
		b.describe += ", buckets in " + g.dir
		ok = true
		return b, nil
	}
	access, secret := g.s3AccessKey, g.s3SecretKey
	newS3 := func(bucket string) (objstore.Store, error) {
		return s3.New(ctx, s3.Config{
			Bucket: bucket, Endpoint: g.s3Endpoint, Region: g.s3Region, UsePathStyle: g.s3PathStyle,
			AccessKey: access, SecretKey: secret,
		})
	}
	if g.s3Bucket != "" {
		s, err := newS3(g.s3Bucket)
		if err != nil {
			return nil, err
		}
		b.sets[chain.Standard], b.names[chain.Standard] = []objstore.Store{s}, []string{g.s3Bucket}
	}
	if g.s3Express != "" {
		for _, name := range strings.Split(g.s3Express, ",") {
			s, err := newS3(name)
			if err != nil {
				return nil, err
			}
			b.sets[chain.Express] = append(b.sets[chain.Express], s)
			b.names[chain.Express] = append(b.names[chain.Express], name)
		}
	}
	b.describe += ", S3 " + g.s3Endpoint
	ok = true
	return b, nil
}

// starConfig is the loglet configuration the flags describe over b.
func (g *globalOpts) starConfig(b *backends, stderr io.Writer) loglet.Config {
	return loglet.Config{
		Star:   g.star,
		Meta:   b.meta,
		Logger: g.logger(stderr),
		// 0 is the library's default; negative is off.
		SettleInterval: g.settleInterval,
		Standard: loglet.ClassConfig{
			Stores: b.sets[chain.Standard], BucketNames: b.names[chain.Standard],
			MemoryBufferMiB: g.memMiB, ParallelUploads: g.parallelUploads,
			ChainBacklogFlights: g.backlogFlights, FlushDeadline: g.flushDeadline, ReadAhead: g.readAhead,
		},
		Express: loglet.ClassConfig{
			Stores: b.sets[chain.Express], BucketNames: b.names[chain.Express],
			MemoryBufferMiB: g.expressMemMiB, ParallelUploads: g.expressParallel,
			ChainBacklogFlights: g.backlogFlights, FlushDeadline: g.expressFlushDeadln, ReadAhead: g.readAhead,
		},
	}
}

// openStar opens the star the flags name as its leader.
func (g *globalOpts) openStar(ctx context.Context, b *backends, stderr io.Writer) (*loglet.Star, error) {
	return g.openStarAs(ctx, b, stderr, false)
}

// openStarAs opens the star as its leader; refuseLive makes it fail with
// loglet.ErrLiveOwner rather than depose a chain's live owner.
func (g *globalOpts) openStarAs(ctx context.Context, b *backends, stderr io.Writer, refuseLive bool, tweaks ...func(*loglet.Config)) (*loglet.Star, error) {
	cfg := g.starConfig(b, stderr)
	cfg.RefuseLiveOwner = refuseLive
	for _, tw := range tweaks {
		tw(&cfg)
	}
	s, err := loglet.Open(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open star %q as its leader: %w", g.star, err)
	}
	return s, nil
}

// reader opens a read-only Reader over b: it leads nothing, so it works
// beside a live leader (with etcd) and after one has stopped.
func (b *backends) reader(poll time.Duration) (*loglet.Reader, error) {
	return loglet.NewReader(loglet.ReaderConfig{
		Meta: b.meta, Standard: b.sets[chain.Standard], Express: b.sets[chain.Express], PollInterval: poll,
	})
}
