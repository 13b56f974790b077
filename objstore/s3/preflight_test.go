package s3_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
	"github.com/flightlog/flightlog/objstore/s3"
)

// TestPreflightAgainstS3: loglet.Open against the real S3-compatible
// server fails within seconds, naming the bucket, for each misconfiguration
// that used to cost a commit deadline per append and a recovery that
// fenced for ever: a bucket that does not exist (a typo), names the server
// rejects (Express buckets "ea,eb,ec", under S3's 3-character minimum), and
// wrong credentials (a wrong secret, an unknown access key). With the
// configuration right, Open succeeds and leaves no probe object behind.
func TestPreflightAgainstS3(t *testing.T) {
	base := server(t)
	good := freshBucket(t, base)
	var b [4]byte
	rand.Read(b[:])
	missing := "flightlog-missing-" + hex.EncodeToString(b[:])

	open := func(t *testing.T, std []s3.Config, express []s3.Config, tweak ...func(*loglet.Config)) (*loglet.Star, error, time.Duration) {
		t.Helper()
		cfg := loglet.Config{Star: "preflight", Meta: metastore.NewMem(), Logger: slog.New(slog.DiscardHandler)}
		for _, f := range tweak {
			f(&cfg)
		}
		for _, c := range std {
			cfg.Standard.Stores = append(cfg.Standard.Stores, newStore(t, c))
			cfg.Standard.BucketNames = append(cfg.Standard.BucketNames, c.Bucket)
		}
		for _, c := range express {
			cfg.Express.Stores = append(cfg.Express.Stores, newStore(t, c))
			cfg.Express.BucketNames = append(cfg.Express.BucketNames, c.Bucket)
		}
		// The bound only keeps a regression from hanging the test.
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		start := time.Now()
		s, err := loglet.Open(ctx, cfg)
		return s, err, time.Since(start)
	}
	with := func(c s3.Config, f func(*s3.Config)) s3.Config { f(&c); return c }

	t.Run("right", func(t *testing.T) {
		s, err, took := open(t, []s3.Config{good}, nil)
		if err != nil {
			t.Fatalf("Open = %v after %v", err, took)
		}
		if err := s.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		keys, err := newStore(t, good).List(context.Background(), "preflight/", "", 0)
		if err != nil || len(keys) != 0 {
			t.Fatalf("probe objects left behind: %v (%v)", keys, err)
		}
		t.Logf("Open passed the pre-flight check in %v", took.Round(time.Millisecond))
	})
	for _, tc := range []struct {
		name    string
		std     []s3.Config
		express []s3.Config
		names   []string // the buckets the error must name
		code    string   // the server's error code it must carry
	}{
		{"missing bucket", []s3.Config{with(base, func(c *s3.Config) { c.Bucket = missing })}, nil, []string{missing}, "NoSuchBucket"},
		{"rejected names", []s3.Config{good}, []s3.Config{
			with(base, func(c *s3.Config) { c.Bucket = "ea" }), with(base, func(c *s3.Config) { c.Bucket = "eb" }), with(base, func(c *s3.Config) { c.Bucket = "ec" }),
		}, []string{"ea", "eb", "ec"}, "InvalidBucketName"},
		{"wrong secret", []s3.Config{with(good, func(c *s3.Config) { c.SecretKey += "-wrong" })}, nil, []string{good.Bucket}, "SignatureDoesNotMatch"},
		{"unknown access key", []s3.Config{with(good, func(c *s3.Config) { c.AccessKey = "nobody" })}, nil, []string{good.Bucket}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err, took := open(t, tc.std, tc.express)
			if s != nil {
				s.Close(context.Background())
			}
			var pe *loglet.PreflightError
			if !errors.As(err, &pe) || !errors.Is(err, objstore.ErrPermanent) {
				t.Fatalf("Open = %v after %v; want a *loglet.PreflightError wrapping objstore.ErrPermanent", err, took)
			}
			for _, n := range tc.names {
				if !strings.Contains(err.Error(), fmt.Sprintf("%q", n)) {
					t.Errorf("Open's error does not name bucket %q: %v", n, err)
				}
			}
			if tc.code != "" && !strings.Contains(err.Error(), tc.code) {
				t.Errorf("Open's error does not carry the server's %s: %v", tc.code, err)
			}
			if took > loglet.DefaultPreflightTimeout {
				t.Errorf("Open took %v to fail, past the pre-flight bound %v", took, loglet.DefaultPreflightTimeout)
			}
			t.Logf("Open failed after %v: %v", took.Round(time.Millisecond), err)
		})
	}

	// Without the check (PreflightTimeout < 0) Open succeeds, as the first
	// mint touches no bucket; then the write path itself must stop at the
	// refusal: the append fails at once naming the bucket, instead of after
	// the 10s commit deadline and a recovery that fenced for ever.
	t.Run("write path without the check", func(t *testing.T) {
		s, err, _ := open(t, []s3.Config{with(base, func(c *s3.Config) { c.Bucket = missing })}, nil,
			func(c *loglet.Config) { c.PreflightTimeout = -1 })
		if err != nil {
			t.Fatalf("Open without the check = %v", err)
		}
		defer s.Close(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if _, err := s.CreateStream(ctx, "x", loglet.StreamOptions{Class: loglet.Standard}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = s.Append(ctx, "x", loglet.Batch{Records: []loglet.Record{{Body: []byte("r")}}})
		took := time.Since(start)
		if err == nil || !errors.Is(err, loglet.ErrOutcomeUnknown) || !strings.Contains(err.Error(), "bucket "+missing+" refuses for good") || !strings.Contains(err.Error(), "NoSuchBucket") {
			t.Fatalf("Append to a missing bucket = %v after %v; want outcome unknown naming the bucket and NoSuchBucket", err, took)
		}
		if took > loglet.DefaultStandardCommitDeadline/2 {
			t.Fatalf("Append took %v to fail; the refusal should end it long before the %v commit deadline", took, loglet.DefaultStandardCommitDeadline)
		}
		t.Logf("Append failed after %v: %v", took.Round(time.Millisecond), err)
	})
}
