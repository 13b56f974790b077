package loglet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/flightlog/flightlog/metastore/bbolt"
	"github.com/flightlog/flightlog/objstore"
	"github.com/flightlog/flightlog/objstore/file"
)

// The embedded layout inside OpenDir's directory. The CLI's --dir uses the
// same names, so `flightlog walk --dir <dir>` (and read, tail, append, fsck)
// open what OpenDir wrote. The bucket names are recorded in each chain's
// epoch record (see ClassConfig.BucketNames): they must never change.
const (
	dirMetastoreFile  = "meta.db"
	dirStandardBucket = "standard"
	dirDefaultStar    = "default"
)

var dirExpressBuckets = []string{"express-a", "express-b", "express-c"}

// OpenDir opens the embedded default in dir, creating what is absent: a star
// whose metastore is a bbolt file and whose buckets are local directories,
// all inside dir, with no server to run:
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
// cfg is a Config as for Open (DefaultConfig, or the zero Config) with Meta
// and both classes' Stores and BucketNames left unset: OpenDir supplies
// them and refuses a cfg that sets them. cfg.Star defaults to "default", the
// CLI's --star default. Every other field keeps its meaning: settlement,
// for one, is on unless cfg.SettleInterval is negative, so the express-*
// directories hold only the records of the last settle lag.
//
// The returned Star owns what OpenDir opened: its Close closes the bbolt
// file after the chains have closed. bbolt allows one process at a time: a
// dir another process (or another OpenDir in this one) holds fails within
// bbolt.DefaultLockTimeout with an error matching bbolt.ErrInUse. A failed
// OpenDir leaves nothing open.
func OpenDir(ctx context.Context, dir string, cfg Config) (*Star, error) {
	if ctx == nil {
		return nil, ErrNilContext
	}
	var set []string
	if cfg.Meta != nil {
		set = append(set, "Meta")
	}
	for _, c := range []struct {
		name string
		cc   *ClassConfig
	}{{"Standard", &cfg.Standard}, {"Express", &cfg.Express}} {
		if len(c.cc.Stores) > 0 {
			set = append(set, c.name+".Stores")
		}
		if len(c.cc.BucketNames) > 0 {
			set = append(set, c.name+".BucketNames")
		}
	}
	if len(set) > 0 {
		return nil, fmt.Errorf("loglet: OpenDir %s: Config sets %v, which OpenDir supplies (use Open for backends of your own)", dir, set)
	}
	if cfg.Star == "" {
		cfg.Star = dirDefaultStar
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("loglet: OpenDir: %w", err)
	}
	metaPath := filepath.Join(dir, dirMetastoreFile)
	meta, err := bbolt.Open(metaPath, nil)
	if errors.Is(err, bbolt.ErrInUse) {
		return nil, fmt.Errorf("loglet: OpenDir %s: %w (bbolt allows one process at a time: is another process, or the flightlog CLI, using this directory?)", dir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("loglet: OpenDir %s: %w", dir, err)
	}
	bucket := func(name string) (objstore.Store, error) { return file.Open(filepath.Join(dir, name)) }
	std, err := bucket(dirStandardBucket)
	if err != nil {
		meta.Close()
		return nil, fmt.Errorf("loglet: OpenDir %s: %w", dir, err)
	}
	cfg.Standard.Stores, cfg.Standard.BucketNames = []objstore.Store{std}, []string{dirStandardBucket}
	for _, name := range dirExpressBuckets {
		b, err := bucket(name)
		if err != nil {
			meta.Close()
			return nil, fmt.Errorf("loglet: OpenDir %s: %w", dir, err)
		}
		cfg.Express.Stores = append(cfg.Express.Stores, b)
		cfg.Express.BucketNames = append(cfg.Express.BucketNames, name)
	}
	cfg.Meta = meta
	s, err := Open(ctx, cfg)
	if err != nil {
		meta.Close()
		return nil, fmt.Errorf("loglet: OpenDir %s: %w", dir, err)
	}
	s.release = append(s.release, meta.Close)
	return s, nil
}
