package loglet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// logCapture is a slog handler that keeps every record at WARN or above.
type logCapture struct {
	mu   *sync.Mutex
	recs *[]string
}

func newLogCapture() logCapture { return logCapture{mu: &sync.Mutex{}, recs: new([]string)} }

func (h logCapture) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h logCapture) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.mu.Lock()
	*h.recs = append(*h.recs, b.String())
	h.mu.Unlock()
	return nil
}
func (h logCapture) WithAttrs(as []slog.Attr) slog.Handler { return h }
func (h logCapture) WithGroup(string) slog.Handler         { return h }

func (h logCapture) lines() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), *h.recs...)
}

func (h logCapture) find(sub string) string {
	for _, l := range h.lines() {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

// appendSome appends n records to each of streams and waits for every ack.
func appendSome(t *testing.T, g *ledger, s *Star, streams []string, n int, tag string) {
	t.Helper()
	for i := 0; i < n; i++ {
		for _, st := range streams {
			if _, err := g.append(t, s, st, fmt.Sprintf("%s-%s-%d", tag, st, i)); err != nil {
				t.Fatalf("append %s: %v", st, err)
			}
		}
	}
}

// checkpointOf reads chain c's checkpoint from the world's metastore.
func checkpointOf(t *testing.T, w *world, c Class) absorb.Checkpoint {
	t.Helper()
	cp, _, err := absorb.ReadCheckpoint(context.Background(), w.meta, "s1", c)
	if err != nil {
		t.Fatalf("checkpoint of %s: %v", c, err)
	}
	return cp
}

// TestRebuildTailsAgreesWithSnapshot: the tails rebuilt from the refs are
// the tails the checkpoint's snapshot holds, after many rounds (full
// snapshots and deltas) and a re-created stream.
func TestRebuildTailsAgreesWithSnapshot(t *testing.T) {
	w := newWorld(t)
	g := newLedger()
	p1, err := w.open("p1", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := p1.star.CreateStream(ctx, "e", StreamOptions{Class: Express}); err != nil {
		t.Fatal(err)
	}
	appendSome(t, g, p1.star, []string{"a", "b", "e"}, 30, "one")
	if err := p1.star.DeleteStream(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	g.forget("b")
	appendSome(t, g, p1.star, []string{"a", "b"}, 5, "two")
	if err := p1.star.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []Class{Standard, Express} {
		set := []objstore.Store{w.std}
		if c == Express {
			set = []objstore.Store{w.exp[0], w.exp[1], w.exp[2]}
		}
		cp := checkpointOf(t, w, c)
		want, err := absorb.ReadTails(ctx, set, cp.Tails)
		if err != nil {
			t.Fatal(err)
		}
		got, err := absorb.RebuildTails(ctx, w.meta, "s1", c, cp)
		if err != nil {
			t.Fatal(err)
		}
		// DeleteStream reclaims the deleted incarnation's refs (those
		// absorbed by then; a round absorbing its last records may come
		// after): the snapshot still names its tail, the refs may not.
		for _, m := range []map[string]absorb.StreamTail{want.Streams, got.Streams} {
			for id := range m {
				if name, inc := chain.SplitStreamID(id); !liveIncarnation(t, w.meta, name, inc) {
					delete(m, id)
				}
			}
		}
		if len(want.Streams) == 0 || !maps.EqualFunc(got.Streams, want.Streams, sameTailPos) {
			t.Fatalf("%s: rebuilt tails %v, the snapshot holds %v", c, got.Streams, want.Streams)
		}
		for id, st := range want.Streams {
			one, ok, err := absorb.StreamTailFromRefs(ctx, w.meta, "s1", c, cp, id)
			if err != nil || !ok || !sameTailPos(one, st) {
				t.Fatalf("%s: StreamTailFromRefs(%s) = %+v %v %v, want %+v", c, id, one, ok, err, st)
			}
		}
	}
}

func (g *ledger) forget(stream string) {
	g.mu.Lock()
	delete(g.acked, stream)
	g.mu.Unlock()
}

// TestOpenDespiteDamagedTailsSnapshot: one flipped byte in the tails
// snapshot the checkpoint names (or the snapshot gone) does not keep the
// star from opening: the successor rebuilds the tails from the refs, says
// so at WARN and in Stats, and every stream continues at its tail.
func TestOpenDespiteDamagedTailsSnapshot(t *testing.T) {
	for _, damage := range []string{"flipped byte", "truncated", "deleted"} {
		for _, clean := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/clean=%v", damage, clean), inBubble(func(t *testing.T) {
				w := newWorld(t)
				w.openTimeout = 5 * time.Second
				g := newLedger()
				p1, err := w.open("p1", nil)
				if err != nil {
					t.Fatal(err)
				}
				appendSome(t, g, p1.star, []string{"a", "b", "c"}, 20, "one")
				if clean {
					if err := p1.star.Close(context.Background()); err != nil {
						t.Fatal(err)
					}
				} else {
					waitAbsorbed(t, p1.star)
					p1.kill()
				}
				cp := checkpointOf(t, w, Standard)
				if cp.Tails == "" {
					t.Fatal("no tails snapshot to damage")
				}
				damageObject(t, w.std, cp.Tails, damage)
				logs := newLogCapture()
				p2, err := w.open("p2", func(c *Config) { c.Logger = slog.New(logs) })
				if err != nil {
					t.Fatalf("open with a damaged tails snapshot: %v", err)
				}
				if n := p2.star.Stats().Standard.TailsRebuilds; n != 1 {
					t.Errorf("Stats().Standard.TailsRebuilds = %d, want 1", n)
				}
				if l := logs.find("rebuilding the tails"); l == "" || !strings.Contains(l, cp.Tails) {
					t.Errorf("no WARN naming the damaged snapshot %s; logged: %q", cp.Tails, logs.lines())
				}
				g.verify(t, p2.star)
				for _, st := range []string{"a", "b", "c"} {
					ack, err := g.append(t, p2.star, st, "two")
					if err != nil || ack.Start != 20 {
						t.Fatalf("%s after the rebuild: %+v %v (want seq 20)", st, ack, err)
					}
				}
				if err := p2.star.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
				// The next owner finds a sound snapshot again.
				p3, err := w.open("p3", nil)
				if err != nil {
					t.Fatal(err)
				}
				if n := p3.star.Stats().Standard.TailsRebuilds; n != 0 {
					t.Errorf("the owner after the rebuild rebuilt again (%d)", n)
				}
				g.verify(t, p3.star)
			}))
		}
	}
}

// damageObject damages key in m: one flipped byte in the middle, the last
// half cut off, or the object deleted.
func damageObject(t *testing.T, m *objstore.Mem, key, how string) {
	t.Helper()
	ctx := context.Background()
	b, err := m.Get(ctx, key, 0, -1)
	if err != nil {
		t.Fatalf("damage %s: %v", key, err)
	}
	switch how {
	case "flipped byte":
		if err := m.Corrupt(key, int64(len(b)/2)); err != nil {
			t.Fatal(err)
		}
		return
	case "truncated":
		b = b[:len(b)/2]
	case "deleted":
		b = nil
	default:
		t.Fatalf("damage %q?", how)
	}
	if err := m.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if b != nil {
		if err := m.PutIfAbsent(ctx, key, b); err != nil {
			t.Fatal(err)
		}
	}
}

var _ = errors.Is
var _ = chain.SlotKey

// TestTakeoverStuckOnCorruptSlotSaysSo (issue 17, item 4): a crashed
// chain whose newest unabsorbed slot is corrupt in its only copy cannot be
// fenced (neither a flight copy nor a poison can ever be found there).
// Open must not wait quietly: it logs at WARN what it waits for (the slot,
// the bucket, what it holds), its error names it when ctx ends, and the
// operator's override (FenceDiscardUnreadable) gets the star open, losing
// only the unreadable slot.
func TestTakeoverStuckOnCorruptSlotSaysSo(t *testing.T) {
	w := newWorld(t)
	g := newLedger()
	p1, err := w.open("p1", func(c *Config) { c.AbsorbInterval = time.Hour; c.Express = ClassConfig{} })
	if err != nil {
		t.Fatal(err)
	}
	appendSome(t, g, p1.star, []string{"a"}, 10, "one") // one flight each
	p1.kill()
	// The newest slot of epoch 1 holds record 9.
	newest := ""
	for _, k := range w.std.Keys() {
		if strings.HasPrefix(k, "chains/s1/standard/") && k > newest {
			newest = k
		}
	}
	if newest == "" {
		t.Fatal("no slot written")
	}
	if err := w.std.Corrupt(newest, 0); err != nil { // the envelope's first byte
		t.Fatal(err)
	}
	_, _, _, slot, _ := chain.ParseSlotKey(newest)

	logs := newLogCapture()
	w.openTimeout = 1500 * time.Millisecond
	_, err = w.open("p2", func(c *Config) {
		c.Logger = slog.New(logs)
		c.FencePatience = 100 * time.Millisecond
		c.Express = ClassConfig{}
	})
	if err == nil {
		t.Fatal("Open took over a chain whose newest slot cannot be decided")
	}
	t.Logf("Open: %v", err)
	t.Logf("WARNs: %q", logs.lines())
	want := fmt.Sprintf("slot %d", slot)
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("Open's error does not name %s and its corrupt copy: %v", want, err)
	}
	if l := logs.find("fence blocked"); l == "" || !strings.Contains(l, want) || !strings.Contains(l, "bucket-0: corrupt") {
		t.Errorf("no WARN naming %s and bucket-0's corrupt occupant; logged: %q", want, logs.lines())
	}
	// WARNs are paced: a handful in 1.5 s, not one per retry.
	if n := len(logs.lines()); n > 5 {
		t.Errorf("%d WARNs in 1.5 s: not backed off: %q", n, logs.lines())
	}

	w.openTimeout = 10 * time.Second
	logs = newLogCapture()
	p3, err := w.open("p3", func(c *Config) {
		c.Logger = slog.New(logs)
		c.Standard.FenceOverride = FenceDiscardUnreadable
		c.Express = ClassConfig{}
	})
	if err != nil {
		t.Fatalf("Open with FenceDiscardUnreadable: %v", err)
	}
	if logs.find("fence override") == "" {
		t.Errorf("the override's decision was not logged at WARN: %q", logs.lines())
	}
	got := readAll(t, p3.star, "a")
	if len(got) != 9 {
		t.Fatalf("read %d records after discarding slot %d, want 9", len(got), slot)
	}
	for i, r := range got {
		if want := fmt.Sprintf("one-a-%d", i); string(r.Body) != want {
			t.Fatalf("seq %d = %q, want %q", i, r.Body, want)
		}
	}
	ack, err := p3.star.Append(context.Background(), "a", Batch{Records: []Record{{Body: []byte("three")}}})
	if err != nil || ack.Start != 9 {
		t.Fatalf("append after the override: %+v %v (want seq 9)", ack, err)
	}
}

// TestDamageIsErrCorrupt (issue 17, item 2): with two Express copies of a
// slot corrupt and the third absent, a read fails as corruption
// (ErrCorrupt, naming the object), not as "object not found"; a read that
// meets it after some records returns those records alone; the records
// around it stay readable; and a damaged tails snapshot does not fail
// CheckTail (it falls back to the stream's refs).
func TestDamageIsErrCorrupt(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	p1, err := w.open("p1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p1.star.CreateStream(ctx, "e", StreamOptions{Class: Express}); err != nil {
		t.Fatal(err)
	}
	g := newLedger()
	appendSome(t, g, p1.star, []string{"e"}, 10, "one") // one flight each
	if err := p1.star.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The extent of record 5.
	var ext absorb.Extent
	items, err := w.meta.Scan(ctx, "refs/", "", 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		ref, err := absorb.DecodeRef(it.Value)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ref.Extents {
			if e.FirstSeq <= 5 && 5 < e.FirstSeq+uint64(e.Count) {
				ext = e
			}
		}
	}
	if ext.Key == "" || ext.Count != 1 {
		t.Fatalf("extent of record 5: %+v (want one record to itself)", ext)
	}
	for _, m := range w.exp[:2] {
		if err := m.Corrupt(ext.Key, int64(ext.Offset)+int64(ext.Length)/2); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.exp[2].Delete(ctx, ext.Key); err != nil {
		t.Fatal(err)
	}
	rd, err := NewReader(ReaderConfig{Meta: w.meta, Express: []objstore.Store{w.exp[0], w.exp[1], w.exp[2]}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := rd.Read(ctx, "e", ReadQuery{Start: AtSeq(0), MaxRecords: 100})
	if err != nil || len(res.Records) != 5 || res.Next != 5 {
		t.Fatalf("read from 0: %d records, next %d, %v; want records 0-4 and no error", len(res.Records), res.Next, err)
	}
	res, err = rd.Read(ctx, "e", ReadQuery{Start: AtSeq(5)})
	var ce *CorruptError
	if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) || !strings.Contains(ce.Object, ext.Key) || len(res.Records) != 0 {
		t.Fatalf("read of the damaged slot: %d records, %v; want ErrCorrupt naming %s", len(res.Records), err, ext.Key)
	}
	if !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("the absent third copy is not in the error: %v", err)
	}
	t.Logf("read of the damaged slot: %v", err)
	res, err = rd.Read(ctx, "e", ReadQuery{Start: AtSeq(6)})
	if err != nil || len(res.Records) != 4 {
		t.Fatalf("read from 6: %d records, %v", len(res.Records), err)
	}
	if _, err := rd.Read(ctx, "nope", ReadQuery{}); !errors.Is(err, ErrStreamNotFound) {
		t.Errorf("Read of an unknown stream: %v, want ErrStreamNotFound", err)
	}

	// Every copy of the tails snapshot damaged: CheckTail reads the tail
	// from the stream's refs, and says so in Stats.
	cp := checkpointOf(t, w, Express)
	damaged := 0
	for _, m := range w.exp {
		if _, err := m.Get(ctx, cp.Tails, 0, 1); err == nil { // the snapshot has W copies or more
			damageObject(t, m, cp.Tails, "flipped byte")
			damaged++
		}
	}
	if damaged == 0 {
		t.Fatal("no copy of the tails snapshot")
	}
	fresh, _ := NewReader(ReaderConfig{Meta: w.meta, Express: []objstore.Store{w.exp[0], w.exp[1], w.exp[2]}})
	tail, err := fresh.CheckTail(ctx, "e")
	if err != nil || tail.Seq != 10 {
		t.Fatalf("CheckTail with a damaged snapshot: %+v %v, want 10", tail, err)
	}
	if n := fresh.Stats().SnapshotFallbacks; n != 1 {
		t.Errorf("SnapshotFallbacks = %d, want 1", n)
	}
	// The leader's read of absorbed history says corruption too.
	p2, err := w.open("p2", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p2.star.Read(ctx, "e", ReadQuery{Start: AtSeq(5)}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("the leader's read of the damaged slot: %v, want ErrCorrupt", err)
	}
}

// liveIncarnation reports whether the stream record of name carries inc.
func liveIncarnation(t *testing.T, meta metastore.Store, name, inc string) bool {
	t.Helper()
	it, err := meta.Get(context.Background(), chain.StreamRecordKey(name))
	if errors.Is(err, metastore.ErrNotFound) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	var rec streamRecord
	if err := json.Unmarshal(it.Value, &rec); err != nil {
		t.Fatal(err)
	}
	return rec.Incarnation == inc
}

// sameTailPos compares two tails' positions (a tail rebuilt from the refs
// has no producer window: that lives in the snapshot only).
func sameTailPos(a, b absorb.StreamTail) bool { return a.Next == b.Next && a.Timestamp == b.Timestamp }
