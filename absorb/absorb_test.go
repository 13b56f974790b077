package absorb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

func frame(stream string, first uint64, n uint32, off uint64) envelope.FrameInfo {
	return envelope.FrameInfo{Stream: stream, FirstSeq: first, Count: n, Offset: off, Length: 10, RawLength: 10, MinTimestamp: int64(first), MaxTimestamp: int64(first) + int64(n)}
}

func slots() []Slot {
	return []Slot{
		{Epoch: 1, Slot: 4, Key: "k4", Frames: []envelope.FrameInfo{frame("a", 0, 3, 60), frame("b", 10, 2, 70)}},
		{Epoch: 1, Slot: 5, Key: "k5", Frames: []envelope.FrameInfo{frame("b", 12, 1, 60)}},
		{Epoch: 1, Slot: 6, Key: "k6", Frames: []envelope.FrameInfo{frame("a", 3, 4, 60)}},
	}
}

func TestPlanOneRefPerStream(t *testing.T) {
	tails := map[string]StreamTail{"b": {Next: 10}}
	refs, err := Plan("express", "w", slots(), tails)
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 2 || refs[0].Stream != "a" || refs[0].Start != 0 || refs[0].End != 7 || len(refs[0].Extents) != 2 ||
		refs[1].Stream != "b" || refs[1].Start != 10 || refs[1].End != 13 {
		t.Fatalf("refs %+v", refs)
	}
	for _, r := range refs {
		if err := r.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	if tails["a"].Next != 7 || tails["b"].Next != 13 {
		t.Fatalf("tails %+v", tails)
	}
	// A frame that does not continue its stream is a bug upstream.
	bad := slots()
	bad[2].Frames[0].FirstSeq = 4
	if _, err := Plan("express", "w", bad, map[string]StreamTail{}); err == nil {
		t.Fatal("gap accepted")
	}
	if _, err := Plan("express", "w", slots(), map[string]StreamTail{"a": {Next: 1}}); err == nil {
		t.Fatal("frame not continuing the tail accepted")
	}
}

func TestRefValidateRejectsInconsistency(t *testing.T) {
	refs, _ := Plan("standard", "w", slots(), map[string]StreamTail{})
	r := refs[0]
	r.End++
	if err := r.Validate(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ref with a wrong end: %v", err)
	}
	b, _ := json.Marshal(refs[0])
	if _, err := DecodeRef(b[:len(b)-3]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("truncated ref: %v", err)
	}
}

// limited makes a Mem declare an op limit, to exercise the split path.
type limited struct {
	*metastore.Mem
	n int
}

func (l limited) MaxCommitOps() int { return l.n }

func (l limited) Commit(ctx context.Context, ops []metastore.Op) ([]metastore.Version, error) {
	if len(ops) > l.n {
		return nil, fmt.Errorf("%w: %d ops > %d", metastore.ErrTooLarge, len(ops), l.n)
	}
	return l.Mem.Commit(ctx, ops)
}

func commitRound(t *testing.T, ms metastore.Store) (*Committer, []SpanRef) {
	t.Helper()
	ctx := context.Background()
	cm, err := InitCheckpoint(ctx, ms, "s", chain.Standard, "me", 1)
	if err != nil {
		t.Fatal(err)
	}
	refs, _ := Plan("standard", "w", slots(), map[string]StreamTail{})
	if err := cm.Commit(ctx, Round{Epoch: 1, From: 4, To: 7}, refs, "tk"); err != nil {
		t.Fatal(err)
	}
	return cm, refs
}

func TestCommitAtomicAndSplit(t *testing.T) {
	for _, tc := range []struct {
		name string
		ms   func() (metastore.Store, *metastore.Mem)
		ops  uint64 // metastore requests the round took
	}{
		{"atomic", func() (metastore.Store, *metastore.Mem) { m := metastore.NewMem(); return m, m }, 1},
		// pending CAS, one commit per ref (limit 2 = 1 ref + the seal check), final CAS
		{"split", func() (metastore.Store, *metastore.Mem) { m := metastore.NewMem(); return limited{m, 2}, m }, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms, mem := tc.ms()
			ctx := context.Background()
			cm, err := InitCheckpoint(ctx, ms, "s", chain.Standard, "me", 1)
			if err != nil {
				t.Fatal(err)
			}
			before := mem.Counters().Requests()
			refs, _ := Plan("standard", "w", slots(), map[string]StreamTail{})
			if err := cm.Commit(ctx, Round{Epoch: 1, From: 4, To: 7}, refs, "tk"); err != nil {
				t.Fatal(err)
			}
			if got := mem.Counters().Requests() - before; got != tc.ops {
				t.Errorf("round took %d metastore requests, want %d", got, tc.ops)
			}
			cp, _, _ := ReadCheckpoint(ctx, ms, "s", chain.Standard)
			if cp.Next != 7 || cp.Pending != nil || cp.Tails != "tk" {
				t.Fatalf("checkpoint %+v", cp)
			}
			for _, r := range refs {
				it, err := ms.Get(ctx, r.Key())
				if err != nil {
					t.Fatal(err)
				}
				got, err := DecodeRef(it.Value)
				if err != nil || got.End != r.End {
					t.Fatalf("ref %s: %+v %v", r.Key(), got, err)
				}
			}
		})
	}
}

// TestReplayAfterCrashMidRound: a leader died after writing the pending
// round and some refs; its successor (same owner after restart here)
// replays the round exactly, creates only the missing refs and never
// overwrites one (settle may have repointed it).
func TestReplayAfterCrashMidRound(t *testing.T) {
	mem := metastore.NewMem()
	ms := limited{mem, 2}
	ctx := context.Background()
	cm, err := InitCheckpoint(ctx, ms, "s", chain.Standard, "me", 1)
	if err != nil {
		t.Fatal(err)
	}
	refs, _ := Plan("standard", "w", slots(), map[string]StreamTail{})
	round := Round{Epoch: 1, From: 4, To: 7}
	// Crash point: pending recorded, the first ref written (and since
	// repointed by settle), the second not, checkpoint not advanced.
	pend := cm.cp
	pend.Pending, pend.Counter = &round, pend.Counter+1
	if err := cm.casCheckpoint(ctx, pend); err != nil {
		t.Fatal(err)
	}
	repointed := refs[0]
	repointed.Writer = "settle"
	val, _ := json.Marshal(repointed)
	if _, err := ms.Put(ctx, refs[0].Key(), val, metastore.NoVersion); err != nil {
		t.Fatal(err)
	}
	// The successor reads the checkpoint and replays the pending round.
	cp, ver, _ := ReadCheckpoint(ctx, ms, "s", chain.Standard)
	if cp.Pending == nil || *cp.Pending != round {
		t.Fatalf("pending %+v", cp.Pending)
	}
	succ := ResumeCommitter(ms, "s", chain.Standard, "me", 1, cp, ver)
	if err := succ.Commit(ctx, *cp.Pending, refs, "tk"); err != nil {
		t.Fatal(err)
	}
	it, _ := ms.Get(ctx, refs[0].Key())
	got, _ := DecodeRef(it.Value)
	if got.Writer != "settle" {
		t.Fatal("the replay overwrote a repointed ref")
	}
	if _, err := ms.Get(ctx, refs[1].Key()); err != nil {
		t.Fatalf("the replay did not write the missing ref: %v", err)
	}
}

func TestDeposedStopsAbsorb(t *testing.T) {
	ms := metastore.NewMem()
	ctx := context.Background()
	cm, _ := commitRound(t, ms)
	// A successor takes the seal.
	cp, ver, _ := ReadCheckpoint(ctx, ms, "s", chain.Standard)
	cp.Owner, cp.OwnerEpoch, cp.Counter = "successor", 2, cp.Counter+1
	val, _ := json.Marshal(cp)
	if _, err := ms.Put(ctx, chain.CheckpointKey("s", chain.Standard), val, ver); err != nil {
		t.Fatal(err)
	}
	more := []SpanRef{{Stream: "a", Class: "standard", Start: 7, End: 8, Extents: []Extent{{Key: "k7", Length: 1, FirstSeq: 7, Count: 1}}}}
	err := cm.Commit(ctx, Round{Epoch: 1, From: 7, To: 8}, more, "tk2")
	if !errors.Is(err, ErrDeposed) {
		t.Fatalf("commit after losing the seal: %v", err)
	}
	if _, err := ms.Get(ctx, more[0].Key()); !errors.Is(err, metastore.ErrNotFound) {
		t.Fatal("a deposed leader wrote a ref")
	}
}

// TestAmbiguousCommitResolved: a commit that applied but reported failure
// is recognised by re-reading the checkpoint.
func TestAmbiguousCommitResolved(t *testing.T) {
	fs := metastore.WithFaults(metastore.NewMem(), 1)
	ctx := context.Background()
	cm, err := InitCheckpoint(ctx, fs, "s", chain.Express, "me", 1)
	if err != nil {
		t.Fatal(err)
	}
	fs.SetAmbiguousRate(1)
	refs, _ := Plan("express", "w", slots(), map[string]StreamTail{})
	if err := cm.Commit(ctx, Round{Epoch: 1, From: 4, To: 7}, refs, "tk"); err != nil {
		t.Fatalf("ambiguous but applied commit: %v", err)
	}
	if cm.Checkpoint().Next != 7 {
		t.Fatalf("checkpoint %+v", cm.Checkpoint())
	}
}

// TestBacklogBoundAndStallCause: the backlog fits flights up to its flight
// and byte bounds (an empty backlog always fits one), releases tokens by
// claim position, and counts each stall under the most specific cause seen
// while it lasted.
func TestSnapshotRoundTripAndCorruption(t *testing.T) {
	ctx := context.Background()
	ms := []objstore.Store{objstore.NewMem(), objstore.NewMem()}
	tails := Tails{Epoch: 1, Next: 9, Streams: map[string]StreamTail{"a": {Next: 5, Timestamp: 7}}}
	key := TailsKey("s", chain.Express, 1, 9, 1)
	if err := PutSnapshot(ctx, ms, 2, key, EncodeTails(tails)); err != nil {
		t.Fatal(err)
	}
	if err := PutSnapshot(ctx, ms, 2, key, EncodeTails(tails)); err != nil {
		t.Fatalf("replayed snapshot: %v", err)
	}
	ms[0].(*objstore.Mem).Corrupt(key, 3)
	got, err := ReadSnapshot(ctx, ms, key)
	if err != nil || got.Streams["a"].Next != 5 {
		t.Fatalf("read past a corrupt copy: %+v %v", got, err)
	}
	ms[1].(*objstore.Mem).Corrupt(key, 3)
	if _, err := ReadSnapshot(ctx, ms, key); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("every copy corrupt: %v", err)
	}
}

// TestPutSnapshotNeverTakesOtherContentAsWritten: an object already at the
// key counts as written only if it is this write's (the same bytes) or a
// sound full snapshot of the same position (a repair's). Before, any
// object there counted: a round planned again under the key of a refused
// one took the refused round's delta for the full snapshot it meant to
// write, and every later delta built on a delta.
func TestPutSnapshotNeverTakesOtherContentAsWritten(t *testing.T) {
	ctx := context.Background()
	key := TailsKey("s", chain.Express, 1, 9, 1)
	full := Tails{Epoch: 1, Next: 9, Streams: map[string]StreamTail{"a": {Next: 5, Timestamp: 7}, "b": {Next: 2, Timestamp: 3}}}
	delta := Tails{Epoch: 1, Next: 9, Streams: map[string]StreamTail{"a": {Next: 5, Timestamp: 7}}, Base: TailsKey("s", chain.Express, 1, 4, 1)}
	for _, tc := range []struct {
		name        string
		there, body Tails
		ok          bool
	}{
		{"the same snapshot", full, full, true},
		{"a delta where a full one is written", delta, full, false},
		{"a delta over another base", Tails{Epoch: 1, Next: 9, Streams: delta.Streams, Base: TailsKey("s", chain.Express, 1, 2, 1)}, delta, false},
		{"a full one of another position", Tails{Epoch: 1, Next: 8, Streams: full.Streams}, full, false},
		{"a full one of the position where a delta is written (a repair's)", full, delta, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms := []objstore.Store{objstore.NewMem(), objstore.NewMem()}
			for _, m := range ms {
				if err := m.PutIfAbsent(ctx, key, EncodeTails(tc.there)); err != nil {
					t.Fatal(err)
				}
			}
			err := PutSnapshot(ctx, ms, 2, key, EncodeTails(tc.body))
			if tc.ok && err != nil {
				t.Fatalf("PutSnapshot over %+v: %v", tc.there, err)
			}
			if !tc.ok && (err == nil || !errors.Is(err, objstore.ErrExists)) {
				t.Fatalf("PutSnapshot of %+v over %+v: %v, want an error (ErrExists: other content)", tc.body, tc.there, err)
			}
		})
	}
}

// TestCommitRecordsDoomedSnapshots: the checkpoint a round advances
// records the doomed snapshots it is given, durable with the round (a
// successor, sealing, reads them there); a later Commit keeps them; the
// seal moves with them; more than MaxDoomedSnapshots is refused before
// anything is written.
func TestCommitRecordsDoomedSnapshots(t *testing.T) {
	ctx := context.Background()
	ms := metastore.NewMem()
	cm, err := InitCheckpoint(ctx, ms, "s", chain.Standard, "me", 1)
	if err != nil {
		t.Fatal(err)
	}
	refs, _ := Plan("standard", "w", slots(), map[string]StreamTail{})
	doomed := []string{"snap-1", "snap-2"}
	if err := cm.CommitDooming(ctx, Round{Epoch: 1, From: 4, To: 7}, refs, "snap-3", "", doomed); err != nil {
		t.Fatal(err)
	}
	doomed[0] = "changed by the caller"
	if cp, _, err := ReadCheckpoint(ctx, ms, "s", chain.Standard); err != nil || cp.Tails != "snap-3" || fmt.Sprint(cp.Doomed) != "[snap-1 snap-2]" {
		t.Fatalf("checkpoint %+v %v: want snap-3, doomed [snap-1 snap-2]", cp, err)
	}
	if err := cm.Commit(ctx, Round{Epoch: 1, From: 7, To: 7}, nil, "snap-3"); err != nil {
		t.Fatal(err)
	}
	if cp := cm.Checkpoint(); fmt.Sprint(cp.Doomed) != "[snap-1 snap-2]" {
		t.Fatalf("Commit dropped the doomed snapshots: %+v", cp)
	}
	epKey := chain.EpochKey("s", chain.Standard)
	ev, err := ms.Put(ctx, epKey, []byte(`{"epoch":1}`), metastore.NoVersion)
	if err != nil {
		t.Fatal(err)
	}
	if _, found, err := SealCheckpoint(ctx, ms, "s", chain.Standard, "next", 2, ev); err != nil || fmt.Sprint(found.Doomed) != "[snap-1 snap-2]" {
		t.Fatalf("seal found %+v %v: want the doomed snapshots", found, err)
	}
	if cp, _, _ := ReadCheckpoint(ctx, ms, "s", chain.Standard); fmt.Sprint(cp.Doomed) != "[snap-1 snap-2]" || cp.Owner != "next" {
		t.Fatalf("sealed checkpoint %+v: the doomed snapshots must stay", cp)
	}

	ms2 := metastore.NewMem()
	cm2, err := InitCheckpoint(ctx, ms2, "s", chain.Standard, "me", 1)
	if err != nil {
		t.Fatal(err)
	}
	many := make([]string, MaxDoomedSnapshots+1)
	for i := range many {
		many[i] = fmt.Sprint("snap-", i)
	}
	if err := cm2.CommitDooming(ctx, Round{Epoch: 1, From: 4, To: 7}, refs, "snap", "", many); err == nil || !strings.HasPrefix(err.Error(), "absorb: ") {
		t.Fatalf("%d doomed snapshots: %v, want an error", len(many), err)
	}
	if cp, _, _ := ReadCheckpoint(ctx, ms2, "s", chain.Standard); cp.Next != 0 || cp.Tails != "" {
		t.Fatalf("a refused round wrote the checkpoint: %+v", cp)
	}
	if _, err := ms2.Get(ctx, refs[0].Key()); !errors.Is(err, metastore.ErrNotFound) {
		t.Fatalf("a refused round wrote a ref: %v", err)
	}
}

// TestUncommittedSnapshots: the snapshots of the rounds from a checkpoint
// are found by point lookups at TailsRoundKey of the checkpoint's position,
// for each writer from the checkpoint's epoch to the latest one, plan after
// plan while some bucket holds one; a copy in one bucket is enough; another
// position's is not theirs. A bucket that cannot answer leaves the key it
// was asked about among those returned, with the error.
func TestUncommittedSnapshots(t *testing.T) {
	ctx := context.Background()
	mems := []*objstore.Mem{objstore.NewMem(), objstore.NewMem(), objstore.NewMem()}
	faulty := objstore.WithFaults(mems[0], 1)
	stores := []objstore.Store{faulty, mems[1], mems[2]}
	cp := Checkpoint{Epoch: 2, Next: 7, OwnerEpoch: 3}
	key := func(writer, plan uint64) string { return TailsRoundKey("s", chain.Standard, 2, 7, writer, plan) }
	put := func(m *objstore.Mem, key string) {
		if err := m.PutIfAbsent(ctx, key, EncodeTails(Tails{Epoch: 2, Next: 9})); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := UncommittedSnapshots(ctx, stores, "s", chain.Standard, cp); err != nil || len(got) != 0 {
		t.Fatalf("nothing written: found %v, %v", got, err)
	}
	put(mems[1], key(3, 0))
	put(mems[0], key(3, 1))
	put(mems[2], key(3, 3)) // plan 2 never written: plan 3 is not looked for
	put(mems[2], key(2, 0))
	put(mems[1], key(4, 0)) // past the checkpoint's seal: only a later one's
	put(mems[2], key(1, 0)) // before the checkpoint's epoch: none
	put(mems[2], TailsRoundKey("s", chain.Standard, 2, 8, 3, 0))
	got, err := UncommittedSnapshots(ctx, stores, "s", chain.Standard, cp)
	if want := []string{key(3, 0), key(3, 1), key(2, 0)}; err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("found %v, %v: want %v", got, err, want)
	}
	got, err = UncommittedSnapshots(ctx, stores, "s", chain.Standard, Checkpoint{Epoch: 2, Next: 7, OwnerEpoch: 4})
	if want := []string{key(4, 0), key(3, 0), key(3, 1), key(2, 0)}; err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("found %v, %v: want %v", got, err, want)
	}
	faulty.SetHook(func(call fault.Call) fault.Fault {
		op, k := call.Op, call.Key
		if op == fault.Get && k == key(3, 2) {
			return fault.Fault{Err: errors.New("test: bucket down")}
		}
		return fault.Fault{}
	})
	got, err = UncommittedSnapshots(ctx, stores, "s", chain.Standard, cp)
	if want := []string{key(3, 0), key(3, 1), key(3, 2), key(2, 0)}; err == nil || !strings.HasPrefix(err.Error(), "absorb: ") || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("found %v, %v: want %v and an error", got, err, want)
	}
	// Takeovers in quick succession: only the newest writers are looked for.
	far := Checkpoint{Epoch: 2, Next: 7, OwnerEpoch: 2 + MaxUncommittedWriters}
	faulty.SetHook(nil)
	got, _ = UncommittedSnapshots(ctx, stores, "s", chain.Standard, far)
	if want := []string{key(4, 0), key(3, 0), key(3, 1)}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("found %v: want %v", got, want)
	}
}

// TestCommitRecordsTailsBase: the checkpoint a round advances records the
// base its snapshot is a delta over, so a successor that cannot read the
// delta still knows the base (and deletes it); the seal keeps it; a full
// snapshot, or a Commit that is not told, records none.
func TestCommitRecordsTailsBase(t *testing.T) {
	ctx := context.Background()
	ms := metastore.NewMem()
	cm, err := InitCheckpoint(ctx, ms, "s", chain.Standard, "me", 1)
	if err != nil {
		t.Fatal(err)
	}
	refs, _ := Plan("standard", "w", slots(), map[string]StreamTail{})
	if err := cm.CommitDooming(ctx, Round{Epoch: 1, From: 4, To: 7}, refs, "delta", "full", nil); err != nil {
		t.Fatal(err)
	}
	epKey := chain.EpochKey("s", chain.Standard)
	ev, err := ms.Put(ctx, epKey, []byte(`{"epoch":1}`), metastore.NoVersion)
	if err != nil {
		t.Fatal(err)
	}
	if _, found, err := SealCheckpoint(ctx, ms, "s", chain.Standard, "next", 2, ev); err != nil || found.Tails != "delta" || found.TailsBase != "full" {
		t.Fatalf("seal found %+v %v: want delta over full", found, err)
	}
	if cp, _, _ := ReadCheckpoint(ctx, ms, "s", chain.Standard); cp.TailsBase != "full" || cp.Owner != "next" {
		t.Fatalf("sealed checkpoint %+v: the base must stay", cp)
	}

	ms2 := metastore.NewMem()
	cm2, err := InitCheckpoint(ctx, ms2, "s", chain.Standard, "me", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := cm2.CommitDooming(ctx, Round{Epoch: 1, From: 4, To: 7}, refs, "delta", "full", nil); err != nil {
		t.Fatal(err)
	}
	if err := cm2.Commit(ctx, Round{Epoch: 1, From: 7, To: 7}, nil, "other"); err != nil {
		t.Fatal(err)
	}
	if cp := cm2.Checkpoint(); cp.TailsBase != "" {
		t.Fatalf("Commit kept the base of another snapshot: %+v", cp)
	}
}
