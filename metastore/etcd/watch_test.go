package etcd_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/metastore/etcd"
	"github.com/flightlog/flightlog/metastore/metastoretest"
)

// TestWatchUnreachableIsUnavailable: a Watch that etcd never confirms
// fails with ErrUnavailable after the request timeout, not never.
func TestWatchUnreachableIsUnavailable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s := open(t, etcd.Config{Endpoints: []string{"http://" + addr}, RequestTimeout: 300 * time.Millisecond, DialTimeout: 300 * time.Millisecond})
	start := time.Now()
	ch, err := s.Watch(context.Background(), "p/")
	if !errors.Is(err, metastore.ErrUnavailable) || ch != nil {
		t.Fatalf("Watch of nowhere = %v, %v; want ErrUnavailable and no channel", ch, err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("Watch of nowhere took %v, want about the 300ms request timeout", took)
	}
}

// TestCloseEndsWatches: Close ends every watch of the Store, also over a
// client it does not own (which stays usable), and a Watch after Close is
// ErrUnavailable.
func TestCloseEndsWatches(t *testing.T) {
	for _, owned := range []bool{true, false} {
		name := "owned client"
		if !owned {
			name = "Config.Client"
		}
		t.Run(name, func(t *testing.T) {
			eps := endpoints(t)
			cfg := etcd.Config{Endpoints: eps, Prefix: randomPrefix()}
			if !owned {
				c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				cfg.Client = c
			}
			s := open(t, cfg)
			ch, err := s.Watch(t.Context(), "p/")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Put(t.Context(), "p/a", []byte("x"), metastore.NoVersion); err != nil {
				t.Fatal(err)
			}
			metastoretest.WantSignal(t, ch, "a put")
			s.Close()
			metastoretest.WantEnded(t, ch, "after Close")
			if _, err := s.Watch(t.Context(), "p/"); !errors.Is(err, metastore.ErrUnavailable) {
				t.Fatalf("Watch after Close = %v, want ErrUnavailable", err)
			}
			if !owned {
				if _, err := cfg.Client.Delete(t.Context(), cfg.Prefix, clientv3.WithPrefix()); err != nil {
					t.Fatalf("the caller's client after Close: %v", err)
				}
			}
		})
	}
}

// TestWatchCompactedWhileDisconnectedEnds: the client loses its
// connection and writes under the prefix land meanwhile. Without a
// compaction the client resumes the watch where it was, and the writes are
// signalled. With etcd compacted past them, it cannot resume, so the watch
// must end (the caller then re-reads and polls), not go on silently after
// missing those writes.
func TestWatchCompactedWhileDisconnectedEnds(t *testing.T) {
	for _, compact := range []bool{false, true} {
		name := "resumed"
		if compact {
			name = "compacted"
		}
		t.Run(name, func(t *testing.T) {
			eps := endpoints(t)
			prefix := randomPrefix()
			direct := open(t, etcd.Config{Endpoints: eps, Prefix: prefix})
			t.Cleanup(func() { direct.Client().Delete(context.Background(), prefix, clientv3.WithPrefix()) })
			p := startGate(t, strings.TrimPrefix(strings.TrimPrefix(eps[0], "http://"), "https://"))
			s := open(t, etcd.Config{Endpoints: []string{"http://" + p.ln.Addr().String()}, Prefix: prefix})
			ctx := t.Context()
			ch, err := s.Watch(ctx, "p/")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := direct.Put(ctx, "p/a", []byte("x"), metastore.NoVersion); err != nil {
				t.Fatal(err)
			}
			metastoretest.WantSignal(t, ch, "a put before the disconnect")

			p.hold() // new connections wait; the open ones are cut
			for _, k := range []string{"p/b", "p/c"} {
				if _, err := direct.Put(ctx, k, []byte("x"), metastore.NoVersion); err != nil {
					t.Fatal(err)
				}
			}
			if compact {
				resp, err := direct.Client().Get(ctx, "any")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := direct.Client().Compact(ctx, resp.Header.Revision); err != nil {
					t.Fatal(err)
				}
			}
			p.release()
			if compact {
				metastoretest.WantEnded(t, ch, "a watch resumed past a compaction")
			} else {
				metastoretest.WantSignal(t, ch, "puts while disconnected, once reconnected")
			}
		})
	}
}

// gate forwards TCP to etcd. hold cuts every open connection and makes
// new ones wait (accepted, not forwarded) until release.
type gate struct {
	ln       net.Listener
	mu       sync.Mutex
	held     bool
	released chan struct{}
	open     []net.Conn
}

func startGate(t *testing.T, upstream string) *gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{ln: ln, released: make(chan struct{})}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		g.release()
		g.cut()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			g.mu.Lock()
			held, released := g.held, g.released
			g.open = append(g.open, c)
			g.mu.Unlock()
			wg.Go(func() {
				if held {
					<-released
				}
				u, err := net.Dial("tcp", upstream)
				if err != nil {
					c.Close()
					return
				}
				g.mu.Lock()
				g.open = append(g.open, u)
				g.mu.Unlock()
				wg.Go(func() { io.Copy(u, c); u.Close() })
				io.Copy(c, u)
				c.Close()
			})
		}
	})
	return g
}

func (g *gate) cut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.open {
		c.Close()
	}
	g.open = nil
}

func (g *gate) hold() {
	g.mu.Lock()
	g.held = true
	g.mu.Unlock()
	g.cut()
}

func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held {
		g.held = false
		close(g.released)
		g.released = make(chan struct{})
	}
}
