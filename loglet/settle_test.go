package loglet

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// settleRig is a star over Mem stores with settlement running fast.
type settleRig struct {
	meta *metastore.Mem
	std  *objstore.Mem
	exp  [3]*objstore.Mem
	cfg  Config
}

func newSettleRig() *settleRig {
	r := &settleRig{meta: metastore.NewMem(), std: objstore.NewMem()}
	for i := range r.exp {
		r.exp[i] = objstore.NewMem()
	}
	r.cfg = Config{Star: "s1", Owner: "p1", Meta: r.meta, CreateOnAppend: true, Logger: testLogger(),
		AbsorbInterval: 2 * time.Millisecond, SettleInterval: 5 * time.Millisecond,
		Standard: ClassConfig{Buckets: []objstore.Store{r.std}, FlushDeadline: time.Millisecond},
		Express:  ClassConfig{Buckets: []objstore.Store{r.exp[0], r.exp[1], r.exp[2]}, FlushDeadline: time.Millisecond}}
	return r
}

// transitKeys counts the chain slot objects left in every bucket.
func (r *settleRig) transitKeys() int {
	n := 0
	for _, b := range append([]*objstore.Mem{r.std}, r.exp[:]...) {
		for _, k := range b.Keys() {
			if strings.HasPrefix(k, "chains/") {
				n++
			}
		}
	}
	return n
}

// waitSettled polls the star's figures until both chains' trim cursors
// reach the end of the chain: every flight uploaded is absorbed, settled
// and trimmed (a condition, not a sleep: the bound is only there so a
// broken settle fails instead of hanging). Every round settled is not
// enough: the last acked flight may not be absorbed yet, and its copies
// (two of three, if the third PUT is still on its way) are then still
// there. The star is fresh, so its chains start at slot 0 of epoch 1 and
// the cursor reaches Flights.
func waitSettled(t *testing.T, s *Star) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := s.Stats()
		done := true
		for _, cs := range []*ClassStats{st.Standard, st.Express} {
			if cs == nil {
				continue
			}
			if cs.Settle.UnsettledRounds > 0 || cs.Settle.Passes == 0 || cs.Settle.TrimNext < cs.Flights {
				done = false
			} else if cs.Settle.TransitBytes != 0 {
				t.Fatalf("every round settled, yet %d transit bytes held", cs.Settle.TransitBytes)
			}
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("settlement did not catch up: standard %+v express %+v", st.Standard.Settle, st.Express.Settle)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestSettleServesHistoryFromSettledObjectsAlone: after settlement, every
// acked record reads back byte for byte with every chain slot object gone
// (trim deleted the settled ones; the test deletes whatever is left),
// through the leader and through a fresh Reader; and a fresh Open after a
// clean Close finds every stream at its tail.
func TestSettleServesHistoryFromSettledObjectsAlone(t *testing.T) {
	r := newSettleRig()
	ctx := context.Background()
	s, err := Open(ctx, r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateStream(ctx, "e", StreamOptions{Class: Express}); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{}
	for i := 0; i < 200; i++ {
		for _, st := range []string{"a", "b", "e"} {
			body := fmt.Sprintf("%s-%d-%s", st, i, strings.Repeat("x", i%50))
			ack, err := s.Append(ctx, st, Batch{Records: []Record{{Body: []byte(body)}}})
			if err != nil {
				t.Fatal(err)
			}
			if ack.Start != uint64(len(want[st])) {
				t.Fatalf("%s: acked at %d, want %d", st, ack.Start, len(want[st]))
			}
			want[st] = append(want[st], body)
		}
	}
	waitSettled(t, s)
	st := s.Stats()
	if st.Standard.Settle.Objects == 0 || st.Express.Settle.Objects == 0 || st.Express.Settle.DeletedCopies == 0 {
		t.Fatalf("nothing settled: standard %+v express %+v", st.Standard.Settle, st.Express.Settle)
	}
	written := int(st.Standard.Flights) + 3*int(st.Express.Flights) // copies PUT
	left := r.transitKeys()
	t.Logf("transit objects: %d copies written, %d left; standard %+v; express %+v", written, left, st.Standard.Settle, st.Express.Settle)
	if left >= written || int(st.Standard.Settle.DeletedCopies+st.Express.Settle.DeletedCopies) < written-left {
		t.Fatalf("trim deleted too little: %d copies written, %d left, %d deleted", written, left, st.Standard.Settle.DeletedCopies+st.Express.Settle.DeletedCopies)
	}
	for _, b := range append([]*objstore.Mem{r.std}, r.exp[:]...) {
		for _, k := range b.Keys() {
			if strings.HasPrefix(k, "chains/") {
				if err := b.Delete(ctx, k); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	rd, err := NewReader(ReaderConfig{Meta: r.meta, Standard: []objstore.Store{r.std}, Express: []objstore.Store{r.exp[0], r.exp[1], r.exp[2]}, ReadCacheMiB: -1})
	if err != nil {
		t.Fatal(err)
	}
	check := func(who string, read func(string, uint64) (ReadResult, error)) {
		for name, bodies := range want {
			next := uint64(0)
			for next < uint64(len(bodies)) {
				res, err := read(name, next)
				if err != nil {
					t.Fatalf("%s: read %s at %d: %v", who, name, next, err)
				}
				if len(res.Records) == 0 {
					t.Fatalf("%s: read %s at %d: nothing", who, name, next)
				}
				for _, rec := range res.Records {
					if rec.Seq != next || string(rec.Record.Body) != bodies[next] {
						t.Fatalf("%s: %s seq %d: got seq %d %q, want %q", who, name, next, rec.Seq, rec.Record.Body, bodies[next])
					}
					next++
				}
			}
		}
	}
	check("fresh reader", func(name string, from uint64) (ReadResult, error) {
		return rd.Read(ctx, name, ReadQuery{Start: AtSeq(from), MaxRecords: 37})
	})
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(ctx, r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close(ctx)
	check("leader after reopen", func(name string, from uint64) (ReadResult, error) {
		return s2.Read(ctx, name, ReadQuery{Start: AtSeq(from), MaxRecords: 37})
	})
	for name, bodies := range want {
		ack, err := s2.Append(ctx, name, Batch{Records: []Record{{Body: []byte("after")}}})
		if err != nil || ack.Start != uint64(len(bodies)) {
			t.Fatalf("%s: append after reopen: %+v %v", name, ack, err)
		}
	}
	cur, _, err := chain.ReadTrimCursor(ctx, r.meta, "s1", Express)
	if err != nil || !chain.Start.Less(cur.At) {
		t.Fatalf("express trim cursor %+v %v", cur, err)
	}
}

// TestSettleTransitBytesHeld: Stats counts the flight copies absorbed
// rounds hold in the buckets until settlement frees them.
func TestSettleTransitBytesHeld(t *testing.T) {
	r := newSettleRig()
	r.cfg.SettleInterval = -1 // off: nothing is freed
	ctx := context.Background()
	s, err := Open(ctx, r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	for i := 0; i < 20; i++ {
		if _, err := s.Append(ctx, "a", Batch{Records: []Record{{Body: []byte(fmt.Sprint(i))}}}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for s.Stats().Standard.FlightIndexBytes > 0 { // every flight absorbed
		if time.Now().After(deadline) {
			t.Fatal("the absorb did not catch up")
		}
		time.Sleep(time.Millisecond)
	}
	st := s.Stats().Standard
	var stored int64
	for _, k := range r.std.Keys() {
		if strings.HasPrefix(k, "chains/") {
			obj, _ := r.std.Get(ctx, k, 0, -1)
			stored += int64(len(obj))
		}
	}
	if st.Settle.TransitBytes != stored || stored == 0 {
		t.Fatalf("TransitBytes %d, the bucket holds %d bytes of flights", st.Settle.TransitBytes, stored)
	}
}
