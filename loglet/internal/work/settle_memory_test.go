package work_test

import (
	"context"
	"errors"
	"runtime"
	"testing"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/loglet/internal/chaincore"
	"github.com/flightlog/flightlog/loglet/internal/work"
	"github.com/flightlog/flightlog/objstore"
	"github.com/flightlog/flightlog/pool"
)

// gatedPuts holds every PutIfAbsent (a settled object's) until open is
// closed or its ctx ends, telling entered the first time.
type gatedPuts struct {
	objstore.Store
	entered chan struct{}
	open    chan struct{}
}

func (g *gatedPuts) PutIfAbsent(ctx context.Context, key string, body []byte) error {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	select {
	case <-g.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	return g.Store.PutIfAbsent(ctx, key, body)
}

// passMemoryWorld is a world's Standard chain as its leader's worker
// sees it (work.Env, its settle pass accounted in mem), the Settle
// request the leader would make, and the sizes of the slots to settle.
func passMemoryWorld(t *testing.T, mem *work.PassMemory) (*world, *work.Env, *gatedPuts, chaincore.Settle, []int64) {
	t.Helper()
	return passMemoryWorldOf(t, newWorld(t), mem)
}

// passMemoryWorldOf is passMemoryWorld over the world w.
func passMemoryWorldOf(t *testing.T, w *world, mem *work.PassMemory) (*world, *work.Env, *gatedPuts, chaincore.Settle, []int64) {
	t.Helper()
	ctx := context.Background()
	rec, _, err := chain.ReadEpoch(ctx, w.meta, "s1", chain.Standard)
	if err != nil {
		t.Fatal(err)
	}
	cp, _, err := absorb.ReadCheckpoint(ctx, w.meta, "s1", chain.Standard)
	if err != nil {
		t.Fatal(err)
	}
	tc, _, err := chain.ReadTrimCursor(ctx, w.meta, "s1", chain.Standard)
	if err != nil {
		t.Fatal(err)
	}
	if tc.At.Epoch != cp.Epoch {
		t.Fatalf("the world's slots span epochs %d to %d; the test reads one", tc.At.Epoch, cp.Epoch)
	}
	g := &gatedPuts{Store: w.std, entered: make(chan struct{}, 1), open: make(chan struct{})}
	env := &work.Env{Star: "s1", Class: chain.Standard, Owner: cp.Owner, Stores: []objstore.Store{w.std}, W: 1, Meta: w.meta,
		Retry: chain.RetryPolicy{MinBackoff: 1, MaxBackoff: 2}, Settled: []objstore.Store{g}, SettleGrace: -1, PassMemory: mem}
	var sizes []int64
	if err := chain.Walk(ctx, env.Set(), "s1", chain.Standard, cp.Epoch, tc.At.Next, cp.Next, func(_ uint64, obj []byte, _ []envelope.FrameInfo) error {
		sizes = append(sizes, int64(len(obj)))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(sizes) < 3 {
		t.Fatalf("the world has %d Standard slots; the test needs 3 or more", len(sizes))
	}
	pos := chain.Position{Epoch: cp.Epoch, Next: cp.Next}
	return w, env, g, chaincore.Settle{Upto: pos, Checkpoint: pos, Cuts: rec.Cuts, Epoch: cp.OwnerEpoch}, sizes
}

// slotRoom is what a pass reserves for slots of sizes: each twice, and
// the room to render it.
func slotRoom(sizes []int64) (n int64) {
	for _, x := range sizes {
		n += 2*x + 4<<10
	}
	return n
}

func sum(xs []int64) (n int64) {
	for _, x := range xs {
		n += x
	}
	return n
}

// runPass runs the leader's Settle request on a goroutine.
func runPass(ctx context.Context, env *work.Env, req chaincore.Settle) <-chan chaincore.SettlePassed {
	done := make(chan chaincore.SettlePassed, 1)
	go func() { done <- env.Do(ctx, req).(chaincore.SettlePassed) }()
	return done
}

// TestSettlePassReservesItsSlots: a pass holds the slot objects it read
// inside the pool's budget while it settles them, counted in PassMemory,
// and gives them back when it ends, whether it succeeds or fails.
func TestSettlePassReservesItsSlots(t *testing.T) {
	for _, fail := range []bool{false, true} {
		budget := pool.NewBudget(1 << 20)
		mem := &work.PassMemory{Budget: budget}
		w, env, g, req, sizes := passMemoryWorld(t, mem)
		ctx, cancel := context.WithCancel(context.Background())
		done := runPass(ctx, env, req)
		<-g.entered // every slot read; the first settled object's PUT waits
		held, reserved := mem.Held()
		_, bufReserved := mem.Buffers()
		if want, wantRes := sum(sizes), slotRoom(sizes); held != want || reserved != wantRes || budget.Stats().ReservedBytes != wantRes+bufReserved {
			t.Fatalf("fail=%v: while the pass settles, it holds %d bytes, reserves %d (and %d for buffers), the budget has %d reserved; want %d, reserving %d (the %d slots read)",
				fail, held, reserved, bufReserved, budget.Stats().ReservedBytes, want, wantRes, len(sizes))
		}
		if held > mem.Bound() {
			t.Fatalf("fail=%v: the pass holds %d bytes over its bound %d", fail, held, mem.Bound())
		}
		if fail {
			cancel() // the pass fails (as when the star closes: the shell cancels it)
		} else {
			close(g.open)
		}
		ev := <-done
		cancel()
		if fail != (ev.Err != nil) {
			t.Fatalf("fail=%v: the pass ended with %v", fail, ev.Err)
		}
		if held, reserved := mem.Held(); held != 0 || reserved != 0 || budget.Stats().ReservedBytes != 0 {
			t.Fatalf("fail=%v: after the pass, %d bytes held, %d reserved, %d in the budget; want none", fail, held, reserved, budget.Stats().ReservedBytes)
		}
		if !fail {
			if ev.Result.Slots != len(sizes) {
				t.Fatalf("the pass settled %d slots, want %d", ev.Result.Slots, len(sizes))
			}
			w.verify(t, "after the pass")
		}
	}
}

// TestSettlePassReadsLessWhenTheBudgetIsUsed: with producers holding all
// but room for one slot, a pass reads that one slot and settles it (the
// next pass goes on); with no room at all it waits, holding nothing, and
// fails when the budget closes (the star closing), leaving nothing held.
func TestSettlePassReadsLessWhenTheBudgetIsUsed(t *testing.T) {
	const size = 1 << 20
	budget := pool.NewBudget(size)
	mem := &work.PassMemory{Budget: budget}
	w, env, g, req, sizes := passMemoryWorld(t, mem)
	close(g.open)
	ctx := context.Background()
	producers := size - slotRoom(sizes[:1])
	if err := budget.Reserve(ctx, producers); err != nil {
		t.Fatal(err)
	}
	ev := <-runPass(ctx, env, req)
	if ev.Err != nil || ev.Result.Slots != 1 {
		t.Fatalf("with room for one slot, the pass settled %d slots (err %v); want 1", ev.Result.Slots, ev.Err)
	}
	if got := budget.Stats().ReservedBytes; got != producers {
		t.Fatalf("after the pass the budget has %d bytes reserved, want the producers' %d", got, producers)
	}
	w.verify(t, "after a pass of one slot")

	// No room: the pass waits for its first slot, holding nothing.
	if err := budget.Reserve(ctx, slotRoom(sizes[:1])); err != nil {
		t.Fatal(err)
	}
	done := runPass(ctx, env, req)
	for budget.Stats().Waiting == 0 { // the pass blocks in Reserve: an event, not a sleep
		select {
		case ev := <-done:
			t.Fatalf("with no room the pass did not wait: %d slots, err %v", ev.Result.Slots, ev.Err)
		default:
			runtime.Gosched()
		}
	}
	if held, _ := mem.Held(); held != 0 {
		t.Fatalf("a pass waiting for budget holds %d bytes", held)
	}
	budget.Close()
	ev = <-done
	if !errors.Is(ev.Err, pool.ErrClosed) {
		t.Fatalf("a pass waiting when the budget closed ended with %v, want pool.ErrClosed", ev.Err)
	}
	if held, reserved := mem.Held(); held != 0 || reserved != 0 {
		t.Fatalf("after the budget closed, the pass holds %d bytes (%d reserved)", held, reserved)
	}
	if got := budget.Stats().ReservedBytes; got != size {
		t.Fatalf("the budget has %d bytes reserved, want the producers' %d", got, int64(size))
	}
}

// TestSettlePassBuffersInTheBudget: the settled objects a pass renders
// (and the extents it reads back) are held inside what it reserved from
// the budget (the room its slots reserved, then beyond) while it writes
// them, and given back after.
func TestSettlePassBuffersInTheBudget(t *testing.T) {
	budget := pool.NewBudget(1 << 20)
	mem := &work.PassMemory{Budget: budget}
	_, env, g, req, sizes := passMemoryWorld(t, mem)
	ctx := context.Background()
	done := runPass(ctx, env, req)
	<-g.entered // rendered; the first settled object's PUT waits
	held, reserved := mem.Held()
	bufHeld, bufReserved := mem.Buffers()
	if bufHeld <= 0 || bufHeld > reserved-held+bufReserved {
		t.Fatalf("while the pass writes its settled objects it holds %d bytes of them, reserved in the slots' room (%d) and %d beyond; want some, all reserved", bufHeld, reserved-held, bufReserved)
	}
	if got, want := budget.Stats().ReservedBytes, reserved+bufReserved; got != want || held != sum(sizes) {
		t.Fatalf("the budget has %d bytes reserved, want %d (slots %d + buffers %d)", got, want, reserved, bufReserved)
	}
	close(g.open)
	if ev := <-done; ev.Err != nil {
		t.Fatal(ev.Err)
	}
	bufHeld, bufReserved = mem.Buffers()
	if held, _ := mem.Held(); held != 0 || bufHeld != 0 || bufReserved != 0 || budget.Stats().ReservedBytes != 0 {
		t.Fatalf("after the pass: slots %d, buffers %d (%d reserved), budget %d; want none", held, bufHeld, bufReserved, budget.Stats().ReservedBytes)
	}
}
