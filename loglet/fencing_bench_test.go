package loglet

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightlog/flightlog/histogram"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// BenchmarkFencingToken is what a fencing token costs on the write path:
// BenchmarkProducerIdentity's closed load of one-record Appends, on a
// stream without a token (the baseline, in the same run) and on a fenced
// one whose batches present its token. Run:
//
//	go test ./loglet -run '^$' -bench BenchmarkFencingToken -benchtime 20000x -count 5
func BenchmarkFencingToken(b *testing.B) {
	for _, fenced := range []bool{false, true} {
		b.Run(fmt.Sprintf("fenced=%v", fenced), func(b *testing.B) {
			cfg := Config{Star: "fen", Meta: metastore.NewMem(), Logger: slog.New(slog.DiscardHandler), CreateOnAppend: true, DefaultClass: Express,
				Express: ClassConfig{Stores: []objstore.Store{newSinkStore()}, Codec: CodecNone}}
			s, err := Open(context.Background(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close(context.Background())
			token := ""
			if fenced {
				token = "writer-1"
				if _, err := s.SetFencingToken(context.Background(), "fen", token, ""); err != nil {
					b.Fatal(err)
				}
			}
			deadline := s.classConfig(Express).FlushDeadline
			const producers = 8
			var ack histogram.H
			var mu sync.Mutex
			var left atomic.Int64
			left.Store(int64(b.N))
			rec := []Record{{Body: []byte("a small record of about sixty bytes, like a log line")}}
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			for range producers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for left.Add(-1) >= 0 {
						start := time.Now()
						if _, err := s.Append(context.Background(), "fen", Batch{Records: rec, FencingToken: token}); err != nil {
							b.Error(err)
							return
						}
						d := time.Since(start)
						mu.Lock()
						ack.RecordDuration(d)
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			snap := ack.Snapshot()
			b.ReportMetric(us(snap.Quantile(0.5)), "ack-p50-us")
			b.ReportMetric(us(snap.Quantile(0.5)-int64(deadline)), "own-p50-us")
		})
	}
}
