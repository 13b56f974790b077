package pool

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestBudgetNeverExceeded runs many producers against a slow cut loop and
// checks invariant 5's pool half: reserved bytes never exceed the budget,
// every pushed item is cut exactly once, in FIFO order per producer.
func TestBudgetNeverExceeded(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	const budget = 10_000
	b := NewBudget(budget)
	var mu sync.Mutex // the cut loop's lock around the queue, as a lane's around its core
	var q Queue[[2]int]
	pushed := make(chan struct{}, 1)
	var wg sync.WaitGroup
	var over atomic.Bool
	const producers, perProducer = 8, 400
	for g := 0; g < producers; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(g)))
			for i := 0; i < perProducer; i++ {
				n := int64(1 + r.IntN(3000))
				if err := b.Reserve(context.Background(), n); err != nil {
					t.Errorf("reserve: %v", err)
					return
				}
				if b.Stats().ReservedBytes > budget {
					over.Store(true)
				}
				mu.Lock()
				q.Push([2]int{g, i}, n, time.Now())
				mu.Unlock()
				select {
				case pushed <- struct{}{}:
				default:
				}
			}
		}(g)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	next := make([]int, producers)
	got := 0
	for got < producers*perProducer {
		mu.Lock()
		_, n := q.Queued()
		mu.Unlock()
		if n == 0 {
			select {
			case <-pushed:
			case <-done:
			}
		}
		mu.Lock()
		items, bytes := q.Cut(4000, 0, nil)
		mu.Unlock()
		b.Free(bytes)
		for _, it := range items {
			if it[1] != next[it[0]] {
				t.Fatalf("producer %d: got item %d, want %d (FIFO broken)", it[0], it[1], next[it[0]])
			}
			next[it[0]]++
			got++
		}
	}
	if over.Load() {
		t.Fatal("reserved bytes exceeded the budget")
	}
	if s := b.Stats(); s.ReservedBytes != 0 {
		t.Fatalf("after draining: %+v", s)
	}
	if bytes, n := q.Queued(); bytes != 0 || n != 0 {
		t.Fatalf("queue after draining: %d bytes, %d items", bytes, n)
	}
}

func TestReserveBlocksAndHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewBudget(100)
		if err := b.Reserve(context.Background(), 80); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		err := b.Reserve(ctx, 30)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("reserve past budget with a deadline: %v", err)
		}
		if s := b.Stats(); s.ReservedBytes != 80 || s.BlockedNanos < int64(time.Second) {
			t.Fatalf("after timed-out reserve: %+v", s)
		}
		// A blocked reserve proceeds once a cut frees room.
		res := make(chan error, 1)
		go func() { res <- b.Reserve(context.Background(), 30) }()
		synctest.Wait()
		select {
		case err := <-res:
			t.Fatalf("reserve returned %v while the pool was full", err)
		default:
		}
		b.Free(80)
		if err := <-res; err != nil {
			t.Fatal(err)
		}
		// Unreserve counts an empty batch as one byte, as Reserve does.
		if err := b.Reserve(context.Background(), 0); err != nil {
			t.Fatal(err)
		}
		b.Unreserve(0)
		if s := b.Stats(); s.ReservedBytes != 30 {
			t.Fatalf("reserved after an empty reserve/unreserve: %d", s.ReservedBytes)
		}
	})
}

func TestTooLargeAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewBudget(100)
		if err := b.Reserve(context.Background(), 101); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("oversized: %v", err)
		}
		_ = b.Reserve(context.Background(), 100)
		res := make(chan error, 1)
		go func() { res <- b.Reserve(context.Background(), 1) }()
		synctest.Wait()
		b.Close()
		if err := <-res; !errors.Is(err, ErrClosed) {
			t.Fatalf("blocked reserve after close: %v", err)
		}
		if err := b.Reserve(context.Background(), 1); !errors.Is(err, ErrClosed) {
			t.Fatalf("reserve after close: %v", err)
		}
	})
}

func TestCutTakesPrefixAndOldest(t *testing.T) {
	var q Queue[string]
	t0 := time.Unix(100, 0)
	for i, s := range []string{"a", "b", "c", "d", "e"} {
		q.Push(s, 100, t0.Add(time.Duration(i)*time.Second))
	}
	if o, ok := q.Oldest(); !ok || !o.Equal(t0) {
		t.Fatalf("oldest %v %v", o, ok)
	}
	items, n := q.Cut(250, 0, nil)
	if len(items) != 2 || items[0] != "a" || items[1] != "b" || n != 200 {
		t.Fatalf("cut(250) = %v %d", items, n)
	}
	if o, _ := q.Oldest(); !o.Equal(t0.Add(2 * time.Second)) {
		t.Fatalf("oldest after cut %v", o)
	}
	// An item larger than max still leaves, alone.
	items, _ = q.Cut(10, 0, nil)
	if len(items) != 1 || items[0] != "c" {
		t.Fatalf("cut(10) = %v", items)
	}
	// The item bound and the fits callback stop a cut early.
	q.Push("f", 100, t0)
	items, _ = q.Cut(1000, 1, nil)
	if len(items) != 1 || items[0] != "d" {
		t.Fatalf("cut(max 1 item) = %v", items)
	}
	items, _ = q.Cut(1000, 0, func(s string) bool { return s != "f" })
	if len(items) != 1 || items[0] != "e" {
		t.Fatalf("cut(fits) = %v", items)
	}
	items, n = q.Drain()
	if len(items) != 1 || items[0] != "f" || n != 100 {
		t.Fatalf("drain = %v %d", items, n)
	}
	if _, ok := q.Oldest(); ok {
		t.Fatal("oldest of an empty queue")
	}
	// An empty item occupies one byte.
	q.Push("g", 0, t0)
	if b, _ := q.Queued(); b != 1 {
		t.Fatalf("an empty item queues %d bytes", b)
	}
}

// TestReserveWithEndedContext: an ended context reserves nothing, even
// with budget to spare (a caller's cancelled request must not be admitted).
func TestReserveWithEndedContext(t *testing.T) {
	b := NewBudget(1 << 20)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Reserve(ctx, 100); !errors.Is(err, context.Canceled) {
		t.Fatalf("Reserve with an ended context: %v, want context.Canceled", err)
	}
	if st := b.Stats(); st.ReservedBytes != 0 {
		t.Fatalf("reserved %d bytes for an ended context", st.ReservedBytes)
	}
	if err := b.Reserve(nil, 100); err == nil { //nolint:staticcheck // the nil context is the point
		t.Fatal("Reserve(nil ctx) succeeded")
	}
}

// TestTryReserve: TryReserve takes what is free now and nothing else, never
// blocks, counts what it took, and refuses once the budget is closed.
func TestTryReserve(t *testing.T) {
	b := NewBudget(100)
	if !b.TryReserve(60) {
		t.Fatal("60 of a free 100 refused")
	}
	if b.TryReserve(41) {
		t.Fatal("41 taken with 40 left")
	}
	if !b.TryReserve(40) {
		t.Fatal("the last 40 refused")
	}
	if b.TryReserve(1) || b.TryReserve(101) {
		t.Fatal("taken past the budget")
	}
	if got := b.Stats().ReservedBytes; got != 100 {
		t.Fatalf("reserved %d, want 100", got)
	}
	b.Free(100)
	b.Close()
	if b.TryReserve(1) {
		t.Fatal("taken after close")
	}
	if got := b.Stats().ReservedBytes; got != 0 {
		t.Fatalf("reserved %d after free, want 0", got)
	}
}
