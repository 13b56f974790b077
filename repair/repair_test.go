package repair

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

const star = "s1"

// flight renders a transit bundle of two streams' frames for (epoch, slot).
func flight(t *testing.T, epoch, slot uint64) ([]byte, envelope.Nonce) {
	t.Helper()
	w := envelope.NewBundleWriter()
	for i, stream := range []string{"a", "b"} {
		var recs []byte
		for j := 0; j < 3; j++ {
			recs = envelope.AppendRecord(recs, envelope.Record{Timestamp: int64(10 + j), Body: []byte(fmt.Sprintf("%s-%d-%d", stream, slot, j))})
		}
		if err := w.AddFrame(stream, uint64(i), 3, 10, 12, recs, envelope.CodecNone); err != nil {
			t.Fatal(err)
		}
	}
	n := envelope.NewNonce()
	obj, _ := w.Finish(epoch, slot, n)
	return obj, n
}

// harness is one Express-like chain: K=3, W=2, over Mem stores.
type harness struct {
	t      *testing.T
	meta   *metastore.Mem
	stores []objstore.Store
	c      Chain
}

func newHarness(t *testing.T, k, w int) *harness {
	h := &harness{t: t, meta: metastore.NewMem()}
	var names []string
	for i := 0; i < k; i++ {
		h.stores = append(h.stores, objstore.NewMem())
		names = append(names, fmt.Sprintf("b%d", i))
	}
	h.c = Chain{Meta: h.meta, Star: star, Class: chain.Express, Set: chain.BucketSet{Stores: h.stores, Names: names, W: w}}
	return h
}

// record writes the epoch record (live epoch e, cuts of earlier epochs)
// and the checkpoint.
func (h *harness) record(e uint64, cuts []chain.Cut, cp absorb.Checkpoint) {
	h.t.Helper()
	ctx := context.Background()
	rec := chain.EpochRecord{Epoch: e, Owner: "o", Window: 4, K: len(h.stores), W: h.c.Set.W, Buckets: h.c.Set.Names, Cuts: cuts}
	v, _ := json.Marshal(rec)
	if _, err := h.meta.Put(ctx, chain.EpochKey(star, chain.Express), v, metastore.AnyVersion); err != nil {
		h.t.Fatal(err)
	}
	v, _ = json.Marshal(cp)
	if _, err := h.meta.Put(ctx, chain.CheckpointKey(star, chain.Express), v, metastore.AnyVersion); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) put(i int, key string, obj []byte) {
	h.t.Helper()
	ctx := context.Background()
	if err := h.stores[i].Delete(ctx, key); err != nil {
		h.t.Fatal(err)
	}
	if obj != nil {
		if err := h.stores[i].PutIfAbsent(ctx, key, obj); err != nil {
			h.t.Fatal(err)
		}
	}
}

func (h *harness) get(i int, key string) []byte {
	obj, err := h.stores[i].Get(context.Background(), key, 0, -1)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return obj
}

// Damage to one copy, as done at rest.
func flipAt(off func(obj []byte) int) func([]byte) []byte {
	return func(obj []byte) []byte {
		o := bytes.Clone(obj)
		o[off(o)] ^= 0x5a
		return o
	}
}

var (
	flipEnvelope = flipAt(func([]byte) int { return 20 }) // inside the epoch/slot fields
	flipFrame    = flipAt(func([]byte) int { return envelope.EnvelopeSize + 2 })
	flipFooter   = flipAt(func(o []byte) int { return len(o) - 3 })
	truncate     = func(obj []byte) []byte { return bytes.Clone(obj[:len(obj)-7]) }
	remove       = func([]byte) []byte { return nil }
)

func TestCheckSlotClassifiesEveryCopy(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		damage func([]byte) []byte
		state  State
		err    string
	}{
		{"intact", func(o []byte) []byte { return o }, Good, ""},
		{"envelope-byte", flipEnvelope, Corrupt, "envelope:"},
		{"footer-byte", flipFooter, Corrupt, "footer"},
		{"frame-byte", flipFrame, Corrupt, "frame 0 (stream \"a\""},
		{"truncated", truncate, Corrupt, "truncated"},
		{"missing", remove, Missing, ""},
		{"poison", func([]byte) []byte { return envelope.Poison(3, 7, envelope.NewNonce()) }, Poison, ""},
		{"another-slot", func([]byte) []byte { o, _ := flight(t, 3, 8); return o }, Foreign, "not of epoch 3 slot 7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 3, 2)
			obj, n := flight(t, 3, 7)
			key := chain.SlotKey(star, chain.Express, 3, 7)
			for i := range h.stores {
				h.put(i, key, obj)
			}
			h.put(1, key, tc.damage(obj))
			r, err := CheckSlot(ctx, h.c.Set, star, chain.Express, 3, 7)
			if err != nil {
				t.Fatal(err)
			}
			got := r.Copies[1]
			if got.State != tc.state || (tc.err != "" && (got.Err == nil || !strings.Contains(got.Err.Error(), tc.err))) {
				t.Fatalf("copy in b1: %v (%v), want %v with %q", got.State, got.Err, tc.state, tc.err)
			}
			if r.Copies[0].State != Good || r.Copies[2].State != Good || r.Nonce != n || r.Source() != "b0" || len(r.Frames) != 2 {
				t.Fatalf("the intact copies: %+v", r)
			}
			if want := tc.state == Good; r.Healthy() != want {
				t.Fatalf("Healthy() = %v, want %v", r.Healthy(), want)
			}
		})
	}
}

// TestRepairSlot runs each settlement rule: what is repaired comes back
// byte for byte; what is refused is left exactly as it was.
func TestRepairSlot(t *testing.T) {
	ctx := context.Background()
	const e, s = 3, 7
	live := func(h *harness) { h.record(e, nil, absorb.Checkpoint{Epoch: e, Next: 2}) }
	for _, tc := range []struct {
		name    string
		setup   func(h *harness)
		damage  []func([]byte) []byte // per bucket; nil leaves the copy
		ev      Evidence
		settled Settlement
		refused string // substring of Refused
		done    []bool // per damaged copy, in bucket order
	}{
		{name: "quorum-frame", setup: live, damage: []func([]byte) []byte{nil, flipFrame, nil}, settled: Quorum, done: []bool{true}},
		{name: "quorum-envelope", setup: live, damage: []func([]byte) []byte{flipEnvelope, nil, nil}, settled: Quorum, done: []bool{true}},
		{name: "quorum-truncated", setup: live, damage: []func([]byte) []byte{nil, nil, truncate}, settled: Quorum, done: []bool{true}},
		{name: "quorum-missing", setup: live, damage: []func([]byte) []byte{nil, remove, nil}, settled: Quorum, done: []bool{true}},
		{name: "undetermined-one-good", setup: live, damage: []func([]byte) []byte{nil, remove, remove}, refused: "undetermined"},
		{name: "undetermined-one-good-one-corrupt", setup: live, damage: []func([]byte) []byte{nil, flipFrame, remove}, refused: "undetermined"},
		{name: "referenced-one-good", setup: live, damage: []func([]byte) []byte{nil, remove, remove}, ev: Evidence{Referenced: true}, settled: Referenced, done: []bool{true, true}},
		// Released, live epoch: the missing copy is filled; the corrupt
		// one (a flight by its envelope) is not deleted, since without
		// it only one bucket would hold the flight for a fence to count.
		{name: "released-keeps-a-fence-countable-copy", setup: live, damage: []func([]byte) []byte{nil, flipFrame, remove}, ev: Evidence{Released: true}, settled: Released, done: []bool{false, true}},
		// The same with a corrupt envelope: a fence does not count that
		// copy, yet deleting it would open a hole for a poison.
		{name: "released-corrupt-envelope-kept", setup: live, damage: []func([]byte) []byte{nil, flipEnvelope, remove}, ev: Evidence{Released: true}, settled: Released, done: []bool{false, true}},
		{name: "below-cut-one-good", setup: func(h *harness) {
			h.record(e+1, []chain.Cut{{Epoch: e, Slot: s + 1}}, absorb.Checkpoint{Epoch: e, Next: 2})
		}, damage: []func([]byte) []byte{flipFrame, nil, flipEnvelope}, settled: BelowCut, done: []bool{true, true}},
		{name: "absorbed-one-good", setup: func(h *harness) {
			h.record(e, nil, absorb.Checkpoint{Epoch: e, Next: s + 1})
		}, damage: []func([]byte) []byte{truncate, flipFooter, nil}, settled: Absorbed, done: []bool{true, true}},
		{name: "at-the-cut", setup: func(h *harness) {
			h.record(e+1, []chain.Cut{{Epoch: e, Slot: s}}, absorb.Checkpoint{Epoch: e, Next: 2})
		}, damage: []func([]byte) []byte{flipFrame, nil, nil}, ev: Evidence{Referenced: true}, refused: "at or past epoch 3's cut 7"},
		{name: "trimmed", setup: func(h *harness) {
			live(h)
			cur := chain.TrimCursor{At: chain.Position{Epoch: 3, Next: 8}, Deleted: chain.Position{Epoch: 3, Next: 8}}
			h.meta.Put(ctx, chain.TrimKey(star, chain.Express), cur.Encode(), metastore.AnyVersion)
		}, damage: []func([]byte) []byte{nil, remove, nil}, refused: "trim cursor"},
		{name: "no-good-copy", setup: live, damage: []func([]byte) []byte{flipFrame, flipEnvelope, remove}, ev: Evidence{Referenced: true}, refused: "no good copy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 3, 2)
			tc.setup(h)
			obj, _ := flight(t, e, s)
			key := chain.SlotKey(star, chain.Express, e, s)
			for i, d := range tc.damage {
				h.put(i, key, obj)
				if d != nil {
					h.put(i, key, d(obj))
				}
			}
			var before [][]byte
			for i := range h.stores {
				before = append(before, h.get(i, key))
			}
			res, err := h.c.RepairSlot(ctx, e, s, tc.ev)
			if err != nil {
				t.Fatal(err)
			}
			if tc.refused != "" {
				if !strings.Contains(res.Refused, tc.refused) || len(res.Actions) != 0 {
					t.Fatalf("Refused %q with %d actions, want a refusal with %q", res.Refused, len(res.Actions), tc.refused)
				}
				for i := range h.stores {
					if !bytes.Equal(h.get(i, key), before[i]) {
						t.Fatalf("a refused repair changed bucket %d", i)
					}
				}
				return
			}
			if res.Refused != "" || res.Settled != tc.settled || len(res.Actions) != len(tc.done) {
				t.Fatalf("settled %v refused %q actions %+v; want %v and %d actions", res.Settled, res.Refused, res.Actions, tc.settled, len(tc.done))
			}
			for j, a := range res.Actions {
				if a.Done != tc.done[j] {
					t.Fatalf("action %d: %+v, want done=%v", j, a, tc.done[j])
				}
			}
			for i, d := range tc.damage {
				got := h.get(i, key)
				wasDone := false
				for _, a := range res.Actions {
					wasDone = wasDone || (a.Bucket == h.c.Set.Names[i] && a.Done)
				}
				switch {
				case d == nil || wasDone:
					if !bytes.Equal(got, obj) {
						t.Fatalf("bucket %d does not hold the flight's bytes after the repair", i)
					}
				default:
					if !bytes.Equal(got, before[i]) {
						t.Fatalf("bucket %d: a refused copy was changed", i)
					}
				}
			}
			if again, _ := CheckSlot(ctx, h.c.Set, star, chain.Express, e, s); res.Complete() != again.Healthy() {
				t.Fatalf("Complete()=%v but the slot after: %+v", res.Complete(), again.Copies)
			}
		})
	}
}

// hookStore runs afterDelete once a Delete has been applied: what a
// concurrent writer may do in the hole before the repair's PutIfAbsent.
type hookStore struct {
	objstore.Store
	afterDelete func(key string)
}

func (h *hookStore) Delete(ctx context.Context, key string) error {
	err := h.Store.Delete(ctx, key)
	if err == nil && h.afterDelete != nil {
		h.afterDelete(key)
	}
	return err
}

// TestRepairRaces: a fencer's poison or the leader's straggler copy lands
// in the hole between the delete and the PutIfAbsent; and the leader's
// straggler PUT comes after the repair.
func TestRepairRaces(t *testing.T) {
	ctx := context.Background()
	const e, s = 2, 5
	key := chain.SlotKey(star, chain.Express, e, s)
	setup := func(t *testing.T, inHole func(b objstore.Store, obj []byte) func(string)) (*harness, []byte, envelope.Nonce) {
		h := newHarness(t, 3, 2)
		h.record(e, nil, absorb.Checkpoint{Epoch: e, Next: 0})
		obj, n := flight(t, e, s)
		for i := range h.stores {
			h.put(i, key, obj)
		}
		h.put(2, key, flipFrame(obj))
		if inHole != nil {
			inner := h.stores[2]
			h.c.Set.Stores[2] = &hookStore{Store: inner, afterDelete: inHole(inner, obj)}
		}
		return h, obj, n
	}
	t.Run("fencer-poison-in-the-hole", func(t *testing.T) {
		h, _, _ := setup(t, func(b objstore.Store, _ []byte) func(string) {
			return func(key string) { b.PutIfAbsent(ctx, key, envelope.Poison(e, s, envelope.NewNonce())) }
		})
		res, err := h.c.RepairSlot(ctx, e, s, Evidence{})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Actions) != 1 || res.Actions[0].Done || !strings.Contains(res.Actions[0].Note, "poison") {
			t.Fatalf("actions %+v, want one left to the fencer's poison", res.Actions)
		}
		// The slot is still committed: two flight copies of one nonce.
		after, _ := CheckSlot(ctx, h.c.Set, star, chain.Express, e, s)
		if after.Good != 2 || after.Poisons() != 1 {
			t.Fatalf("after: %+v", after.Copies)
		}
	})
	t.Run("straggler-lands-in-the-hole", func(t *testing.T) {
		h, obj, _ := setup(t, func(b objstore.Store, obj []byte) func(string) {
			return func(key string) { b.PutIfAbsent(ctx, key, obj) }
		})
		res, err := h.c.RepairSlot(ctx, e, s, Evidence{})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Actions) != 1 || !res.Actions[0].Done || res.Actions[0].Copied || !strings.Contains(res.Actions[0].Note, "straggler") {
			t.Fatalf("actions %+v, want the straggler's copy accepted", res.Actions)
		}
		if !bytes.Equal(h.get(2, key), obj) {
			t.Fatal("bucket 2 does not hold the flight")
		}
	})
	t.Run("straggler-after-the-repair-is-a-ghost", func(t *testing.T) {
		h, obj, n := setup(t, nil)
		h.put(2, key, nil) // missing, as an abandoned straggler leaves it
		res, err := h.c.RepairSlot(ctx, e, s, Evidence{Released: true})
		if err != nil || !res.Complete() {
			t.Fatalf("%+v %v", res, err)
		}
		r := chain.WriteCopy(ctx, h.stores[2], chain.Flight{Key: key, Obj: obj, Epoch: e, Slot: s, Nonce: n}, chain.RetryPolicy{})
		if r.Status != chain.CopyOurs || !r.Ghost {
			t.Fatalf("the leader's late PUT resolved %v (ghost %v, %v): it would halt the epoch", r.Status, r.Ghost, r.Err)
		}
	})
}

// streamRecord is the part of a stream's metastore record the harness
// writes.
type streamRecord struct {
	Name        string `json:"name"`
	Class       string `json:"class"`
	Star        string `json:"star"`
	Incarnation string `json:"incarnation,omitempty"`
}

// snapHarness is a chain with two streams' refs, a pending round's ref
// past the checkpoint, and the checkpoint's tails snapshot in every bucket.
func snapHarness(t *testing.T, k int) (*harness, absorb.Checkpoint, absorb.Tails) {
	ctx := context.Background()
	h := newHarness(t, k, k/2+1)
	const e = 4
	slotKey := func(s uint64) string { return chain.SlotKey(star, chain.Express, e, s) }
	ids := map[string]string{}
	for _, name := range []string{"x", "y", "z"} {
		inc := chain.NewIncarnation()
		ids[name] = chain.StreamID(name, inc)
		v, _ := json.Marshal(streamRecord{Name: name, Class: "express", Star: star, Incarnation: inc})
		if _, err := h.meta.Put(ctx, chain.StreamRecordKey(name), v, metastore.NoVersion); err != nil {
			t.Fatal(err)
		}
	}
	// An other star's stream is not the chain's.
	v, _ := json.Marshal(streamRecord{Name: "w", Class: "express", Star: "other", Incarnation: chain.NewIncarnation()})
	h.meta.Put(ctx, chain.StreamRecordKey("w"), v, metastore.NoVersion)
	ref := func(name string, start, end uint64, maxTS int64, slots ...uint64) {
		r := absorb.SpanRef{Stream: ids[name], Class: "express", Start: start, End: end, MaxTS: maxTS, Writer: "o/4/0"}
		per := (end - start) / uint64(len(slots))
		for i, s := range slots {
			n := per
			if i == len(slots)-1 {
				n = end - start - per*uint64(i)
			}
			r.Extents = append(r.Extents, absorb.Extent{Key: slotKey(s), Offset: 60, Length: 10, RawLength: 10, FirstSeq: start + per*uint64(i), Count: uint32(n)})
		}
		v, _ := json.Marshal(r)
		if _, err := h.meta.Put(ctx, r.Key(), v, metastore.NoVersion); err != nil {
			t.Fatal(err)
		}
	}
	ref("x", 0, 4, 100, 0, 1)
	ref("x", 4, 6, 150, 3)
	ref("y", 0, 2, 120, 2)
	ref("x", 6, 9, 200, 5) // the pending round [5, 6): past the checkpoint
	want := absorb.Tails{Epoch: e, Next: 5, Streams: map[string]absorb.StreamTail{
		ids["x"]: {Next: 6, Timestamp: 150},
		ids["y"]: {Next: 2, Timestamp: 120},
	}}
	key := absorb.TailsKey(star, chain.Express, e, 5, e)
	cp := absorb.Checkpoint{Epoch: e, Next: 5, Owner: "o", OwnerEpoch: e, Pending: &absorb.Round{Epoch: e, From: 5, To: 6}, Tails: key, Counter: 9}
	h.record(e, nil, cp)
	for i := range h.stores {
		h.put(i, key, absorb.EncodeTails(want))
	}
	return h, cp, want
}

func TestRebuildTailsFromRefs(t *testing.T) {
	h, cp, want := snapHarness(t, 1)
	got, err := h.c.RebuildTails(context.Background(), cp.Epoch, cp.Next)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(absorb.EncodeTails(got), absorb.EncodeTails(want)) {
		t.Fatalf("rebuilt %+v\nwant    %+v", got, want)
	}
}

func TestRepairSnapshots(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		k       int
		damage  []func([]byte) []byte
		rebuilt bool
		refused string
		breakMe func(h *harness)
	}{
		{name: "only-copy-flipped", k: 1, damage: []func([]byte) []byte{flipAt(func([]byte) int { return 5 })}, rebuilt: true},
		{name: "only-copy-missing", k: 1, damage: []func([]byte) []byte{remove}, rebuilt: true},
		{name: "one-of-three-truncated", k: 3, damage: []func([]byte) []byte{nil, truncate, nil}},
		{name: "two-of-three", k: 3, damage: []func([]byte) []byte{remove, flipAt(func([]byte) int { return 1 }), nil}},
		{name: "all-three", k: 3, damage: []func([]byte) []byte{remove, truncate, flipAt(func([]byte) int { return 9 })}, rebuilt: true},
		{name: "undecodable-ref", k: 1, damage: []func([]byte) []byte{remove}, refused: "cannot be rebuilt", breakMe: func(h *harness) {
			items, _ := h.meta.Scan(ctx, "refs/", "", 1)
			h.meta.Put(ctx, items[0].Key, []byte("{"), metastore.AnyVersion)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, cp, want := snapHarness(t, tc.k)
			orig := absorb.EncodeTails(want)
			for i, d := range tc.damage {
				if d != nil {
					h.put(i, cp.Tails, d(orig))
				}
			}
			if tc.breakMe != nil {
				tc.breakMe(h)
			}
			reps, err := h.c.CheckSnapshots(ctx, cp)
			if err != nil || len(reps) != 1 || reps[0].Healthy() {
				t.Fatalf("check before: %+v %v", reps, err)
			}
			res, err := h.c.RepairSnapshots(ctx)
			if err != nil || len(res) != 1 {
				t.Fatalf("%+v %v", res, err)
			}
			if tc.refused != "" {
				if !strings.Contains(res[0].Refused, tc.refused) {
					t.Fatalf("Refused %q, want %q", res[0].Refused, tc.refused)
				}
				return
			}
			if !res[0].Complete() || res[0].Rebuilt != tc.rebuilt {
				t.Fatalf("result %+v, want complete, rebuilt=%v", res[0], tc.rebuilt)
			}
			for i := range h.stores {
				if got := h.get(i, cp.Tails); !bytes.Equal(got, orig) {
					t.Fatalf("bucket %d holds %q, want the snapshot's bytes %q", i, got, orig)
				}
			}
			if again, _ := h.c.RepairSnapshots(ctx); len(again) != 0 {
				t.Fatalf("a second repair found %+v", again)
			}
		})
	}
}

// TestRepairSnapshotsRebuildsABaseOfTheRoundKeyLayout: the keys rounds
// write (absorb.TailsRoundKey) name the checkpoint a round advanced from,
// not the snapshot's position. A delta's base, damaged in every copy, is
// rebuilt from the refs as of the checkpoint, and the delta reads over it
// as the tails were.
func TestRepairSnapshotsRebuildsABaseOfTheRoundKeyLayout(t *testing.T) {
	ctx := context.Background()
	h, cp, want := snapHarness(t, 3)
	baseKey := absorb.TailsRoundKey(star, chain.Express, cp.Epoch, 1, cp.Epoch, 0)
	deltaKey := absorb.TailsRoundKey(star, chain.Express, cp.Epoch, 3, cp.Epoch, 0)
	var x string
	for id := range want.Streams {
		if x == "" || id < x {
			x = id
		}
	}
	delta := absorb.Tails{Epoch: cp.Epoch, Next: cp.Next, Streams: map[string]absorb.StreamTail{x: want.Streams[x]}, Base: baseKey}
	for i := range h.stores {
		h.put(i, deltaKey, absorb.EncodeTails(delta))
		h.put(i, baseKey, []byte("damaged"))
	}
	cp.Tails = deltaKey
	h.record(cp.Epoch, nil, cp)
	res, err := h.c.RepairSnapshots(ctx)
	if err != nil || len(res) != 1 || !res[0].Report.Base || !res[0].Rebuilt || !res[0].Complete() {
		t.Fatalf("%+v %v: want the base rebuilt", res, err)
	}
	got, err := absorb.ReadTails(ctx, h.stores, deltaKey)
	if err != nil || fmt.Sprint(got.Streams) != fmt.Sprint(want.Streams) {
		t.Fatalf("tails read over the rebuilt base %+v %v, want %+v", got, err, want)
	}
}
