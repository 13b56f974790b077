package peerbench

import (
	"bytes"
	"context"
	"fmt"
	"testing"
)

// Each side round-trips a few records per producer, appended one at a time
// and pipelined, so the benchmarks measure appends that really land.
func TestSidesRoundTrip(t *testing.T) {
	for _, k := range sideKinds() {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			s, err := k.open(ctx, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer s.close(ctx)
			roundTrip(t, s)
		})
	}
}

// roundTrip appends a few records per producer (two one at a time, three
// pipelined) and reads each producer's back in order.
func roundTrip(t *testing.T, s side) {
	t.Helper()
	ctx := context.Background()
	const producers, records = 3, 5
	want := make([][][]byte, producers)
	for i := range producers {
		p, err := s.producer(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		var waits []func() error
		for j := range records {
			body := []byte(fmt.Sprintf("producer %d record %d", i, j))
			want[i] = append(want[i], body)
			if j < 2 {
				if err := p.append(ctx, body); err != nil {
					t.Fatalf("append %d/%d: %v", i, j, err)
				}
				continue
			}
			w, err := p.submit(ctx, body)
			if err != nil {
				t.Fatalf("submit %d/%d: %v", i, j, err)
			}
			waits = append(waits, w)
		}
		for j, w := range waits {
			if err := w(); err != nil {
				t.Fatalf("ack %d/%d: %v", i, j+2, err)
			}
		}
	}
	for i := range producers {
		got, err := s.read(ctx, i)
		if err != nil {
			t.Fatalf("read producer %d: %v", i, err)
		}
		if len(got) != len(want[i]) {
			t.Fatalf("producer %d: read %d records, want %d", i, len(got), len(want[i]))
		}
		for j := range got {
			if !bytes.Equal(got[j], want[i][j]) {
				t.Errorf("producer %d record %d: got %q, want %q", i, j, got[j], want[i][j])
			}
		}
	}
}
