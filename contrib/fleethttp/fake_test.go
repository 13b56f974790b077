package fleethttp

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/fleet"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// table is a routing table the test writes: who leads which star, at which
// epoch. It stands for the fleet's Router, which needs etcd.
type table struct {
	stars   []string
	mu      sync.Mutex
	leads   map[string]fleet.Lead
	changed chan struct{}
}

func (tb *table) set(star string, m fleet.Member, epoch uint64) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if m.Name == "" {
		delete(tb.leads, star)
	} else {
		tb.leads[star] = fleet.Lead{Member: m, Epoch: epoch}
	}
	close(tb.changed)
	tb.changed = make(chan struct{})
}

// member is one in-process member: its own stars, the shared table.
type member struct {
	fleet.Member
	tb   *table
	srv  *httptest.Server
	sent atomic.Int64 // requests this member forwarded
	// misdirected gets a value each time the member answers 421.
	misdirected chan struct{}

	mu    sync.Mutex
	stars map[string]*loglet.Star
}

func (m *member) Self() string { return m.Name }

func (m *member) Route(ctx context.Context, stream string) (string, fleet.Member, uint64, error) {
	star := chain.PlaceStream(stream, m.tb.stars)
	m.tb.mu.Lock()
	defer m.tb.mu.Unlock()
	l, ok := m.tb.leads[star]
	if !ok {
		return star, fleet.Member{}, 0, fmt.Errorf("%w: %q", fleet.ErrUnled, star)
	}
	return star, l.Member, l.Epoch, nil
}

func (m *member) RouteStar(star string) (fleet.Member, uint64, error) {
	m.tb.mu.Lock()
	defer m.tb.mu.Unlock()
	if !slices.Contains(m.tb.stars, star) {
		return fleet.Member{}, 0, fmt.Errorf("fleethttp test: no star %q: %w", star, loglet.ErrInvalidStreamName)
	}
	l, ok := m.tb.leads[star]
	if !ok {
		return fleet.Member{}, 0, fmt.Errorf("%w: %q", fleet.ErrUnled, star)
	}
	return l.Member, l.Epoch, nil
}

func (m *member) Star(name string) (*loglet.Star, uint64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.stars[name]
	if !ok {
		return nil, 0, false
	}
	return s, epochOf(s), true
}

func (m *member) Changed() <-chan struct{} {
	m.tb.mu.Lock()
	defer m.tb.mu.Unlock()
	return m.tb.changed
}

// countingTransport counts the requests a member forwards.
type countingTransport struct {
	n    *atomic.Int64
	next http.RoundTripper
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

// testFleet is members over one in-memory metastore and bucket.
type testFleet struct {
	t       testing.TB
	tb      *table
	meta    metastore.Store
	bucket  objstore.Store
	express []objstore.Store // Express's three buckets (K=3, W=2)
	members map[string]*member
	cfg     loglet.Config
}

func newTestFleet(t testing.TB, hcfg Config, names ...string) *testFleet {
	f := &testFleet{
		t:    t,
		tb:   &table{stars: []string{"s0", "s1"}, leads: map[string]fleet.Lead{}, changed: make(chan struct{})},
		meta: metastore.NewMem(), bucket: objstore.NewMem(),
		express: []objstore.Store{objstore.NewMem(), objstore.NewMem(), objstore.NewMem()},
		members: map[string]*member{},
	}
	f.cfg = loglet.Config{
		Stars: f.tb.stars, Meta: f.meta,
		Standard:       loglet.ClassConfig{Stores: []objstore.Store{f.bucket}, FlushDeadline: time.Millisecond},
		Express:        loglet.ClassConfig{Stores: f.express, W: 2, FlushDeadline: time.Millisecond},
		CreateOnAppend: true, DefaultClass: loglet.Standard,
		Logger: slog.New(slog.DiscardHandler),
	}
	for _, name := range names {
		m := &member{tb: f.tb, stars: map[string]*loglet.Star{}, misdirected: make(chan struct{}, 64)}
		c := hcfg
		c.Client = &http.Client{Transport: countingTransport{&m.sent, http.DefaultTransport}}
		c.Logger = slog.New(slog.DiscardHandler)
		h := NewHandler(m, c)
		m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sw := &statusWriter{ResponseWriter: w}
			h.ServeHTTP(sw, r)
			if sw.status == http.StatusMisdirectedRequest {
				select {
				case m.misdirected <- struct{}{}:
				default:
				}
			}
		}))
		m.Member = fleet.Member{Name: name, Addr: m.srv.URL}
		f.members[name] = m
		t.Cleanup(func() {
			m.srv.Close()
			m.mu.Lock()
			defer m.mu.Unlock()
			for _, s := range m.stars {
				s.Close(context.Background())
			}
		})
	}
	return f
}

// lead opens star on member name and publishes its lead in the table.
func (f *testFleet) lead(star, name string) {
	f.t.Helper()
	m := f.members[name]
	cfg := f.cfg
	cfg.Star = star
	s, err := loglet.Open(context.Background(), cfg)
	if err != nil {
		f.t.Fatalf("open %s on %s: %v", star, name, err)
	}
	m.mu.Lock()
	m.stars[star] = s
	m.mu.Unlock()
	f.tb.set(star, m.Member, epochOf(s))
}

// release closes star on member name cleanly, leaving the table as it is
// (a stale route until the test sets it).
func (f *testFleet) release(star, name string) {
	f.t.Helper()
	m := f.members[name]
	m.mu.Lock()
	s := m.stars[star]
	delete(m.stars, star)
	m.mu.Unlock()
	if err := s.Close(context.Background()); err != nil {
		f.t.Fatalf("close %s on %s: %v", star, name, err)
	}
}

func (f *testFleet) client(names ...string) *Client {
	f.t.Helper()
	var addrs []string
	for _, n := range names {
		addrs = append(addrs, f.members[n].srv.URL)
	}
	c, err := NewClient(nil, addrs...)
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// streamOn returns a stream name that chain.PlaceStream puts on star.
func (f *testFleet) streamOn(star, prefix string) string {
	for i := 0; ; i++ {
		s := fmt.Sprintf("%s-%d", prefix, i)
		if chain.PlaceStream(s, f.tb.stars) == star {
			return s
		}
	}
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}
