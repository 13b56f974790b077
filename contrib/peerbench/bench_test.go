package peerbench

import (
	"bufio"
	"context"
	crand "crypto/rand"
	"fmt"
	"io/fs"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flightlog/flightlog/histogram"
)

// The workload: one record per append, each a different slice of random
// (incompressible) bytes, so neither side's compression changes what
// reaches the disk: not within a record, and not across the records of one
// frame or settled object either (identical bodies would compress to
// almost nothing there).
var (
	recordSizes   = []int{1 << 10, 16 << 10}
	producerCount = []int{1, 8, 64}
	// pipelineDepth is the appends each producer keeps in flight in the
	// pipelined runs (flightlog's AppendSession, JetStream's PublishAsync).
	pipelineDepth = 64
)

func sizeName(n int) string {
	if n%(1<<10) == 0 {
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// bodyPoolBytes is the random bytes the bodies are cut from: two bodies of
// one frame (at most 256 KiB of records) overlap with a chance of about
// 2·size/64 MiB per pair.
const bodyPoolBytes = 64 << 20

var bodyPool = sync.OnceValue(func() []byte {
	b := make([]byte, bodyPoolBytes)
	crand.Read(b) // never fails (crypto/rand)
	return b
})

// bodies returns a function that gives size bytes from a random offset of
// the pool at each call; it is safe for concurrent use.
func bodies(size int) func() []byte {
	pool := bodyPool()
	return func() []byte {
		off := mrand.IntN(len(pool) - size)
		return pool[off : off+size : off+size]
	}
}

func randomBody(tb testing.TB, n int) []byte {
	b := make([]byte, n)
	if _, err := crand.Read(b); err != nil {
		tb.Fatal(err)
	}
	return b
}

// BenchmarkPeer runs every side with the same records and producers. Each
// producer waits for each ack (depth=1), or keeps pipelineDepth appends in
// flight (depth=64). Besides ns/op and MB/s (of record bodies, over the
// run's wall time) it reports:
//
//   - ack-p50-ms, ack-p99-ms: from the append's start to its ack;
//   - disk-B/body-B: the process's write_bytes from /proc/self/io (bytes
//     it caused to be written to the block device, counted when a page is
//     dirtied, so unsynced writes count too) from before the side was
//     opened to after it was closed, over the body bytes appended;
//   - dir-B/body-B: the sizes of the files left in the side's directory
//     after close, over the body bytes.
func BenchmarkPeer(b *testing.B) {
	for _, size := range recordSizes {
		for _, producers := range producerCount {
			for _, k := range sideKinds() {
				b.Run(fmt.Sprintf("size=%s/producers=%d/depth=1/%s", sizeName(size), producers, k.name), func(b *testing.B) {
					runPeer(b, k, size, producers, 1)
				})
			}
		}
	}
	for _, producers := range []int{1, 8} {
		for _, k := range sideKinds() {
			b.Run(fmt.Sprintf("size=1KiB/producers=%d/depth=%d/%s", producers, pipelineDepth, k.name), func(b *testing.B) {
				runPeer(b, k, 1<<10, producers, pipelineDepth)
			})
		}
	}
}

func runPeer(b *testing.B, k sideKind, size, producers, depth int) {
	ctx := context.Background()
	dir := b.TempDir()
	body := bodies(size)
	io0 := writeBytes(b)
	s, err := k.open(ctx, dir)
	if err != nil {
		b.Fatal(err)
	}
	prods := make([]producer, producers)
	for i := range prods {
		if prods[i], err = s.producer(ctx, i); err != nil {
			s.close(ctx)
			b.Fatal(err)
		}
	}
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
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = produce(ctx, p, body, n, depth, &lat)
		}()
	}
	wg.Wait()
	b.StopTimer()
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
	b.ReportMetric(float64(writeBytes(b)-io0)/bodyBytes, "disk-B/body-B")
	b.ReportMetric(float64(dirBytes(b, dir))/bodyBytes, "dir-B/body-B")
}

// produce appends n bodies, keeping depth appends in flight, and
// records each one's latency to its ack.
func produce(ctx context.Context, p producer, body func() []byte, n, depth int, lat *histogram.Latency) error {
	if depth <= 1 {
		for range n {
			b := body()
			t := time.Now()
			if err := p.append(ctx, b); err != nil {
				return err
			}
			lat.RecordDuration(time.Since(t))
		}
		return nil
	}
	type pending struct {
		wait func() error
		t    time.Time
	}
	q := make([]pending, 0, depth)
	drain := func() error {
		if err := q[0].wait(); err != nil {
			return err
		}
		lat.RecordDuration(time.Since(q[0].t))
		q = q[1:]
		return nil
	}
	for range n {
		if len(q) == depth {
			if err := drain(); err != nil {
				return err
			}
		}
		b := body()
		t := time.Now()
		w, err := p.submit(ctx, b)
		if err != nil {
			return err
		}
		q = append(q, pending{w, t})
	}
	for len(q) > 0 {
		if err := drain(); err != nil {
			return err
		}
	}
	return nil
}

// writeBytes is this process's write_bytes from /proc/self/io: the bytes
// it caused to be sent to the block device (page cache writes count when
// the page is dirtied). The benchmark is skipped where it cannot be read.
func writeBytes(tb testing.TB) int64 {
	f, err := os.Open("/proc/self/io")
	if err != nil {
		tb.Skipf("no /proc/self/io to count bytes written: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "write_bytes:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				tb.Fatalf("/proc/self/io: write_bytes %q: %v", v, err)
			}
			return n
		}
	}
	tb.Skip("/proc/self/io has no write_bytes")
	return 0
}

// dirBytes sums the sizes of the regular files under dir.
func dirBytes(tb testing.TB, dir string) int64 {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		n += info.Size()
		return nil
	})
	if err != nil {
		tb.Fatalf("size of %s: %v", dir, err)
	}
	return n
}

// BenchmarkFsync is the disk's own floor, measured in the same run: append
// 4 KiB to a file and fsync it, one at a time. An ack that promises
// durability on this disk cannot come sooner than one of these.
func BenchmarkFsync(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "fsync"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := randomBody(b, 4<<10)
	var lat histogram.Latency
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for range b.N {
		t := time.Now()
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		lat.RecordDuration(time.Since(t))
	}
	snap := lat.Snapshot()
	b.ReportMetric(float64(snap.QuantileDuration(0.50))/1e6, "fsync-p50-ms")
	b.ReportMetric(float64(snap.QuantileDuration(0.99))/1e6, "fsync-p99-ms")
}
