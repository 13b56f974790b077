// Package open opens a star in one call, three ways:
//
//	star, err := open.Dir(ctx, "./data", loglet.DefaultConfig())   // the embedded default
//	star, err := open.URL(ctx, cfg, open.Spec{Meta: "etcd://h:2379/prod/", Standard: []string{"s3://orders?region=eu-west-1"}})
//	star, err := open.Env(ctx, cfg)                                // the flightlog CLI's FLIGHTLOG_* variables
//
// Dir is a directory holding a bbolt metastore and one local directory per
// bucket, with no server to run: the README's first program. URL takes
// go-cloud style URLs, one per bucket and one for the metastore (Spec
// lists the schemes). Env reads the variables the CLI reads, through the
// same Settings, so a service and the CLI pointed at one environment open
// the same star. Spec.Open gives the opened stores without a star, for
// the CLI's commands that lead nothing.
//
// It lives beside loglet rather than in it because it brings in the
// backends (bbolt, file, S3, etcd), and loglet.Open takes any
// metastore.Store and objstore.Store.
//
// The layout's names (MetastoreFile, StandardBucket, ExpressBuckets) are
// part of the data's format: the bucket names are recorded in each chain's
// epoch record (loglet.ClassConfig.BucketNames) and must never change. The
// flightlog CLI's --dir uses the same names, so `flightlog walk --dir <dir>`
// (and read, tail, append, fsck) open what Dir wrote.
package open

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore/bbolt"
	"github.com/flightlog/flightlog/objstore"
	"github.com/flightlog/flightlog/objstore/file"
)

// The embedded layout inside Dir's directory.
const (
	// MetastoreFile is the bbolt metastore's file.
	MetastoreFile = "meta.db"
	// StandardBucket is Standard's one bucket (K=1, W=1).
	StandardBucket = "standard"
	// DefaultStar is the star Dir opens when the Config names none (the
	// CLI's --star default).
	DefaultStar = "default"
)

// ExpressBuckets are Express's three buckets (K=3, W=2), in order.
func ExpressBuckets() []string { return []string{"express-a", "express-b", "express-c"} }

// Dir opens the embedded default in dir, creating what is absent: a star
// whose metastore is a bbolt file and whose buckets are local directories,
// all inside dir:
//
//	dir/meta.db                              the metastore (metastore/bbolt)
//	dir/standard/                            Standard's bucket (K=1, W=1)
//	dir/express-a/, express-b/, express-c/   Express's three "zones" (K=3, W=2)
//
// The Express zones share one disk here, so they show the protocol, not its
// fault tolerance. Run it again on the same dir and every stream continues
// where the last process left it (after a clean Close straight from the
// seal; after a crash by a takeover that keeps every acked record).
//
// cfg is a Config as for loglet.Open (loglet.DefaultConfig, or the zero
// Config) with Meta and both classes' Stores and BucketNames left unset: Dir
// supplies them and refuses a cfg that sets them. cfg.Star defaults to
// DefaultStar. Every other field keeps its meaning: settlement, for one,
// is on unless cfg.SettleInterval is negative, so the express-* directories
// hold only the records of the last settle lag.
//
// The returned Star owns what Dir opened: the bbolt file is in its
// Config.Closers, so its Close closes the file after the chains have
// closed. bbolt allows one process at a time: a dir another process (or
// another Dir in this one) holds fails within bbolt.DefaultLockTimeout with
// an error matching bbolt.ErrInUse. A failed Dir leaves nothing open.
func Dir(ctx context.Context, dir string, cfg loglet.Config) (*loglet.Star, error) {
	if ctx == nil {
		return nil, loglet.ErrNilContext
	}
	if err := refuseBackends("Dir", cfg); err != nil {
		return nil, err
	}
	if cfg.Star == "" {
		cfg.Star = DefaultStar
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("open: Dir: %w", err)
	}
	meta, err := bbolt.Open(filepath.Join(dir, MetastoreFile), nil)
	if errors.Is(err, bbolt.ErrInUse) {
		return nil, fmt.Errorf("open: Dir %s: %w (bbolt allows one process at a time: is another process, or the flightlog CLI, using this directory?)", dir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open: Dir %s: %w", dir, err)
	}
	fail := func(err error) (*loglet.Star, error) {
		meta.Close()
		return nil, fmt.Errorf("open: Dir %s: %w", dir, err)
	}
	bucket := func(name string) (objstore.Store, error) { return file.Open(filepath.Join(dir, name)) }
	std, err := bucket(StandardBucket)
	if err != nil {
		return fail(err)
	}
	cfg.Standard.Stores, cfg.Standard.BucketNames = []objstore.Store{std}, []string{StandardBucket}
	for _, name := range ExpressBuckets() {
		b, err := bucket(name)
		if err != nil {
			return fail(err)
		}
		cfg.Express.Stores = append(cfg.Express.Stores, b)
		cfg.Express.BucketNames = append(cfg.Express.BucketNames, name)
	}
	cfg.Meta = meta
	cfg.Closers = append(append([]io.Closer(nil), cfg.Closers...), meta)
	s, err := loglet.Open(ctx, cfg)
	if err != nil {
		return fail(err)
	}
	return s, nil
}
