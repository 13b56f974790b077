package loglet

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flightlog/flightlog/objstore"
)

// settledPutGate holds every settled object's PUT until open is closed or
// its ctx ends.
type settledPutGate struct {
	objstore.Store
	open chan struct{}
}

func (g settledPutGate) PutIfAbsent(ctx context.Context, key string, body []byte) error {
	if strings.HasPrefix(key, "settled/") {
		select {
		case <-g.open:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g.Store.PutIfAbsent(ctx, key, body)
}

// TestSettlePassInsideTheMemoryBudget: with a 2 MiB pool and a writer
// appending, a settle pass that holds its slots (its settled PUTs held
// up) shows them as Memory.Settle, within its bound and, with the pool's
// reservations, within the budget; the writer still gets acks; and the
// star's close gives the pass's bytes back.
func TestSettlePassInsideTheMemoryBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newSettleRig()
		gate := settledPutGate{Store: r.std, open: make(chan struct{})}
		r.cfg.Standard.Stores = []objstore.Store{gate}
		r.cfg.Standard.MemoryBufferMiB = 2
		ctx := context.Background()
		s, err := Open(ctx, r.cfg)
		if err != nil {
			t.Fatal(err)
		}
		body := []byte(strings.Repeat("x", 8<<10))
		appendSome := func(n int) {
			for i := 0; i < n; i++ {
				if _, err := s.Append(ctx, fmt.Sprint("s", i%4), Batch{Records: []Record{{Body: body}}}); err != nil {
					t.Fatal(err)
				}
			}
		}
		appendSome(40)
		waitUntil(t, time.Minute, "a pass holding slots", func() bool { return s.Stats().Standard.Memory.Settle > 0 })
		appendSome(40) // the writer goes on while the pass holds its slots
		cs := s.Stats().Standard
		m := cs.Memory
		if m.SettleBound != 2<<20 || m.Settle > m.SettleBound {
			t.Fatalf("the pass holds %d bytes, bound %d; want within 2 MiB", m.Settle, m.SettleBound)
		}
		if cs.Pool.ReservedBytes+m.Settle > cs.Pool.BudgetBytes {
			t.Fatalf("pool %d + settle %d bytes over the budget %d", cs.Pool.ReservedBytes, m.Settle, cs.Pool.BudgetBytes)
		}
		if cs.HeldBytes() < m.Settle {
			t.Fatalf("HeldBytes %d leaves out the pass's %d bytes", cs.HeldBytes(), m.Settle)
		}
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if cs := s.Stats().Standard; cs.Memory.Settle != 0 || cs.Pool.ReservedBytes != 0 {
			t.Fatalf("after Close the pass holds %d bytes, the pool %d", cs.Memory.Settle, cs.Pool.ReservedBytes)
		}
		close(gate.open)
	})
}
