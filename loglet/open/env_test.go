package open

import (
	"context"
	"flag"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flightlog/flightlog/loglet"
)

func mapEnv(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// Env reads the CLI's variables: FLIGHTLOG_DIR places the embedded
// layout, FLIGHTLOG_STAR overrides cfg.Star, and a variable not set
// leaves its cfg field alone.
func TestEnvOpensTheEmbeddedLayout(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := loglet.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Star = "from-cfg"
	s, err := envOpen(ctx, cfg, mapEnv(map[string]string{"FLIGHTLOG_DIR": dir, "FLIGHTLOG_STAR": "from-env", "FLIGHTLOG_LOCK_TIMEOUT": "2s"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Stats().Star; got != "from-env" {
		t.Errorf("star %q, want from-env ($FLIGHTLOG_STAR wins over cfg.Star)", got)
	}
	if got := s.Stats().Express.BucketNames; !slices.Equal(got, ExpressBuckets()) {
		t.Errorf("express buckets %v, want Dir's %v", got, ExpressBuckets())
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// What Env wrote is Dir's layout.
	cfg.Star = "from-env"
	s, err = Dir(ctx, dir, cfg)
	if err != nil {
		t.Fatalf("Dir over Env's data: %v", err)
	}
	s.Close(ctx)

	s, err = envOpen(ctx, cfg, mapEnv(map[string]string{"FLIGHTLOG_DIR": dir}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	if got := s.Stats().Star; got != "from-env" {
		t.Errorf("star %q with $FLIGHTLOG_STAR unset, want cfg.Star from-env", got)
	}
}

// A value that does not parse is an error naming the variable; so is a
// bad etcd endpoint. Nothing is created.
func TestEnvRefusesBadValues(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"FLIGHTLOG_DIR": dir, "FLIGHTLOG_FLUSH_DEADLINE": "soon"}, "$FLIGHTLOG_FLUSH_DEADLINE"},
		{map[string]string{"FLIGHTLOG_DIR": dir, "FLIGHTLOG_S3_PATH_STYLE": "maybe"}, "$FLIGHTLOG_S3_PATH_STYLE"},
		{map[string]string{"FLIGHTLOG_DIR": dir, "FLIGHTLOG_ETCD_ENDPOINTS": "unix://h"}, `etcd endpoint "unix://h"`},
		{map[string]string{"FLIGHTLOG_DIR": dir, "FLIGHTLOG_ETCD_ENDPOINTS": "https://h:2379,http://g:2379"}, "mix http and https"},
	} {
		_, err := envOpen(ctx, loglet.Config{}, mapEnv(tc.env))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("env %v: %v, want an error naming %s", tc.env, err, tc.want)
		}
	}
}

// The Spec the settings describe, for S3 and etcd (what the CLI and Env
// open), so that the flags and the URLs mean the same.
func TestSettingsSpec(t *testing.T) {
	var s Settings
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	s.Register(fs)
	err := s.FromEnv(fs, mapEnv(map[string]string{
		"FLIGHTLOG_DIR":                  "/data",
		"FLIGHTLOG_S3_ENDPOINT":          "http://127.0.0.1:7070",
		"FLIGHTLOG_S3_BUCKET":            "std",
		"FLIGHTLOG_S3_EXPRESS_BUCKETS":   "a,b,c",
		"FLIGHTLOG_S3_ACCESS_KEY":        "ak",
		"FLIGHTLOG_ETCD_ENDPOINTS":       "http://h1:2379,h2:2379",
		"FLIGHTLOG_ETCD_PREFIX":          "prod/",
		"FLIGHTLOG_ETCD_MAX_TXN_OPS":     "64",
		"FLIGHTLOG_S3_MEMORY_BUFFER_MIB": "7",
	}))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := s.Spec()
	if err != nil {
		t.Fatal(err)
	}
	s3 := func(b string) string { return "s3://" + b + "?endpoint=http%3A%2F%2F127.0.0.1%3A7070&path_style=true" }
	want := Spec{
		Meta:        "etcd://h1:2379,h2:2379/prod/?max_request_bytes=1572864&max_txn_ops=64",
		Standard:    []string{s3("std")},
		Express:     []string{s3("a"), s3("b"), s3("c")},
		S3AccessKey: "ak",
	}
	if spec.Meta != want.Meta || !slices.Equal(spec.Standard, want.Standard) || !slices.Equal(spec.Express, want.Express) || spec.S3AccessKey != "ak" {
		t.Errorf("spec\n got %+v\nwant %+v", spec, want)
	}
	s.Etcd = "https://h1:2379,https://h2:2379"
	if spec, err := s.Spec(); err != nil || !strings.HasPrefix(spec.Meta, "etcd://h1:2379,h2:2379/prod/?") || !strings.Contains(spec.Meta, "tls=true") {
		t.Errorf("https endpoints: %q, %v; want tls=true", spec.Meta, err)
	}
	var cfg loglet.Config
	s.Tune(&cfg)
	if cfg.Standard.MemoryBufferMiB != 7 || cfg.Express.FlushDeadline != loglet.DefaultExpressFlushDeadline || cfg.Star != DefaultStar {
		t.Errorf("tuned %+v", cfg)
	}
}
