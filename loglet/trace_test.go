package loglet

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/objstore"
)

// gatedStore holds every chain slot PUT until its gate is opened.
type gatedStore struct {
	objstore.Store
	gate <-chan struct{}
}

func (g gatedStore) PutIfAbsent(ctx context.Context, key string, body []byte) error {
	if strings.HasPrefix(key, "chains/") {
		select {
		case <-g.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g.Store.PutIfAbsent(ctx, key, body)
}

// TestWriteTrace: an AckFuture's trace is withheld until the outcome is
// delivered, then gives the batch's stages in order. On the fake clock of
// a synctest bubble, so that "no outcome yet" is checked once every
// goroutine is blocked, not after a guess at how long is long enough.
func TestWriteTrace(t *testing.T) {
	synctest.Test(t, testWriteTrace)
}

func testWriteTrace(t *testing.T) {
	gate := make(chan struct{})
	opened := false
	open := func() {
		if !opened {
			opened = true
			close(gate)
		}
	}
	r := newRig(t, Express, 3, 1, func(cfg *Config, faults []*objstore.FaultStore) {
		for i, b := range cfg.Express.Stores {
			cfg.Express.Stores[i] = gatedStore{Store: b, gate: gate}
		}
		for _, f := range faults {
			f.SetLatency(fault.Fixed(2*time.Millisecond), fault.Put)
		}
	})
	t.Cleanup(open) // before the rig's Close (cleanups run last first)
	ctx := context.Background()
	sess, err := r.star.OpenAppendSession(ctx, "traced")
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	var futures []*AckFuture
	for i := 0; i < 3; i++ {
		f, err := sess.Submit(ctx, Batch{Records: []Record{{Body: []byte("hello")}}})
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	// No slot PUT can land, so no outcome is delivered, whatever the cut:
	// 20ms pass on the bubble's clock (many flush deadlines), then every
	// goroutine is blocked (the PUTs on the gate).
	time.Sleep(20 * time.Millisecond)
	synctest.Wait()
	for i, f := range futures {
		select {
		case <-f.Done():
			t.Fatalf("batch %d: outcome delivered with every slot PUT held", i)
		default:
		}
		if tr, ok := f.Trace(); ok {
			t.Fatalf("batch %d: Trace before Done: %+v", i, tr)
		}
	}
	open()
	for i, f := range futures {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		seen := time.Now()
		tr, ok := f.Trace()
		if !ok {
			t.Fatalf("batch %d: no trace after Done", i)
		}
		t.Logf("batch %d: epoch %d slot %d, by size %v: claim +%v, put +%v, durable +%v (store %v), released +%v",
			i, tr.Epoch, tr.Slot, tr.BySize, tr.Claimed.Sub(tr.Submitted), tr.PutStart.Sub(tr.Submitted),
			tr.Durable.Sub(tr.Submitted), tr.StoreW, tr.Released.Sub(tr.Submitted))
		stamps := []struct {
			name string
			at   time.Time
		}{{"before Submit", before}, {"Submitted", tr.Submitted}, {"Claimed", tr.Claimed}, {"PutStart", tr.PutStart},
			{"Durable", tr.Durable}, {"Released", tr.Released}, {"seen", seen}}
		for j := 1; j < len(stamps); j++ {
			if stamps[j].at.IsZero() || stamps[j].at.Before(stamps[j-1].at) {
				t.Errorf("batch %d: %s %v is before %s %v", i, stamps[j].name, stamps[j].at, stamps[j-1].name, stamps[j-1].at)
			}
		}
		if tr.Oldest.IsZero() || tr.Oldest.After(tr.Claimed) || tr.Epoch == 0 {
			t.Errorf("batch %d: oldest %v, claimed %v, epoch %d", i, tr.Oldest, tr.Claimed, tr.Epoch)
		}
		// The W-th copy's PUT waited at least the bucket's fixed 2ms (and
		// however long of the 20ms hold it was out for).
		if tr.StoreW < 2*time.Millisecond {
			t.Errorf("batch %d: W-th copy's PUT took %v, want >= 2ms", i, tr.StoreW)
		}
	}
	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
