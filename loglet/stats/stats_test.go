package stats

import "testing"

// TestHeldBytesSumsEveryPart: the pool's and the backlog's bytes live in
// Pool and Backlog, the other parts in Memory; HeldBytes counts each once.
func TestHeldBytesSumsEveryPart(t *testing.T) {
	var c Class
	c.Pool.ReservedBytes, c.Pool.BudgetBytes = 1, 100
	c.Backlog.Bytes, c.Backlog.MaxBytes = 20, 200
	c.Memory = Memory{Objects: 300, Stragglers: 4000, StragglersBound: 50000}
	if got := c.HeldBytes(); got != 4321 {
		t.Fatalf("HeldBytes = %d, want 4321 (pool 1 + backlog 20 + objects 300 + stragglers 4000)", got)
	}
}
