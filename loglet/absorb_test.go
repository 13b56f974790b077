package loglet

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// TestAckedRecordsReadableFromFreshReader: after Close (which absorbs
// everything), a Reader in "another process" reads every acked record back,
// byte for byte and in order, even with one copy of every slot corrupted.
func TestAckedRecordsReadableFromFreshReader(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := newRig(t, Express, 3, seed, func(c *Config, fs []*objstore.FaultStore) {
		c.AbsorbInterval = 2 * time.Millisecond
		for _, f := range fs {
			f.SetLatency(fault.LogNormal(time.Millisecond, 8*time.Millisecond), fault.Put)
		}
	})
	rnd := rand.New(rand.NewPCG(seed, 0))
	want := map[string][][]byte{}
	ctx := context.Background()
	for i := 0; i < 300; i++ {
		stream := fmt.Sprint("r", rnd.IntN(4))
		b := body(stream, i, 1+rnd.IntN(3000), rnd)
		if _, err := r.star.Append(ctx, stream, Batch{Records: []Record{{Body: b}}}); err != nil {
			t.Fatal(err)
		}
		want[stream] = append(want[stream], b)
	}
	if err := r.star.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := r.star.Stats().Express
	if st.Checkpoint != st.ReleasePoint || st.AbsorbRounds == 0 || st.FlightIndexBytes != 0 || st.Backlog.Flights != 0 {
		t.Fatalf("after Close: checkpoint %d release point %d rounds %d index %d backlog %+v", st.Checkpoint, st.ReleasePoint, st.AbsorbRounds, st.FlightIndexBytes, st.Backlog)
	}
	// Corrupt one copy of every slot: the reader must fall through.
	for _, key := range r.mems[1].Keys() {
		if strings.HasPrefix(key, "chains/") {
			if err := r.mems[1].Corrupt(key, 60); err != nil {
				t.Fatal(err)
			}
		}
	}
	rd, err := NewReader(ReaderConfig{Meta: r.meta, Express: []objstore.Store{r.mems[1], r.mems[0], r.mems[2]}})
	if err != nil {
		t.Fatal(err)
	}
	for stream, bodies := range want {
		tail, err := rd.CheckTail(ctx, stream)
		if err != nil || tail.Seq != uint64(len(bodies)) {
			t.Fatalf("%s: reader tail %+v %v, want %d", stream, tail, err, len(bodies))
		}
		next := uint64(0)
		for next < uint64(len(bodies)) {
			res, err := rd.Read(ctx, stream, ReadQuery{Start: AtSeq(next), MaxRecords: 37})
			if err != nil {
				t.Fatalf("%s at %d: %v", stream, next, err)
			}
			for _, rec := range res.Records {
				if rec.Seq != next || !bytes.Equal(rec.Body, bodies[next]) {
					t.Fatalf("seed %d: %s: record %d differs (seq %d)", seed, stream, next, rec.Seq)
				}
				next++
			}
		}
	}
	// Random limits: the read plans extents ahead by their raw length and
	// must still return exactly the next records, at least one, within
	// MaxRecords and (past the first record) MaxBytes.
	for stream, bodies := range want {
		next := uint64(0)
		for next < uint64(len(bodies)) {
			q := ReadQuery{Start: AtSeq(next), MaxRecords: 1 + rnd.IntN(100), MaxBytes: 1 + rnd.IntN(40000)}
			res, err := rd.Read(ctx, stream, q)
			if err != nil {
				t.Fatalf("%s at %d: %v", stream, next, err)
			}
			if len(res.Records) == 0 || len(res.Records) > q.MaxRecords {
				t.Fatalf("seed %d: %s at %d with %+v: %d records", seed, stream, next, q, len(res.Records))
			}
			size := 0
			for _, rec := range res.Records {
				if rec.Seq != next || !bytes.Equal(rec.Body, bodies[next]) {
					t.Fatalf("seed %d: %s: record %d differs (seq %d)", seed, stream, next, rec.Seq)
				}
				size += len(rec.Body)
				next++
			}
			if len(res.Records) > 1 && size > q.MaxBytes {
				t.Fatalf("seed %d: %s: %d records of %d bytes over MaxBytes %d", seed, stream, len(res.Records), size, q.MaxBytes)
			}
		}
	}
	if s := rd.Stats(); s.CorruptCopies == 0 {
		t.Fatalf("no corrupt copy was detected: %+v", s)
	}
}

// TestReadsRacingAbsorbNoGapNoDup: readers re-read from 0 and follow the
// tail while appends continue and the absorb moves records from the flight
// index to refs underneath them.
func TestReadsRacingAbsorbNoGapNoDup(t *testing.T) {
	r := newRig(t, Standard, 1, 21, func(c *Config, _ []*objstore.FaultStore) {
		c.AbsorbInterval = time.Millisecond
		c.AbsorbMaxSlots = 3
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 200
	if _, err := r.star.CreateStream(ctx, "x", StreamOptions{Class: Standard}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < n; i++ {
			if _, err := r.star.Append(ctx, "x", Batch{Records: []Record{{Body: []byte(fmt.Sprint(i))}}}); err != nil {
				t.Errorf("append: %v", err)
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pass := 0; ; pass++ {
				next := uint64(0)
				for {
					res, err := r.star.Read(ctx, "x", ReadQuery{Start: AtSeq(next), MaxRecords: 50})
					if err != nil {
						t.Errorf("read at %d: %v", next, err)
						return
					}
					for _, rec := range res.Records {
						if rec.Seq != next || string(rec.Body) != fmt.Sprint(next) {
							t.Errorf("pass %d: got seq %d body %q, want %d", pass, rec.Seq, rec.Body, next)
							return
						}
						next++
					}
					if len(res.Records) == 0 {
						break
					}
				}
				select {
				case <-done:
					if next == n {
						return
					}
				case <-time.After(2 * time.Millisecond): // pace the passes
				}
			}
		}()
	}
	rs, err := r.star.OpenReadSession(ctx, "x", ReadQuery{Start: AtSeq(0), MaxRecords: 5})
	if err != nil {
		t.Fatal(err)
	}
	for got := uint64(0); got < n; {
		recs, err := rs.Recv(ctx)
		if err != nil {
			t.Fatalf("session after %d: %v", got, err)
		}
		for _, rec := range recs {
			if rec.Seq != got {
				t.Fatalf("session: seq %d, want %d", rec.Seq, got)
			}
			got++
		}
	}
	wg.Wait()
	if st := r.star.Stats().Standard; st.AbsorbRounds < 5 {
		t.Fatalf("only %d absorb rounds: the race was not exercised", st.AbsorbRounds)
	}
}

// TestMetastoreOutageStallsThenRecovers: with the metastore down, the absorb
// cannot commit, the backlog fills, publishes stall (counted as "metastore
// slow"), producers block; when it returns, everything is acked and absorbed.
func TestMetastoreOutageStallsThenRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mf := metastore.WithFaults(metastore.NewMem(), 3)
		m := objstore.NewMem()
		cfg := Config{Star: "s1", Meta: mf, CreateOnAppend: true, Logger: testLogger(),
			Standard: ClassConfig{Stores: []objstore.Store{m}, ParallelUploads: 2, ChainBacklogFlights: 4, FlushDeadline: time.Millisecond}}
		s, err := Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(context.Background())
		ctx := context.Background()
		if _, err := s.Append(ctx, "a", Batch{Records: []Record{{Body: []byte("warm")}}}); err != nil {
			t.Fatal(err) // creates the stream while the metastore is up
		}
		mf.SetDown(true)
		const n = 12
		errs := make(chan error, n)
		for i := 0; i < n; i++ {
			go func() {
				_, err := s.Append(ctx, "a", Batch{Records: []Record{{Body: []byte("x")}}})
				errs <- err
			}()
			time.Sleep(5 * time.Millisecond) // one flight each (fake clock)
		}
		time.Sleep(10 * time.Second) // the outage lasts 10s (fake clock)
		synctest.Wait()
		st := s.Stats().Standard
		if st.Backlog.Flights > 4 || !st.Backlog.Stalling || st.Backlog.StallingCause != "metastore slow" {
			t.Fatalf("backlog during the outage %+v", st.Backlog)
		}
		if st.AckedBatches >= n+1 {
			t.Fatalf("all %d appends acked while the backlog was full", st.AckedBatches)
		}
		mf.SetDown(false)
		for i := 0; i < n; i++ {
			if err := <-errs; err != nil {
				t.Fatalf("append after recovery: %v", err)
			}
		}
		s.Close(context.Background())
		if st := s.Stats().Standard; st.Checkpoint != st.ReleasePoint || st.Backlog.Stalls["metastore slow"] == 0 {
			t.Fatalf("after recovery: checkpoint %d, release point %d, backlog %+v", st.Checkpoint, st.ReleasePoint, st.Backlog)
		}
	})
}

// TestMetastoreRequestsDoNotGrowWithStreams: every absorb round costs one
// metastore request, whether 1 stream or 500 streams are active, and
// nothing else on the append path touches the metastore (but Close's seal:
// one request more, unless the close's last round carried it).
func TestMetastoreRequestsDoNotGrowWithStreams(t *testing.T) {
	perRound := func(streams int) float64 {
		meta := metastore.NewMem()
		m := objstore.NewMem()
		s, err := Open(context.Background(), Config{Star: "s1", Meta: meta, Logger: quietLogger(),
			AbsorbInterval: time.Millisecond, AbsorbMaxSlots: 4,
			// Small flights: many slots, so many rounds.
			Standard: ClassConfig{Stores: []objstore.Store{m}, FlushDeadline: time.Millisecond, FlightBytes: 256}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		sess := make([]*AppendSession, streams)
		for i := range sess {
			name := fmt.Sprint("st", i)
			if _, err := s.CreateStream(ctx, name, StreamOptions{Class: Standard}); err != nil {
				t.Fatal(err)
			}
			if sess[i], err = s.OpenAppendSession(ctx, name); err != nil {
				t.Fatal(err)
			}
		}
		// From here on only the absorb (and Close's seal) may call the
		// metastore.
		before := meta.Counters().Requests()
		var futs []*AckFuture
		for i := 0; i < 2000; i++ {
			f, err := sess[i%streams].Submit(ctx, Batch{Records: []Record{{Body: []byte("x")}}})
			if err != nil {
				t.Fatal(err)
			}
			futs = append(futs, f)
		}
		for _, f := range futs {
			if _, err := f.Wait(ctx); err != nil {
				t.Fatal(err)
			}
		}
		s.Close(context.Background())
		rounds := s.Stats().Standard.AbsorbRounds
		if rounds < 2 {
			t.Fatalf("%d absorb rounds", rounds)
		}
		n := float64(meta.Counters().Requests() - before)
		if n == float64(rounds) {
			n++ // the clean seal went in the last round's Commit
		}
		return (n - 1) / float64(rounds) // -1: the clean seal
	}
	one, many := perRound(1), perRound(500)
	if one != 1 || many != 1 {
		t.Fatalf("metastore requests per absorb round: %.2f with 1 stream, %.2f with 500 (want 1 and 1)", one, many)
	}
}

// TestReadSpansHistoryAndIndex: one Read from 0 returns absorbed records
// from refs and then the unabsorbed tail from the flight index, within its
// limits, in order.
func TestReadSpansHistoryAndIndex(t *testing.T) {
	r := newRig(t, Standard, 1, 40, func(c *Config, _ []*objstore.FaultStore) {
		c.AbsorbInterval = time.Hour // the first round runs at once; later ones wait
	})
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		if _, err := r.star.Append(ctx, "m", Batch{Records: []Record{{Body: []byte(fmt.Sprint(i))}}}); err != nil {
			t.Fatal(err)
		}
	}
	if st := r.star.Stats().Standard; st.Checkpoint == 0 || st.FlightIndexBytes == 0 {
		t.Skipf("need some records absorbed and some not (checkpoint %d, index %d bytes)", st.Checkpoint, st.FlightIndexBytes)
	}
	res, err := r.star.Read(ctx, "m", ReadQuery{Start: AtSeq(0)})
	if err != nil || len(res.Records) != 10 || res.Next != 10 {
		t.Fatalf("read: %d records, next %d, %v", len(res.Records), res.Next, err)
	}
	for i, rec := range res.Records {
		if rec.Seq != uint64(i) || string(rec.Body) != fmt.Sprint(i) {
			t.Fatalf("record %d: seq %d %q", i, rec.Seq, rec.Body)
		}
	}
	res, _ = r.star.Read(ctx, "m", ReadQuery{Start: AtSeq(0), MaxRecords: 4})
	if len(res.Records) != 4 || res.Next != 4 {
		t.Fatalf("limited read: %d records, next %d", len(res.Records), res.Next)
	}
}

// TestReadWithRoomReturnsUpToItsTail (issue 13, item 9): readers looping
// against a busy writer whose absorb keeps moving records from the flight
// index into refs: every Read with room left returns every record up to the
// tail it reports (Next == Tail.Seq), never a short page. The loglet's
// Example failed this way about one run in 100 under -race.
func TestReadWithRoomReturnsUpToItsTail(t *testing.T) {
	r := newRig(t, Standard, 1, 7, func(c *Config, _ []*objstore.FaultStore) {
		c.AbsorbInterval = 0 // rounds as fast as they go: the index moves all the time
	})
	// The bound only stops a hung writer; a read cut short by it (records
	// returned, the error kept for the next call) does not count.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := r.star.Append(ctx, "a", Batch{Records: []Record{{Body: []byte("first")}}}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil && i < 1500; i++ {
			if _, err := r.star.Append(ctx, "a", Batch{Records: []Record{{Body: []byte(fmt.Sprint(i))}}}); err != nil && ctx.Err() == nil {
				t.Errorf("append: %v", err)
				return
			}
		}
	}()
	reads, short := 0, 0
	for {
		select {
		case <-done:
			t.Logf("%d reads, %d short", reads, short)
			if short > 0 {
				t.Fatalf("%d of %d reads with room left stopped short of the tail they reported", short, reads)
			}
			return
		default:
		}
		start := uint64(reads % 7 * 10)
		res, err := r.star.Read(ctx, "a", ReadQuery{Start: AtSeq(start), MaxRecords: 1 << 20, MaxBytes: 1 << 30})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			return
		}
		reads++
		if res.Tail.Seq > start && res.Next != res.Tail.Seq {
			short++
			if short == 1 {
				t.Errorf("read from %d returned %d records to %d; its tail is %d", start, len(res.Records), res.Next, res.Tail.Seq)
			}
		}
	}
}
