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
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/loglet/open"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// The embedded layout inside --dir, named as loglet/open names it, so
// this tool opens what open.Dir (and examples/quickstart) wrote.
const (
	metaFile        = open.MetastoreFile
	standardDir     = open.StandardBucket
	defaultStarName = open.DefaultStar
)

// globalOpts are the backend and configuration flags every command takes:
// loglet/open's Settings, so that the flags, their FLIGHTLOG_* variables
// and their meanings are the ones open.Env reads.
type globalOpts struct {
	open.Settings
}

// envName is the environment variable that stands in for the backend flag
// name.
func envName(name string) string { return open.EnvName(name) }

// register adds the backend flags to fs, each usage naming its variable.
func (g *globalOpts) register(fs *flag.FlagSet) { g.Settings.Register(fs) }

// fromEnv sets each backend flag the command line did not give from its
// variable, if that is set: an explicit flag wins. A value the flag
// rejects is an error naming the variable.
func (g *globalOpts) fromEnv(fs *flag.FlagSet, lookupEnv func(string) (string, bool)) error {
	return g.Settings.FromEnv(fs, lookupEnv)
}

func (g *globalOpts) embedded() bool { return g.Embedded() }

func (g *globalOpts) logger(stderr io.Writer) *slog.Logger {
	if g.Verbose {
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
	metaPath := filepath.Join(g.Dir, metaFile)
	if mustExist && (g.Etcd == "" || g.embedded()) {
		// A read must not create what is not there: the bbolt metastore,
		// or, with etcd as the metastore, the bucket directories in --dir.
		need := metaPath
		if g.Etcd != "" {
			need = filepath.Join(g.Dir, standardDir)
		}
		if _, err := os.Stat(need); err != nil {
			return nil, fmt.Errorf("%w in %s (%s: %v); write some with `flightlog append` or `go run ./examples/quickstart --dir %s`", errNoData, g.Dir, filepath.Base(need), err, g.Dir)
		}
	}
	spec, err := g.Spec()
	if err != nil {
		return nil, err
	}
	ob, err := spec.Open(ctx)
	if err != nil {
		return nil, err
	}
	b.closers = append(b.closers, ob.Close)
	b.meta = ob.Meta
	b.sets[chain.Standard], b.names[chain.Standard] = ob.Standard, ob.StandardNames
	b.sets[chain.Express], b.names[chain.Express] = ob.Express, ob.ExpressNames
	if g.Etcd != "" {
		b.describe = "etcd " + g.Etcd
	} else {
		b.describe = "bbolt " + metaPath
	}
	if g.embedded() {
		b.describe += ", buckets in " + g.Dir
	} else {
		b.describe += ", S3 " + g.S3Endpoint
	}
	ok = true
	return b, nil
}

// starConfig is the loglet configuration the flags describe over b.
func (g *globalOpts) starConfig(b *backends, stderr io.Writer) loglet.Config {
	cfg := loglet.Config{
		Meta:   b.meta,
		Logger: g.logger(stderr),
		Standard: loglet.ClassConfig{
			Stores: b.sets[chain.Standard], BucketNames: b.names[chain.Standard],
		},
		Express: loglet.ClassConfig{
			Stores: b.sets[chain.Express], BucketNames: b.names[chain.Express],
		},
	}
	g.Tune(&cfg)
	return cfg
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
		return nil, fmt.Errorf("open star %q as its leader: %w", g.Star, err)
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
