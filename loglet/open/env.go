package open

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore/etcd"
)

// Settings are the backend and tuning settings the flightlog CLI takes as
// flags, each of which a FLIGHTLOG_* variable stands in for (EnvName).
// Env reads them from the environment; the CLI registers them as flags
// (Register) and fills the ones not given from the environment (FromEnv),
// so both read the same variables with the same meanings.
//
// With no S3 bucket set the buckets are the embedded layout in Dir (as
// Dir opens it); with no etcd endpoints the metastore is Dir's bbolt file.
type Settings struct {
	Dir         string        // embedded data directory (FLIGHTLOG_DIR)
	Star        string        // star name (FLIGHTLOG_STAR)
	LockTimeout time.Duration // bbolt's file lock wait (FLIGHTLOG_LOCK_TIMEOUT)
	Verbose     bool          // log the library's events to stderr (FLIGHTLOG_VERBOSE)

	S3Endpoint, S3Region     string
	S3AccessKey, S3SecretKey string
	S3Bucket                 string // Standard's bucket
	S3ExpressBuckets         string // Express's buckets, comma-separated
	S3PathStyle              bool

	Etcd                                string // etcd endpoints, comma-separated
	EtcdPrefix                          string
	EtcdMaxTxnOps, EtcdMaxRequestBytes  int
	MemoryBufferMiB, ExpressMemoryMiB   int
	ParallelUploads, ExpressParallel    int
	ChainBacklogFlights                 int
	FlushDeadline, ExpressFlushDeadline time.Duration
	ReadAhead                           int
	SettleInterval                      time.Duration

	registered []string // the flags Register added
}

// Default data directory and star of the CLI and Env.
const DefaultDataDir = "./flightlog-data"

// envOverrides names the variable of a flag whose name, in capitals, would
// not be the name deployments already use.
var envOverrides = map[string]string{
	"etcd": "FLIGHTLOG_ETCD_ENDPOINTS", // as scripts/test.sh sets it
	"v":    "FLIGHTLOG_VERBOSE",
}

// EnvName is the environment variable that stands in for the flag name:
// FLIGHTLOG_ and the name in capitals, '-' as '_' (FLIGHTLOG_S3_ENDPOINT
// for --s3-endpoint), except FLIGHTLOG_ETCD_ENDPOINTS for --etcd and
// FLIGHTLOG_VERBOSE for -v.
func EnvName(flagName string) string {
	if v, ok := envOverrides[flagName]; ok {
		return v
	}
	return "FLIGHTLOG_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Register adds a flag per setting to fs, with its default, each usage
// naming its variable.
func (s *Settings) Register(fs *flag.FlagSet) {
	before := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { before[f.Name] = true })
	s.registerFlags(fs)
	s.registered = nil
	fs.VisitAll(func(f *flag.Flag) {
		if !before[f.Name] {
			s.registered = append(s.registered, f.Name)
			f.Usage += " [$" + EnvName(f.Name) + "]"
		}
	})
}

// FromEnv sets each flag Register added that fs has not been given from
// its variable, if lookupEnv finds it: a flag given wins. A value the flag
// rejects is an error naming the variable.
func (s *Settings) FromEnv(fs *flag.FlagSet, lookupEnv func(string) (string, bool)) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, name := range s.registered {
		if given[name] {
			continue
		}
		v, ok := lookupEnv(EnvName(name))
		if !ok {
			continue
		}
		if err := fs.Set(name, v); err != nil {
			return fmt.Errorf("$%s=%q (for --%s): %v", EnvName(name), v, name, err)
		}
	}
	return nil
}

func (s *Settings) registerFlags(fs *flag.FlagSet) {
	fs.StringVar(&s.Dir, "dir", DefaultDataDir, "embedded data directory: a bucket directory per bucket and the bbolt metastore "+MetastoreFile+" (one process at a time)")
	fs.StringVar(&s.Star, "star", DefaultStar, "star name")
	fs.DurationVar(&s.LockTimeout, "lock-timeout", time.Second, "how long to wait for the embedded metastore's file lock")
	fs.BoolVar(&s.Verbose, "v", false, "log the library's events to stderr")
	fs.StringVar(&s.S3Endpoint, "s3-endpoint", "", "S3 endpoint URL (an S3-compatible server; empty with --s3-bucket: AWS)")
	fs.StringVar(&s.S3Region, "s3-region", "", "S3 region (default: the SDK's configuration)")
	fs.StringVar(&s.S3AccessKey, "s3-access-key", "", "S3 access key (with --s3-secret-key; neither: the SDK's default chain)")
	fs.StringVar(&s.S3SecretKey, "s3-secret-key", "", "S3 secret key")
	fs.StringVar(&s.S3Bucket, "s3-bucket", "", "S3 bucket of the Standard class (K=1)")
	fs.StringVar(&s.S3ExpressBuckets, "s3-express-buckets", "", "comma-separated S3 buckets of the Express class (one per zone, K=3, W=2)")
	fs.BoolVar(&s.S3PathStyle, "s3-path-style", true, "path-style S3 addressing (S3-compatible servers; false for S3 directory buckets)")
	fs.StringVar(&s.Etcd, "etcd", "", "comma-separated etcd endpoints: use etcd as the metastore instead of bbolt in --dir")
	fs.StringVar(&s.EtcdPrefix, "etcd-prefix", "", "prefix of every etcd key (several deployments on one cluster)")
	fs.IntVar(&s.EtcdMaxTxnOps, "etcd-max-txn-ops", etcd.DefaultMaxCommitOps, "the etcd cluster's --max-txn-ops (absorb rounds split to fit)")
	fs.IntVar(&s.EtcdMaxRequestBytes, "etcd-max-request-bytes", etcd.DefaultMaxRequestBytes, "the etcd cluster's --max-request-bytes (absorb rounds split to fit)")
	fs.IntVar(&s.MemoryBufferMiB, "s3-memory-buffer-mib", loglet.DefaultStandardMemoryBufferMiB, "Standard pool budget in MiB")
	fs.IntVar(&s.ExpressMemoryMiB, "s3-express-memory-buffer-mib", loglet.DefaultExpressMemoryBufferMiB, "Express pool budget in MiB")
	fs.IntVar(&s.ParallelUploads, "s3-parallel-uploads", loglet.DefaultStandardParallelUploads, "Standard pipeline window: slots claimed and not yet released")
	fs.IntVar(&s.ExpressParallel, "s3-express-parallel-uploads", loglet.DefaultExpressParallelUploads, "Express pipeline window")
	fs.IntVar(&s.ChainBacklogFlights, "s3-chain-backlog-flights", loglet.DefaultChainBacklogFlights, "backlog budget: released-but-unabsorbed flights per chain")
	fs.DurationVar(&s.FlushDeadline, "flush-deadline", loglet.DefaultStandardFlushDeadline, "Standard flush deadline (how long the oldest pooled byte waits)")
	fs.DurationVar(&s.ExpressFlushDeadline, "express-flush-deadline", loglet.DefaultExpressFlushDeadline, "Express flush deadline")
	fs.DurationVar(&s.SettleInterval, "settle-interval", 0, "settlement's interval (loglet.Config.SettleInterval): 0 takes the library's default (loglet.DefaultSettleInterval); negative turns settlement off, and transit slots are then kept")
	fs.IntVar(&s.ReadAhead, "read-ahead", 0, "slots a takeover's fence and walk work on at once, both classes (0: the library's defaults, up to 128·K requests in flight; lower it for a store that limits request rates)")
}

// Embedded reports whether the buckets are the embedded layout in Dir (no
// S3 setting given).
func (s *Settings) Embedded() bool {
	return s.S3Endpoint == "" && s.S3Bucket == "" && s.S3ExpressBuckets == ""
}

// Spec is the Spec the settings describe: the bbolt file in Dir or the
// etcd endpoints; the embedded bucket directories in Dir or the S3 buckets.
func (s *Settings) Spec() (Spec, error) {
	spec := Spec{S3AccessKey: s.S3AccessKey, S3SecretKey: s.S3SecretKey}
	dir, err := filepath.Abs(s.Dir)
	if err != nil {
		return Spec{}, fmt.Errorf("open: dir %q: %w", s.Dir, err)
	}
	fileURL := func(scheme, name string) string {
		return (&url.URL{Scheme: scheme, Path: filepath.ToSlash(filepath.Join(dir, name))}).String()
	}
	if s.Etcd != "" {
		var hosts []string
		schemes := map[bool]bool{}
		for _, ep := range strings.Split(s.Etcd, ",") {
			h, tls := strings.CutPrefix(ep, "https://")
			h = strings.TrimSuffix(strings.TrimPrefix(h, "http://"), "/")
			if h == "" || strings.ContainsAny(h, "/,") || strings.Contains(h, "://") {
				return Spec{}, fmt.Errorf("open: etcd endpoint %q: want host:port, http://host:port or https://host:port", ep)
			}
			hosts = append(hosts, h)
			schemes[tls] = true
		}
		if len(schemes) > 1 {
			return Spec{}, fmt.Errorf("open: etcd endpoints %q mix http and https", s.Etcd)
		}
		q := url.Values{}
		if schemes[true] {
			q.Set("tls", "true")
		}
		q.Set("max_txn_ops", strconv.Itoa(s.EtcdMaxTxnOps))
		q.Set("max_request_bytes", strconv.Itoa(s.EtcdMaxRequestBytes))
		spec.Meta = (&url.URL{Scheme: "etcd", Host: strings.Join(hosts, ","), Path: "/" + s.EtcdPrefix, RawQuery: q.Encode()}).String()
	} else {
		u := fileURL("bbolt", MetastoreFile)
		if s.LockTimeout > 0 {
			u += "?lock_timeout=" + s.LockTimeout.String()
		}
		spec.Meta = u
	}
	if s.Embedded() {
		spec.Standard = []string{fileURL("file", StandardBucket)}
		for _, b := range ExpressBuckets() {
			spec.Express = append(spec.Express, fileURL("file", b))
		}
		return spec, nil
	}
	s3URL := func(bucket string) string {
		q := url.Values{}
		if s.S3Region != "" {
			q.Set("region", s.S3Region)
		}
		if s.S3Endpoint != "" {
			q.Set("endpoint", s.S3Endpoint)
		}
		q.Set("path_style", strconv.FormatBool(s.S3PathStyle))
		return (&url.URL{Scheme: "s3", Host: bucket, RawQuery: q.Encode()}).String()
	}
	if s.S3Bucket != "" {
		spec.Standard = []string{s3URL(s.S3Bucket)}
	}
	if s.S3ExpressBuckets != "" {
		for _, b := range strings.Split(s.S3ExpressBuckets, ",") {
			spec.Express = append(spec.Express, s3URL(b))
		}
	}
	return spec, nil
}

// Tune sets cfg's tuning fields (star, pools, windows, deadlines,
// settlement) from the settings.
func (s *Settings) Tune(cfg *loglet.Config) {
	cfg.Star = s.Star
	cfg.SettleInterval = s.SettleInterval // 0 is the library's default; negative is off
	cfg.Standard.MemoryBufferMiB, cfg.Standard.ParallelUploads = s.MemoryBufferMiB, s.ParallelUploads
	cfg.Standard.ChainBacklogFlights, cfg.Standard.FlushDeadline, cfg.Standard.ReadAhead = s.ChainBacklogFlights, s.FlushDeadline, s.ReadAhead
	cfg.Express.MemoryBufferMiB, cfg.Express.ParallelUploads = s.ExpressMemoryMiB, s.ExpressParallel
	cfg.Express.ChainBacklogFlights, cfg.Express.FlushDeadline, cfg.Express.ReadAhead = s.ChainBacklogFlights, s.ExpressFlushDeadline, s.ReadAhead
}

// Env opens the star the FLIGHTLOG_* variables describe, with the names
// and meanings of the flightlog CLI's flags (`flightlog help` lists them;
// EnvName gives each flag's variable): FLIGHTLOG_S3_BUCKET,
// FLIGHTLOG_S3_ENDPOINT, FLIGHTLOG_ETCD_ENDPOINTS, FLIGHTLOG_DIR and the
// rest. With none set it opens the embedded default in DefaultDataDir, as
// the CLI does.
//
// cfg is as for URL. A variable that is set overrides the matching cfg
// field (FLIGHTLOG_STAR cfg.Star, FLIGHTLOG_FLUSH_DEADLINE
// cfg.Standard.FlushDeadline, ...); one that is not leaves it.
// FLIGHTLOG_VERBOSE=true logs to stderr when cfg.Logger is nil. A value
// that does not parse is an error naming the variable.
func Env(ctx context.Context, cfg loglet.Config) (*loglet.Star, error) {
	return envOpen(ctx, cfg, os.LookupEnv)
}

func envOpen(ctx context.Context, cfg loglet.Config, lookupEnv func(string) (string, bool)) (*loglet.Star, error) {
	if ctx == nil {
		return nil, loglet.ErrNilContext
	}
	var s Settings
	fs := flag.NewFlagSet("open.Env", flag.ContinueOnError)
	s.Register(fs)
	if err := s.FromEnv(fs, lookupEnv); err != nil {
		return nil, fmt.Errorf("open: Env: %w", err)
	}
	// Only what the environment set overrides cfg.
	var tuned loglet.Config
	s.Tune(&tuned)
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "star":
			cfg.Star = tuned.Star
		case "settle-interval":
			cfg.SettleInterval = tuned.SettleInterval
		case "s3-memory-buffer-mib":
			cfg.Standard.MemoryBufferMiB = tuned.Standard.MemoryBufferMiB
		case "s3-express-memory-buffer-mib":
			cfg.Express.MemoryBufferMiB = tuned.Express.MemoryBufferMiB
		case "s3-parallel-uploads":
			cfg.Standard.ParallelUploads = tuned.Standard.ParallelUploads
		case "s3-express-parallel-uploads":
			cfg.Express.ParallelUploads = tuned.Express.ParallelUploads
		case "s3-chain-backlog-flights":
			cfg.Standard.ChainBacklogFlights, cfg.Express.ChainBacklogFlights = s.ChainBacklogFlights, s.ChainBacklogFlights
		case "flush-deadline":
			cfg.Standard.FlushDeadline = s.FlushDeadline
		case "express-flush-deadline":
			cfg.Express.FlushDeadline = s.ExpressFlushDeadline
		case "read-ahead":
			cfg.Standard.ReadAhead, cfg.Express.ReadAhead = s.ReadAhead, s.ReadAhead
		case "v":
			if s.Verbose && cfg.Logger == nil {
				cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
			}
		}
	})
	spec, err := s.Spec()
	if err != nil {
		return nil, fmt.Errorf("open: Env: %w", err)
	}
	return URL(ctx, cfg, spec)
}
