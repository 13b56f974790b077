package work

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/flightlog/flightlog/settle"
)

// PassBudget is the memory budget a settle pass reserves the slot objects
// it reads from: the chain's pool (pool.Budget), which producers reserve
// their batches from too.
type PassBudget interface {
	// Size is the budget in bytes.
	Size() int64
	// Reserve takes n bytes, blocking while they are not free; nothing is
	// reserved when it fails (ctx ended, the budget closed).
	Reserve(ctx context.Context, n int64) error
	// TryReserve takes n bytes if they are free now; it never blocks.
	TryReserve(n int64) bool
	// Free returns bytes reserved.
	Free(bytes int64)
}

// PassMemory accounts the buffers of a chain's settle passes in the
// chain's memory budget: each slot object a pass reads is reserved from
// Budget before the pass keeps it, and given back when the pass ends
// (done, failed or cancelled by a close). A pass that holds slots takes
// more only if the budget has it now (TryReserve): when producers use the
// budget, the pass stops reading and settles what it holds. Only a pass
// that holds nothing waits for its first slot's bytes, so it never holds
// budget while it waits for more (no hold-and-wait), and what it waits for
// the write path frees at every cut, which never waits for settlement: the
// write path and a pass cannot wait on each other.
type PassMemory struct {
	Budget PassBudget

	held     atomic.Int64 // bytes of slot objects passes hold now
	reserved atomic.Int64 // of them, reserved from Budget
}

// Held is the bytes of slot objects settle passes hold now, and Reserved
// those of them reserved from the budget (all of them but the excess of a
// slot object larger than the whole budget, which holds all of it).
func (m *PassMemory) Held() (held, reserved int64) {
	if m == nil {
		return 0, 0
	}
	return m.held.Load(), m.reserved.Load()
}

// Bound is the most a pass holds: settle.MaxPassBytes or the budget, the
// smaller.
func (m *PassMemory) Bound() int64 {
	if m == nil || m.Budget == nil {
		return settle.MaxPassBytes
	}
	return min(int64(settle.MaxPassBytes), m.Budget.Size())
}

// hold starts one pass's reservation (nil, which accounts nothing, when
// m or its Budget is nil).
func (m *PassMemory) hold() *PassHold {
	if m == nil || m.Budget == nil {
		return nil
	}
	return &PassHold{m: m}
}

// PassHold is one settle pass's share of its chain's PassMemory. Its
// methods are called from the pass's driver only (one goroutine).
type PassHold struct {
	m              *PassMemory
	held, reserved int64
}

// take accounts n more bytes of slot objects to the pass. It returns
// errPassFull when the pass holds some already and the budget has not n
// free now (the pass settles what it holds: it reads less).
func (h *PassHold) take(ctx context.Context, n int64) error {
	if h == nil || n <= 0 {
		return nil
	}
	r := min(n, h.m.Budget.Size())
	switch {
	case h.m.Budget.TryReserve(r):
	case h.held > 0:
		return errPassFull
	default:
		if err := h.m.Budget.Reserve(ctx, r); err != nil {
			return fmt.Errorf("work: settle pass: reserve %d bytes of the pool's budget for a slot: %w", r, err)
		}
	}
	h.held += n
	h.reserved += r
	h.m.held.Add(n)
	h.m.reserved.Add(r)
	return nil
}

// Release gives back everything the pass holds (idempotent).
func (h *PassHold) Release() {
	if h == nil || h.held == 0 {
		return
	}
	h.m.held.Add(-h.held)
	h.m.reserved.Add(-h.reserved)
	h.m.Budget.Free(h.reserved)
	h.held, h.reserved = 0, 0
}
