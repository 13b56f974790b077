package s3

import (
	"bytes"
	"io"
	"net"
	"runtime"
	"testing"
)

// TestBodyConnCopiesThroughPool: a request body written through the pool's
// connection arrives whole, and the copy does not allocate a buffer per
// request (net's own ReadFrom allocates 32 KiB each time).
func TestBodyConnCopiesThroughPool(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	body := make([]byte, 100<<10+7)
	for i := range body {
		body[i] = byte(i * 31)
	}
	const rounds = 20
	got := make(chan []byte)
	go func() {
		buf := make([]byte, len(body)*rounds)
		n, err := io.ReadFull(server, buf)
		if err != nil {
			t.Errorf("server read %d bytes: %v", n, err)
		}
		got <- buf[:n]
	}()
	c := bodyConn{client}
	c.ReadFrom(io.LimitReader(bytes.NewReader(body), int64(len(body)))) // warm the pool
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range rounds - 1 {
		n, err := c.ReadFrom(io.LimitReader(bytes.NewReader(body), int64(len(body))))
		if err != nil || n != int64(len(body)) {
			t.Fatalf("ReadFrom = %d, %v; want %d, nil", n, err, len(body))
		}
	}
	runtime.ReadMemStats(&after)
	all := <-got
	for i := range rounds {
		if !bytes.Equal(all[i*len(body):(i+1)*len(body)], body) {
			t.Fatalf("copy %d arrived changed", i)
		}
	}
	// The goroutines and the pipe allocate a little; a buffer per copy
	// would be 32 KiB each.
	if per := (after.TotalAlloc - before.TotalAlloc) / (rounds - 1); per >= 16<<10 {
		t.Errorf("%d bytes allocated per copy; want well under a 32 KiB buffer", per)
	}
}
