package s3_test

import (
	"bytes"
	"context"
	"fmt"
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
// against the real server, three ways in one run, so that a ratio can be
// quoted on a busy machine:
//
//   - path=sdk-default: PutObject with If-None-Match: * through a client
//     built with the SDK's defaults (its retryer, flexible checksums "when
//     supported", its HTTP pool), as a user of the SDK would write it;
//   - path=raw: the same PutObject through the Store's own client (no
//     retry loop, no attempt deadline, no CRC-32C header);
//   - path=store: Store.PutIfAbsent, the path flightlog's copies take.
//
// Each reports the p50 and p99 latency of single calls, and the process's
// CPU time per PUT (user + system, from getrusage: the server is another
// process, so this is the client's CPU alone) as "cpu-µs/op".
// parallel=N runs N PUTs at a time (a flight's copies and the flights in
// flight).
//
//	scripts/test.sh -run '^$' -bench BenchmarkPutPath -benchtime 400x -count 3 ./objstore/s3
func BenchmarkPutPath(b *testing.B) {
	base := server(b)
	for _, size := range []int{32 << 10, 256 << 10} {
		body := make([]byte, size)
		for i := range body {
			body[i] = byte(i*7 + i>>9)
		}
		for _, par := range []int{1, 8} {
			for _, path := range []string{"sdk-default", "raw", "store"} {
				name := fmt.Sprintf("size=%dKiB/parallel=%d/path=%s", size>>10, par, path)
				b.Run(name, func(b *testing.B) {
					cfg := freshBucket(b, base)
					put := putFunc(b, cfg, path)
					benchPuts(b, put, body, par)
				})
			}
		}
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

// benchPuts runs b.N PUTs of fresh keys, par at a time, and reports
// latency and CPU per PUT.
func benchPuts(b *testing.B, put func(context.Context, string, []byte) error, body []byte, par int) {
	ctx := context.Background()
	// Warm the connection pool so that dials are not measured.
	var wg sync.WaitGroup
	for w := range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := put(ctx, fmt.Sprintf("warm/%d", w), body); err != nil {
				b.Errorf("warm-up PUT: %v", err)
			}
		}()
	}
	wg.Wait()
	if b.Failed() {
		return
	}
	lat := make([][]time.Duration, par)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	cpu0 := processCPU()
	b.ResetTimer()
	for w := range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < b.N; i += par {
				key := fmt.Sprintf("bench/%012d", i)
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
	b.StopTimer()
	cpu := processCPU() - cpu0
	all := slices.Concat(lat...)
	if len(all) == 0 {
		return
	}
	slices.Sort(all)
	q := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))]) / 1e3 }
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
	b.ReportMetric(float64(cpu)/1e3/float64(len(all)), "cpu-µs/op")
}

// processCPU is the process's user plus system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
