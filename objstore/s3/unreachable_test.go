package s3_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
	"github.com/flightlog/flightlog/objstore/s3"
)

// refusedEndpoint returns the URL of a loopback port nothing listens on:
// a listener's port, the listener closed. A dial there is refused at once.
func refusedEndpoint(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return "http://" + addr
}

// TestOpenAgainstARefusedEndpointFailsFast: loglet.Open whose only
// Standard bucket is an S3 endpoint that refuses every connection fails
// in the pre-flight check, at once, with a *loglet.PreflightError naming
// the bucket and the refusal (objstore.ErrUnavailable, "connection
// refused"), and leads nothing. It used to log "opening anyway" and then
// either open a star that could never ack (a new star: the first mint
// touches no bucket) or retry the takeover's reads until its context ended
// (a star with a chain: for ever under context.Background()).
func TestOpenAgainstARefusedEndpointFailsFast(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before func(t *testing.T, meta metastore.Store) // the star's history
	}{
		{"new star", func(*testing.T, metastore.Store) {}},
		{"after a clean close", func(t *testing.T, meta metastore.Store) { writeHistory(t, meta, true) }},
		{"after a crash", func(t *testing.T, meta metastore.Store) { writeHistory(t, meta, false) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			meta := metastore.NewMem()
			tc.before(t, meta)
			epoch, _ := meta.Get(context.Background(), chain.EpochKey("refused", loglet.Standard))
			st, err := s3.New(context.Background(), s3.Config{
				Bucket: "flights", Endpoint: refusedEndpoint(t), UsePathStyle: true, AccessKey: "k", SecretKey: "s",
			})
			if err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			cfg := loglet.Config{Star: "refused", Meta: meta, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
				Standard: loglet.ClassConfig{Stores: []objstore.Store{st}, BucketNames: []string{"flights"}}}
			// The bound only keeps a regression from hanging the test (Open
			// used to retry until it ended); the check ends long before.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			s, err := loglet.Open(ctx, cfg)
			took := time.Since(start)
			if s != nil {
				s.Close(context.Background())
			}
			var pe *loglet.PreflightError
			if !errors.As(err, &pe) || !errors.Is(err, objstore.ErrUnavailable) || ctx.Err() != nil {
				t.Fatalf("Open against a refused endpoint = %v after %v; want a *loglet.PreflightError wrapping objstore.ErrUnavailable, before the test's bound", err, took.Round(time.Millisecond))
			}
			if pe.Class != loglet.Standard || pe.Bucket != 0 || pe.Name != "flights" || !strings.Contains(err.Error(), "connection refused") {
				t.Fatalf("Open's error = %v (%+v); want it to name standard bucket 0 (flights) and the refusal", err, pe)
			}
			if took > loglet.DefaultPreflightTimeout {
				t.Fatalf("Open took %v to fail, past the pre-flight bound %v", took, loglet.DefaultPreflightTimeout)
			}
			after, _ := meta.Get(context.Background(), chain.EpochKey("refused", loglet.Standard))
			if after.Version != epoch.Version {
				t.Fatalf("the epoch record changed (version %v -> %v): a failed pre-flight must lead nothing", epoch.Version, after.Version)
			}
			if strings.Contains(logs.String(), "opening anyway") {
				t.Fatalf("Open logged that it opens anyway:\n%s", logs.String())
			}
			t.Logf("Open failed after %v: %v", took.Round(time.Millisecond), err)
		})
	}
}

// writeHistory leaves the star "refused" with a Standard chain holding one
// record, over an in-memory bucket: closed cleanly, or crashed.
func writeHistory(t *testing.T, meta metastore.Store, clean bool) {
	t.Helper()
	ctx := context.Background()
	cfg := loglet.Config{Star: "refused", Meta: meta, Logger: slog.New(slog.DiscardHandler),
		Standard: loglet.ClassConfig{Stores: []objstore.Store{objstore.NewMem()}, BucketNames: []string{"flights"}}}
	s, err := loglet.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateStream(ctx, "x", loglet.StreamOptions{Class: loglet.Standard}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "x", loglet.Batch{Records: []loglet.Record{{Body: []byte("r")}}}); err != nil {
		t.Fatal(err)
	}
	if clean {
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Not closed (until the test ends): as far as the chain can tell, its
	// owner crashed, or runs on.
	t.Cleanup(func() { s.Close(context.Background()) })
}
