package loglet

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/objstore"
)

var readerCalls = flag.Int("readers.calls", 0, "calls TestReadersNeverFailAgainstABusyLeader makes (0: 12,000; 3,000 under -race)")

// TestReadersNeverFailAgainstABusyLeader (issue 17, item 1): Readers in
// other processes loop CheckTail and reads (by seq, by tail offset) over
// streams of both classes while a leader appends and absorbs as fast as it
// can, so every call races rounds that move the checkpoint and supersede
// (then delete) tails snapshots. Half the readers see slow GETs, which
// widens the race. No call may fail: a reader never fails because the
// writer made progress. Each Reader's tail of a stream never goes back.
//
// With settlement on ("settling"), records also move from transit slots
// into settled objects (which are merged, and the merged ones deleted at
// once) and the slots are deleted under the readers' feet.
//
//	go test ./loglet -run TestReadersNeverFailAgainstABusyLeader -readers.calls 1000000 -v
func TestReadersNeverFailAgainstABusyLeader(t *testing.T) {
	t.Run("transit", func(t *testing.T) { readersAgainstBusyLeader(t, false) })
	t.Run("settling", func(t *testing.T) { readersAgainstBusyLeader(t, true) })
}

func readersAgainstBusyLeader(t *testing.T, settling bool) {
	calls := *readerCalls
	if calls == 0 {
		calls = 12000
		if raceBuild {
			calls = 3000
		}
	}
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	w := newWorld(t)
	p1, err := w.open("p1", func(c *Config) {
		c.AbsorbInterval = time.Millisecond
		if settling {
			// Merged-away objects go at once (readers re-resolve); under
			// -race, where each call is slower, after 10ms.
			c.SettleInterval, c.doomedGrace = time.Millisecond, -1
			if raceBuild {
				c.doomedGrace = 10 * time.Millisecond
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var streams []string
	for i := 0; i < 24; i++ {
		name := fmt.Sprintf("s%d", i)
		opts := StreamOptions{Class: Standard}
		if i%3 == 0 {
			name, opts.Class = fmt.Sprintf("e%d", i), Express
		}
		if _, err := p1.star.CreateStream(ctx, name, opts); err != nil {
			t.Fatal(err)
		}
		if _, err := p1.star.Append(ctx, name, Batch{Records: []Record{{Body: []byte("first")}}}); err != nil {
			t.Fatal(err)
		}
		streams = append(streams, name)
	}
	// Every stream has an absorbed record. A Reader's tail moves only when
	// the metastore is written (an absorb round commits there): checked
	// again at each write, on the metastore's watch. (Not in a synctest
	// bubble: this test races real goroutines.)
	wctx, unwatch := context.WithCancel(ctx)
	writes, err := w.meta.Watch(wctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range streams {
		for {
			rd, _ := NewReader(ReaderConfig{Meta: w.meta, Standard: []objstore.Store{w.std}, Express: []objstore.Store{w.exp[0], w.exp[1], w.exp[2]}})
			if tl, err := rd.CheckTail(ctx, name); err == nil && tl.Seq > 0 {
				break
			}
			<-writes
		}
	}
	unwatch()

	stop := make(chan struct{})
	var writers sync.WaitGroup
	var appended atomic.Int64
	for i := 0; i < 4; i++ {
		writers.Add(1)
		go func() {
			defer writers.Done()
			rnd := rand.New(rand.NewPCG(seed, uint64(i)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				st := streams[rnd.IntN(len(streams))]
				if _, err := p1.star.Append(ctx, st, Batch{Records: []Record{{Body: fmt.Appendf(nil, "w%d", i)}}}); err != nil {
					t.Errorf("append %s: %v", st, err)
					return
				}
				appended.Add(1)
			}
		}()
	}

	var done, failed atomic.Int64
	var readers sync.WaitGroup
	var fallbacks atomic.Uint64
	for i := 0; i < 4; i++ {
		readers.Add(1)
		go func() {
			defer readers.Done()
			rnd := rand.New(rand.NewPCG(seed, 100+uint64(i)))
			wrap := func(m *objstore.Mem, n int) objstore.Store {
				if i%2 == 0 {
					return m
				}
				f := objstore.WithFaults(m, seed+uint64(10*i+n))
				f.SetLatency(fault.Uniform(0, 2*time.Millisecond), fault.Get)
				return f
			}
			rd, err := NewReader(ReaderConfig{Meta: w.meta, Standard: []objstore.Store{wrap(w.std, 0)},
				Express: []objstore.Store{wrap(w.exp[0], 1), wrap(w.exp[1], 2), wrap(w.exp[2], 3)}})
			if err != nil {
				t.Error(err)
				return
			}
			defer func() { fallbacks.Add(rd.Stats().SnapshotFallbacks) }()
			seen := map[string]uint64{}
			for done.Add(1) <= int64(calls) {
				st := streams[rnd.IntN(len(streams))]
				var err error
				switch rnd.IntN(3) {
				case 0:
					var tl Tail
					tl, err = rd.CheckTail(ctx, st)
					if err == nil && tl.Seq < seen[st] {
						t.Errorf("reader %d: tail of %s went back from %d to %d", i, st, seen[st], tl.Seq)
					}
					seen[st] = max(seen[st], tl.Seq)
				case 1:
					var res ReadResult
					from := uint64(rnd.Int64N(int64(seen[st] + 1)))
					res, err = rd.Read(ctx, st, ReadQuery{Start: AtSeq(from), MaxRecords: 16})
					if err == nil && from < seen[st] && len(res.Records) == 0 {
						t.Errorf("reader %d: read of %s from %d below its tail %d returned nothing", i, st, from, seen[st])
					}
				case 2:
					_, err = rd.Read(ctx, st, ReadQuery{Start: TailOffset(2), MaxRecords: 4})
				}
				if err != nil {
					failed.Add(1)
					t.Errorf("reader %d: %s: %v", i, st, err)
					if failed.Load() > 10 {
						return
					}
				}
			}
		}()
	}
	start := time.Now()
	readers.Wait()
	took := time.Since(start)
	close(stop)
	writers.Wait()
	st := p1.star.Stats()
	rounds := st.Standard.AbsorbRounds + st.Express.AbsorbRounds
	t.Logf("%d reader calls in %v against %d appends and %d absorb rounds: %d failed, %d snapshot fallbacks",
		min(done.Load(), int64(calls)), took.Round(time.Millisecond), appended.Load(), rounds, failed.Load(), fallbacks.Load())
	if rounds < 20 {
		t.Errorf("only %d absorb rounds ran: the readers did not race a busy writer", rounds)
	}
}
