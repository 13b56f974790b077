package loglet

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flightlog/flightlog/objstore"
)

// inFlightStore is an Express bucket with a fixed latency that records the
// most requests the whole set had in flight at once.
type inFlightStore struct {
	objstore.Store
	in, peak *atomic.Int64
}

func (s inFlightStore) enter() func() {
	n := s.in.Add(1)
	for old := s.peak.Load(); n > old && !s.peak.CompareAndSwap(old, n); old = s.peak.Load() {
	}
	time.Sleep(time.Millisecond) // the store's latency (the bubble's clock), so that requests overlap
	return func() { s.in.Add(-1) }
}

func (s inFlightStore) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	defer s.enter()()
	return s.Store.Get(ctx, key, off, n)
}

func (s inFlightStore) PutIfAbsent(ctx context.Context, key string, body []byte) error {
	defer s.enter()()
	return s.Store.PutIfAbsent(ctx, key, body)
}

func (s inFlightStore) Delete(ctx context.Context, key string) error {
	defer s.enter()()
	return s.Store.Delete(ctx, key)
}

// TestTakeoverReadAhead: ClassConfig.ReadAhead reaches a takeover. Over a
// 192-flight backlog, a successor with ReadAhead 2 never has more than
// 2·(K+1)+K requests in flight against its Express buckets while it opens
// (the fence's 2·K; or the walk's 2 beside the garbage probe's 2 per
// bucket, and the walked round's snapshot PUT to K buckets if it overlaps
// the probe's end), where the defaults have far more; both recover every
// record.
func TestTakeoverReadAhead(t *testing.T) {
	synctest.Test(t, testTakeoverReadAhead)
}

func testTakeoverReadAhead(t *testing.T) {
	const backlog = 192
	const ahead, k int64 = 2, 3
	takeover := func(readAhead int64) int64 {
		w := newTakeoverWorld()
		defer w.stop()
		fillBacklog(t, w, backlog)
		var in, peak atomic.Int64
		succ, err := w.openWith("successor", nil, func(c *Config) {
			takeoverExpressOnly(c)
			c.Express.ReadAhead = int(readAhead)
			for i, s := range c.Express.Stores {
				c.Express.Stores[i] = inFlightStore{Store: s, in: &in, peak: &peak}
			}
		})
		if err != nil {
			t.Fatalf("ReadAhead %d: successor open: %v", readAhead, err)
		}
		opened := peak.Load()
		ack, err := succ.star.Append(context.Background(), takeoverStream(backlog), Batch{Records: []Record{{Body: []byte("first")}}})
		// Fill append i went to stream i%8 and the warm append to stream
		// 0, which is stream backlog%8.
		if want := uint64(backlog/takeoverStreams) + 1; err != nil || ack.Start != want {
			t.Fatalf("ReadAhead %d: first ack after takeover %+v %v, want seq %d", readAhead, ack, err, want)
		}
		return opened
	}
	bounded := takeover(ahead)
	defaults := takeover(0)
	t.Logf("requests in flight during the takeover: at most %d with ReadAhead %d, %d with the defaults", bounded, ahead, defaults)
	if bound := ahead*(k+1) + k; bounded > bound {
		t.Fatalf("ReadAhead %d: %d requests in flight during the takeover, bound %d", ahead, bounded, bound)
	}
	if defaults <= ahead*(k+1)+k {
		t.Fatalf("defaults: only %d requests in flight during the takeover: the test no longer tells the option's bound apart", defaults)
	}
}

// TestReadAheadValidated: a negative ReadAhead is refused at Open.
func TestReadAheadValidated(t *testing.T) {
	w := newTakeoverWorld()
	defer w.stop()
	if _, err := w.open("leader", func(c *Config) { c.Express.ReadAhead = -1 }); err == nil {
		t.Fatal("Open accepted ReadAhead -1")
	}
}
