// Package pool is the star-wide FIFO of admitted, uncut batches of one class.
//
// It keeps invariant 5's pool half: the bytes admitted and not yet cut never
// exceed the budget. Admission reserves bytes first (Reserve blocks at the
// budget, first come first served, honouring the caller's context), and only
// a reserved batch is pushed. The flusher cuts a FIFO prefix (Cut), which
// frees its bytes. The arrival of the oldest queued byte anchors the flush
// deadline (Oldest).
//
// The caller's loop:
//
//	producer: Reserve(ctx, n) → (assign sequence numbers) → Push(item, n, now)
//	          or Unreserve(n) if the batch is rejected after reserving
//	flusher:  wait on Ready() or the deadline Oldest()+linger → Cut(max)
package pool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// Errors returned by Reserve.
var (
	// ErrTooLarge: the batch can never fit the budget. Nothing was reserved.
	ErrTooLarge = errors.New("pool: batch larger than the pool budget")
	// ErrClosed: the pool stopped admitting. Nothing was reserved.
	ErrClosed = errors.New("pool: closed")
)

type entry[T any] struct {
	item    T
	bytes   int64
	arrival time.Time
}

// Pool is a FIFO of items with byte sizes under a byte budget. It is safe
// for concurrent use: many producers, one flusher.
type Pool[T any] struct {
	budget int64
	sem    *semaphore.Weighted

	mu     sync.Mutex
	queue  []entry[T]
	head   int
	queued int64 // bytes pushed and not cut
	closed bool

	closeCtx    context.Context // done once Close is called
	closeCancel context.CancelFunc

	ready    chan struct{} // capacity 1: something was pushed
	reserved atomic.Int64  // bytes reserved and not cut or unreserved
	blocked  atomic.Int64  // nanoseconds producers spent blocked in Reserve
	waiting  atomic.Int64  // producers blocked in Reserve now
}

// New returns a pool holding at most budget bytes.
func New[T any](budget int64) *Pool[T] {
	if budget <= 0 {
		panic(fmt.Sprintf("pool: budget %d must be positive", budget))
	}
	p := &Pool[T]{
		budget: budget,
		sem:    semaphore.NewWeighted(budget),
		ready:  make(chan struct{}, 1),
	}
	p.closeCtx, p.closeCancel = context.WithCancel(context.Background())
	return p
}

// Budget is the pool's byte budget.
func (p *Pool[T]) Budget() int64 { return p.budget }

// Reserve takes n bytes of budget, blocking while the pool is full. It
// returns ErrTooLarge for n > budget, ErrClosed once the pool is closed, and
// an error wrapping ctx.Err() if ctx ends first; in every error case nothing
// is reserved.
func (p *Pool[T]) Reserve(ctx context.Context, n int64) error {
	if n > p.budget {
		return fmt.Errorf("%w: %d bytes > budget %d", ErrTooLarge, n, p.budget)
	}
	if n <= 0 {
		n = 1 // an empty batch still occupies a place in the FIFO
	}
	if p.isClosed() {
		return ErrClosed
	}
	if !p.sem.TryAcquire(n) {
		start := time.Now()
		p.waiting.Add(1)
		// Closing must wake blocked producers: acquire under a context
		// that also ends when the pool closes.
		actx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(p.closeCtx, cancel)
		err := p.sem.Acquire(actx, n)
		stop()
		cancel()
		p.waiting.Add(-1)
		p.blocked.Add(int64(time.Since(start)))
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("pool: waiting for budget: %w", ctx.Err())
			}
			return ErrClosed
		}
	}
	if p.isClosed() {
		p.sem.Release(n)
		return ErrClosed
	}
	p.reserved.Add(n)
	return nil
}

// Unreserve returns n reserved bytes that will not be pushed.
func (p *Pool[T]) Unreserve(n int64) {
	if n <= 0 {
		n = 1
	}
	p.reserved.Add(-n)
	p.sem.Release(n)
}

// Push appends item, whose n bytes the caller reserved, to the FIFO. Its
// arrival time is the one the flush deadline is anchored to when it is the
// oldest. Push never blocks.
func (p *Pool[T]) Push(item T, n int64, arrival time.Time) {
	if n <= 0 {
		n = 1
	}
	p.mu.Lock()
	p.queue = append(p.queue, entry[T]{item, n, arrival})
	p.queued += n
	p.mu.Unlock()
	select {
	case p.ready <- struct{}{}:
	default:
	}
}

// Ready returns a channel that receives after a Push (coalesced: one value
// may stand for many pushes). The flusher waits on it.
func (p *Pool[T]) Ready() <-chan struct{} { return p.ready }

// Oldest returns the arrival time of the oldest queued item, if any.
func (p *Pool[T]) Oldest() (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.head == len(p.queue) {
		return time.Time{}, false
	}
	return p.queue[p.head].arrival, true
}

// Queued returns the bytes and items pushed and not yet cut.
func (p *Pool[T]) Queued() (bytes int64, items int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.queued, len(p.queue) - p.head
}

// Cut removes and returns the longest FIFO prefix whose bytes total at most
// max (always at least one item if any is queued, so an item larger than max
// still leaves), and frees those bytes from the budget.
func (p *Pool[T]) Cut(max int64) (items []T, bytes int64) {
	p.mu.Lock()
	i := p.head
	for i < len(p.queue) {
		e := p.queue[i]
		if i > p.head && bytes+e.bytes > max {
			break
		}
		bytes += e.bytes
		items = append(items, e.item)
		var zero entry[T]
		p.queue[i] = zero
		i++
	}
	p.head = i
	p.queued -= bytes
	if p.head == len(p.queue) {
		p.queue, p.head = p.queue[:0], 0
	} else if p.head > 1024 && p.head*2 > len(p.queue) {
		n := copy(p.queue, p.queue[p.head:])
		p.queue, p.head = p.queue[:n], 0
	}
	p.mu.Unlock()
	if bytes > 0 {
		p.reserved.Add(-bytes)
		p.sem.Release(bytes)
	}
	return items, bytes
}

// Close stops admission: blocked and later Reserve calls return ErrClosed.
// Queued items stay until cut (a clean close flushes them).
func (p *Pool[T]) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		p.closeCancel()
	}
}

func (p *Pool[T]) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// Stats is a point-in-time view of the pool for Stats().
type Stats struct {
	BudgetBytes   int64
	ReservedBytes int64 // admitted (or being admitted) and not yet cut
	QueuedBytes   int64
	QueuedBatches int
	BlockedNanos  int64 // total time producers spent blocked at the budget
	Waiting       int64 // producers blocked now
}

// Stats returns the pool's gauges and counters.
func (p *Pool[T]) Stats() Stats {
	b, n := p.Queued()
	return Stats{
		BudgetBytes: p.budget, ReservedBytes: p.reserved.Load(),
		QueuedBytes: b, QueuedBatches: n,
		BlockedNanos: p.blocked.Load(), Waiting: p.waiting.Load(),
	}
}
