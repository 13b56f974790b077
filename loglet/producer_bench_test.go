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

// BenchmarkProducerIdentity is what a producer identity costs on the write
// path: the same closed load of one-record Appends (8 producers, instant
// buckets, so the ack is the flush deadline plus the library's own cost),
// without an identity (the baseline, in the same run) and with one.
// own-p50-us is the ack's p50 past the flush deadline; allocs/op is per
// batch. Run:
//
//	go test ./loglet -run '^$' -bench BenchmarkProducerIdentity -benchtime 20000x -count 5
func BenchmarkProducerIdentity(b *testing.B) {
	for _, identity := range []bool{false, true} {
		b.Run(fmt.Sprintf("identity=%v", identity), func(b *testing.B) {
			cfg := Config{Star: "pid", Meta: metastore.NewMem(), Logger: slog.New(slog.DiscardHandler), CreateOnAppend: true, DefaultClass: Express,
				Express: ClassConfig{Stores: []objstore.Store{newSinkStore()}, Codec: CodecNone}}
			s, err := Open(context.Background(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close(context.Background())
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
					pr := s.NewProducer("pid", "")
					for left.Add(-1) >= 0 {
						bt := Batch{Records: rec}
						if identity {
							bt.Producer = pr.Next()
						}
						start := time.Now()
						if _, err := s.Append(context.Background(), "pid", bt); err != nil {
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
