// Package pool is the star-wide FIFO of admitted, uncut batches of one class,
// in two parts:
//
//   - Queue is the FIFO itself, a pure data structure (no goroutines, no
//     clock, not safe for concurrent use): the chain's core pushes admitted
//     batches, cuts FIFO prefixes into flights, and reads the arrival of the
//     oldest queued byte, which anchors the flush deadline (Oldest).
//   - Budget is the byte budget in front of it, the one part that blocks:
//     admission reserves bytes first (Reserve blocks at the budget, first
//     come first served, honouring the caller's context), and the bytes are
//     freed when the batch leaves the FIFO (cut into a flight, or dropped
//     because it will never be cut).
//
// Together they keep invariant 5's pool half: the bytes admitted and not yet
// cut never exceed the budget.
//
// The caller's loop:
//
//	producer: Budget.Reserve(ctx, n) → (assign sequence numbers) → Queue.Push(item, n, now)
//	          or Budget.Unreserve(n) if the batch is rejected after reserving
//	cut loop: at Oldest()+linger or once Queued() reaches a flight → Queue.Cut(max) → Budget.Free(bytes)
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

// Queue is a FIFO of items with byte sizes. The zero value is empty and
// ready to use. It is not safe for concurrent use.
type Queue[T any] struct {
	queue  []entry[T]
	head   int
	queued int64 // bytes pushed and not cut
}

// charge is the bytes an item of n bytes occupies: at least 1, so an empty
// batch still holds a place in the FIFO and the budget.
func charge(n int64) int64 { return max(n, 1) }

// Push appends item of n bytes, arrived at arrival (the time the flush
// deadline is anchored to while it is the oldest).
func (q *Queue[T]) Push(item T, n int64, arrival time.Time) {
	n = charge(n)
	q.queue = append(q.queue, entry[T]{item, n, arrival})
	q.queued += n
}

// Oldest returns the arrival time of the oldest queued item, if any.
func (q *Queue[T]) Oldest() (time.Time, bool) {
	if q.head == len(q.queue) {
		return time.Time{}, false
	}
	return q.queue[q.head].arrival, true
}

// Queued returns the bytes and items pushed and not yet cut.
func (q *Queue[T]) Queued() (bytes int64, items int) {
	return q.queued, len(q.queue) - q.head
}

// Cut removes and returns the longest FIFO prefix of at most maxItems items
// (<= 0: any number) whose bytes total at most maxBytes, always at least one
// item if any is queued (so an item larger than maxBytes still leaves), and
// the bytes it held. fits, if not nil, is asked of each item in order, the
// first included, whether it joins the prefix (the cut stops at the first
// it refuses; the first item's answer is not binding: it always leaves).
// fits is asked only once the byte and item bounds admit the item.
func (q *Queue[T]) Cut(maxBytes int64, maxItems int, fits func(T) bool) (items []T, bytes int64) {
	i := q.head
	for i < len(q.queue) {
		e := q.queue[i]
		first := i == q.head
		if !first && (bytes+e.bytes > maxBytes || (maxItems > 0 && len(items) >= maxItems)) {
			break
		}
		if fits != nil && !fits(e.item) && !first {
			break
		}
		bytes += e.bytes
		items = append(items, e.item)
		var zero entry[T]
		q.queue[i] = zero
		i++
	}
	q.head = i
	q.queued -= bytes
	if q.head == len(q.queue) {
		q.queue, q.head = q.queue[:0], 0
	} else if q.head > 1024 && q.head*2 > len(q.queue) {
		n := copy(q.queue, q.queue[q.head:])
		clear(q.queue[n:])
		q.queue, q.head = q.queue[:n], 0
	}
	return items, bytes
}

// Drain removes and returns every queued item and the bytes they held.
func (q *Queue[T]) Drain() (items []T, bytes int64) {
	return q.Cut(1<<62, 0, nil)
}

// Budget bounds the bytes admitted and not yet freed. It is safe for
// concurrent use: many producers reserve, one owner frees.
type Budget struct {
	budget int64
	sem    *semaphore.Weighted

	mu          sync.Mutex
	closed      bool
	closeCtx    context.Context // done once Close is called
	closeCancel context.CancelFunc

	reserved atomic.Int64 // bytes reserved and not freed or unreserved
	blocked  atomic.Int64 // nanoseconds producers spent blocked in Reserve
	waiting  atomic.Int64 // producers blocked in Reserve now
}

// NewBudget returns a budget of budget bytes.
func NewBudget(budget int64) *Budget {
	if budget <= 0 {
		panic(fmt.Sprintf("pool: budget %d must be positive", budget))
	}
	b := &Budget{budget: budget, sem: semaphore.NewWeighted(budget)}
	b.closeCtx, b.closeCancel = context.WithCancel(context.Background())
	return b
}

// Size is the budget in bytes.
func (b *Budget) Size() int64 { return b.budget }

// Reserve takes n bytes of budget, blocking while the budget is spent. It
// returns ErrTooLarge for n > budget, ErrClosed once the budget is closed,
// and an error wrapping ctx.Err() if ctx ends first; in every error case
// nothing is reserved.
func (b *Budget) Reserve(ctx context.Context, n int64) error {
	if ctx == nil {
		return errors.New("pool: nil context")
	}
	if err := ctx.Err(); err != nil {
		// An ended context reserves nothing, even with budget to spare.
		return fmt.Errorf("pool: %w", err)
	}
	if n > b.budget {
		return fmt.Errorf("%w: %d bytes > budget %d", ErrTooLarge, n, b.budget)
	}
	n = charge(n)
	if b.isClosed() {
		return ErrClosed
	}
	if !b.sem.TryAcquire(n) {
		start := time.Now()
		b.waiting.Add(1)
		// Closing must wake blocked producers: acquire under a context
		// that also ends when the budget closes.
		actx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(b.closeCtx, cancel)
		err := b.sem.Acquire(actx, n)
		stop()
		cancel()
		b.waiting.Add(-1)
		b.blocked.Add(int64(time.Since(start)))
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("pool: waiting for budget: %w", ctx.Err())
			}
			return ErrClosed
		}
	}
	if b.isClosed() {
		b.sem.Release(n)
		return ErrClosed
	}
	b.reserved.Add(n)
	return nil
}

// TryReserve takes n bytes of budget if they are free now, and reports
// whether it did; it never blocks. For a producer that already holds a
// reservation and wants a little more: waiting for it while holding the
// first would be hold-and-wait (a batch whose two parts together exceed
// what is left can wait for ever on budget only its own admission would
// free).
func (b *Budget) TryReserve(n int64) bool {
	if n > b.budget || b.isClosed() {
		return false
	}
	n = charge(n)
	if !b.sem.TryAcquire(n) {
		return false
	}
	b.reserved.Add(n)
	return true
}

// Unreserve returns n reserved bytes whose batch was not pushed.
func (b *Budget) Unreserve(n int64) { b.Free(charge(n)) }

// Free returns bytes that left the FIFO (a Queue's Cut or Drain total,
// which already counts each item at least 1 byte).
func (b *Budget) Free(bytes int64) {
	if bytes <= 0 {
		return
	}
	b.reserved.Add(-bytes)
	b.sem.Release(bytes)
}

// Close stops admission: blocked and later Reserve calls return ErrClosed.
func (b *Budget) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		b.closeCancel()
	}
}

func (b *Budget) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// Stats is a point-in-time view of a pool for Stats().
type Stats struct {
	BudgetBytes   int64
	ReservedBytes int64 // admitted (or being admitted) and not yet cut
	QueuedBytes   int64
	QueuedBatches int
	BlockedNanos  int64 // total time producers spent blocked at the budget
	Waiting       int64 // producers blocked now
}

// Stats returns the budget's gauges and counters; the caller fills in the
// queue's (QueuedBytes, QueuedBatches).
func (b *Budget) Stats() Stats {
	return Stats{
		BudgetBytes: b.budget, ReservedBytes: b.reserved.Load(),
		BlockedNanos: b.blocked.Load(), Waiting: b.waiting.Load(),
	}
}
