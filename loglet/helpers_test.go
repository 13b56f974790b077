package loglet

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// rig is a star over Mem buckets wrapped in fault injectors.
type rig struct {
	t     testing.TB
	star  *Star
	mems  []*objstore.Mem
	fault []*objstore.FaultStore
	meta  *metastore.Mem
	cfg   Config

	mu       sync.Mutex
	w        int         // the class's quorum
	released [][2]uint64 // (epoch, slot) in release order
	bad      []string    // invariant violations seen by the release watch
}

// newRig opens a star with k buckets in class c. tweak edits the config
// before Open.
func newRig(t testing.TB, c Class, k int, seed uint64, tweak func(*Config, []*objstore.FaultStore)) *rig {
	t.Helper()
	r := &rig{t: t, meta: metastore.NewMem()}
	var stores []objstore.Store
	for i := 0; i < k; i++ {
		m := objstore.NewMem()
		f := objstore.WithFaults(m, seed*31+uint64(i))
		r.mems, r.fault = append(r.mems, m), append(r.fault, f)
		stores = append(stores, f)
	}
	// The release watch checks invariant 1 at the moment of release, from
	// the chain's "slot released" debug events: slots release in order (an
	// epoch's first slot after any slot of an earlier epoch), each holding
	// W copies of its epoch's flight.
	cfg := Config{Star: "s1", Meta: r.meta, CreateOnAppend: true, DefaultClass: c, Logger: slog.New(releaseWatch{r: r, class: c})}
	cc := ClassConfig{Stores: stores, FlushDeadline: time.Millisecond, FlightBytes: 64 << 10, ParallelUploads: 8,
		CommitDeadline: 5 * time.Second, StragglerTimeout: 10 * time.Second, Retry: chain.RetryPolicy{MinBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond}}
	if c == Express {
		cfg.Express = cc
	} else {
		cfg.Standard = cc
	}
	if tweak != nil {
		tweak(&cfg, r.fault)
	}
	r.cfg = cfg
	r.w = cfg.Express.W
	if c == Standard {
		r.w = cfg.Standard.W
	}
	if r.w == 0 {
		r.w = k/2 + 1
	}
	s, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	r.star = s
	t.Cleanup(func() { s.Close(context.Background()) })
	return r
}

// releaseWatch is the rig's logger: it checks each "slot released" event
// (see newRig) and drops everything else unless FLIGHTLOG_TEST_LOG is set.
type releaseWatch struct {
	r     *rig
	class Class
}

func (h releaseWatch) Enabled(context.Context, slog.Level) bool { return true }

func (h releaseWatch) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Message != "slot released" {
		if tl := testLogger(); tl.Enabled(ctx, rec.Level) {
			return tl.Handler().Handle(ctx, rec)
		}
		return nil
	}
	var epoch, slot uint64
	rec.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "epoch":
			epoch = a.Value.Uint64()
		case "slot":
			slot = a.Value.Uint64()
		}
		return true
	})
	r := h.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.released); n > 0 {
		last := r.released[n-1]
		if !(epoch == last[0] && slot == last[1]+1) && !(epoch > last[0] && slot == 0) {
			r.bad = append(r.bad, fmt.Sprintf("released %d/%d after %d/%d", epoch, slot, last[0], last[1]))
		}
	}
	r.released = append(r.released, [2]uint64{epoch, slot})
	key := chain.SlotKey("s1", h.class, epoch, slot)
	ours := 0
	for _, m := range r.mems {
		head, err := m.Get(context.Background(), key, 0, envelope.EnvelopeSize)
		if err != nil {
			continue
		}
		if env, err := envelope.ParseEnvelope(head); err == nil && env.Kind == envelope.KindFlight && env.Epoch == epoch && env.Slot == slot {
			ours++
		}
	}
	if ours < r.w {
		r.bad = append(r.bad, fmt.Sprintf("released %d/%d with %d copies < W=%d", epoch, slot, ours, r.w))
	}
	return nil
}

func (h releaseWatch) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h releaseWatch) WithGroup(string) slog.Handler      { return h }

func (r *rig) checkReleases() {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range r.bad {
		r.t.Error(b)
	}
}

func body(stream string, seq int, size int, rnd *rand.Rand) []byte {
	b := make([]byte, size)
	prefix := fmt.Sprintf("%s#%d#", stream, seq)
	copy(b, prefix)
	for i := len(prefix); i < size; i++ {
		b[i] = byte('a' + rnd.IntN(26))
	}
	return b
}

// readAll reads every released record of stream from the flight index.
func readAll(t testing.TB, s *Star, stream string) []SequencedRecord {
	t.Helper()
	var out []SequencedRecord
	next := uint64(0)
	for {
		res, err := s.Read(context.Background(), stream, ReadQuery{Start: AtSeq(next), MaxRecords: 500})
		if err != nil {
			t.Fatalf("read %s from %d: %v", stream, next, err)
		}
		if len(res.Records) == 0 {
			return out
		}
		out = append(out, res.Records...)
		next = res.Next
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// testLogger logs to stderr when FLIGHTLOG_TEST_LOG is set (debugging).
func testLogger() *slog.Logger {
	if os.Getenv("FLIGHTLOG_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return quietLogger()
}
