package s3_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
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

// posixKeys reports whether the server declares that it stores keys as a
// POSIX tree (scripts/test.sh sets FLIGHTLOG_S3_POSIX_KEYS=1 for versitygw's
// posix backend), so the kit leaves out nested and over-long key segments.
func posixKeys() bool { return os.Getenv("FLIGHTLOG_S3_POSIX_KEYS") == "1" }

func harness(t testing.TB) objstoretest.Harness {
	base := server(t)
	return objstoretest.Harness{
		New: func(t testing.TB) objstore.Store {
			return newStore(t, freshBucket(t, base))
		},
		Reopen: func(t testing.TB, s objstore.Store) objstore.Store {
			// A new client, as a restarted process would make.
			cfg := base
			cfg.Bucket = s.(*s3.Store).Bucket()
			return newStore(t, cfg)
		},
		Caps: objstoretest.Capabilities{PathKeys: posixKeys()},
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
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		open []net.Conn
	)
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close() // idle keep-alive connections too
		}
		mu.Unlock()
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
				mu.Lock()
				open = append(open, c, u)
				mu.Unlock()
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

// TestListPastOnePage: List follows ListObjectsV2 continuation past the
// server's 1000-key page, with and without startAfter and limit.
func TestListPastOnePage(t *testing.T) {
	s := newStore(t, freshBucket(t, server(t)))
	ctx := context.Background()
	var keys []string
	for i := range 1010 {
		keys = append(keys, fmt.Sprintf("chains/0/std/0001/%06d", i))
	}
	putAll(t, s, keys)
	for _, c := range []struct {
		after string
		limit int
		want  []string
	}{
		{"", 0, keys},
		{"", 1005, keys[:1005]},
		{keys[3], 0, keys[4:]},
		{keys[3], 1001, keys[4:1005]},
		{keys[1008], 0, keys[1009:]},
	} {
		got, err := s.List(ctx, "chains/0/", c.after, c.limit)
		if err != nil || !slices.Equal(got, c.want) {
			t.Fatalf("List(after %q, limit %d) = %d keys, %v; want %d keys", c.after, c.limit, len(got), err, len(c.want))
		}
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
