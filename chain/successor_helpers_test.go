package chain

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/objstore"
)

// The star and class every successor-side test writes under.
const (
	tStar  = "star"
	tClass = Express
)

// testSet is K Mem buckets behind FaultStores, as a BucketSet.
type testSet struct {
	mems   []*objstore.Mem
	faults []*objstore.FaultStore
	set    BucketSet
}

// quickRetry keeps undecided rounds short in tests.
var quickRetry = RetryPolicy{MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}

func newTestSet(k, w int, seed uint64) *testSet {
	ts := &testSet{}
	for i := 0; i < k; i++ {
		m := objstore.NewMem()
		f := objstore.WithFaults(m, seed*31+uint64(i))
		ts.mems = append(ts.mems, m)
		ts.faults = append(ts.faults, f)
		ts.set.Stores = append(ts.set.Stores, f)
		ts.set.Names = append(ts.set.Names, fmt.Sprintf("zone-%c", 'a'+i))
	}
	ts.set.W = w
	ts.set.Retry = quickRetry
	return ts
}

// shapes are the (K, W) pairs every table-driven test runs.
var shapes = []struct{ k, w int }{{1, 1}, {3, 2}}

func shapeName(k, w int) string { return fmt.Sprintf("K=%d,W=%d", k, w) }

// renderFlight renders a realistic transit bundle for (epoch, slot): two
// streams' frames, one compressed.
func renderFlight(t testing.TB, epoch, slot uint64) (obj []byte, n envelope.Nonce) {
	t.Helper()
	w := envelope.NewBundleWriter()
	for si, stream := range []string{"orders", "clicks"} {
		var recs []byte
		const count = 3
		for r := 0; r < count; r++ {
			recs = envelope.AppendRecord(recs, envelope.Record{
				Timestamp: int64(1000*slot) + int64(r),
				Headers:   []envelope.Header{{Name: []byte("k"), Value: []byte(stream)}},
				Body:      fmt.Appendf(nil, `{"epoch":%d,"slot":%d,"stream":%q,"i":%d,"pad":"%032d"}`, epoch, slot, stream, r, r),
			})
		}
		codec := envelope.CodecNone
		if si == 1 {
			codec = envelope.CodecS2
		}
		if err := w.AddFrame(stream, slot*count, count, int64(1000*slot), int64(1000*slot)+count, recs, codec); err != nil {
			t.Fatal(err)
		}
	}
	n = envelope.NewNonce()
	obj, _ = w.Finish(epoch, slot, n)
	return obj, n
}

// writeSlot commits a flight of (epoch, slot) to the listed buckets (all of
// them if none are listed) with WriteFlight, as an incumbent would, and
// returns the object.
func (ts *testSet) writeSlot(t testing.TB, epoch, slot uint64, buckets ...int) []byte {
	t.Helper()
	if len(buckets) == 0 {
		for i := range ts.mems {
			buckets = append(buckets, i)
		}
	}
	obj, n := renderFlight(t, epoch, slot)
	var stores []objstore.Store
	for _, i := range buckets {
		stores = append(stores, ts.mems[i]) // bypass faults: this is setup
	}
	f := Flight{Key: SlotKey(tStar, tClass, epoch, slot), Obj: obj, Epoch: epoch, Slot: slot, Nonce: n}
	for r := range WriteFlight(context.Background(), stores, f, RetryPolicy{}) {
		if r.Status != CopyOurs {
			t.Fatalf("setup: write slot %d to bucket %d: %v (%v)", slot, buckets[r.Bucket], r.Status, r.Err)
		}
	}
	return obj
}

// writeCommitted commits slots [from, from+n) of epoch to every bucket and
// returns their objects.
func (ts *testSet) writeCommitted(t testing.TB, epoch, from uint64, n int) [][]byte {
	t.Helper()
	var objs [][]byte
	for s := from; s < from+uint64(n); s++ {
		objs = append(objs, ts.writeSlot(t, epoch, s))
	}
	return objs
}

// envelopeAt reads bucket i's envelope at (epoch, slot) straight from Mem.
func (ts *testSet) envelopeAt(t testing.TB, i int, epoch, slot uint64) (envelope.Envelope, error) {
	t.Helper()
	return ProbeEnvelope(context.Background(), ts.mems[i], SlotKey(tStar, tClass, epoch, slot))
}

// occupantsAt classifies what every bucket holds at (epoch, slot), from Mem
// directly: the ground truth a checker decides from.
func (ts *testSet) occupantsAt(t testing.TB, epoch, slot uint64) []Occupant {
	t.Helper()
	occ := make([]Occupant, len(ts.mems))
	for i := range ts.mems {
		env, err := ts.envelopeAt(t, i, epoch, slot)
		switch {
		case err == nil:
			occ[i] = classify(env, epoch, slot)
		case envelope.IsCorruption(err):
			occ[i] = Occupant{Kind: OccupantCorrupt}
		}
	}
	return occ
}

// noLists fails the test if any bucket served a List request.
func (ts *testSet) noLists(t testing.TB) {
	t.Helper()
	for i, m := range ts.mems {
		if n := m.Counters().Lists; n != 0 {
			t.Errorf("bucket %d served %d List requests; the takeover path must use point lookups only", i, n)
		}
	}
}

// putBytes sums the bytes of objects created in every bucket.
func (ts *testSet) putBytes() int64 {
	var n int64
	for _, m := range ts.mems {
		n += m.Counters().PutBytes
	}
	return n
}
