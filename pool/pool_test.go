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

// TestBudgetNeverExceeded runs many producers against a slow flusher and
// checks invariant 5's pool half: reserved bytes never exceed the budget,
// every pushed item is cut exactly once, in FIFO order per producer.
func TestBudgetNeverExceeded(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	const budget = 10_000
	p := New[[2]int](budget)
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
				if err := p.Reserve(context.Background(), n); err != nil {
					t.Errorf("reserve: %v", err)
					return
				}
				if p.Stats().ReservedBytes > budget {
					over.Store(true)
				}
				p.Push([2]int{g, i}, n, time.Now())
			}
		}(g)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	next := make([]int, producers)
	got := 0
	for got < producers*perProducer {
		if _, n := p.Queued(); n == 0 {
			select {
			case <-p.Ready():
			case <-done:
			}
		}
		items, _ := p.Cut(4000)
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
	if s := p.Stats(); s.ReservedBytes != 0 || s.QueuedBytes != 0 {
		t.Fatalf("after draining: %+v", s)
	}
}

func TestReserveBlocksAndHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New[int](100)
		if err := p.Reserve(context.Background(), 80); err != nil {
			t.Fatal(err)
		}
		p.Push(1, 80, time.Now())
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		err := p.Reserve(ctx, 30)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("reserve past budget with a deadline: %v", err)
		}
		if s := p.Stats(); s.ReservedBytes != 80 || s.BlockedNanos < int64(time.Second) {
			t.Fatalf("after timed-out reserve: %+v", s)
		}
		// A blocked reserve proceeds once a cut frees room.
		res := make(chan error, 1)
		go func() { res <- p.Reserve(context.Background(), 30) }()
		synctest.Wait()
		select {
		case err := <-res:
			t.Fatalf("reserve returned %v while the pool was full", err)
		default:
		}
		p.Cut(1000)
		if err := <-res; err != nil {
			t.Fatal(err)
		}
	})
}

func TestTooLargeAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New[int](100)
		if err := p.Reserve(context.Background(), 101); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("oversized: %v", err)
		}
		_ = p.Reserve(context.Background(), 100)
		res := make(chan error, 1)
		go func() { res <- p.Reserve(context.Background(), 1) }()
		synctest.Wait()
		p.Close()
		if err := <-res; !errors.Is(err, ErrClosed) {
			t.Fatalf("blocked reserve after close: %v", err)
		}
		if err := p.Reserve(context.Background(), 1); !errors.Is(err, ErrClosed) {
			t.Fatalf("reserve after close: %v", err)
		}
	})
}

func TestCutTakesPrefixAndOldest(t *testing.T) {
	p := New[string](1000)
	t0 := time.Unix(100, 0)
	for i, s := range []string{"a", "b", "c", "d"} {
		_ = p.Reserve(context.Background(), 100)
		p.Push(s, 100, t0.Add(time.Duration(i)*time.Second))
	}
	if o, ok := p.Oldest(); !ok || !o.Equal(t0) {
		t.Fatalf("oldest %v %v", o, ok)
	}
	items, n := p.Cut(250)
	if len(items) != 2 || items[0] != "a" || items[1] != "b" || n != 200 {
		t.Fatalf("cut(250) = %v %d", items, n)
	}
	if o, _ := p.Oldest(); !o.Equal(t0.Add(2 * time.Second)) {
		t.Fatalf("oldest after cut %v", o)
	}
	// An item larger than max still leaves, alone.
	items, _ = p.Cut(10)
	if len(items) != 1 || items[0] != "c" {
		t.Fatalf("cut(10) = %v", items)
	}
}
