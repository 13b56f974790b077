package gocloud_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gocloud.dev/blob/memblob"

	"github.com/flightlog/flightlog/contrib/gocloud"
	"github.com/flightlog/flightlog/objstore"
)

// checkMissingBucket: over a bucket that does not exist, no call may read
// as a missing key or an occupied one: each is objstore.ErrPermanent.
func checkMissingBucket(t *testing.T, s objstore.Store) {
	t.Helper()
	ctx := context.Background()
	check := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, objstore.ErrPermanent) || errors.Is(err, objstore.ErrNotFound) || errors.Is(err, objstore.ErrExists) {
			t.Errorf("%s in a missing bucket = %v, want ErrPermanent (and neither ErrNotFound nor ErrExists)", op, err)
		}
	}
	_, err := s.Get(ctx, "chains/s/std/1/0", 0, -1)
	check("Get", err)
	_, err = s.Get(ctx, "chains/s/std/1/0", 5, 10)
	check("ranged Get", err)
	check("PutIfAbsent", s.PutIfAbsent(ctx, "chains/s/std/1/0", []byte("x")))
	check("Delete", s.Delete(ctx, "chains/s/std/1/0"))
	_, err = s.List(ctx, "", "", 0)
	check("List", err)
}

func TestMissingBucketGCS(t *testing.T) {
	checkMissingBucket(t, openGCS(t, gcsClient(t), randomName("flightlog-missing-")))
}

func TestMissingBucketAzure(t *testing.T) {
	checkMissingBucket(t, openAzure(t, randomName("flightlog-missing-")))
}

// TestOpenMissingBucketIsPermanent: Open checks that the bucket exists.
func TestOpenMissingBucketIsPermanent(t *testing.T) {
	ep := emulator(t, "FLIGHTLOG_GCS_ENDPOINT", "fake-gcs-server")
	t.Setenv("STORAGE_EMULATOR_HOST", strings.TrimPrefix(ep, "http://"))
	c := gcsClient(t)
	name := newGCSBucket(t, c)
	s, err := gocloud.Open(context.Background(), "gs://"+name)
	if err != nil {
		t.Fatalf("Open(gs://%s) = %v", name, err)
	}
	defer s.Close()
	if err := s.PutIfAbsent(context.Background(), "k", []byte("v")); err != nil {
		t.Fatalf("PutIfAbsent through Open = %v", err)
	}
	missing := randomName("flightlog-missing-")
	if _, err := gocloud.Open(context.Background(), "gs://"+missing); !errors.Is(err, objstore.ErrPermanent) {
		t.Fatalf("Open(gs://%s) of a missing bucket = %v, want ErrPermanent", missing, err)
	}
}

func TestOpenURLs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, u := range []string{"mem://", "file://" + filepath.ToSlash(dir) + "?metadata=skip"} {
		s, err := gocloud.Open(ctx, u)
		if err != nil {
			t.Fatalf("Open(%s) = %v", u, err)
		}
		if err := s.PutIfAbsent(ctx, "a/b", []byte("v")); err != nil {
			t.Fatalf("%s: PutIfAbsent = %v", u, err)
		}
		if err := s.PutIfAbsent(ctx, "a/b", []byte("w")); !errors.Is(err, objstore.ErrExists) {
			t.Fatalf("%s: second PutIfAbsent = %v, want ErrExists", u, err)
		}
		if strings.Contains(s.Name(), "?") {
			t.Errorf("%s: Name() = %q keeps the query", u, s.Name())
		}
		if err := s.Close(); err != nil {
			t.Fatalf("%s: Close = %v", u, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "a", "b")); err != nil {
		t.Fatalf("file:// did not write into the directory: %v", err)
	}
	for _, u := range []string{"", "nosuchscheme://x", "file:///" + filepath.ToSlash(filepath.Join(dir, "absent")), "://"} {
		if s, err := gocloud.Open(ctx, u); err == nil {
			s.Close()
			t.Errorf("Open(%q) = nil error, want one", u)
		} else if !strings.HasPrefix(err.Error(), "gocloud: ") {
			t.Errorf("Open(%q) = %v, want an error starting with the package name", u, err)
		}
	}
	if _, err := gocloud.Open(nil, "mem://"); err == nil { //nolint:staticcheck // a nil context is the point
		t.Error("Open(nil context) = nil error")
	}
}

// TestNilContext: every method refuses a nil context with an error, no
// panic.
func TestNilContext(t *testing.T) {
	s := gocloud.New(memblob.OpenBucket(nil))
	var nilCtx context.Context
	if err := s.PutIfAbsent(nilCtx, "k", nil); err == nil {
		t.Error("PutIfAbsent(nil ctx) = nil")
	}
	if _, err := s.Get(nilCtx, "k", 0, -1); err == nil {
		t.Error("Get(nil ctx) = nil error")
	}
	if err := s.Delete(nilCtx, "k"); err == nil {
		t.Error("Delete(nil ctx) = nil")
	}
	if _, err := s.List(nilCtx, "", "", 0); err == nil {
		t.Error("List(nil ctx) = nil error")
	}
}

// TestNewDoesNotOwnTheBucket: Close of a Store from New leaves the bucket
// open for its owner.
func TestNewDoesNotOwnTheBucket(t *testing.T) {
	b := memblob.OpenBucket(nil)
	defer b.Close()
	if err := gocloud.New(b).Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.WriteAll(context.Background(), "k", []byte("v"), nil); err != nil {
		t.Fatalf("bucket closed by a Store from New: %v", err)
	}
}
