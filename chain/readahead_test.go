package chain

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/objstore"
)

// peakStore is a bucket with a fixed request latency that records the
// most requests it, and the set it belongs to, had in flight at once.
type peakStore struct {
	objstore.Store
	in, peak       atomic.Int64
	setIn, setPeak *atomic.Int64
}

func (p *peakStore) enter() func() {
	raise := func(cur, peak *atomic.Int64) {
		n := cur.Add(1)
		for old := peak.Load(); n > old && !peak.CompareAndSwap(old, n); old = peak.Load() {
		}
	}
	raise(&p.in, &p.peak)
	raise(p.setIn, p.setPeak)
	time.Sleep(time.Millisecond) // the store's latency (the bubble's clock), so that requests overlap
	return func() { p.in.Add(-1); p.setIn.Add(-1) }
}

func (p *peakStore) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	defer p.enter()()
	return p.Store.Get(ctx, key, off, n)
}

func (p *peakStore) PutIfAbsent(ctx context.Context, key string, body []byte) error {
	defer p.enter()()
	return p.Store.PutIfAbsent(ctx, key, body)
}

func (p *peakStore) Delete(ctx context.Context, key string) error {
	defer p.enter()()
	return p.Store.Delete(ctx, key)
}

// TestReadAheadBoundsRequestsInFlight: BucketSet.ReadAhead bounds the
// requests a fence (ReadAhead·K), a walk (ReadAhead) and a garbage probe
// (ReadAhead per bucket) have in flight, over a backlog long enough for
// their default read-ahead to go far past it; and the bounded runs reach
// the same cut and the same slots.
func TestReadAheadBoundsRequestsInFlight(t *testing.T) {
	synctest.Test(t, testReadAheadBoundsRequestsInFlight)
}

func testReadAheadBoundsRequestsInFlight(t *testing.T) {
	const k, backlog, ahead = 3, 96, 4
	ts := newTestSet(k, 2, 41)
	ts.writeCommitted(t, 1, 0, backlog)
	ts.writeSlot(t, 2, 0) // a zombie's flight, for the probe
	ctx := context.Background()
	run := func(readAhead int) (fence, walk, probe int64) {
		var setIn, setPeak atomic.Int64
		set := ts.set
		set.ReadAhead = readAhead
		set.Stores = nil
		var stores []*peakStore
		for _, m := range ts.mems {
			p := &peakStore{Store: m, setIn: &setIn, setPeak: &setPeak}
			stores = append(stores, p)
			set.Stores = append(set.Stores, p)
		}
		res, err := Fence(ctx, set, tStar, tClass, 1, 0, envelope.NewNonce(), FenceOptions{})
		if err != nil || res.Cut != backlog {
			t.Fatalf("ReadAhead %d: fence %+v %v, want the cut at %d", readAhead, res, err, backlog)
		}
		fence = setPeak.Swap(0)
		var slots uint64
		if err := Walk(ctx, set, tStar, tClass, 1, 0, backlog, func(slot uint64, _ []byte, _ []envelope.FrameInfo) error {
			if slot != slots {
				t.Fatalf("ReadAhead %d: walk handed slot %d, want %d", readAhead, slot, slots)
			}
			slots++
			return nil
		}); err != nil || slots != backlog {
			t.Fatalf("ReadAhead %d: walk of %d slots: %v", readAhead, slots, err)
		}
		walk = setPeak.Swap(0)
		for _, p := range stores {
			p.peak.Store(0)
		}
		if _, err := GarbageProbe(ctx, set, tStar, tClass, 2, 0, 2*backlog, envelope.NewNonce()); err != nil {
			t.Fatal(err)
		}
		for _, p := range stores {
			probe = max(probe, p.peak.Load())
		}
		return fence, walk, probe
	}
	// 1 is the edge: one slot at a time, K requests in a fence.
	for _, ra := range []int64{1, ahead} {
		fence, walk, probe := run(int(ra))
		t.Logf("ReadAhead %d: at most %d requests in flight in the fence, %d in the walk, %d per bucket in the probe", ra, fence, walk, probe)
		if fence > ra*k || walk > ra || probe > ra {
			t.Fatalf("ReadAhead %d: %d requests in flight in the fence (bound %d), %d in the walk (bound %d), %d per bucket in the probe (bound %d)",
				ra, fence, ra*k, walk, ra, probe, ra)
		}
	}
	// The defaults read far past it: the bound above is the option's doing.
	fence, walk, probe := run(0)
	t.Logf("defaults: at most %d requests in flight in the fence, %d in the walk, %d per bucket in the probe", fence, walk, probe)
	if fence <= ahead*k || walk <= ahead || probe <= ahead {
		t.Fatalf("defaults: only %d requests in flight in the fence, %d in the walk, %d per bucket in the probe", fence, walk, probe)
	}
}
