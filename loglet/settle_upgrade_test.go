package loglet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// TestSettleUpgradeExistingStar (issue 24, item 3): a star that ran with
// settlement off through two processes (the first closed cleanly, the
// second crashed), with a consumer group's offset, a trim, and a stream
// deleted and created again in its history, is reopened with the default
// Config, which settles. Every record reads back (the trimmed stream from
// its trim point, the re-created one with its new incarnation's records
// only), the group resumes at its offset, every ref is settled or points
// into the live epoch, and no transit slot of the old epochs below their
// cuts is left in any bucket. On the fake clock of a synctest bubble.
func TestSettleUpgradeExistingStar(t *testing.T) {
	synctest.Test(t, testSettleUpgradeExistingStar)
}

func testSettleUpgradeExistingStar(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	off := func(c *Config) { c.SettleInterval = -1 }
	want := map[string][]string{} // by stream, from seq 0 of the live incarnation
	appendTo := func(s *Star, stream string, n int, tag string) {
		t.Helper()
		for i := 0; i < n; i++ {
			body := fmt.Sprintf("%s-%s-%d-%s", stream, tag, i, strings.Repeat("x", i%40))
			ack, err := s.Append(ctx, stream, Batch{Records: []Record{{Body: []byte(body)}}})
			if err != nil {
				t.Fatalf("append to %s: %v", stream, err)
			}
			if ack.Start != uint64(len(want[stream])) {
				t.Fatalf("%s: acked at %d, want %d", stream, ack.Start, len(want[stream]))
			}
			want[stream] = append(want[stream], body)
		}
	}

	// The first process: four streams, a group, a trim, a delete and a
	// re-create; a clean close.
	p1, err := w.open("p1", off)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []string{"e", "de"} {
		if _, err := p1.star.CreateStream(ctx, st, StreamOptions{Class: Express}); err != nil {
			t.Fatal(err)
		}
	}
	for _, st := range []string{"a", "e", "t", "d", "de"} {
		appendTo(p1.star, st, 30, "p1")
	}
	// The group: read up to 17, then commit its offset as loglet/groups
	// writes one (groups imports loglet, so this test cannot use it; the
	// groups package's own tests run sessions across trims and retention).
	sess, err := p1.star.OpenReadSession(ctx, "a", ReadQuery{})
	if err != nil {
		t.Fatal(err)
	}
	for sess.Next() < 17 {
		if _, err := sess.Recv(ctx); err != nil {
			t.Fatal(err)
		}
	}
	groupKey := "offsets/billing/" + chain.StreamKey("a") + "/" + sess.Incarnation()
	if _, err := w.meta.Commit(ctx, []metastore.Op{{Kind: metastore.OpPut, Key: groupKey, Expect: metastore.NoVersion,
		Value: []byte(`{"next":17,"nonce":"upgrade-test","committed_ms":1}`)}}); err != nil {
		t.Fatal(err)
	}
	const trimAt = 12
	if err := p1.star.Trim(ctx, "t", trimAt); err != nil {
		t.Fatal(err)
	}
	for _, st := range []string{"d", "de"} {
		if err := p1.star.DeleteStream(ctx, st); err != nil {
			t.Fatal(err)
		}
		delete(want, st)
	}
	if _, err := p1.star.CreateStream(ctx, "de", StreamOptions{Class: Express}); err != nil {
		t.Fatal(err)
	}
	appendTo(p1.star, "de", 5, "p1-again")
	if err := p1.star.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// The second: re-creates d, writes more, and crashes (its cut is a
	// fence's).
	p2, err := w.open("p2", off)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []string{"a", "e", "t", "de", "d"} {
		appendTo(p2.star, st, 20, "p2")
	}
	waitAbsorbed(t, p2.star)
	p2.kill()

	// The upgrade: the default Config, which settles.
	if DefaultConfig().SettleInterval <= 0 {
		t.Fatalf("DefaultConfig().SettleInterval = %v: settlement is not on by default", DefaultConfig().SettleInterval)
	}
	p3, err := w.open("p3", nil)
	if err != nil {
		t.Fatal(err)
	}
	appendTo(p3.star, "a", 5, "p3")
	appendTo(p3.star, "e", 5, "p3")
	atLive := func() bool {
		st := p3.star.Stats()
		for _, cs := range []*ClassStats{st.Standard, st.Express} {
			if cs.Settle.TrimEpoch < cs.Epoch || cs.Settle.TrimNext < cs.ReleasePoint || cs.Settle.UnsettledRounds > 0 {
				return false
			}
		}
		return true
	}
	if !quiesceUntil(10*time.Minute, 100*time.Millisecond, atLive) {
		st := p3.star.Stats()
		t.Fatalf("settlement never reached the live epoch: standard %+v (epoch %d); express %+v (epoch %d)",
			st.Standard.Settle, st.Standard.Epoch, st.Express.Settle, st.Express.Epoch)
	}
	st := p3.star.Stats()
	if st.Standard.Settle.Objects == 0 || st.Express.Settle.Objects == 0 || st.Express.Settle.DeletedCopies == 0 {
		t.Fatalf("nothing settled: standard %+v express %+v", st.Standard.Settle, st.Express.Settle)
	}

	// Every record reads back; the trimmed stream from its trim point.
	for stream, bodies := range want {
		got := readAll(t, p3.star, stream)
		first := uint64(0)
		if stream == "t" {
			first = trimAt
		}
		if uint64(len(got)) != uint64(len(bodies))-first {
			t.Fatalf("%s: read %d records, want %d (from %d)", stream, len(got), uint64(len(bodies))-first, first)
		}
		for i, r := range got {
			seq := first + uint64(i)
			if r.Seq != seq || string(r.Body) != bodies[seq] {
				t.Fatalf("%s: record %d: seq %d %q, want seq %d %q", stream, i, r.Seq, r.Body, seq, bodies[seq])
			}
		}
	}
	// The group resumes at its offset: the record is still there, and a
	// session from it starts at the record after the last acknowledged.
	it, err := w.meta.Get(ctx, groupKey)
	if err != nil || !strings.Contains(string(it.Value), `"next":17`) {
		t.Fatalf("group offset after the upgrade: %q, %v; want next 17", it.Value, err)
	}
	g3, err := p3.star.OpenReadSession(ctx, "a", ReadQuery{Start: AtSeq(17)})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := g3.Recv(ctx)
	if err != nil || len(recs) == 0 || recs[0].Seq != 17 || string(recs[0].Body) != want["a"][17] {
		t.Fatalf("group's first record after the upgrade: %v %v, want seq 17", recs, err)
	}

	// Refs: settled, or in the live epoch; none of the deleted
	// incarnations' left. Transit: no slot of an old epoch below its cut.
	live := map[string]bool{}
	for stream := range want {
		live[streamID(t, w.meta, stream)] = true
	}
	items, err := w.meta.Scan(ctx, "refs/", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		ref, err := absorb.DecodeRef(it.Value)
		if err != nil {
			t.Fatal(err)
		}
		if !liveRef(it.Key, live) {
			t.Fatalf("ref %s of a deleted incarnation is still there", it.Key)
		}
		for _, e := range ref.Extents {
			if _, class, epoch, _, ok := chain.ParseSlotKey(e.Key); ok && epoch < epochOf(st, class) {
				t.Fatalf("ref %s still points into epoch %d of %s, settled: %s", it.Key, epoch, class, e.Key)
			}
		}
	}
	for c, bkts := range map[Class][]*objstore.Mem{Standard: {w.std}, Express: w.exp[:]} {
		rec, _, err := chain.ReadEpoch(ctx, w.meta, "s1", c)
		if err != nil {
			t.Fatal(err)
		}
		cutOf := map[uint64]uint64{}
		for _, k := range rec.Cuts {
			cutOf[k.Epoch] = k.Slot
		}
		for _, b := range bkts {
			for _, k := range b.Keys() {
				_, _, epoch, slot, ok := chain.ParseSlotKey(k)
				if !ok || epoch >= epochOf(st, c) {
					continue
				}
				if cut, known := cutOf[epoch]; !known || slot < cut {
					t.Fatalf("%s: transit slot %s of a settled epoch (cut %d, known %v) is still there", c, k, cut, known)
				}
			}
		}
	}
	if err := p3.star.Close(ctx); err != nil && !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
}

// epochOf is the live epoch of class c in st.
func epochOf(st Stats, c Class) uint64 {
	if c == Express {
		return st.Express.Epoch
	}
	return st.Standard.Epoch
}

// liveRef reports whether the ref key belongs to one of the live
// incarnations' stream ids.
func liveRef(key string, live map[string]bool) bool {
	for id := range live {
		if strings.HasPrefix(key, chain.RefPrefix(id)) {
			return true
		}
	}
	return false
}
