package loglet

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/objstore"
)

// TestRepairUnderReplicated: with K=3/W=2 and one Express bucket down,
// every append acks and its slot goes on the under-replicated list once the
// straggler copy is given up. With the bucket back, RepairUnderReplicated
// re-copies every slot on the list, byte for byte, while the star leads
// (a slot's first copy damaged at rest is repaired too); a second call
// finds nothing to do, and the star goes on appending without a halt.
func TestRepairUnderReplicated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		r := newRig(t, Express, 3, 1, func(c *Config, fs []*objstore.FaultStore) {
			fs[2].SetDown(true)
			c.Express.CommitDeadline = 100 * time.Millisecond
			c.Express.StragglerTimeout = 200 * time.Millisecond
		})
		const n = 6
		for i := 0; i < n; i++ {
			if _, err := r.star.Append(ctx, "a", Batch{Records: []Record{{Body: []byte{byte('a' + i)}}}}); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Second) // past every straggler's timeout (fake clock)
		synctest.Wait()
		st := r.star.Stats().Express
		if len(st.UnderReplSlots) == 0 || st.Halts != 0 {
			t.Fatalf("under-replicated slots %v, halts %d", st.UnderReplSlots, st.Halts)
		}
		key := func(slot uint64) string { return chain.SlotKey("s1", Express, st.Epoch, slot) }
		// One slot's copy in bucket 0 is damaged at rest as well.
		damaged := key(st.UnderReplSlots[0])
		obj, err := r.mems[0].Get(ctx, damaged, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		bad := bytes.Clone(obj)
		bad[len(bad)-3] ^= 0xff // the footer
		r.mems[0].Delete(ctx, damaged)
		r.mems[0].PutIfAbsent(ctx, damaged, bad)

		r.fault[2].SetDown(false)
		res, err := r.star.RepairUnderReplicated(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != len(st.UnderReplSlots) {
			t.Fatalf("%d results for %d under-replicated slots: %+v", len(res), len(st.UnderReplSlots), res)
		}
		for _, rs := range res {
			if rs.Refused != "" {
				t.Fatalf("%s refused: %s", rs.Report.Key, rs.Refused)
			}
		}
		// Repeat until nothing is left: a corrupt copy deleted only once
		// the filled copies make the hole safe takes a second pass.
		for pass := 0; ; pass++ {
			again, err := r.star.RepairUnderReplicated(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(again) == 0 {
				break
			}
			if pass == 2 {
				t.Fatalf("still damaged after %d passes: %+v", pass+1, again)
			}
		}
		for _, slot := range st.UnderReplSlots {
			want, err := r.mems[1].Get(ctx, key(slot), 0, -1)
			if err != nil {
				t.Fatal(err)
			}
			for i, m := range r.mems {
				got, err := m.Get(ctx, key(slot), 0, -1)
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("slot %d in bucket %d after the repair: %v, %d bytes, want %d bytes equal to bucket 1's", slot, i, err, len(got), len(want))
				}
			}
		}
		if _, err := r.star.Append(ctx, "a", Batch{Records: []Record{{Body: []byte("after")}}}); err != nil {
			t.Fatal(err)
		}
		if st := r.star.Stats().Express; st.Halts != 0 || st.ForeignOccupants != 0 {
			t.Fatalf("after the repair: halts %d, foreign occupants %d", st.Halts, st.ForeignOccupants)
		}
		got, err := r.star.Read(ctx, "a", ReadQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Records) != n+1 || string(got.Records[0].Body) != "a" || string(got.Records[n].Body) != "after" {
			t.Fatalf("read back %d records", len(got.Records))
		}
	})
}

// TestRepairSkipsSettledSlots: an under-replicated slot that settlement
// has since moved into settled objects and trimmed is not repaired, even
// where a copy survived the trim (a bucket refusing deletes): the repair
// must not put copies of a trimmed slot back. The list forgets such slots
// as the passes report the trim cursor (issue 24): it is empty, the count
// stays.
func TestRepairSkipsSettledSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		std := objstore.NewMem()
		r := newRig(t, Express, 3, 1, func(c *Config, fs []*objstore.FaultStore) {
			fs[2].SetDown(true)
			fs[0].SetHook(func(call fault.Call) fault.Fault {
				op := call.Op
				if op == fault.Delete {
					return fault.Fault{Err: errors.New("refusing deletes")}
				}
				return fault.Fault{}
			})
			c.Express.CommitDeadline = 100 * time.Millisecond
			c.Express.StragglerTimeout = 200 * time.Millisecond
			c.Standard = ClassConfig{Stores: []objstore.Store{std}}
			c.SettleInterval = 50 * time.Millisecond
		})
		for i := 0; i < 4; i++ {
			if _, err := r.star.Append(ctx, "a", Batch{Records: []Record{{Body: []byte{byte('a' + i)}}}}); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(5 * time.Second) // past the stragglers' timeout and many settle passes (fake clock)
		synctest.Wait()
		st := r.star.Stats().Express
		if st.UnderReplicated == 0 || st.Settle.DeletedCopies == 0 || st.Settle.UnsettledRounds != 0 {
			t.Fatalf("under-replicated %d, settle %+v: the test needs both", st.UnderReplicated, st.Settle)
		}
		if len(st.UnderReplSlots) != 0 {
			t.Fatalf("the under-replicated list still names %v, every slot settled (trim cursor %d/%d)", st.UnderReplSlots, st.Settle.TrimEpoch, st.Settle.TrimNext)
		}
		r.fault[2].SetDown(false)
		res, err := r.star.RepairUnderReplicated(ctx)
		if err != nil || len(res) != 0 {
			t.Fatalf("repair of settled slots: %+v %v", res, err)
		}
		for _, m := range r.mems[1:] {
			for _, k := range m.Keys() {
				if strings.HasPrefix(k, "chains/") {
					if obj, _ := m.Get(ctx, k, 0, 60); len(obj) == 60 && obj[6] == 1 {
						t.Fatalf("a flight copy %s is back after settlement deleted it", k)
					}
				}
			}
		}
		got, err := r.star.Read(ctx, "a", ReadQuery{})
		if err != nil || len(got.Records) != 4 {
			t.Fatalf("read after settlement: %d records, %v", len(got.Records), err)
		}
	})
}
