package absorb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/metastore"
)

// sizeLimited declares and enforces etcd-like limits on a store: at most
// ops ops and bytes bytes per request, Put included, an op counting
// metastore.BaseOpBytes plus opExtra (as etcd adds its key prefix). It records every write it lets through, and can
// fail the failAt-th write (1-based; 0: never), before it reaches the store
// (a request lost on the way) or after it applied (a lost answer:
// ambiguous); with die, every request after it fails too, Gets included,
// until die is cleared (the writer crashed there).
type sizeLimited struct {
	metastore.Store
	ops, bytes int
	opExtra    int

	mu          sync.Mutex
	commits     []commitSize // every Commit that reached the store
	over        int          // requests refused for their size
	writes      int
	failAt      int
	failApplied bool
	die, dead   bool
}

type commitSize struct{ ops, bytes int }

var errCrash = errors.New("test: the request was lost")

func (s *sizeLimited) MaxCommitOps() int   { return s.ops }
func (s *sizeLimited) MaxCommitBytes() int { return s.bytes }

func (s *sizeLimited) OpBytes(op metastore.Op) int { return metastore.BaseOpBytes(op) + s.opExtra }

// newLimited returns a sizeLimited Mem with an op extra of 30 bytes.
func newLimited(ops, bytes int) (*sizeLimited, *metastore.Mem) {
	mem := metastore.NewMem()
	return &sizeLimited{Store: mem, ops: ops, bytes: bytes, opExtra: 30}, mem
}

func (s *sizeLimited) admit(ops []metastore.Op) (fail bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return false, errCrash
	}
	if n := metastore.CommitBytes(s, ops); (s.ops > 0 && len(ops) > s.ops) || (s.bytes > 0 && n > s.bytes) {
		s.over++
		return false, fmt.Errorf("test: %d ops of %d bytes over the limits %d, %d: %w", len(ops), n, s.ops, s.bytes, metastore.ErrTooLarge)
	}
	s.writes++
	fail = s.writes == s.failAt
	s.dead = fail && s.die
	return fail, nil
}

func (s *sizeLimited) Get(ctx context.Context, key string) (metastore.Item, error) {
	s.mu.Lock()
	dead := s.dead
	s.mu.Unlock()
	if dead {
		return metastore.Item{}, errCrash
	}
	return s.Store.Get(ctx, key)
}

// revive ends a crash: the successor's requests go through.
func (s *sizeLimited) revive() {
	s.mu.Lock()
	s.dead, s.die = false, false
	s.mu.Unlock()
}

func (s *sizeLimited) Commit(ctx context.Context, ops []metastore.Op) ([]metastore.Version, error) {
	fail, err := s.admit(ops)
	if err != nil {
		return nil, err
	}
	if fail && !s.failApplied {
		return nil, errCrash
	}
	vs, err := s.Store.Commit(ctx, ops)
	if err == nil {
		s.mu.Lock()
		s.commits = append(s.commits, commitSize{len(ops), metastore.CommitBytes(s, ops)})
		s.mu.Unlock()
	}
	if fail {
		return nil, errCrash
	}
	return vs, err
}

func (s *sizeLimited) Put(ctx context.Context, key string, value []byte, expect metastore.Version) (metastore.Version, error) {
	fail, err := s.admit([]metastore.Op{{Kind: metastore.OpPut, Key: key, Value: value, Expect: expect}})
	if err != nil {
		return "", err
	}
	if fail && !s.failApplied {
		return "", errCrash
	}
	v, err := s.Store.Put(ctx, key, value, expect)
	if fail {
		return "", errCrash
	}
	return v, err
}

// roundSlots returns the slots of a round touching n streams (about 20-byte
// names), each stream in one or two of the round's slots, so its ref has
// one or two extents, as after a backlog of several slots.
func roundSlots(n int, from uint64) []Slot {
	sl := []Slot{
		{Epoch: 1, Slot: from, Key: chain.SlotKey("s", chain.Standard, 1, from)},
		{Epoch: 1, Slot: from + 1, Key: chain.SlotKey("s", chain.Standard, 1, from+1)},
	}
	var off [2]uint64
	for i := range n {
		name := fmt.Sprintf("orders/eu-west/%05d", i)
		sl[0].Frames = append(sl[0].Frames, envelope.FrameInfo{Stream: name, FirstSeq: 0, Count: 3, Offset: 60 + off[0], Length: 1234, RawLength: 4321,
			Codec: envelope.CodecZstd, CRC: 0xdeadbeef, MinTimestamp: 1_754_000_000_000, MaxTimestamp: 1_754_000_000_999})
		off[0] += 1234
		if i%2 == 1 {
			sl[1].Frames = append(sl[1].Frames, envelope.FrameInfo{Stream: name, FirstSeq: 3, Count: 2, Offset: 60 + off[1], Length: 987, RawLength: 2345,
				Codec: envelope.CodecZstd, CRC: 0xfeedface, MinTimestamp: 1_754_000_001_000, MaxTimestamp: 1_754_000_001_500})
			off[1] += 987
		}
	}
	return sl
}

func roundRefs(t *testing.T, n int) (Round, []SpanRef) {
	t.Helper()
	refs, err := Plan("standard", "me/1/4", roundSlots(n, 4), map[string]StreamTail{})
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != n {
		t.Fatalf("planned %d refs, want %d", len(refs), n)
	}
	return Round{Epoch: 1, From: 4, To: 6}, refs
}

// snapshot is what a round leaves in the metastore: every key's value,
// with the checkpoint's counter (which a split round bumps once more, for
// its pending record) zeroed.
func snapshot(t *testing.T, mem *metastore.Mem) map[string]string {
	t.Helper()
	items, err := mem.Scan(context.Background(), "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, it := range items {
		v := it.Value
		if it.Key == chain.CheckpointKey("s", chain.Standard) {
			cp, err := DecodeCheckpoint(v)
			if err != nil {
				t.Fatal(err)
			}
			cp.Counter = 0
			v, _ = json.Marshal(cp)
		}
		out[it.Key] = string(v)
	}
	return out
}

// unsplit returns the state an unlimited metastore holds after the round.
func unsplit(t *testing.T, round Round, refs []SpanRef) map[string]string {
	t.Helper()
	mem := metastore.NewMem()
	cm, err := InitCheckpoint(context.Background(), mem, "s", chain.Standard, "me", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := cm.Commit(context.Background(), round, refs, "tk"); err != nil {
		t.Fatal(err)
	}
	if c := mem.Counters(); c.Commits != 1 {
		t.Fatalf("unlimited round took %d Commits", c.Commits)
	}
	return snapshot(t, mem)
}

func sameState(t *testing.T, got, want map[string]string) {
	t.Helper()
	if maps.Equal(got, want) {
		return
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got[k] != want[k] {
			t.Errorf("key %s: got %q, want %q", k, got[k], want[k])
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("key %s: unexpected, %q", k, got[k])
		}
	}
	t.FailNow()
}

// refBytes is the size of each ref's op, and the seal check's, as a
// sizeLimited counts them.
func refBytes(t *testing.T, refs []SpanRef) (each []int, check int) {
	t.Helper()
	s, _ := newLimited(0, 0)
	for _, r := range refs {
		v, _ := json.Marshal(&r)
		each = append(each, s.OpBytes(metastore.Op{Kind: metastore.OpPut, Key: r.Key(), Value: v}))
	}
	return each, s.OpBytes(metastore.Op{Kind: metastore.OpCheck, Key: chain.CheckpointKey("s", chain.Standard)})
}

// TestCommitSplitsByBytes: a round whose refs and checkpoint exceed the
// metastore's byte limit (and, in some cases, its op limit) is written in
// chunks that each fit both, and leaves exactly what one unsplit Commit
// would; a round that fits is one Commit.
func TestCommitSplitsByBytes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		refs     int
		ops      int     // op limit (0: none)
		perChunk float64 // byte limit, in refs of the largest size per chunk
		split    bool
	}{
		{"1_ref_fits", 1, 0, 4, false},
		{"2_refs_fit", 2, 3, 4, false},
		{"2_refs_bytes_split", 2, 0, 1.5, true},
		{"2_refs_one_per_chunk", 2, 128, 1, true},
		{"many_refs_bytes_bind", 200, 128, 7.5, true},
		{"many_refs_ops_bind", 200, 5, 40, true},
		{"many_refs_both_bind", 200, 8, 6.2, true}, // 7 refs, or 6 when 4 are large
		{"many_refs_no_op_limit", 500, 0, 33.3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			round, refs := roundRefs(t, tc.refs)
			each, check := refBytes(t, refs)
			limit := int(tc.perChunk*float64(slices.Max(each))) + check
			ms, mem := newLimited(tc.ops, limit)
			cm, err := InitCheckpoint(ctx, ms, "s", chain.Standard, "me", 1)
			if err != nil {
				t.Fatal(err)
			}
			ms.writes, ms.commits, cm.Requests = 0, nil, 0 // InitCheckpoint's
			if err := cm.Commit(ctx, round, refs, "tk"); err != nil {
				t.Fatal(err)
			}
			if ms.over > 0 {
				t.Fatalf("%d requests over the limits reached the metastore", ms.over)
			}
			total := 0
			for _, c := range ms.commits {
				if (tc.ops > 0 && c.ops > tc.ops) || c.bytes > limit {
					t.Fatalf("a Commit of %d ops, %d bytes: over the limits %d, %d", c.ops, c.bytes, tc.ops, limit)
				}
				total += c.ops
			}
			if !tc.split {
				if len(ms.commits) != 1 || ms.writes != 1 {
					t.Fatalf("a round that fits took %d Commits, %d writes; want 1", len(ms.commits), ms.writes)
				}
			} else {
				// Greedy chunks are full: each but the last could not take
				// the next ref, so there are fewer than twice the minimum.
				var sum int
				for _, b := range each {
					sum += b
				}
				minChunks := max((sum+limit-check-1)/(limit-check), 1)
				if tc.ops > 0 {
					minChunks = max(minChunks, (len(refs)+tc.ops-2)/(tc.ops-1))
				}
				if n := len(ms.commits); n < minChunks || n > 2*minChunks || total != len(refs)+n {
					t.Fatalf("split round: %d Commits of %d ops in all for %d refs; want %d to %d, each with one seal check", n, total, len(refs), minChunks, 2*minChunks)
				}
				if ms.writes != len(ms.commits)+2 {
					t.Fatalf("split round: %d writes for %d Commits; want the pending record and the advance besides", ms.writes, len(ms.commits))
				}
				t.Logf("%d refs in %d Commits (%d requests with the checkpoint's two)", len(refs), len(ms.commits), ms.writes)
			}
			if cm.Requests != uint64(ms.writes) {
				t.Fatalf("committer counted %d requests, the metastore saw %d writes", cm.Requests, ms.writes)
			}
			sameState(t, snapshot(t, mem), unsplit(t, round, refs))
		})
	}
}

// TestSplitRoundReplays: a split round interrupted at any of its requests,
// whether the request was lost before it applied or its answer after, and
// whether the committer then crashed or went on, is finished by the
// committer itself or by a successor (the same owner after a restart,
// here) replaying the pending round: the result is what one unsplit Commit
// leaves, every request fits the limits, and a ref that settle has
// repointed meanwhile is not overwritten.
func TestSplitRoundReplays(t *testing.T) {
	round, refs := roundRefs(t, 40)
	each, check := refBytes(t, refs)
	limit := 5*slices.Max(each) + check // 5 to 10 refs per chunk
	want := unsplit(t, round, refs)
	// How many writes the uninterrupted split round makes.
	probe, _ := newLimited(8, limit)
	cm, err := InitCheckpoint(context.Background(), probe, "s", chain.Standard, "me", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := cm.Commit(context.Background(), round, refs, "tk"); err != nil {
		t.Fatal(err)
	}
	writes := probe.writes - 1 // less InitCheckpoint's
	if writes < 5 {
		t.Fatalf("the round took %d writes: not split enough to test", writes)
	}
	for failAt := 1; failAt <= writes; failAt++ {
		for _, mode := range []struct {
			name         string
			applied, die bool
		}{{"lost", false, false}, {"answer_lost", true, false}, {"crash_before", false, true}, {"crash_after", true, true}} {
			t.Run(fmt.Sprintf("write_%d_%s", failAt, mode.name), func(t *testing.T) {
				ctx := context.Background()
				ms, mem := newLimited(8, limit)
				cm, err := InitCheckpoint(ctx, ms, "s", chain.Standard, "me", 1)
				if err != nil {
					t.Fatal(err)
				}
				ms.failAt, ms.failApplied, ms.die = ms.writes+failAt, mode.applied, mode.die
				err = cm.Commit(ctx, round, refs, "tk")
				if err != nil && !errors.Is(err, errCrash) || mode.die && err == nil {
					t.Fatalf("interrupted round: %v", err)
				}
				ms.revive()
				// Settle repoints the first ref if it got written.
				it, gerr := mem.Get(ctx, refs[0].Key())
				repointed := gerr == nil
				if repointed {
					r, _ := DecodeRef(it.Value)
					r.Writer = "settle"
					v, _ := json.Marshal(r)
					if _, err := mem.Put(ctx, refs[0].Key(), v, it.Version); err != nil {
						t.Fatal(err)
					}
				}
				if err != nil {
					// The successor: reads the checkpoint, replays what is
					// pending, or the round if it never began.
					cp, ver, err := ReadCheckpoint(ctx, ms, "s", chain.Standard)
					if err != nil {
						t.Fatal(err)
					}
					succ := ResumeCommitter(ms, "s", chain.Standard, "me", 1, cp, ver)
					switch {
					case cp.Pending != nil:
						if *cp.Pending != round {
							t.Fatalf("pending %+v, want %+v", *cp.Pending, round)
						}
						err = succ.Commit(ctx, *cp.Pending, refs, "tk")
					case cp.Next == round.To:
					default:
						err = succ.Commit(ctx, round, refs, "tk")
					}
					if err != nil {
						t.Fatalf("replay: %v", err)
					}
				}
				if ms.over > 0 {
					t.Fatalf("%d requests over the limits reached the metastore", ms.over)
				}
				got := snapshot(t, mem)
				if repointed && !strings.Contains(got[refs[0].Key()], `"writer":"settle"`) {
					t.Fatalf("ref %s: %s; want settle's repointed ref kept", refs[0].Key(), got[refs[0].Key()])
				}
				got[refs[0].Key()] = want[refs[0].Key()]
				sameState(t, got, want)
			})
		}
	}
}

// TestRefTooLargeForAnyChunk: a ref whose op alone, with the seal check,
// exceeds the byte limit fails the round with ErrTooLarge naming the ref
// and its size, before anything is written (no pending round that no
// replay could finish); the round planned without it then commits.
func TestRefTooLargeForAnyChunk(t *testing.T) {
	for _, ops := range []int{0, 4, 128} {
		t.Run("ops_"+strconv.Itoa(ops), func(t *testing.T) {
			ctx := context.Background()
			round, refs := roundRefs(t, 10)
			// refs[5] grows to many extents, as after a long outage.
			big := &refs[5]
			for i := range 40 {
				e := big.Extents[len(big.Extents)-1]
				e.Key = chain.SlotKey("s", chain.Standard, 1, uint64(100+i))
				e.FirstSeq += uint64(e.Count)
				big.Extents = append(big.Extents, e)
				big.End += uint64(e.Count)
			}
			each, check := refBytes(t, refs)
			limit := 3*slices.Max(append(slices.Clone(each[:5]), each[6:]...)) + check
			if each[5]+check <= limit {
				t.Fatalf("ref of %d bytes is not too large for %d", each[5], limit)
			}
			ms, mem := newLimited(ops, limit)
			cm, err := InitCheckpoint(ctx, ms, "s", chain.Standard, "me", 1)
			if err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, mem)
			err = cm.Commit(ctx, round, refs, "tk")
			if !errors.Is(err, metastore.ErrTooLarge) {
				t.Fatalf("round with an oversized ref: %v; want ErrTooLarge", err)
			}
			var tl *RefTooLargeError
			if !errors.As(err, &tl) || tl.Key != big.Key() || tl.Stream != big.Stream || tl.Bytes != each[5]+check || tl.Limit != limit || tl.Extents != len(big.Extents) {
				t.Fatalf("error %v (%+v); want a RefTooLargeError for %s, %d bytes, limit %d", err, tl, big.Key(), each[5]+check, limit)
			}
			for _, s := range []string{big.Key(), strconv.Itoa(each[5] + check), strconv.Itoa(limit)} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %s", err, s)
				}
			}
			if ms.over > 0 || ms.writes != 1 {
				t.Fatalf("after the refusal: %d requests over the limits, %d writes; want none but InitCheckpoint's", ms.over, ms.writes)
			}
			sameState(t, snapshot(t, mem), before)
			// The caller plans a smaller round: here, without the stream.
			rest := append(slices.Clone(refs[:5]), refs[6:]...)
			if err := cm.Commit(ctx, round, rest, "tk"); err != nil {
				t.Fatalf("the round without the oversized ref: %v", err)
			}
			sameState(t, snapshot(t, mem), unsplit(t, round, rest))
		})
	}
}

// TestBigSplitRoundFinishesUnderAFlakyMetastore: a round of 2,000 refs
// split into a chunk per ref, over a metastore failing 10% of requests (and
// answering 5% of writes ambiguously), finishes within a few dozen retries
// by the same committer, with every ref written once: a retry resumes where
// the round got to instead of checking every ref again. Before, each retry
// re-read every ref from the first, failed within about ten reads, and the
// round never finished (the simulation's crowd of streams under a two-op
// metastore hung on it).
func TestBigSplitRoundFinishesUnderAFlakyMetastore(t *testing.T) {
	ctx := context.Background()
	mem := metastore.NewMem()
	faults := metastore.WithFaults(limited{Mem: mem, n: 2}, 7)
	cm, err := InitCheckpoint(ctx, mem, "s", chain.Standard, "me", 1)
	if err != nil {
		t.Fatal(err)
	}
	cm = ResumeCommitter(faults, "s", chain.Standard, "me", 1, cm.Checkpoint(), cm.ver)
	round, refs := roundRefs(t, 2000)
	faults.SetErrorRate(0.1)
	faults.SetAmbiguousRate(0.05)
	attempts := 0
	for err = cm.Commit(ctx, round, refs, "tk"); err != nil; err = cm.Commit(ctx, round, refs, "tk") {
		if attempts++; attempts == 500 {
			t.Fatalf("the round did not finish in %d attempts: %v", attempts, err)
		}
	}
	t.Logf("finished after %d failed attempts, %d requests", attempts, cm.Requests)
	faults.SetErrorRate(0)
	faults.SetAmbiguousRate(0)
	for _, r := range refs {
		it, err := mem.Get(ctx, r.Key())
		if err != nil {
			t.Fatalf("ref %s: %v", r.Key(), err)
		}
		if got, _ := DecodeRef(it.Value); got.End != r.End {
			t.Fatalf("ref %s holds %+v", r.Key(), got)
		}
	}
	if cp, _, err := ReadCheckpoint(ctx, mem, "s", chain.Standard); err != nil || cp.Next != round.To || cp.Pending != nil {
		t.Fatalf("checkpoint after the round: %+v %v", cp, err)
	}
}
