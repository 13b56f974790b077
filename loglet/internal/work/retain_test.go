package work

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"
	"weak"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/loglet/internal/chaincore"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// TestAbsorbedBatchesAreNotRetained: once a batch is acked and absorbed,
// nothing in the core keeps it (or its payload) reachable. Before, the
// absorb queue and the window were resliced without clearing what they
// dropped, so their backing arrays kept every absorbed flight's batches:
// 345 MB at 1,000,000 streams with nothing left unabsorbed
// (BenchmarkManyStreams).
func TestAbsorbedBatchesAreNotRetained(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	cfg := coreConfig(64<<10, chaincore.DefaultFrameLimits(4<<20))
	cfg.AbsorbInterval, cfg.Window = time.Millisecond, 4
	env := &Env{Star: cfg.Star, Class: cfg.Class, Owner: cfg.Owner, Stores: []objstore.Store{objstore.NewMem()}, Names: cfg.Buckets,
		W: 1, Meta: metastore.NewMem(), Codec: envelope.CodecNone, Frames: cfg.Frames, Now: func() time.Time { return now },
		Retry: chain.RetryPolicy{MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond}}
	c := chaincore.New(cfg, now)
	drive := func() {
		for i := 0; i < 10000; i++ {
			rd := c.Ready()
			c.Advance(rd)
			if rd.Empty() {
				return
			}
			for _, req := range rd.Requests {
				c.Step(now, env.Do(ctx, req))
			}
		}
		t.Fatal("the core never went quiet")
	}
	drive()
	var held []weak.Pointer[chaincore.Batch]
	admit := func(n int) {
		for i := 0; i < n; i++ {
			b := batch(c.Stream([]string{"a", "b", "c"}[i%3]), 3, strings.Repeat("x", 2000))
			held = append(held, weak.Make(b))
			if err := c.Admit(now, b, nil, nil, true); err != nil {
				t.Fatalf("admit %d: %v", i, err)
			}
		}
	}
	admit(200) // many flights of 64 KiB, through a window of 4
	for i := 0; i < 1000; i++ {
		now = now.Add(10 * time.Millisecond)
		c.Step(now, chaincore.Tick{})
		drive()
		if st := c.Stats(now); st.Backlog.Flights == 0 && st.FlightIndexBytes == 0 && st.WindowInFlight == 0 && st.Flights > 10 {
			break
		}
	}
	if st := c.Stats(now); st.Backlog.Flights != 0 || st.FlightIndexBytes != 0 || st.Flights <= 10 {
		t.Fatalf("not all absorbed: %d flights, backlog %d, index %d bytes", st.Flights, st.Backlog.Flights, st.FlightIndexBytes)
	}
	runtime.GC()
	runtime.GC()
	live := 0
	for _, w := range held {
		if w.Value() != nil {
			live++
		}
	}
	if live > 0 {
		t.Fatalf("%d of %d acked, absorbed batches are still reachable from the core", live, len(held))
	}
	runtime.KeepAlive(c)
}
