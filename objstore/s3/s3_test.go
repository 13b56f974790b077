package s3_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/flightlog/flightlog/objstore"
	"github.com/flightlog/flightlog/objstore/objstoretest"
	"github.com/flightlog/flightlog/objstore/s3"
)

// server returns the S3-compatible server the real-server tests use, from
// the environment, or skips (fails under FLIGHTLOG_REQUIRE_SERVERS=1).
func server(t testing.TB) s3.Config {
	t.Helper()
	ep := os.Getenv("FLIGHTLOG_S3_ENDPOINT")
	if ep == "" {
		msg := "FLIGHTLOG_S3_ENDPOINT is not set: run ./scripts/test.sh, which starts an S3-compatible server (versitygw) on loopback and sets it"
		if os.Getenv("FLIGHTLOG_REQUIRE_SERVERS") == "1" {
			t.Fatal(msg + " (FLIGHTLOG_REQUIRE_SERVERS=1: a missing server is a failure)")
		}
		t.Skip(msg)
	}
	return s3.Config{
		Endpoint:     ep,
		UsePathStyle: true,
		AccessKey:    os.Getenv("FLIGHTLOG_S3_ACCESS_KEY"),
		SecretKey:    os.Getenv("FLIGHTLOG_S3_SECRET_KEY"),
	}
}

// freshBucket creates a bucket with a random name and returns a config for
// it; the bucket is emptied and removed at cleanup.
func freshBucket(t testing.TB, cfg s3.Config) s3.Config {
	t.Helper()
	var b [6]byte
	rand.Read(b[:])
	cfg.Bucket = "flightlog-test-" + hex.EncodeToString(b[:])
	s := newStore(t, cfg)
	if err := s.CreateBucket(context.Background()); err != nil {
		t.Fatalf("CreateBucket(%s): %v", cfg.Bucket, err)
	}
	t.Cleanup(func() { removeBucket(t, s) })
	return cfg
}

func newStore(t testing.TB, cfg s3.Config) *s3.Store {
	t.Helper()
	s, err := s3.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("s3.New: %v", err)
	}
	return s
}

// removeBucket deletes every object and then the bucket, best effort.
func removeBucket(t testing.TB, s *s3.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keys, err := s.List(ctx, "", "", 0)
	if err != nil {
		t.Logf("cleanup: list %s: %v", s.Bucket(), err)
		return
	}
	for _, k := range keys {
		if err := s.Delete(ctx, k); err != nil {
			t.Logf("cleanup: delete %s/%s: %v", s.Bucket(), k, err)
		}
	}
	if _, err := s.Client().DeleteBucket(ctx, &awss3.DeleteBucketInput{Bucket: aws.String(s.Bucket())}); err != nil {
		t.Logf("cleanup: delete bucket %s: %v", s.Bucket(), err)
	}
}

// nestedKeySubtests are the kit's subtests that store a key that is also
// the "directory" of another key ("k" and "k/child"), or a key segment over
// 255 bytes. A server that maps keys to a POSIX tree (versitygw's posix
// backend) refuses those (409 ObjectParentIsFile, ENAMETOOLONG) where S3
// accepts them. flightlog's own keys never nest (slots and settled objects
// are leaves at a fixed depth), and TestListFlat and TestReopenFlat cover
// listing, paging and reopening with such keys.
var nestedKeySubtests = map[string]bool{
	"TestConformance/DeleteIsIdempotentAndKeyCanBeRecreated": true,
	"TestConformance/ListOrderPrefixStartAfterLimit":         true,
	"TestConformance/ListPaging":                             true,
	"TestConformance/OddButLegalKeys":                        true,
	"TestConformance/DurableAcrossReopen":                    true,
}

// posixServer reports whether the server declares a POSIX key layout
// (scripts/test.sh sets FLIGHTLOG_S3_POSIX_KEYS=1 for versitygw).
func posixServer() bool { return os.Getenv("FLIGHTLOG_S3_POSIX_KEYS") == "1" }

func harness(t testing.TB) objstoretest.Harness {
	base := server(t)
	return objstoretest.Harness{
		New: func(t testing.TB) objstore.Store {
			if posixServer() && nestedKeySubtests[t.Name()] {
				t.Skip("server stores keys as a POSIX tree (FLIGHTLOG_S3_POSIX_KEYS=1): it cannot hold a key that is also another key's directory; covered by TestListFlat/TestReopenFlat")
			}
			return newStore(t, freshBucket(t, base))
		},
		Reopen: func(t testing.TB, s objstore.Store) objstore.Store {
			// A new client, as a restarted process would make.
			cfg := base
			cfg.Bucket = s.(*s3.Store).Bucket()
			return newStore(t, cfg)
		},
	}
}

func TestConformance(t *testing.T) {
	objstoretest.Run(t, harness(t))
}

func BenchmarkConformance(b *testing.B) {
	objstoretest.RunBenchmarks(b, harness(b))
}

// TestRacingPutIfAbsentOneWinner: 8 clients (each its own connection pool)
// race PutIfAbsent on one key; the server's 412s must come back as
// ErrExists, exactly one call wins, and the object is the winner's.
func TestRacingPutIfAbsentOneWinner(t *testing.T) {
	cfg := freshBucket(t, server(t))
	const racers = 8
	for round := range 5 {
		key := fmt.Sprintf("chains/s/std/1/%020d", round)
		errs := make([]error, racers)
		var start, done sync.WaitGroup
		start.Add(1)
		for i := range racers {
			s := newStore(t, cfg)
			done.Go(func() {
				start.Wait()
				errs[i] = s.PutIfAbsent(context.Background(), key, bytes.Repeat([]byte{byte('a' + i)}, 100+i))
			})
		}
		start.Done()
		done.Wait()
		winner, exists := -1, 0
		for i, err := range errs {
			switch {
			case err == nil:
				if winner >= 0 {
					t.Fatalf("round %d: racers %d and %d both won", round, winner, i)
				}
				winner = i
			case errors.Is(err, objstore.ErrExists):
				exists++
			default:
				t.Fatalf("round %d: racer %d: %v, want nil or ErrExists", round, i, err)
			}
		}
		if winner < 0 || exists != racers-1 {
			t.Fatalf("round %d: winner %d, %d ErrExists; want one winner and %d ErrExists", round, winner, exists, racers-1)
		}
		got, err := newStore(t, cfg).Get(context.Background(), key, 0, -1)
		if want := bytes.Repeat([]byte{byte('a' + winner)}, 100+winner); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("round %d: Get = %q, %v; want the winner's body %q", round, got, err, want)
		}
		t.Logf("round %d: 1 nil (racer %d), %d ErrExists", round, winner, exists)
	}
}

// TestTimeoutAfterLandingIsAmbiguous: a proxy forwards the request to the
// server but drops the response, so the client times out after the object
// landed. PutIfAbsent must report an ambiguous error (not nil, not
// ErrExists); a Get shows the object; a retried PutIfAbsent is ErrExists.
func TestTimeoutAfterLandingIsAmbiguous(t *testing.T) {
	cfg := freshBucket(t, server(t))
	direct := newStore(t, cfg)
	p := startProxy(t, cfg.Endpoint, func(int) bool { return true })
	viaProxy := cfg
	viaProxy.Endpoint = p.url()
	viaProxy.AttemptTimeout = 300 * time.Millisecond
	viaProxy.MaxAttempts = 2
	s := newStore(t, viaProxy)

	key, body := "chains/s/std/1/00000000000000000007", []byte("flight copy")
	start := time.Now()
	err := s.PutIfAbsent(context.Background(), key, body)
	took := time.Since(start)
	if err == nil || errors.Is(err, objstore.ErrExists) || errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("PutIfAbsent with lost responses = %v, want an ambiguous error", err)
	}
	if !errors.Is(err, s3.ErrAmbiguous) {
		t.Fatalf("PutIfAbsent with lost responses = %v, want it to wrap s3.ErrAmbiguous", err)
	}
	if took > 2*time.Second {
		t.Fatalf("PutIfAbsent took %v, want about 2 attempts of 300ms", took)
	}
	t.Logf("PutIfAbsent with lost responses after %v: %v", took.Round(time.Millisecond), err)
	if n := p.conns.Load(); n < 1 {
		t.Fatalf("proxy saw %d connections", n)
	}
	got, err := direct.Get(context.Background(), key, 0, -1)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("Get after the ambiguous PutIfAbsent = %q, %v; want the object to have landed", got, err)
	}
	if err := direct.PutIfAbsent(context.Background(), key, body); !errors.Is(err, objstore.ErrExists) {
		t.Fatalf("retried PutIfAbsent = %v, want ErrExists", err)
	}
	t.Logf("Get shows the object landed; retried PutIfAbsent = ErrExists")
}

// TestPreconditionAfterLostResponseIsAmbiguous: only the first attempt's
// response is lost; the retry within the same call gets 412 for the
// object its own first attempt created. That 412 must not be reported as
// ErrExists (a definite "this call did not create it").
func TestPreconditionAfterLostResponseIsAmbiguous(t *testing.T) {
	cfg := freshBucket(t, server(t))
	p := startProxy(t, cfg.Endpoint, func(conn int) bool { return conn == 0 })
	viaProxy := cfg
	viaProxy.Endpoint = p.url()
	viaProxy.AttemptTimeout = 300 * time.Millisecond
	viaProxy.MaxAttempts = 3
	s := newStore(t, viaProxy)

	key := "chains/s/std/1/00000000000000000008"
	err := s.PutIfAbsent(context.Background(), key, []byte("mine"))
	if err == nil || errors.Is(err, objstore.ErrExists) || !errors.Is(err, s3.ErrAmbiguous) {
		t.Fatalf("PutIfAbsent whose first response was lost = %v, want ErrAmbiguous (not ErrExists)", err)
	}
	if n := p.conns.Load(); n < 2 {
		t.Fatalf("proxy saw %d connections, want a retry on a second one", n)
	}
	t.Logf("412 after a lost response: %v", err)
	got, err := newStore(t, cfg).Get(context.Background(), key, 0, -1)
	if err != nil || string(got) != "mine" {
		t.Fatalf("Get = %q, %v; want the first attempt's object", got, err)
	}
}

// proxy is a TCP proxy in front of the server that forwards every request
// and, for the connections drop selects (numbered from 0 in accept order),
// swallows the responses.
type proxy struct {
	ln    net.Listener
	conns atomic.Int32
}

func startProxy(t *testing.T, endpoint string, drop func(conn int) bool) *proxy {
	t.Helper()
	upstream := endpoint
	if u, ok := cutScheme(endpoint); ok {
		upstream = u
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := int(p.conns.Add(1) - 1)
			wg.Go(func() {
				defer c.Close()
				u, err := net.Dial("tcp", upstream)
				if err != nil {
					return
				}
				defer u.Close()
				done := make(chan struct{}, 2)
				go func() {
					io.Copy(u, c)
					done <- struct{}{}
				}()
				dropping := drop(n)
				go func() {
					if dropping {
						// Swallow the response, and keep the client's
						// connection open even if the server closes its
						// side: the client sees silence, not EOF.
						io.Copy(io.Discard, u)
						return
					}
					io.Copy(c, u)
					done <- struct{}{}
				}()
				<-done
			})
		}
	})
	return p
}

func (p *proxy) url() string { return "http://" + p.ln.Addr().String() }

func cutScheme(endpoint string) (string, bool) {
	for _, scheme := range []string{"http://", "https://"} {
		if len(endpoint) > len(scheme) && endpoint[:len(scheme)] == scheme {
			return endpoint[len(scheme):], true
		}
	}
	return "", false
}

// flatKeys are keys a POSIX-tree server can hold together (no key is
// another's directory), chosen so that byte order differs from a naive
// directory walk: bytes around '/', case, escapes, multi-byte UTF-8.
var flatKeys = []string{
	"a", "a b", "a-b", "a.b", "a0", "ab", "a~", "A", "CaSe", "case",
	"c/b-c", "c/bc", "c/b/c", "c/b0", "c.d", "c0",
	"é", "z/é/x", "with space", "100%", "%2F", "%2e%2e", "a+b", "k=v&x=y",
	"?query#frag", "back\\slash", "tab\there", "line\nbreak", "...", ".hidden",
	"quote\"'`", "<angle>", "colon:name", strings.Repeat("s", 255),
}

// TestListFlat checks listing order, prefix, startAfter, limit and paging
// past one ListObjectsV2 page (1000 keys) against the real server.
func TestListFlat(t *testing.T) {
	cfg := freshBucket(t, server(t))
	s := newStore(t, cfg)
	ctx := context.Background()
	all := slices.Clone(flatKeys)
	putAll(t, s, all)
	slices.Sort(all)

	list := func(prefix, after string, limit int) []string {
		t.Helper()
		got, err := s.List(ctx, prefix, after, limit)
		if err != nil {
			t.Fatalf("List(%q, %q, %d): %v", prefix, after, limit, err)
		}
		return got
	}
	want := func(prefix, after string, limit int) []string {
		var w []string
		for _, k := range all {
			if strings.HasPrefix(k, prefix) && k > after && (limit <= 0 || len(w) < limit) {
				w = append(w, k)
			}
		}
		return w
	}
	for _, prefix := range []string{"", "a", "c/", "c/b", "zz"} {
		for _, after := range []string{"", "a", "a/", "a0", "c/b", "c/b/", "\U0010FFFF"} {
			for _, limit := range []int{0, 1, 5} {
				if got, w := list(prefix, after, limit), want(prefix, after, limit); !slices.Equal(got, w) {
					t.Fatalf("List(%q, %q, %d):\n got %q\nwant %q", prefix, after, limit, got, w)
				}
			}
		}
	}

	// Paging, in a bucket of its own so the matrix above stays cheap.
	s = newStore(t, freshBucket(t, server(t)))
	var paged []string
	for i := range 1050 {
		paged = append(paged, fmt.Sprintf("pg/%04d", i))
	}
	putAll(t, s, paged)
	if got := list("pg/", "", 0); !slices.Equal(got, paged) {
		t.Fatalf("List past one page: %d keys, want %d", len(got), len(paged))
	}
	if got := list("pg/", "pg/0999", 0); !slices.Equal(got, paged[1000:]) {
		t.Fatalf("List after pg/0999: %d keys, want %d", len(got), len(paged)-1000)
	}
	for _, page := range []int{400, 1000} {
		var got []string
		after := ""
		for {
			batch := list("pg/", after, page)
			if len(batch) == 0 {
				break
			}
			got = append(got, batch...)
			after = batch[len(batch)-1]
		}
		if !slices.Equal(got, paged) {
			t.Fatalf("paging by %d: %d keys, want %d", page, len(got), len(paged))
		}
	}
}

// TestReopenFlat: objects written through one client are there, intact
// and still occupied, through a new client.
func TestReopenFlat(t *testing.T) {
	cfg := freshBucket(t, server(t))
	s := newStore(t, cfg)
	ctx := context.Background()
	want := map[string][]byte{
		"chains/0/std/0001/000000": []byte("flight"),
		"chains/0/std/0001/000001": {},
		"settled/x/0":              bytes.Repeat([]byte("ab"), 100000),
	}
	for k, v := range want {
		if err := s.PutIfAbsent(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutIfAbsent(ctx, "gone", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	r := newStore(t, cfg)
	for k, v := range want {
		if got, err := r.Get(ctx, k, 0, -1); err != nil || !bytes.Equal(got, v) {
			t.Fatalf("after reopen, Get(%q) = %d bytes, %v; want %d bytes", k, len(got), err, len(v))
		}
		if err := r.PutIfAbsent(ctx, k, []byte("over")); !errors.Is(err, objstore.ErrExists) {
			t.Fatalf("after reopen, PutIfAbsent(%q) = %v, want ErrExists", k, err)
		}
	}
	if _, err := r.Get(ctx, "gone", 0, -1); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("after reopen, Get(gone) = %v, want ErrNotFound", err)
	}
	keys, err := r.List(ctx, "", "", 0)
	if w := slices.Sorted(maps.Keys(want)); err != nil || !slices.Equal(keys, w) {
		t.Fatalf("after reopen, List = %q, %v; want %q", keys, err, w)
	}
}

func putAll(t *testing.T, s *s3.Store, keys []string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(keys))
	ch := make(chan string)
	for range 8 {
		wg.Go(func() {
			for k := range ch {
				if err := s.PutIfAbsent(context.Background(), k, []byte(k)); err != nil {
					errs <- fmt.Errorf("PutIfAbsent(%q): %w", k, err)
				}
			}
		})
	}
	for _, k := range keys {
		ch <- k
	}
	close(ch)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
