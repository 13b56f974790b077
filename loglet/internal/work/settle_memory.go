package work

import (
	"context"
	"errors"
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
// Budget before the pass keeps it (twice its bytes: room for the settled
// objects rendered from it), and so are the settled objects it renders
// and the extents it reads back to merge beyond that room
// (settlecore.HoldMemory), all given back when the pass ends (done,
// failed or cancelled by a close), the buffers as soon as they are
// written. A pass that holds anything takes more only if the budget has
// it now (TryReserve): when producers use the budget, the pass stops
// reading and settles what it holds, or, refused its buffers, writes what
// it rendered, asks again on its backoff, and leaves the rest to the next
// pass. Only a pass that holds nothing waits for its bytes, so it never
// holds budget while it waits for more (no hold-and-wait), and what it
// waits for the write path frees at every cut, which never waits for
// settlement: the write path and a pass cannot wait on each other, nor
// two passes.
type PassMemory struct {
	Budget PassBudget

	held     atomic.Int64 // bytes of slot objects passes hold now
	reserved atomic.Int64 // of them, reserved from Budget
	// bufHeld, bufReserved: the same of the settled objects passes render
	// and the extents they read back to merge.
	bufHeld, bufReserved atomic.Int64
}

// Buffers is the bytes of settled objects rendered and extents read back
// that settle passes hold now, and what they reserved from the budget
// beyond the room their slots reserved.
func (m *PassMemory) Buffers() (held, reserved int64) {
	if m == nil {
		return 0, 0
	}
	return m.bufHeld.Load(), m.bufReserved.Load()
}

// Held is the bytes of slot objects settle passes hold now, and Reserved
// what they reserved for them from the budget: twice their bytes and
// renderSlack a slot (room to render them), at most the whole budget for
// one slot.
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
	// buf, bufReserved: the pass's rendered and read-back objects
	// (settlecore.HoldMemory).
	buf, bufReserved int64
}

// errBudgetBusy: the budget has not the bytes now and the pass holds some
// (it does not wait holding): the pass asks again on its backoff, or
// settles less.
var errBudgetBusy = errors.New("work: the memory budget has not the bytes now, and the settle pass holds some (it does not wait holding)")

// setBuffers makes the bytes of rendered and read-back objects the pass
// holds n: fewer are given back; more are reserved (up to the whole
// budget for one pass), blocking only while the pass holds nothing else.
func (h *PassHold) setBuffers(ctx context.Context, n int64) error {
	if h == nil {
		return nil
	}
	head := max(0, h.reserved-h.held) // the room the slots reserved to render them
	res := min(max(0, n-head), h.m.Budget.Size())
	switch d := res - h.bufReserved; {
	case d < 0:
		h.m.Budget.Free(-d)
	case d > 0 && h.m.Budget.TryReserve(d):
	case d > 0 && (h.held > 0 || h.bufReserved > 0):
		return errBudgetBusy
	case d > 0:
		if err := h.m.Budget.Reserve(ctx, d); err != nil {
			return fmt.Errorf("work: settle pass: reserve %d bytes of the pool's budget for settled objects: %w", d, err)
		}
	}
	h.m.bufHeld.Add(n - h.buf)
	h.m.bufReserved.Add(res - h.bufReserved)
	h.buf, h.bufReserved = n, res
	return nil
}

// renderSlack is the room reserved with each slot, beside as many bytes
// again as it holds, for the settled objects rendered from it (their
// headers and indexes).
const renderSlack = 4 << 10

// take accounts n more bytes of slot objects to the pass, reserving twice
// as many (and renderSlack) from the budget: the objects rendered from a
// slot are about as large as it, so a pass that could read a slot can
// render it (setBuffers takes from that room first). It returns
// errPassFull when the pass holds some already and the budget has not n
// free now (the pass settles what it holds: it reads less).
func (h *PassHold) take(ctx context.Context, n int64) error {
	if h == nil || n <= 0 {
		return nil
	}
	r := min(2*n+renderSlack, h.m.Budget.Size()) // the slot, and room to render it
	switch {
	case h.m.Budget.TryReserve(r):
	case h.held > 0 || h.bufReserved > 0:
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
	if h == nil {
		return
	}
	_ = h.setBuffers(context.Background(), 0) // giving back never fails
	if h.held == 0 {
		return
	}
	h.m.held.Add(-h.held)
	h.m.reserved.Add(-h.reserved)
	h.m.Budget.Free(h.reserved)
	h.held, h.reserved = 0, 0
}
