package chain

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

func testFlight(t *testing.T, epoch, slot uint64) Flight {
	t.Helper()
	w := envelope.NewBundleWriter()
	rec := envelope.AppendRecord(nil, envelope.Record{Timestamp: 1, Body: []byte("hello")})
	if err := w.AddFrame("s", 0, 1, 1, 1, rec, envelope.CodecNone); err != nil {
		t.Fatal(err)
	}
	n := envelope.NewNonce()
	obj, _ := w.Finish(epoch, slot, n)
	return Flight{Key: SlotKey("star", Express, epoch, slot), Obj: obj, Epoch: epoch, Slot: slot, Nonce: n}
}

func collect(ch <-chan CopyResult) (Tally, []CopyResult) {
	t := Tally{K: 3, W: 2}
	var rs []CopyResult
	for r := range ch {
		t.Add(r)
		rs = append(rs, r)
	}
	return t, rs
}

func threeBuckets() ([]*objstore.Mem, []*objstore.FaultStore, []objstore.Store) {
	var mems []*objstore.Mem
	var fs []*objstore.FaultStore
	var ss []objstore.Store
	for i := 0; i < 3; i++ {
		m := objstore.NewMem()
		f := objstore.WithFaults(m, uint64(i))
		mems, fs, ss = append(mems, m), append(fs, f), append(ss, f)
	}
	return mems, fs, ss
}

func TestWriteFlightAllOurs(t *testing.T) {
	mems, _, ss := threeBuckets()
	f := testFlight(t, 1, 0)
	tally, _ := collect(WriteFlight(context.Background(), ss, f, RetryPolicy{}))
	if tally.Ours != 3 || !tally.Durable() {
		t.Fatalf("tally %+v", tally)
	}
	for i, m := range mems {
		got, err := m.Get(context.Background(), f.Key, 0, -1)
		if err != nil || string(got) != string(f.Obj) {
			t.Fatalf("bucket %d: copy differs (%v)", i, err)
		}
	}
}

// TestGhostPutRecognisedByNonce: a PUT that applied but reported failure is
// retried, finds the key occupied, probes the envelope and counts the copy
// as ours.
func TestGhostPutRecognisedByNonce(t *testing.T) {
	_, fs, ss := threeBuckets()
	first := true
	fs[0].SetHook(func(call fault.Call) fault.Fault {
		op := call.Op
		if op == fault.Put && first {
			first = false
			return fault.Fault{Kind: fault.Ambiguous}
		}
		return fault.Fault{}
	})
	f := testFlight(t, 1, 0)
	tally, rs := collect(WriteFlight(context.Background(), ss, f, RetryPolicy{MinBackoff: time.Millisecond}))
	if tally.Ours != 3 {
		t.Fatalf("tally %+v", tally)
	}
	for _, r := range rs {
		if r.Bucket == 0 && (!r.Ghost || r.Attempts != 2) {
			t.Fatalf("bucket 0: %+v, want a ghost found on attempt 2", r)
		}
	}
}

// TestForeignOccupantsHalt: a poison or another writer's flight at the key is
// foreign; so is an unreadable occupant.
func TestForeignOccupants(t *testing.T) {
	cases := []struct {
		name     string
		occupant func(f Flight) []byte
	}{
		{"poison", func(f Flight) []byte { return envelope.Poison(f.Epoch, f.Slot, envelope.NewNonce()) }},
		{"other nonce", func(f Flight) []byte { return testFlight(t, f.Epoch, f.Slot).Obj }},
		{"other epoch", func(f Flight) []byte { return testFlight(t, f.Epoch+1, f.Slot).Obj }},
		{"garbage", func(Flight) []byte { return []byte(strings.Repeat("x", 100)) }},
		{"short", func(Flight) []byte { return []byte("abc") }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mems, _, ss := threeBuckets()
			f := testFlight(t, 1, 5)
			if err := mems[1].PutIfAbsent(context.Background(), f.Key, c.occupant(f)); err != nil {
				t.Fatal(err)
			}
			tally, rs := collect(WriteFlight(context.Background(), ss, f, RetryPolicy{}))
			if tally.Foreign != 1 || tally.Ours != 2 {
				t.Fatalf("tally %+v", tally)
			}
			for _, r := range rs {
				if r.Bucket == 1 && (r.Status != CopyForeign || r.Err == nil) {
					t.Fatalf("bucket 1: %+v", r)
				}
			}
		})
	}
}

func TestDownBucketFailsAtDeadline(t *testing.T) {
	_, fs, ss := threeBuckets()
	fs[2].SetDown(true)
	f := testFlight(t, 1, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	tally, rs := collect(WriteFlight(ctx, ss, f, RetryPolicy{MinBackoff: time.Millisecond}))
	if tally.Ours != 2 || tally.Failed != 1 || !tally.Durable() {
		t.Fatalf("tally %+v", tally)
	}
	for _, r := range rs {
		if r.Bucket == 2 && (r.Attempts < 2 || !errors.Is(r.Err, context.DeadlineExceeded)) {
			t.Fatalf("down bucket: %+v, want retries until the deadline", r)
		}
	}
}

func TestMintFirst(t *testing.T) {
	ms := metastore.NewMem()
	ctx := context.Background()
	rec, _, err := MintFirst(ctx, ms, "s", Standard, EpochRecord{Owner: "p1", Window: 4, K: 1, W: 1, Buckets: []string{"a"}})
	if err != nil || rec.Epoch != 1 {
		t.Fatalf("mint: %+v %v", rec, err)
	}
	got, _, err := MintFirst(ctx, ms, "s", Standard, EpochRecord{Owner: "p2", Window: 4, K: 1, W: 1, Buckets: []string{"a"}})
	if !errors.Is(err, ErrEpochTaken) || got.Owner != "p1" {
		t.Fatalf("second mint: %+v %v", got, err)
	}
	// An ambiguous create that applied is recognised as ours.
	fs := metastore.WithFaults(metastore.NewMem(), 1)
	fs.SetAmbiguousRate(1, fault.Put)
	rec, _, err = MintFirst(ctx, fs, "s", Express, EpochRecord{Owner: "p3", Window: 4, K: 3, W: 2, Buckets: []string{"a", "b", "c"}})
	if err != nil || rec.Owner != "p3" {
		t.Fatalf("mint through an ambiguous put: %+v %v", rec, err)
	}
}
