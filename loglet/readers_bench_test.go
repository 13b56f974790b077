package loglet

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// BenchmarkAckToReaderSession measures how long after its ack a record
// reaches a non-leader Reader's polling session (Watch hidden): the
// leader's absorb must record its ref (within AbsorbInterval plus the
// round), then the session's next poll must see it (within
// ReaderConfig.PollInterval). One record is
// appended every 5 ms; each op is 100 of them. Reported: p50 and p99 of
// ack → Recv, in ms, against the bound absorb + poll.
//
//	go test ./loglet -run XXX -bench AckToReaderSession -benchtime 3x -count 3
func BenchmarkAckToReaderSession(b *testing.B) {
	for _, c := range []struct{ absorb, poll time.Duration }{
		{100 * time.Millisecond, 250 * time.Millisecond}, // the defaults
		{10 * time.Millisecond, 20 * time.Millisecond},
	} {
		b.Run(fmt.Sprintf("absorb=%v/poll=%v", c.absorb, c.poll), func(b *testing.B) {
			meta := metastore.NewMem()
			bucket := objstore.WithFaults(objstore.NewMem(), 1)
			bucket.SetLatency(fault.LogNormal(5*time.Millisecond, 20*time.Millisecond), fault.Put)
			ctx := context.Background()
			s, err := Open(ctx, Config{Star: "s1", Meta: meta, CreateOnAppend: true, Logger: quietLogger(), AbsorbInterval: c.absorb,
				Standard: ClassConfig{Stores: []objstore.Store{bucket}, FlushDeadline: time.Millisecond}})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close(ctx)
			if _, err := s.Append(ctx, "a", Batch{Records: []Record{{Body: []byte("start")}}}); err != nil {
				b.Fatal(err)
			}
			// The Reader polls: Mem can watch, and the etcd benchmark
			// (readers_etcd_bench_test.go) measures watching against polling.
			rd, err := NewReader(ReaderConfig{Meta: struct{ metastore.Store }{meta}, Standard: []objstore.Store{bucket}, PollInterval: c.poll})
			if err != nil {
				b.Fatal(err)
			}
			rs, err := rd.OpenReadSession(ctx, "a", ReadQuery{Start: AtSeq(1)})
			if err != nil {
				b.Fatal(err)
			}
			p50, p99 := ackToSession(b, s, rs, 100*b.N)
			b.ReportMetric(p50, "p50-ms")
			b.ReportMetric(p99, "p99-ms")
			b.ReportMetric(float64(c.absorb+c.poll)/1e6, "bound-ms")
		})
	}
}

// ackToSession appends total records to stream "a" of s, one every 5 ms,
// and returns the p50 and p99, in ms, of each one's ack to its arrival in
// the read session rs (which starts at the first of them).
func ackToSession(b *testing.B, s *Star, rs *ReadSession, total int) (p50, p99 float64) {
	b.Helper()
	ctx := context.Background()
	acked := map[uint64]time.Time{}
	got := make(chan map[uint64]time.Time, 1)
	go func() {
		seen := map[uint64]time.Time{}
		for len(seen) < total {
			recs, err := rs.Recv(ctx)
			if err != nil {
				b.Error(err)
				break
			}
			now := time.Now()
			for _, r := range recs {
				seen[r.Seq] = now
			}
		}
		got <- seen
	}()
	b.ResetTimer()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for i := 0; i < total; i++ {
		<-tick.C
		ack, err := s.Append(ctx, "a", Batch{Records: []Record{{Body: []byte("x")}}})
		if err != nil {
			b.Fatal(err)
		}
		acked[ack.Start] = time.Now()
	}
	seen := <-got
	b.StopTimer()
	var lat []float64
	for seq, at := range acked {
		if r, ok := seen[seq]; ok {
			lat = append(lat, float64(r.Sub(at))/1e6)
		}
	}
	if len(lat) != total {
		b.Fatalf("the session received %d of %d records", len(lat), total)
	}
	slices.Sort(lat)
	return lat[len(lat)/2], lat[len(lat)*99/100]
}
