package peerbench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/histogram"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore/bbolt"
	"github.com/flightlog/flightlog/objstore"
	"github.com/flightlog/flightlog/objstore/s3"
)

// s3Server is the S3-compatible server named by the environment, as
// scripts/test.sh exports it for versitygw; absent, the caller skips (or
// fails, under FLIGHTLOG_REQUIRE_SERVERS=1).
func s3Server(tb testing.TB) s3.Config {
	tb.Helper()
	ep := os.Getenv("FLIGHTLOG_S3_ENDPOINT")
	if ep == "" {
		msg := "FLIGHTLOG_S3_ENDPOINT is not set: run ./scripts/test.sh, which starts an S3-compatible server (versitygw) on loopback and sets it"
		if os.Getenv("FLIGHTLOG_REQUIRE_SERVERS") == "1" {
			tb.Fatal(msg + " (FLIGHTLOG_REQUIRE_SERVERS=1: a missing server is a failure)")
		}
		tb.Skip(msg)
	}
	return s3.Config{
		Endpoint:     ep,
		UsePathStyle: true,
		AccessKey:    os.Getenv("FLIGHTLOG_S3_ACCESS_KEY"),
		SecretKey:    os.Getenv("FLIGHTLOG_S3_SECRET_KEY"),
	}
}

// freshBucket creates a bucket of a random name through the client both
// sides share; it is emptied and removed at cleanup.
func freshBucket(tb testing.TB, cfg s3.Config) *s3.Store {
	tb.Helper()
	var b [6]byte
	rand.Read(b[:])
	cfg.Bucket = "peerbench-" + hex.EncodeToString(b[:])
	st, err := s3.New(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("s3.New: %v", err)
	}
	if err := st.CreateBucket(context.Background()); err != nil {
		tb.Fatalf("CreateBucket(%s): %v", cfg.Bucket, err)
	}
	tb.Cleanup(func() { removeBucket(tb, st) })
	return st
}

// removeBucket deletes every object, eight at a time, and then the bucket.
func removeBucket(tb testing.TB, st *s3.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	keys, err := st.List(ctx, "", "", 0)
	if err != nil {
		tb.Errorf("cleanup: list %s: %v", st.Bucket(), err)
		return
	}
	ch := make(chan string)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for k := range ch {
				if err := st.Delete(ctx, k); err != nil {
					tb.Errorf("cleanup: delete %s/%s: %v", st.Bucket(), k, err)
				}
			}
		})
	}
	for _, k := range keys {
		ch <- k
	}
	close(ch)
	wg.Wait()
	if _, err := st.Client().DeleteBucket(ctx, &awss3.DeleteBucketInput{Bucket: aws.String(st.Bucket())}); err != nil {
		tb.Errorf("cleanup: delete bucket %s: %v", st.Bucket(), err)
	}
}

// countingStore counts the PUTs and the bytes PUT through a store.
type countingStore struct {
	objstore.Store
	puts, bytes atomic.Int64
}

func (c *countingStore) PutIfAbsent(ctx context.Context, key string, body []byte) error {
	c.puts.Add(1)
	c.bytes.Add(int64(len(body)))
	return c.Store.PutIfAbsent(ctx, key, body)
}

// s3SideKind opens a side over bucket (counted) with its metastore, if any,
// in dir.
type s3SideKind struct {
	name string
	open func(ctx context.Context, dir string, bucket *countingStore) (side, error)
}

func s3SideKinds() []s3SideKind {
	return []s3SideKind{
		{"flightlog-standard", openFlightlogS3},
		{"naive-put-per-append", func(_ context.Context, _ string, bucket *countingStore) (side, error) {
			return &naiveSide{bucket: bucket}, nil
		}},
	}
}

// openFlightlogS3 opens a star whose Standard class is the one S3 bucket
// (K=1, W=1) with a bbolt metastore in dir: the embedded default's
// layout with the bucket moved to S3. Settlement is on, as by default.
func openFlightlogS3(ctx context.Context, dir string, bucket *countingStore) (side, error) {
	meta, err := bbolt.Open(filepath.Join(dir, "meta.db"), nil)
	if err != nil {
		return nil, err
	}
	cfg := loglet.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Star = "peerbench"
	cfg.Meta = meta
	cfg.Closers = append(cfg.Closers, meta)
	cfg.Standard.Stores = []objstore.Store{bucket}
	cfg.Standard.BucketNames = []string{bucket.Store.(*s3.Store).Bucket()}
	star, err := loglet.Open(ctx, cfg)
	if err != nil {
		meta.Close()
		return nil, err
	}
	return &flightlogSide{star: star, class: loglet.Standard}, nil
}

// naiveSide is the strawman: each append is one conditional PutObject of a
// one-frame transit bundle (the record encoding and checksums a flight
// uses) under a key of its own, acked when the PUT returns. It keeps no
// order across producers, no metastore, and nothing of the write path's
// guarantees beyond "in the bucket before the ack"; it shows what batching
// appends into flights buys (PUTs per MB) and costs (ack latency).
type naiveSide struct {
	bucket *countingStore
}

func naivePrefix(i int) string { return fmt.Sprintf("naive/%s/", streamName(i)) }

func (s *naiveSide) producer(_ context.Context, i int) (producer, error) {
	return &naiveProducer{bucket: s.bucket, stream: streamName(i), prefix: naivePrefix(i)}, nil
}

func (s *naiveSide) read(ctx context.Context, i int) ([][]byte, error) {
	keys, err := s.bucket.List(ctx, naivePrefix(i), "", 0)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for _, k := range keys { // keys sort by sequence number (zero-padded)
		obj, err := s.bucket.Get(ctx, k, 0, -1)
		if err != nil {
			return nil, err
		}
		_, frames, err := envelope.ParseBundle(obj)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		for _, f := range frames {
			recs, err := envelope.DecodeFrame(f, obj[f.Offset:f.End()])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			for _, r := range recs {
				out = append(out, r.Body)
			}
		}
	}
	return out, nil
}

func (s *naiveSide) close(context.Context) error { return nil }

type naiveProducer struct {
	bucket *countingStore
	stream string
	prefix string

	mu   sync.Mutex
	next uint64
	w    *envelope.BundleWriter
}

func (p *naiveProducer) append(ctx context.Context, body []byte) error {
	key, obj, err := p.encode(body)
	if err != nil {
		return err
	}
	return p.bucket.PutIfAbsent(ctx, key, obj)
}

// submit starts the PUT on a goroutine of its own: the naive writer's
// pipelining is one request per append in flight.
func (p *naiveProducer) submit(ctx context.Context, body []byte) (func() error, error) {
	key, obj, err := p.encode(body)
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- p.bucket.PutIfAbsent(ctx, key, obj) }()
	return func() error { return <-done }, nil
}

// encode renders body as a one-frame bundle at the producer's next
// sequence number and names its key.
func (p *naiveProducer) encode(body []byte) (key string, obj []byte, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.w == nil {
		p.w = envelope.NewBundleWriter()
	}
	now := time.Now().UnixMilli()
	rec := envelope.Record{Timestamp: now, Body: body}
	payload := envelope.AppendRecord(make([]byte, 0, envelope.EncodedRecordSize(rec)), rec)
	seq := p.next
	if err := p.w.AddFrame(p.stream, seq, 1, now, now, payload, envelope.CodecNone); err != nil {
		p.w.Finish(0, 0, envelope.Nonce{}) // reset
		return "", nil, fmt.Errorf("naive: %s at %d: %w", p.stream, seq, err)
	}
	obj, _ = p.w.Finish(1, seq, envelope.NewNonce())
	obj = append([]byte(nil), obj...) // the writer reuses its buffer
	p.next++
	return fmt.Sprintf("%s%020d", p.prefix, seq), obj, nil
}

// BenchmarkS3 runs flightlog's Standard class and the naive writer over the
// same S3 client against a real S3-compatible server (skipped without
// FLIGHTLOG_S3_ENDPOINT), with the same records and producers, each
// producer waiting for each ack. Besides ack-p50-ms, ack-p99-ms and MB/s it
// reports PUTs/MB (PutObject requests per MB of record bodies) and
// put-B/body-B (bytes PUT, metastore excluded, over body bytes).
func BenchmarkS3(b *testing.B) {
	cfg := s3Server(b)
	for _, size := range recordSizes {
		for _, producers := range producerCount {
			for _, k := range s3SideKinds() {
				b.Run(fmt.Sprintf("size=%s/producers=%d/%s", sizeName(size), producers, k.name), func(b *testing.B) {
					runS3(b, cfg, k, size, producers)
				})
			}
		}
	}
}

func runS3(b *testing.B, cfg s3.Config, k s3SideKind, size, producers int) {
	ctx := context.Background()
	bucket := &countingStore{Store: freshBucket(b, cfg)}
	s, err := k.open(ctx, b.TempDir(), bucket)
	if err != nil {
		b.Fatal(err)
	}
	body := bodies(size)
	prods := make([]producer, producers)
	for i := range prods {
		if prods[i], err = s.producer(ctx, i); err != nil {
			s.close(ctx)
			b.Fatal(err)
		}
	}
	puts0, bytes0 := bucket.puts.Load(), bucket.bytes.Load()
	var lat histogram.Latency
	errs := make([]error, producers)
	var wg sync.WaitGroup
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i, p := range prods {
		n := b.N / producers
		if i < b.N%producers {
			n++
		}
		wg.Go(func() { errs[i] = produce(ctx, p, body, n, 1, &lat) })
	}
	wg.Wait()
	b.StopTimer()
	// The PUTs of the appends: settlement's rewrites after the last ack
	// (and at close) are left out of both sides' counts.
	puts, bytes := bucket.puts.Load()-puts0, bucket.bytes.Load()-bytes0
	if err := s.close(ctx); err != nil {
		b.Fatalf("close: %v", err)
	}
	for i, err := range errs {
		if err != nil {
			b.Fatalf("producer %d: %v", i, err)
		}
	}
	bodyBytes := float64(b.N) * float64(size)
	snap := lat.Snapshot()
	b.ReportMetric(float64(snap.QuantileDuration(0.50))/1e6, "ack-p50-ms")
	b.ReportMetric(float64(snap.QuantileDuration(0.99))/1e6, "ack-p99-ms")
	b.ReportMetric(float64(puts)/(bodyBytes/1e6), "PUTs/MB")
	b.ReportMetric(float64(bytes)/bodyBytes, "put-B/body-B")
}

// Each S3 side round-trips a few records per producer.
func TestS3SidesRoundTrip(t *testing.T) {
	cfg := s3Server(t)
	for _, k := range s3SideKinds() {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			bucket := &countingStore{Store: freshBucket(t, cfg)}
			s, err := k.open(ctx, t.TempDir(), bucket)
			if err != nil {
				t.Fatal(err)
			}
			defer s.close(ctx)
			roundTrip(t, s)
			if bucket.puts.Load() == 0 {
				t.Errorf("no PUT reached the bucket")
			}
		})
	}
}
