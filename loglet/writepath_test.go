package loglet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// TestWritePathInvariants drives many producers over many streams through
// buckets whose heavy-tailed latencies reorder completions, for K=1/W=1 and
// K=3/W=2, and checks invariants 1, 2, 3 and 7: acks release in slot order
// with W copies (the release hook), per-stream sequence numbers are
// contiguous and assigned once, each producer's records keep their order, and
// every record acked is read back byte for byte at its sequence number.
func TestWritePathInvariants(t *testing.T) {
	for _, tc := range []struct {
		name  string
		class Class
		k     int
	}{{"K1W1", Standard, 1}, {"K3W2", Express, 3}} {
		t.Run(tc.name, func(t *testing.T) {
			seed := rand.Uint64()
			t.Logf("seed %d (replay: FLIGHTLOG_SEED=%d)", seed, seed)
			r := newRig(t, tc.class, tc.k, seed, func(c *Config, fs []*objstore.FaultStore) {
				for _, f := range fs {
					f.SetLatency(fault.LogNormal(2*time.Millisecond, 20*time.Millisecond), fault.Put)
				}
				// verifyBuckets reads every chain slot from the first:
				// a settle pass (the first is due a second in, which a
				// busy machine under -race reaches) would delete some.
				c.SettleInterval = -1
			})
			const producers, streams, perProducer = 8, 5, 60
			type sent struct {
				stream string
				ack    Ack
				bodies [][]byte
			}
			var mu sync.Mutex
			var all []sent
			var wg sync.WaitGroup
			for p := 0; p < producers; p++ {
				wg.Add(1)
				go func(p int) {
					defer wg.Done()
					rnd := rand.New(rand.NewPCG(seed, uint64(p)))
					var lastEnd = map[string]uint64{}
					for i := 0; i < perProducer; i++ {
						stream := fmt.Sprintf("stream-%d", rnd.IntN(streams))
						n := 1 + rnd.IntN(5)
						var b Batch
						var bodies [][]byte
						for j := 0; j < n; j++ {
							bd := body(stream, p*1000+i, 10+rnd.IntN(2000), rnd)
							bodies = append(bodies, bd)
							b.Records = append(b.Records, Record{Body: bd, Headers: []Header{{Name: []byte("p"), Value: []byte{byte(p)}}}})
						}
						ack, err := r.star.Append(context.Background(), stream, b)
						if err != nil {
							t.Errorf("append: %v", err)
							return
						}
						if ack.End-ack.Start != uint64(n) {
							t.Errorf("ack %+v for %d records", ack, n)
						}
						if ack.Start < lastEnd[stream] {
							t.Errorf("producer %d: ack %v on %s before its previous end %d (order broken)", p, ack, stream, lastEnd[stream])
						}
						lastEnd[stream] = ack.End
						mu.Lock()
						all = append(all, sent{stream, ack, bodies})
						mu.Unlock()
					}
				}(p)
			}
			wg.Wait()
			r.checkReleases()
			// Sequence numbers per stream: a partition of [0, tail).
			byStream := map[string][]sent{}
			for _, s := range all {
				byStream[s.stream] = append(byStream[s.stream], s)
			}
			for name, ss := range byStream {
				sort.Slice(ss, func(i, j int) bool { return ss[i].ack.Start < ss[j].ack.Start })
				next := uint64(0)
				for _, s := range ss {
					if s.ack.Start != next {
						t.Fatalf("seed %d: %s: batch at %d, expected %d (gap or overlap)", seed, name, s.ack.Start, next)
					}
					next = s.ack.End
				}
				got := readAll(t, r.star, name)
				if uint64(len(got)) != next {
					t.Fatalf("seed %d: %s: read %d records, acked %d", seed, name, len(got), next)
				}
				for _, s := range ss {
					for j, bd := range s.bodies {
						rec := got[s.ack.Start+uint64(j)]
						if rec.Seq != s.ack.Start+uint64(j) || !bytes.Equal(rec.Body, bd) {
							t.Fatalf("seed %d: %s seq %d: read back a different record", seed, name, s.ack.Start+uint64(j))
						}
					}
				}
			}
			// The stored objects agree: every frame decodes, and the
			// frames of each stream tile its sequence space in slot order.
			verifyBuckets(t, r, tc.class)
		})
	}
}

// verifyBuckets parses every stored slot (from whichever bucket holds a
// copy: with K=3/W=2 a slot may lack its third copy) and checks that each
// stream's frames, taken in slot order, tile [0, tail) (cut order is slot
// order).
func verifyBuckets(t *testing.T, r *rig, c Class) {
	t.Helper()
	keys := map[string]bool{}
	for _, m := range r.mems {
		for _, k := range m.Keys() {
			if strings.HasPrefix(k, "chains/") {
				keys[k] = true
			}
		}
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	next := map[string]uint64{}
	for _, key := range sorted {
		var obj []byte
		for _, m := range r.mems {
			if b, err := m.Get(context.Background(), key, 0, -1); err == nil {
				obj = b
				break
			}
		}
		_, frames, err := envelope.ParseBundle(obj)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		for _, f := range frames {
			if f.FirstSeq != next[f.Stream] {
				t.Fatalf("%s: frame of %s starts at %d, want %d", key, f.Stream, f.FirstSeq, next[f.Stream])
			}
			if _, err := envelope.DecodeFrame(f, obj[f.Offset:f.End()]); err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			next[f.Stream] += uint64(f.Count)
		}
	}
}

// TestOneBucketDownAcksFlow: with K=3/W=2 and one bucket down, every append
// acks and the missing copies are counted under-replicated.
func TestOneBucketDownAcksFlow(t *testing.T) {
	r := newRig(t, Express, 3, 1, func(c *Config, fs []*objstore.FaultStore) {
		fs[1].SetDown(true)
		c.Express.StragglerTimeout = 6 * time.Second
		c.Express.CommitDeadline = time.Second
	})
	for i := 0; i < 20; i++ {
		if _, err := r.star.Append(context.Background(), "a", Batch{Records: []Record{{Body: []byte("x")}}}); err != nil {
			t.Fatalf("append %d with a bucket down: %v", i, err)
		}
	}
	r.checkReleases()
	r.star.Close(context.Background())
	st := r.star.Stats().Express
	if st.Halts != 0 || st.UnderReplicated == 0 || st.AckedBatches != 20 {
		t.Fatalf("stats: halts %d under-replicated %d acked %d", st.Halts, st.UnderReplicated, st.AckedBatches)
	}
}

// TestSlowBucketInvisible: one bucket 300ms slow; acks follow the two fast
// ones.
func TestSlowBucketInvisible(t *testing.T) {
	r := newRig(t, Express, 3, 2, func(c *Config, fs []*objstore.FaultStore) {
		fs[0].SetLatency(fault.Fixed(2*time.Millisecond), fault.Put)
		fs[1].SetLatency(fault.Fixed(3*time.Millisecond), fault.Put)
		fs[2].SetLatency(fault.Fixed(300*time.Millisecond), fault.Put)
	})
	for i := 0; i < 10; i++ {
		if _, err := r.star.Append(context.Background(), "a", Batch{Records: []Record{{Body: []byte("x")}}}); err != nil {
			t.Fatal(err)
		}
	}
	st := r.star.Stats().Express
	if p99 := time.Duration(st.AckLatency.Quantile(0.99)); p99 >= 300*time.Millisecond {
		t.Fatalf("ack p99 %v: the slow bucket is visible", p99)
	}
	if p50 := time.Duration(st.AckLatency.Quantile(0.5)); p50 < 3*time.Millisecond {
		t.Fatalf("ack p50 %v is below the second-fastest copy's latency", p50)
	}
}

// TestAmbiguousPutRecognisedByNonce: every first PUT of each key applies and
// then reports failure; the retry finds our nonce and the append acks.
func TestAmbiguousPutRecognisedByNonce(t *testing.T) {
	seen := map[string]bool{}
	var mu sync.Mutex
	r := newRig(t, Standard, 1, 3, func(c *Config, fs []*objstore.FaultStore) {
		fs[0].SetHook(func(call fault.Call) fault.Fault {
			op, key := call.Op, call.Key
			mu.Lock()
			defer mu.Unlock()
			if op == fault.Put && !seen[key] {
				seen[key] = true
				return fault.Fault{Kind: fault.Ambiguous}
			}
			return fault.Fault{}
		})
	})
	for i := 0; i < 5; i++ {
		if _, err := r.star.Append(context.Background(), "a", Batch{Records: []Record{{Body: []byte("x")}}}); err != nil {
			t.Fatal(err)
		}
	}
	if st := r.star.Stats().Standard; st.GhostPuts < 5 || st.Halts != 0 {
		t.Fatalf("ghosts %d halts %d", st.GhostPuts, st.Halts)
	}
}

// TestForeignOccupantRecovers: a poison at slot 2 halts the epoch there;
// the recovery fences, acks slots 0 and 1, mints epoch 2 and republishes the
// halted flight into its slot 0: the producer sees latency, never an error,
// and no sequence number is committed twice.
func TestForeignOccupantRecovers(t *testing.T) {
	r := newRig(t, Standard, 1, 4, nil)
	key := chain.SlotKey("s1", Standard, 1, 2)
	if err := r.mems[0].PutIfAbsent(context.Background(), key, envelope.Poison(1, 2, envelope.NewNonce())); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ { // one batch per flight: each Append waits
		ack, err := r.star.Append(context.Background(), "a", Batch{Records: []Record{{Body: []byte(fmt.Sprint(i))}}})
		if err != nil || ack.Start != uint64(i) {
			t.Fatalf("append %d: %+v %v", i, ack, err)
		}
	}
	r.checkReleases()
	r.mu.Lock()
	released := fmt.Sprint(r.released)
	r.mu.Unlock() // not held across Fatalf: the cleanup's Close needs the release watch
	want := [][2]uint64{{1, 0}, {1, 1}, {2, 0}, {2, 1}, {2, 2}}
	if released != fmt.Sprint(want) {
		t.Fatalf("released %v, want %v", released, want)
	}
	st := r.star.Stats().Standard
	if st.Halts != 1 || st.ForeignOccupants != 1 || st.Epoch != 2 {
		t.Fatalf("halts %d foreign %d epoch %d", st.Halts, st.ForeignOccupants, st.Epoch)
	}
	got := readAll(t, r.star, "a")
	for i, rec := range got {
		if rec.Seq != uint64(i) || string(rec.Body) != fmt.Sprint(i) {
			t.Fatalf("record %d: seq %d body %q", i, rec.Seq, rec.Body)
		}
	}
	if len(got) != 5 {
		t.Fatalf("read %d records", len(got))
	}
}

// TestCommitDeadlineRecovers: a PUT that never answers misses the commit
// deadline and halts the epoch; the recovery cancels it, fences (the slot is
// empty: dead), and republishes: the append acks late, in epoch 2.
func TestCommitDeadlineRecovers(t *testing.T) {
	var once sync.Once
	r := newRig(t, Standard, 1, 5, func(c *Config, fs []*objstore.FaultStore) {
		fs[0].SetHook(func(call fault.Call) fault.Fault {
			op, key := call.Op, call.Key
			var f fault.Fault
			if op == fault.Put && strings.HasPrefix(key, "chains/") {
				once.Do(func() { f.Delay = time.Hour })
			}
			return f
		})
		c.Standard.CommitDeadline = 50 * time.Millisecond
		c.Standard.StragglerTimeout = time.Second
	})
	ack, err := r.star.Append(context.Background(), "a", Batch{Records: []Record{{Body: []byte("x")}}})
	if err != nil || ack.Start != 0 {
		t.Fatalf("append past the commit deadline: %+v %v", ack, err)
	}
	if st := r.star.Stats().Standard; st.Halts != 1 || st.Epoch != 2 {
		t.Fatalf("halts %d epoch %d", st.Halts, st.Epoch)
	}
	r.checkReleases()
}

// lateStore applies a PUT and then withholds the answer until the caller
// gives up: the copy is committed, the writer does not know it.
type lateStore struct {
	objstore.Store
	late atomic.Int32 // PUTs of chain slots still to answer late
}

func (s *lateStore) PutIfAbsent(ctx context.Context, key string, body []byte) error {
	err := s.Store.PutIfAbsent(ctx, key, body)
	if strings.HasPrefix(key, "chains/") && s.late.Add(-1) >= 0 {
		<-ctx.Done()
		return ctx.Err()
	}
	return err
}

// TestHaltedSlotThatCommittedIsAckedNotRepublished: the slot that missed its
// deadline had in fact landed; the fence finds it committed, so its batch is
// acked in epoch 1 and nothing is republished (no duplicate).
func TestHaltedSlotThatCommittedIsAckedNotRepublished(t *testing.T) {
	r := newRig(t, Standard, 1, 6, func(c *Config, fs []*objstore.FaultStore) {
		ls := &lateStore{Store: c.Standard.Stores[0]}
		ls.late.Store(1)
		c.Standard.Stores[0] = ls
		c.Standard.CommitDeadline = 50 * time.Millisecond
		c.Standard.StragglerTimeout = time.Second
	})
	ack, err := r.star.Append(context.Background(), "a", Batch{Records: []Record{{Body: []byte("once")}}})
	if err != nil || ack.Start != 0 {
		t.Fatalf("append: %+v %v", ack, err)
	}
	if _, err := r.star.Append(context.Background(), "a", Batch{Records: []Record{{Body: []byte("next")}}}); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	released := fmt.Sprint(r.released)
	r.mu.Unlock() // not held across Fatalf: the cleanup's Close needs the release watch
	if released != "[[1 0] [2 0]]" {
		t.Fatalf("released %v, want [[1 0] [2 0]]: the committed slot acked in epoch 1, the next append in epoch 2 (stats %+v)", released, r.star.Stats().Standard)
	}
	got := readAll(t, r.star, "a")
	if len(got) != 2 || string(got[0].Body) != "once" || string(got[1].Body) != "next" {
		t.Fatalf("read back %d records", len(got))
	}
	// Nothing of epoch 2 holds the first batch again.
	for _, k := range r.mems[0].Keys() {
		if strings.HasPrefix(k, "chains/s1/standard/00000000000000000002/") {
			obj, _ := r.mems[0].Get(context.Background(), k, 0, -1)
			_, frames, err := envelope.ParseBundle(obj)
			if err != nil || frames[0].FirstSeq == 0 {
				t.Fatalf("%s holds seq %d again (%v)", k, frames[0].FirstSeq, err)
			}
		}
	}
}

// TestMatchSeqNum: a miss rejects only that batch and reports the tail.
func TestMatchSeqNum(t *testing.T) {
	r := newRig(t, Standard, 1, 6, nil)
	ctx := context.Background()
	zero := uint64(0)
	if _, err := r.star.Append(ctx, "a", Batch{Records: []Record{{Body: []byte("1")}, {Body: []byte("2")}}, MatchSeqNum: &zero}); err != nil {
		t.Fatal(err)
	}
	_, err := r.star.Append(ctx, "a", Batch{Records: []Record{{Body: []byte("dup")}}, MatchSeqNum: &zero})
	var me *SeqNumMismatchError
	if !errors.As(err, &me) || me.Tail.Seq != 2 || !errors.Is(err, ErrNotCommitted) {
		t.Fatalf("mismatch: %v", err)
	}
	two := uint64(2)
	ack, err := r.star.Append(ctx, "a", Batch{Records: []Record{{Body: []byte("3")}}, MatchSeqNum: &two})
	if err != nil || ack.Start != 2 {
		t.Fatalf("matched append: %+v %v", ack, err)
	}
	if tail, _ := r.star.CheckTail(ctx, "a"); tail.Seq != 3 {
		t.Fatalf("tail %d", tail.Seq)
	}
}

// TestBadInputIsRejectedClearly: bad names, oversized records and batches,
// empty batches and unknown streams are not committed, never panic.
func TestBadInputIsRejectedClearly(t *testing.T) {
	r := newRig(t, Standard, 1, 7, func(c *Config, _ []*objstore.FaultStore) {
		c.CreateOnAppend = false
		c.MaxRecordBytes = 1000
		c.MaxBatchBytes = 3000
	})
	ctx := context.Background()
	if _, err := r.star.CreateStream(ctx, "known", StreamOptions{Class: Standard}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.star.CreateStream(ctx, "known", StreamOptions{Class: Standard}); !errors.Is(err, ErrStreamExists) {
		t.Fatalf("second create: %v", err)
	}
	big := make([]byte, 1000)
	cases := []struct {
		name   string
		stream string
		b      Batch
		want   error
	}{
		{"empty batch", "known", Batch{}, ErrInvalidBatch},
		{"record too large", "known", Batch{Records: []Record{{Body: big}}}, ErrInvalidBatch},
		{"batch too large", "known", Batch{Records: []Record{{Body: big[:900]}, {Body: big[:900]}, {Body: big[:900]}, {Body: big[:900]}}}, ErrInvalidBatch},
		{"negative timestamp", "known", Batch{Records: []Record{{Timestamp: -1}}}, ErrInvalidBatch},
		{"unknown stream", "nope", Batch{Records: []Record{{Body: []byte("x")}}}, ErrStreamNotFound},
		{"bad name", "a\x00b", Batch{Records: []Record{{Body: []byte("x")}}}, ErrInvalidBatch},
		{"name too long", string(big[:600]), Batch{Records: []Record{{Body: []byte("x")}}}, ErrInvalidBatch},
	}
	for _, c := range cases {
		_, err := r.star.Append(ctx, c.stream, c.b)
		if !errors.Is(err, c.want) || !errors.Is(err, ErrNotCommitted) {
			t.Errorf("%s: %v, want %v and ErrNotCommitted", c.name, err, c.want)
		}
	}
	if tail, _ := r.star.CheckTail(ctx, "known"); tail.Seq != 0 {
		t.Fatalf("rejected batches moved the tail to %d", tail.Seq)
	}
}

// issued closes ch when the first PUT of a key under prefix is issued,
// before the store it wraps sees it.
type issued struct {
	objstore.Store
	prefix string
	ch     chan struct{}
	once   sync.Once
}

func (s *issued) PutIfAbsent(ctx context.Context, key string, body []byte) error {
	if strings.HasPrefix(key, s.prefix) {
		s.once.Do(func() { close(s.ch) })
	}
	return s.Store.PutIfAbsent(ctx, key, body)
}

// TestPoolBudgetBlocksAndHonoursContext: with a full pool and a stuck store,
// admission blocks and a caller's deadline ends it as not committed.
func TestPoolBudgetBlocksAndHonoursContext(t *testing.T) {
	release := make(chan struct{})
	// Closed when the first flight's PUT is issued: the flight is in the
	// window. (Not in a synctest bubble: the hook holds the fault store's
	// lock while it blocks, and a goroutine waiting on a lock is not
	// durably blocked, so the bubble's clock would stop.)
	putting := make(chan struct{})
	r := newRig(t, Standard, 1, 8, func(c *Config, fs []*objstore.FaultStore) {
		c.Standard.MemoryBufferMiB = 2
		c.Standard.ParallelUploads = 1
		c.Standard.FlightBytes = 1 << 20
		c.MaxRecordBytes = 1 << 20
		fs[0].SetHook(func(call fault.Call) fault.Fault {
			op := call.Op
			if op == fault.Put {
				<-release
			}
			return fault.Fault{}
		})
		c.Standard.Stores[0] = &issued{Store: c.Standard.Stores[0], prefix: "chains/", ch: putting}
	})
	defer close(release)
	ctx := context.Background()
	rec := Record{Body: make([]byte, 900<<10)}
	var futs []*AckFuture
	sess, err := r.star.OpenAppendSession(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	// One flight in the window (stuck), then the pool fills.
	for i := 0; i < 3; i++ {
		f, err := sess.Submit(ctx, Batch{Records: []Record{rec}})
		if err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
		futs = append(futs, f)
		if i == 0 {
			<-putting
		}
	}
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = r.star.Append(tctx, "a", Batch{Records: []Record{rec}})
	if !errors.Is(err, ErrNotCommitted) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("append into a full pool: %v", err)
	}
	st := r.star.Stats().Standard.Pool
	if st.ReservedBytes > st.BudgetBytes || st.BlockedNanos == 0 {
		t.Fatalf("pool %+v", st)
	}
}

// TestAppendSessionOrderAndFailure: acks of a session complete in submit
// order; a failure fails every later submit.
func TestAppendSessionOrderAndFailure(t *testing.T) {
	r := newRig(t, Express, 3, 9, func(c *Config, fs []*objstore.FaultStore) {
		for _, f := range fs {
			f.SetLatency(fault.LogNormal(time.Millisecond, 10*time.Millisecond), fault.Put)
		}
	})
	ctx := context.Background()
	sess, err := r.star.OpenAppendSession(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	var futs []*AckFuture
	for i := 0; i < 200; i++ {
		f, err := sess.Submit(ctx, Batch{Records: []Record{{Body: []byte(fmt.Sprint(i))}}})
		if err != nil {
			t.Fatal(err)
		}
		futs = append(futs, f)
	}
	for i, f := range futs {
		ack, err := f.Wait(ctx)
		if err != nil || ack.Start != uint64(i) {
			t.Fatalf("future %d: %+v %v", i, ack, err)
		}
	}
	bad := uint64(7)
	if _, err := sess.Submit(ctx, Batch{Records: []Record{{Body: []byte("x")}}, MatchSeqNum: &bad}); err == nil {
		t.Fatal("mismatched submit admitted")
	}
	if _, err := sess.Submit(ctx, Batch{Records: []Record{{Body: []byte("y")}}}); !errors.Is(err, ErrSessionFailed) || !errors.Is(err, ErrNotCommitted) {
		t.Fatalf("submit after a failure: %v", err)
	}
	if err := sess.Close(ctx); err == nil {
		t.Fatal("Close of a failed session returned nil")
	}
}

// TestAcksDeliveredInSlotOrder: when two uploads finish together, each
// releases its slots under the lane lock, but the waiters are woken outside
// it; a later release must never wake its waiter before an earlier
// release's are woken. Every future, once seen done, checks that every
// earlier future of its session is done too. (The simulation found this:
// an AppendSession future acked before an earlier one completed.)
func TestAcksDeliveredInSlotOrder(t *testing.T) {
	r := newRig(t, Express, 3, 11, func(c *Config, fs []*objstore.FaultStore) {
		c.Express.FlightBytes = 256 // about one batch per flight
		c.Express.ParallelUploads = 16
		for _, f := range fs {
			f.SetLatency(fault.Uniform(0, 200*time.Microsecond), fault.Put)
		}
	})
	ctx := context.Background()
	var bad atomic.Int64
	var first atomic.Value
	for round := 0; round < 20; round++ {
		sess, err := r.star.OpenAppendSession(ctx, fmt.Sprint("s", round))
		if err != nil {
			t.Fatal(err)
		}
		var futs []*AckFuture
		for i := 0; i < 200; i++ {
			f, err := sess.Submit(ctx, Batch{Records: []Record{{Body: bytes.Repeat([]byte{'x'}, 200)}}})
			if err != nil {
				t.Fatal(err)
			}
			futs = append(futs, f)
		}
		var wg sync.WaitGroup
		for i, f := range futs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-f.Done()
				for j := range i {
					select {
					case <-futs[j].Done():
					default:
						if bad.Add(1) == 1 {
							first.Store(fmt.Sprintf("round %d: future %d done before future %d", round, i, j))
						}
					}
				}
			}()
		}
		wg.Wait()
		if err := sess.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := bad.Load(); n > 0 {
		t.Fatalf("%d futures done before an earlier one of their session; first: %v", n, first.Load())
	}
	r.checkReleases()
}

// TestReadSessionSeesEveryRecordOnce follows a stream while it is appended.
func TestReadSessionSeesEveryRecordOnce(t *testing.T) {
	r := newRig(t, Express, 3, 10, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := r.star.CreateStream(ctx, "f", StreamOptions{Class: Express}); err != nil {
		t.Fatal(err)
	}
	rs, err := r.star.OpenReadSession(ctx, "f", ReadQuery{Start: AtSeq(0), MaxRecords: 7})
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	appended := make(chan struct{})
	defer func() { <-appended }()
	go func() {
		defer close(appended)
		for i := 0; i < n; i++ {
			if _, err := r.star.Append(ctx, "f", Batch{Records: []Record{{Body: []byte(fmt.Sprint(i))}}}); err != nil {
				t.Errorf("append: %v", err)
				return
			}
		}
	}()
	for got := 0; got < n; {
		recs, err := rs.Recv(ctx)
		if err != nil {
			t.Fatalf("recv after %d: %v", got, err)
		}
		for _, rec := range recs {
			if rec.Seq != uint64(got) || string(rec.Body) != fmt.Sprint(got) {
				t.Fatalf("record %d: seq %d body %q", got, rec.Seq, rec.Body)
			}
			got++
		}
	}
}

// TestTimestampsNeverGoBackwards: explicit backwards timestamps are raised
// to the stream's last.
func TestTimestampsNeverGoBackwards(t *testing.T) {
	r := newRig(t, Standard, 1, 11, nil)
	ctx := context.Background()
	if _, err := r.star.Append(ctx, "t", Batch{Records: []Record{{Timestamp: 5000}, {Timestamp: 4000}, {}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.star.Append(ctx, "t", Batch{Records: []Record{{Timestamp: 100}}}); err != nil {
		t.Fatal(err)
	}
	recs := readAll(t, r.star, "t")
	prev := int64(0)
	for _, rec := range recs {
		if rec.Timestamp < prev {
			t.Fatalf("seq %d: timestamp %d after %d", rec.Seq, rec.Timestamp, prev)
		}
		prev = rec.Timestamp
	}
	if recs[1].Timestamp != 5000 || recs[2].Timestamp < 5000 {
		t.Fatalf("timestamps %d %d %d", recs[0].Timestamp, recs[1].Timestamp, recs[2].Timestamp)
	}
	if res, _ := r.star.Read(ctx, "t", ReadQuery{Start: AtTimestamp(5001)}); len(res.Records) == 0 || res.Records[0].Seq != 2 {
		t.Fatalf("read from timestamp: %+v", res.Records)
	}
}

// TestEveryAppendEndsInOneOutcome (invariant 7) under random errors,
// ambiguous PUTs and cancelled callers: each append returns nil, or an error
// matching exactly one of ErrNotCommitted and ErrOutcomeUnknown; acked
// records are all readable, and no sequence number is acked twice.
func TestEveryAppendEndsInOneOutcome(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := newRig(t, Express, 3, seed, func(c *Config, fs []*objstore.FaultStore) {
		for _, f := range fs {
			f.SetLatency(fault.LogNormal(time.Millisecond, 30*time.Millisecond), fault.Put)
			f.SetErrorRate(0.1, fault.Put)
			f.SetAmbiguousRate(0.1, fault.Put)
		}
	})
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked := map[string]map[uint64]bool{}
	for p := 0; p < 6; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(seed, uint64(p)))
			for i := 0; i < 40; i++ {
				stream := fmt.Sprint("s", rnd.IntN(3))
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rnd.IntN(40))*time.Millisecond)
				ack, err := r.star.Append(ctx, stream, Batch{Records: []Record{{Body: []byte("x")}, {Body: []byte("y")}}})
				cancel()
				nc, ou := errors.Is(err, ErrNotCommitted), errors.Is(err, ErrOutcomeUnknown)
				if err != nil && nc == ou {
					t.Errorf("seed %d: error matches both or neither outcome: %v", seed, err)
				}
				if err == nil {
					mu.Lock()
					if acked[stream] == nil {
						acked[stream] = map[uint64]bool{}
					}
					for s := ack.Start; s < ack.End; s++ {
						if acked[stream][s] {
							t.Errorf("seed %d: %s seq %d acked twice", seed, stream, s)
						}
						acked[stream][s] = true
					}
					mu.Unlock()
				}
			}
		}(p)
	}
	wg.Wait()
	r.checkReleases()
	for stream, seqs := range acked {
		got := readAll(t, r.star, stream)
		have := map[uint64]bool{}
		for _, rec := range got {
			have[rec.Seq] = true
		}
		for s := range seqs {
			if !have[s] {
				t.Fatalf("seed %d: %s seq %d acked but not readable", seed, stream, s)
			}
		}
	}
}

// TestCloseFlushesAndLeaksNothing: Close acks every admitted batch and
// stops every goroutine.
func TestCloseFlushesAndLeaksNothing(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := newRig(t, Standard, 1, 12, func(c *Config, _ []*objstore.FaultStore) {
		c.Standard.FlushDeadline = time.Hour // only Close cuts
	})
	ctx := context.Background()
	sess, _ := r.star.OpenAppendSession(ctx, "a")
	var futs []*AckFuture
	for i := 0; i < 10; i++ {
		f, err := sess.Submit(ctx, Batch{Records: []Record{{Body: []byte("x")}}})
		if err != nil {
			t.Fatal(err)
		}
		futs = append(futs, f)
	}
	if err := r.star.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, f := range futs {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatalf("batch %d after Close: %v", i, err)
		}
	}
	if _, err := r.star.Append(ctx, "a", Batch{Records: []Record{{Body: []byte("late")}}}); !errors.Is(err, ErrClosed) || !errors.Is(err, ErrNotCommitted) {
		t.Fatalf("append after Close: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	m := objstore.NewMem()
	bad := []Config{
		{},
		{Star: "Bad Name", Meta: nil},
		{Star: "s", Standard: ClassConfig{Stores: []objstore.Store{m, m, m}, W: 4}},
		{Star: "s", Standard: ClassConfig{Stores: []objstore.Store{m, m, m}, W: -1}},
		{Star: "s", Standard: ClassConfig{Stores: []objstore.Store{m}, FlightBytes: 64 << 20}},
	}
	for i, c := range bad {
		if err := c.Validate(); err == nil {
			t.Errorf("config %d accepted", i)
		}
	}
	for w := 1; w <= 3; w++ { // any W in [1, K] is safe
		ok := Config{Star: "s", Meta: metastore.NewMem(), Express: ClassConfig{Stores: []objstore.Store{m, m, m}, W: w}}
		if err := ok.Validate(); err != nil {
			t.Errorf("W=%d of K=3 rejected: %v", w, err)
		}
	}
}
