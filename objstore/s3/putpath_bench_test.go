package s3_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/flightlog/flightlog/objstore/s3"
)

// BenchmarkPutPath measures the client's own cost of one conditional PUT
// against the real server, three ways interleaved in one run (blocks of
// putBlock PUTs, each path in turn), so that the ratios hold on a busy
// machine:
//
//   - sdk: PutObject with If-None-Match: * through a client built with the
//     SDK's defaults (its retryer, flexible checksums "when supported", its
//     HTTP pool), as a user of the SDK would write it;
//   - raw: the same PutObject through the Store's own client (no retry
//     loop, no attempt deadline, no CRC-32C header);
//   - store: Store.PutIfAbsent, the path flightlog's copies take.
//
// For each path it reports the p50 and p99 latency of single calls
// ("store-p50-µs"), the process's CPU time per PUT (user + system from
// getrusage: the server is another process, so this is the client's
// alone; "store-cpu-µs/op") and the heap bytes allocated per PUT
// ("store-B/op"). parallel=N runs N PUTs at a time (a flight's copies
// and the flights in flight). b.N PUTs are made per path.
//
//	scripts/test.sh -run '^$' -bench BenchmarkPutPath -benchtime 300x -count 3 ./objstore/s3
func BenchmarkPutPath(b *testing.B) {
	base := server(b)
	for _, size := range []int{32 << 10, 256 << 10} {
		body := make([]byte, size)
		for i := range body {
			body[i] = byte(i*7 + i>>9)
		}
		for _, par := range []int{1, 8} {
			b.Run(fmt.Sprintf("size=%dKiB/parallel=%d", size>>10, par), func(b *testing.B) {
				cfg := freshBucket(b, base)
				paths := []string{"sdk", "raw", "store"}
				puts := make([]func(context.Context, string, []byte) error, len(paths))
				figs := make([]pathFigures, len(paths))
				for i, p := range paths {
					puts[i] = putFunc(b, cfg, p)
					warm(b, puts[i], p, body, par)
				}
				b.SetBytes(int64(len(body)))
				b.ResetTimer()
				for done := 0; done < b.N; done += putBlock {
					n := min(putBlock, b.N-done)
					for i, p := range paths {
						figs[i].block(b, puts[i], fmt.Sprintf("bench/%s/%012d", p, done), body, n, par)
					}
				}
				b.StopTimer()
				for i, p := range paths {
					figs[i].report(b, p)
				}
			})
		}
	}
}

// putBlock is how many PUTs one path makes before the next path's turn.
const putBlock = 20

// pathFigures accumulates one path's latencies, CPU and allocation.
type pathFigures struct {
	lat   []time.Duration
	cpu   time.Duration
	bytes uint64
}

// block makes n PUTs of fresh keys under prefix, par at a time.
func (f *pathFigures) block(b *testing.B, put func(context.Context, string, []byte) error, prefix string, body []byte, n, par int) {
	ctx := context.Background()
	lat := make([][]time.Duration, par)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	alloc0, cpu0 := ms.TotalAlloc, processCPU()
	var wg sync.WaitGroup
	for w := range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += par {
				key := fmt.Sprintf("%s/%d", prefix, i)
				start := time.Now()
				if err := put(ctx, key, body); err != nil {
					b.Errorf("PUT %s: %v", key, err)
					return
				}
				lat[w] = append(lat[w], time.Since(start))
			}
		}()
	}
	wg.Wait()
	f.cpu += processCPU() - cpu0
	runtime.ReadMemStats(&ms)
	f.bytes += ms.TotalAlloc - alloc0
	f.lat = append(f.lat, slices.Concat(lat...)...)
}

func (f *pathFigures) report(b *testing.B, path string) {
	if len(f.lat) == 0 {
		return
	}
	slices.Sort(f.lat)
	q := func(p float64) float64 { return float64(f.lat[int(p*float64(len(f.lat)-1))]) / 1e3 }
	n := float64(len(f.lat))
	b.ReportMetric(q(0.50), path+"-p50-µs")
	b.ReportMetric(q(0.99), path+"-p99-µs")
	b.ReportMetric(float64(f.cpu)/1e3/n, path+"-cpu-µs/op")
	b.ReportMetric(float64(f.bytes)/n, path+"-B/op")
}

// warm makes par PUTs at once so that the connection pool is open before
// anything is measured.
func warm(b *testing.B, put func(context.Context, string, []byte) error, path string, body []byte, par int) {
	var wg sync.WaitGroup
	for w := range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := put(context.Background(), fmt.Sprintf("warm/%s/%d", path, w), body); err != nil {
				b.Errorf("warm-up PUT: %v", err)
			}
		}()
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
}

// putFunc returns the PUT of one path over the bucket of cfg.
func putFunc(b *testing.B, cfg s3.Config, path string) func(ctx context.Context, key string, body []byte) error {
	st := newStore(b, cfg)
	switch path {
	case "store":
		return st.PutIfAbsent
	case "raw":
		c := st.Client()
		return func(ctx context.Context, key string, body []byte) error {
			_, err := c.PutObject(ctx, &awss3.PutObjectInput{
				Bucket: aws.String(cfg.Bucket), Key: aws.String(key),
				Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body))),
				IfNoneMatch: aws.String("*"),
			})
			return err
		}
	}
	awsCfg, err := config.LoadDefaultConfig(context.Background(),
		config.WithRegion(s3.DefaultEndpointRegion),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, "")))
	if err != nil {
		b.Fatal(err)
	}
	c := awss3.NewFromConfig(awsCfg, func(o *awss3.Options) {
		o.BaseEndpoint = aws.String(cfg.Endpoint)
		o.UsePathStyle = true
	})
	return func(ctx context.Context, key string, body []byte) error {
		_, err := c.PutObject(ctx, &awss3.PutObjectInput{
			Bucket: aws.String(cfg.Bucket), Key: aws.String(key),
			Body: bytes.NewReader(body), IfNoneMatch: aws.String("*"),
		})
		return err
	}
}

// processCPU is the process's user plus system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
