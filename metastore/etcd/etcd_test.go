package etcd_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/metastore/etcd"
	"github.com/flightlog/flightlog/metastore/metastoretest"
)

// endpoints returns the etcd cluster the tests use, from the environment,
// or skips (fails under FLIGHTLOG_REQUIRE_SERVERS=1).
func endpoints(t testing.TB) []string {
	t.Helper()
	eps := os.Getenv("FLIGHTLOG_ETCD_ENDPOINTS")
	if eps == "" {
		msg := "FLIGHTLOG_ETCD_ENDPOINTS is not set: run ./scripts/test.sh, which starts etcd on loopback and sets it"
		if os.Getenv("FLIGHTLOG_REQUIRE_SERVERS") == "1" {
			t.Fatal(msg + " (FLIGHTLOG_REQUIRE_SERVERS=1: a missing server is a failure)")
		}
		t.Skip(msg)
	}
	return strings.Split(eps, ",")
}

func randomPrefix() string {
	var b [8]byte
	rand.Read(b[:])
	return "flightlog-test/" + hex.EncodeToString(b[:]) + "/"
}

func open(t testing.TB, cfg etcd.Config) *etcd.Store {
	t.Helper()
	s, err := etcd.New(cfg)
	if err != nil {
		t.Fatalf("etcd.New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// fresh returns a store over a new random prefix, deleted at cleanup.
func fresh(t testing.TB) *etcd.Store {
	t.Helper()
	eps := endpoints(t)
	s := open(t, etcd.Config{Endpoints: eps, Prefix: randomPrefix()})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := s.Client().Delete(ctx, s.Prefix(), clientv3.WithPrefix()); err != nil {
			t.Logf("cleanup: delete prefix %s: %v", s.Prefix(), err)
		}
	})
	return s
}

func harness() metastoretest.Harness {
	return metastoretest.Harness{
		New: func(t testing.TB) metastore.Store { return fresh(t) },
		Reopen: func(t testing.TB, s metastore.Store) metastore.Store {
			// A new client over the same prefix, as a restarted process.
			return open(t, etcd.Config{Endpoints: endpoints(t), Prefix: s.(*etcd.Store).Prefix()})
		},
	}
}

func TestConformance(t *testing.T) {
	endpoints(t)
	metastoretest.Run(t, harness())
}

func BenchmarkConformance(b *testing.B) {
	endpoints(b)
	metastoretest.RunBenchmarks(b, harness())
}

func TestMaxCommitOps(t *testing.T) {
	s := fresh(t)
	if got := metastore.MaxCommitOps(s); got != etcd.DefaultMaxCommitOps {
		t.Fatalf("MaxCommitOps = %d, want %d", got, etcd.DefaultMaxCommitOps)
	}
	ops := make([]metastore.Op, etcd.DefaultMaxCommitOps)
	for i := range ops {
		ops[i] = metastore.Op{Kind: metastore.OpPut, Key: "k/" + hex.EncodeToString([]byte{byte(i)}), Value: []byte("v")}
	}
	vs, err := s.Commit(context.Background(), ops)
	if err != nil {
		t.Fatalf("Commit of %d ops (the limit): %v", len(ops), err)
	}
	for i, v := range vs {
		if v != vs[0] || v == metastore.NoVersion {
			t.Fatalf("version %d = %q, want every put at the txn revision %q", i, v, vs[0])
		}
	}
	ops = append(ops, metastore.Op{Kind: metastore.OpPut, Key: "k/over", Value: []byte("v")})
	if _, err := s.Commit(context.Background(), ops); !errors.Is(err, metastore.ErrTooLarge) {
		t.Fatalf("Commit of %d ops = %v, want ErrTooLarge", len(ops), err)
	}
	// The server's own limit, when the client allows more than it does.
	big := open(t, etcd.Config{Endpoints: endpoints(t), Prefix: s.Prefix(), MaxCommitOps: 10000})
	many := make([]metastore.Op, 200)
	for i := range many {
		many[i] = metastore.Op{Kind: metastore.OpPut, Key: "m/" + hex.EncodeToString([]byte{byte(i), byte(i >> 8)}), Value: []byte("v")}
	}
	if _, err := big.Commit(context.Background(), many); !errors.Is(err, metastore.ErrTooLarge) {
		t.Fatalf("Commit of 200 ops past the server's --max-txn-ops = %v, want ErrTooLarge", err)
	}
}

// TestPrefixIsolation: two stores on one cluster with different prefixes
// never see each other's keys.
func TestPrefixIsolation(t *testing.T) {
	a, b := fresh(t), fresh(t)
	ctx := context.Background()
	if _, err := a.Put(ctx, "k", []byte("a"), metastore.NoVersion); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, "k"); !errors.Is(err, metastore.ErrNotFound) {
		t.Fatalf("other prefix Get = %v, want ErrNotFound", err)
	}
	if items, err := b.Scan(ctx, "", "", 0); err != nil || len(items) != 0 {
		t.Fatalf("other prefix Scan = %v, %v; want nothing", items, err)
	}
	if items, err := a.Scan(ctx, "", "", 0); err != nil || len(items) != 1 || items[0].Key != "k" {
		t.Fatalf("own Scan = %v, %v; want [k]", items, err)
	}
}

// TestLostTxnResponseIsAmbiguous: a proxy forwards a Put's Txn to etcd and
// swallows the answer, so the client's request deadline passes after the
// write applied. Put must return an ambiguous error (not nil, not
// ErrConflict); a Get shows the value; a retried create is ErrConflict.
func TestLostTxnResponseIsAmbiguous(t *testing.T) {
	eps := endpoints(t)
	prefix := randomPrefix()
	direct := open(t, etcd.Config{Endpoints: eps, Prefix: prefix})
	p := startProxy(t, strings.TrimPrefix(strings.TrimPrefix(eps[0], "http://"), "https://"))
	s := open(t, etcd.Config{Endpoints: []string{"http://" + p.ln.Addr().String()}, Prefix: prefix, RequestTimeout: 500 * time.Millisecond})
	ctx := context.Background()
	// Connect and prove the path works before dropping answers (the first
	// connection may take longer than one request timeout on a busy box).
	for deadline := time.Now().Add(15 * time.Second); ; {
		_, err := s.Get(ctx, "warmup")
		if errors.Is(err, metastore.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Get through the proxy = %v, want ErrNotFound", err)
		}
	}
	p.drop.Store(true)
	start := time.Now()
	_, err := s.Put(ctx, "stars/0/std/epoch", []byte("epoch 1 by me"), metastore.NoVersion)
	took := time.Since(start)
	if err == nil || errors.Is(err, metastore.ErrConflict) || !errors.Is(err, etcd.ErrAmbiguous) {
		t.Fatalf("Put with a lost answer = %v, want ErrAmbiguous (not nil, not ErrConflict)", err)
	}
	if took > 3*time.Second {
		t.Fatalf("Put took %v, want about the 500ms request timeout", took)
	}
	t.Logf("Put with a lost answer after %v: %v", took.Round(time.Millisecond), err)
	it, err := direct.Get(ctx, "stars/0/std/epoch")
	if err != nil || string(it.Value) != "epoch 1 by me" {
		t.Fatalf("Get after the ambiguous Put = %+v, %v; want the value to have applied", it, err)
	}
	if _, err := direct.Put(ctx, "stars/0/std/epoch", []byte("epoch 1 by me"), metastore.NoVersion); !errors.Is(err, metastore.ErrConflict) {
		t.Fatalf("retried create = %v, want ErrConflict", err)
	}
	t.Logf("Get shows the write applied at version %s; retried create = ErrConflict", it.Version)
	direct.Client().Delete(ctx, prefix, clientv3.WithPrefix())
}

// TestUnreachableIsUnavailable: nothing listens at the endpoint.
func TestUnreachableIsUnavailable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s := open(t, etcd.Config{Endpoints: []string{"http://" + addr}, RequestTimeout: 300 * time.Millisecond, DialTimeout: 300 * time.Millisecond})
	if _, err := s.Get(context.Background(), "k"); err == nil || errors.Is(err, metastore.ErrNotFound) {
		t.Fatalf("Get from nowhere = %v, want an error", err)
	}
	_, err = s.Put(context.Background(), "k", []byte("v"), metastore.NoVersion)
	if err == nil || errors.Is(err, metastore.ErrConflict) || !errors.Is(err, etcd.ErrAmbiguous) {
		t.Fatalf("Put to nowhere = %v, want an ambiguous error", err)
	}
	s.Close()
	if _, err := s.Get(context.Background(), "k"); !errors.Is(err, metastore.ErrUnavailable) {
		t.Fatalf("Get after Close = %v, want ErrUnavailable", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []etcd.Config{
		{},
		{Endpoints: []string{"x"}, MaxCommitOps: -1},
		{Endpoints: []string{"x"}, RequestTimeout: -1},
	} {
		if _, err := etcd.New(c); err == nil {
			t.Errorf("New(%+v) = nil error, want a validation error", c)
		}
	}
}

// proxy forwards TCP to etcd; once drop is set, answers are swallowed
// (the connection stays open, so the client sees silence).
type proxy struct {
	ln   net.Listener
	drop atomic.Bool
}

func startProxy(t *testing.T, upstream string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
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
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			open = append(open, c, u)
			mu.Unlock()
			wg.Go(func() { io.Copy(u, c); u.Close() })
			wg.Go(func() {
				buf := make([]byte, 32<<10)
				for {
					n, err := u.Read(buf)
					if n > 0 && !p.drop.Load() {
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			})
		}
	})
	return p
}
