package open_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/loglet/open"
	"github.com/flightlog/flightlog/metastore/bbolt"
	"github.com/flightlog/flightlog/objstore"
)

// appendAndRead appends one record to a new (or existing) stream of the
// class and reads it back; it returns the record's seq.
func appendAndRead(t *testing.T, s *loglet.Star, stream string, class loglet.Class) uint64 {
	t.Helper()
	ctx := context.Background()
	if _, err := s.CreateStream(ctx, stream, loglet.StreamOptions{Class: class}); err != nil && !errors.Is(err, loglet.ErrStreamExists) {
		t.Fatalf("create %s: %v", stream, err)
	}
	ack, err := s.Append(ctx, stream, loglet.Batch{Records: []loglet.Record{{Body: []byte(stream)}}})
	if err != nil {
		t.Fatalf("append %s: %v", stream, err)
	}
	res, err := s.Read(ctx, stream, loglet.ReadQuery{Start: loglet.AtSeq(ack.Start)})
	if err != nil || len(res.Records) != 1 || string(res.Records[0].Body) != stream {
		t.Fatalf("read %s at %d: %v, %v", stream, ack.Start, res.Records, err)
	}
	return ack.Start
}

func memSpec() open.Spec {
	return open.Spec{Meta: "mem://", Standard: []string{"mem://std"}, Express: []string{"mem://a", "mem://b", "mem://c"}}
}

// mem:// for both stores: a star in memory, both classes working, and the
// bucket names the URLs' hosts.
func TestURLMem(t *testing.T) {
	ctx := context.Background()
	s, err := open.URL(ctx, quietDir(), memSpec())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	appendAndRead(t, s, "orders", loglet.Standard)
	appendAndRead(t, s, "clicks", loglet.Express)
	st := s.Stats()
	if st.Star != open.DefaultStar || strings.Join(st.Standard.BucketNames, ",") != "std" || strings.Join(st.Express.BucketNames, ",") != "a,b,c" {
		t.Errorf("star %q, buckets %v %v; want %q, [std] [a b c]", st.Star, st.Standard.BucketNames, st.Express.BucketNames, open.DefaultStar)
	}
}

// bbolt:// and file:// open what Dir wrote, under the same bucket names
// (the last path element), and Dir opens what they wrote: one layout.
func TestURLFileOpensDir(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	spec := open.Spec{
		Meta:     "bbolt://" + filepath.ToSlash(filepath.Join(dir, "meta.db")) + "?lock_timeout=2s",
		Standard: []string{"file://" + filepath.ToSlash(filepath.Join(dir, "standard"))},
	}
	for _, b := range open.ExpressBuckets() {
		spec.Express = append(spec.Express, "file://"+filepath.ToSlash(filepath.Join(dir, b)))
	}
	s, err := open.Dir(ctx, dir, quietDir())
	if err != nil {
		t.Fatal(err)
	}
	appendAndRead(t, s, "a", loglet.Standard)
	appendAndRead(t, s, "b", loglet.Express)
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s, err = open.URL(ctx, quietDir(), spec)
	if err != nil {
		t.Fatalf("URL over Dir's layout: %v", err)
	}
	if got := appendAndRead(t, s, "a", loglet.Standard); got != 1 {
		t.Errorf("standard stream continued at %d, want 1", got)
	}
	if got := appendAndRead(t, s, "b", loglet.Express); got != 1 {
		t.Errorf("express stream continued at %d, want 1", got)
	}
	// The Star owns the bbolt file: its Close frees it for Dir.
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s, err = open.Dir(ctx, dir, quietDir())
	if err != nil {
		t.Fatalf("Dir after URL: %v", err)
	}
	defer s.Close(ctx)
	if got := appendAndRead(t, s, "a", loglet.Standard); got != 2 {
		t.Errorf("standard stream continued at %d, want 2", got)
	}
}

// A bad URL is refused with an error naming the field and the part of
// the URL at fault, before anything is opened.
func TestURLRefusesBadURLs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	meta := "bbolt://" + filepath.ToSlash(filepath.Join(dir, "meta.db"))
	for _, tc := range []struct {
		name string
		spec open.Spec
		want []string // substrings of the error
	}{
		{"no meta", open.Spec{Standard: []string{"mem://x"}}, []string{"Spec.Meta is empty"}},
		{"unknown meta scheme", open.Spec{Meta: "zk://h:2181"}, []string{"Meta", `unknown scheme "zk"`, "bbolt, etcd or mem"}},
		{"unknown bucket scheme", open.Spec{Meta: "mem://", Standard: []string{"gs://b"}}, []string{"Standard[0]", `unknown scheme "gs"`, "s3, file, mem", "contrib/gocloud"}},
		{"scheme not among the extra ones", open.Spec{Meta: "mem://", Standard: []string{"gs://b"}, Schemes: map[string]open.BucketOpener{"azblob": memOpener(nil)}}, []string{"Standard[0]", `unknown scheme "gs"`, "s3, file, mem, azblob"}},
		{"extra scheme overrides a built-in", open.Spec{Meta: "mem://", Standard: []string{"s3://b"}, Schemes: map[string]open.BucketOpener{"s3": memOpener(nil)}}, []string{`Spec.Schemes names "s3"`}},
		{"nil opener", open.Spec{Meta: "mem://", Standard: []string{"gs://b"}, Schemes: map[string]open.BucketOpener{"gs": nil}}, []string{`Spec.Schemes["gs"] is nil`}},
		{"opener fails", open.Spec{Meta: "mem://", Standard: []string{"gs://b"}, Schemes: map[string]open.BucketOpener{"gs": func(context.Context, string) (objstore.Store, string, error) {
			return nil, "", errors.New("no such bucket")
		}}}, []string{"Standard[0]", `"gs://b"`, "no such bucket"}},
		{"opener names no bucket", open.Spec{Meta: "mem://", Standard: []string{"gs://b"}, Schemes: map[string]open.BucketOpener{"gs": func(context.Context, string) (objstore.Store, string, error) {
			return objstore.NewMem(), "", nil
		}}}, []string{"Standard[0]", "no bucket name"}},
		{"no scheme", open.Spec{Meta: "mem://", Standard: []string{"/data/standard"}}, []string{"Standard[0]", "no scheme"}},
		{"s3 missing bucket", open.Spec{Meta: "mem://", Express: []string{"mem://a", "s3://?region=x"}}, []string{"Express[1]", "missing bucket name (the host part)"}},
		{"mem missing bucket", open.Spec{Meta: "mem://", Standard: []string{"mem://"}}, []string{"Standard[0]", "missing bucket name"}},
		{"s3 bad path_style", open.Spec{Meta: "mem://", Standard: []string{"s3://b?path_style=maybe"}}, []string{"Standard[0]", `path_style="maybe"`, "true or false"}},
		{"s3 bad endpoint", open.Spec{Meta: "mem://", Standard: []string{"s3://b?endpoint=127.0.0.1"}}, []string{"Standard[0]", `endpoint="127.0.0.1"`}},
		{"s3 key prefix", open.Spec{Meta: "mem://", Standard: []string{"s3://b/logs"}}, []string{"Standard[0]", `path "/logs"`}},
		{"s3 unknown key", open.Spec{Meta: "mem://", Standard: []string{"s3://b?regoin=x"}}, []string{"Standard[0]", `unknown query key "regoin"`}},
		{"s3 repeated key", open.Spec{Meta: "mem://", Standard: []string{"s3://b?region=x&region=y"}}, []string{"query region given 2 times"}},
		{"credentials in URL", open.Spec{Meta: "mem://", Standard: []string{"s3://ak:secret@b"}}, []string{"Standard[0]", "credentials in the URL"}},
		{"relative file", open.Spec{Meta: "mem://", Standard: []string{"file://data/standard"}}, []string{"Standard[0]", "must be absolute", `"data" in the host part`}},
		{"opaque file", open.Spec{Meta: "mem://", Standard: []string{"file:data/standard"}}, []string{"Standard[0]", "must be absolute"}},
		{"relative bbolt", open.Spec{Meta: "bbolt://meta.db"}, []string{"Meta", "must be absolute"}},
		{"bbolt bad lock_timeout", open.Spec{Meta: meta + "?lock_timeout=soon"}, []string{"Meta", `lock_timeout="soon"`, "duration"}},
		{"etcd no endpoints", open.Spec{Meta: "etcd:///prefix"}, []string{"Meta", "no endpoints (the host part)"}},
		{"etcd empty endpoint", open.Spec{Meta: "etcd://a:1,,b:2/p"}, []string{"Meta", `endpoint ""`}},
		{"etcd bad max_txn_ops", open.Spec{Meta: "etcd://a:1/p?max_txn_ops=-1"}, []string{"Meta", `max_txn_ops="-1"`, "positive integer"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := open.URL(ctx, quietDir(), tc.spec)
			if err == nil {
				t.Fatal("opened")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error %q repeats the URL's password", err)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "meta.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused URL created the bbolt file (%v)", err)
	}
}

// A failed open leaves nothing open: the bbolt file is free again after a
// bucket that cannot be opened, and after loglet.Open refuses the Config.
func TestURLFailedOpenClosesMeta(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	metaPath := filepath.Join(dir, "meta.db")
	notADir := filepath.Join(dir, "file")
	if err := os.WriteFile(notADir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	badStar := quietDir()
	badStar.Star = "Not A Star Name"
	for _, tc := range []struct {
		name string
		cfg  loglet.Config
		spec open.Spec
	}{
		{"bucket fails", quietDir(), open.Spec{Meta: "bbolt://" + metaPath, Standard: []string{"file://" + notADir + "/standard"}}},
		{"loglet.Open fails", badStar, open.Spec{Meta: "bbolt://" + metaPath, Standard: []string{"mem://std"}}},
	} {
		if _, err := open.URL(ctx, tc.cfg, tc.spec); err == nil {
			t.Fatalf("%s: opened", tc.name)
		}
		m, err := bbolt.Open(metaPath, &bbolt.Options{LockTimeout: 10 * time.Millisecond})
		if err != nil {
			t.Fatalf("%s: the bbolt file is still held: %v", tc.name, err)
		}
		m.Close()
	}
	cfg := quietDir()
	cfg.Standard.BucketNames = []string{"x"}
	if _, err := open.URL(ctx, cfg, memSpec()); err == nil || !strings.Contains(err.Error(), "Standard.BucketNames") {
		t.Errorf("URL with Standard.BucketNames set: %v, want a refusal naming it", err)
	}
}

// servers returns what scripts/test.sh exports, or skips (fails under
// FLIGHTLOG_REQUIRE_SERVERS=1).
func servers(t *testing.T, vars ...string) []string {
	t.Helper()
	var vals []string
	for _, v := range vars {
		val := os.Getenv(v)
		if val == "" {
			msg := v + " is not set: run ./scripts/test.sh, which starts versitygw and etcd on loopback"
			if os.Getenv("FLIGHTLOG_REQUIRE_SERVERS") == "1" {
				t.Fatal(msg + " (FLIGHTLOG_REQUIRE_SERVERS=1: a missing server is a failure)")
			}
			t.Skip(msg)
		}
		vals = append(vals, val)
	}
	return vals
}

func randomID() string {
	var b [5]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// s3:// against the test script's versitygw, buckets created by the URL.
func TestURLS3(t *testing.T) {
	ep := servers(t, "FLIGHTLOG_S3_ENDPOINT")[0]
	ctx := context.Background()
	id := randomID()
	bucket := func(suffix string) string {
		return "s3://flightlog-open-" + id + "-" + suffix + "?region=us-east-1&create=true&endpoint=" + ep
	}
	spec := open.Spec{
		Meta:        "mem://",
		Standard:    []string{bucket("std")},
		Express:     []string{bucket("a"), bucket("b"), bucket("c")},
		S3AccessKey: os.Getenv("FLIGHTLOG_S3_ACCESS_KEY"), S3SecretKey: os.Getenv("FLIGHTLOG_S3_SECRET_KEY"),
	}
	s, err := open.URL(ctx, quietDir(), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	appendAndRead(t, s, "orders", loglet.Standard)
	appendAndRead(t, s, "clicks", loglet.Express)
	if got := s.Stats().Standard.BucketNames; len(got) != 1 || got[0] != "flightlog-open-"+id+"-std" {
		t.Errorf("bucket names %v, want the bucket", got)
	}
}

// etcd:// against the test script's etcd, with a key prefix of its own;
// a second open over the same prefix continues the stream.
func TestURLEtcd(t *testing.T) {
	eps := servers(t, "FLIGHTLOG_ETCD_ENDPOINTS")[0]
	ctx := context.Background()
	var hosts []string
	for _, ep := range strings.Split(eps, ",") {
		hosts = append(hosts, strings.TrimPrefix(ep, "http://"))
	}
	dir := t.TempDir()
	spec := open.Spec{
		Meta:     "etcd://" + strings.Join(hosts, ",") + "/flightlog-test/open/" + randomID() + "/?max_txn_ops=128",
		Standard: []string{"file://" + filepath.ToSlash(filepath.Join(dir, "standard"))},
	}
	for run := uint64(0); run < 2; run++ {
		s, err := open.URL(ctx, quietDir(), spec)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendAndRead(t, s, "orders", loglet.Standard); got != run {
			t.Errorf("run %d appended at %d, want %d", run, got, run)
		}
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// closingMem is an in-memory bucket that counts its Closes.
type closingMem struct {
	objstore.Store
	closes *int
}

func (c closingMem) Close() error { *c.closes++; return nil }

// memOpener opens any URL as a new in-memory bucket named by its host,
// recording the URLs it was given and counting the buckets' Closes.
func memOpener(got *[]string) open.BucketOpener {
	closes := new(int)
	return func(_ context.Context, raw string) (objstore.Store, string, error) {
		if got != nil {
			*got = append(*got, raw)
		}
		u, err := url.Parse(raw)
		if err != nil {
			return nil, "", err
		}
		return closingMem{objstore.NewMem(), closes}, u.Host, nil
	}
}

// TestURLExtraSchemes: a bucket scheme given in Spec.Schemes (as
// contrib/gocloud's gs and azblob) is opened by its opener with the URL as
// written, query included; the bucket's name is the opener's; a star runs
// on it; and the Star's Close closes the buckets that are io.Closers.
func TestURLExtraSchemes(t *testing.T) {
	ctx := context.Background()
	var got []string
	closes := 0
	spec := open.Spec{
		Meta:     "mem://",
		Standard: []string{"fake://std?opt=1"},
		Express:  []string{"fake://a", "fake://b", "fake://c"},
		Schemes: map[string]open.BucketOpener{"fake": func(ctx context.Context, raw string) (objstore.Store, string, error) {
			got = append(got, raw)
			u, err := url.Parse(raw)
			if err != nil {
				return nil, "", err
			}
			return closingMem{objstore.NewMem(), &closes}, "fake-" + u.Host, nil
		}},
	}
	b, err := spec.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"fake://std?opt=1", "fake://a", "fake://b", "fake://c"}; !slices.Equal(got, want) {
		t.Fatalf("opener given %q, want %q", got, want)
	}
	if want := []string{"fake-std"}; !slices.Equal(b.StandardNames, want) {
		t.Fatalf("standard names %q, want %q", b.StandardNames, want)
	}
	s, err := b.Star(ctx, quietDir())
	if err != nil {
		t.Fatal(err)
	}
	appendAndRead(t, s, "std", loglet.Standard)
	appendAndRead(t, s, "exp", loglet.Express)
	if closes != 0 {
		t.Fatalf("%d buckets closed while the star runs", closes)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if closes != 4 {
		t.Fatalf("the star's Close closed %d of 4 buckets", closes)
	}
}
