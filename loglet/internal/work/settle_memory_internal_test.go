package work

import (
	"context"
	"errors"
	"runtime"
	"testing"

	"github.com/flightlog/flightlog/pool"
)

// TestPassBuffersNeverWaitHolding: a pass that holds a slot and asks for
// buffers beyond the room the slot reserved, with the budget used by the
// write path, is refused at once (errBudgetBusy): it never waits holding,
// which, with another pass doing the same, would deadlock. Fewer buffers
// than the room take nothing more; a pass that holds nothing waits for
// its buffers like for its first slot; everything goes back at Release.
func TestPassBuffersNeverWaitHolding(t *testing.T) {
	const size = 64 << 10
	budget := pool.NewBudget(size)
	mem := &PassMemory{Budget: budget}
	ctx := context.Background()
	h := mem.hold()
	if err := h.take(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	room := 2*1000 + int64(renderSlack)
	if got := budget.Stats().ReservedBytes; got != room {
		t.Fatalf("a slot of 1000 bytes reserved %d, want %d", got, room)
	}
	if err := h.setBuffers(ctx, 900); err != nil || budget.Stats().ReservedBytes != room {
		t.Fatalf("buffers within the slot's room: err %v, budget %d reserved, want %d", err, budget.Stats().ReservedBytes, room)
	}
	producers := size - room
	if err := budget.Reserve(ctx, producers); err != nil {
		t.Fatal(err)
	}
	if err := h.setBuffers(ctx, room); !errors.Is(err, errBudgetBusy) { // returns: the test would hang otherwise
		t.Fatalf("buffers beyond the room with the budget used: %v, want errBudgetBusy", err)
	}
	if held, _ := mem.Buffers(); held != 900 {
		t.Fatalf("a refused reservation changed the buffers held to %d, want 900", held)
	}
	budget.Free(producers)
	if err := h.setBuffers(ctx, room); err != nil {
		t.Fatal(err)
	}
	if got, want := budget.Stats().ReservedBytes, room+1000; got != want {
		t.Fatalf("budget %d reserved, want %d (the slot's room and 1000 beyond)", got, want)
	}
	h.Release()
	if got := budget.Stats().ReservedBytes; got != 0 {
		t.Fatalf("after Release the budget has %d reserved", got)
	}
	if held, res := mem.Buffers(); held != 0 || res != 0 {
		t.Fatalf("after Release: buffers %d held, %d reserved", held, res)
	}

	// Holding nothing, a pass waits for its buffers (an idle merge).
	if err := budget.Reserve(ctx, size); err != nil {
		t.Fatal(err)
	}
	h = mem.hold()
	done := make(chan error, 1)
	go func() { done <- h.setBuffers(ctx, 100) }()
	for budget.Stats().Waiting == 0 {
		select {
		case err := <-done:
			t.Fatalf("holding nothing, the pass did not wait for its buffers: %v", err)
		default:
		}
		runtime.Gosched()
	}
	budget.Free(size)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	h.Release()
	if got := budget.Stats().ReservedBytes; got != 0 {
		t.Fatalf("after Release the budget has %d reserved", got)
	}
}
