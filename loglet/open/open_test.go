package open_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/loglet/open"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/metastore/bbolt"
	"github.com/flightlog/flightlog/objstore"
	"github.com/flightlog/flightlog/objstore/file"
)

func quietDir() loglet.Config {
	c := loglet.DefaultConfig()
	c.Logger = slog.New(slog.DiscardHandler)
	return c
}

// Dir writes the layout the CLI reads, its Close releases the bbolt
// file, and the next Dir continues both classes' streams.
func TestDirReopensAndReleases(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	appendOne := func(s *loglet.Star, stream string, class loglet.Class) loglet.Ack {
		t.Helper()
		if _, err := s.CreateStream(ctx, stream, loglet.StreamOptions{Class: class}); err != nil && !errors.Is(err, loglet.ErrStreamExists) {
			t.Fatal(err)
		}
		ack, err := s.Append(ctx, stream, loglet.Batch{Records: []loglet.Record{{Body: []byte(stream)}}})
		if err != nil {
			t.Fatalf("append %s: %v", stream, err)
		}
		return ack
	}
	s, err := open.Dir(ctx, dir, quietDir())
	if err != nil {
		t.Fatal(err)
	}
	appendOne(s, "a", loglet.Standard)
	appendOne(s, "b", loglet.Express)

	// While it is open, the directory is this process's.
	if _, err := open.Dir(ctx, dir, quietDir()); !errors.Is(err, bbolt.ErrInUse) {
		t.Errorf("second Dir of a held dir: %v, want bbolt.ErrInUse", err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	// The layout, by name: the names are recorded in the epoch records, so
	// they are part of the data's format.
	for _, name := range []string{"meta.db", "standard", "express-a", "express-b", "express-c"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("layout: %v", err)
		}
	}
	// Close released the file lock.
	m, err := bbolt.Open(filepath.Join(dir, "meta.db"), &bbolt.Options{LockTimeout: 10 * time.Millisecond})
	if err != nil {
		t.Fatalf("bbolt file still held after Close: %v", err)
	}
	m.Close()

	s, err = open.Dir(ctx, dir, quietDir())
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close(ctx)
	if ack := appendOne(s, "a", loglet.Standard); ack.Start != 1 {
		t.Errorf("standard stream continued at %d, want 1", ack.Start)
	}
	if ack := appendOne(s, "b", loglet.Express); ack.Start != 1 {
		t.Errorf("express stream continued at %d, want 1", ack.Start)
	}
}

// Dir supplies the backends; a Config that sets any is refused before
// anything is created. A failed Open inside Dir leaves the file free.
func TestDirRefusals(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	cfg := quietDir()
	cfg.Meta = metastore.NewMem()
	cfg.Express.BucketNames = []string{"x", "y", "z"}
	_, err := open.Dir(ctx, dir, cfg)
	if err == nil || !strings.Contains(err.Error(), "Meta") || !strings.Contains(err.Error(), "Express.BucketNames") {
		t.Errorf("Dir with Meta and Express.BucketNames set: %v, want a refusal naming both", err)
	}
	if _, serr := os.Stat(dir); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("refused Dir created %s (%v)", dir, serr)
	}

	cfg = quietDir()
	cfg.Star = "Not A Star Name"
	if _, err := open.Dir(ctx, dir, cfg); err == nil {
		t.Fatal("Dir with an invalid star name succeeded")
	}
	m, err := bbolt.Open(filepath.Join(dir, "meta.db"), &bbolt.Options{LockTimeout: 10 * time.Millisecond})
	if err != nil {
		t.Fatalf("a failed Dir left the bbolt file held: %v", err)
	}
	m.Close()
}

// BucketNames are part of a chain's identity. A chain written by Dir
// opens under the same names given by hand (as the CLI's --dir gives them),
// and is refused, naming both sets, under any other names, including the
// positional defaults; the refusal changes nothing.
func TestBucketNamesAreChainIdentity(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := open.Dir(ctx, dir, quietDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateStream(ctx, "a", loglet.StreamOptions{Class: loglet.Standard}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "a", loglet.Batch{Records: []loglet.Record{{Body: []byte("x")}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}

	meta, err := bbolt.Open(filepath.Join(dir, "meta.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer meta.Close()
	bucket, err := file.Open(filepath.Join(dir, "standard"))
	if err != nil {
		t.Fatal(err)
	}
	openAs := func(names []string) (*loglet.Star, error) {
		return loglet.Open(ctx, loglet.Config{Star: "default", Meta: meta, Logger: slog.New(slog.DiscardHandler),
			Standard: loglet.ClassConfig{Stores: []objstore.Store{bucket}, BucketNames: names}})
	}
	for _, names := range [][]string{nil, {"bucket-0"}, {"Standard"}} {
		_, err := openAs(names)
		shown := names
		if shown == nil {
			shown = []string{"bucket-0"} // the positional default
		}
		if err == nil || !strings.Contains(err.Error(), "[standard]") || !strings.Contains(err.Error(), "["+strings.Join(shown, " ")+"]") {
			t.Errorf("loglet.Open with BucketNames %q over a chain recorded as [standard]: %v, want a refusal naming [standard] and %v", names, err, shown)
		}
	}
	s, err = openAs([]string{"standard"})
	if err != nil {
		t.Fatalf("loglet.Open under the recorded names after refusals: %v", err)
	}
	defer s.Close(ctx)
	res, err := s.Read(ctx, "a", loglet.ReadQuery{Start: loglet.AtSeq(0)})
	if err != nil || len(res.Records) != 1 || string(res.Records[0].Body) != "x" {
		t.Errorf("read after reopening under the recorded names: %v, %v", res.Records, err)
	}
	if st := s.Stats(); !slices.Equal(st.Standard.BucketNames, []string{"standard"}) {
		t.Errorf("Stats names %v, want [standard]", st.Standard.BucketNames)
	}
}
