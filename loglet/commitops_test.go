package loglet

import (
	"context"
	"strings"
	"testing"

	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// opsLimited is a metastore that declares a limit on ops per Commit.
type opsLimited struct {
	metastore.Store
	n int
}

func (s opsLimited) MaxCommitOps() int { return s.n }

// A metastore taking fewer than MinCommitOps ops per Commit is refused at
// Open with a clear error: a stream's delete is three ops that must apply
// together, so on such a backend DeleteStream could never succeed (the
// simulation found it on a seed whose metastore took two). At the
// minimum, Open works and a stream can be created and deleted.
func TestOpenRefusesTooFewCommitOps(t *testing.T) {
	ctx := context.Background()
	cfg := func(n int) Config {
		c := DefaultConfig()
		c.Star, c.Owner = "s", "p1"
		c.Meta = opsLimited{metastore.NewMem(), n}
		c.Standard.Stores = []objstore.Store{objstore.NewMem()}
		c.Express.Stores = nil
		return c
	}
	for _, n := range []int{1, metastore.MinCommitOps - 1} {
		s, err := Open(ctx, cfg(n))
		if err == nil {
			s.Close(ctx)
			t.Fatalf("Open over a metastore taking %d ops per Commit succeeded, want refused", n)
		}
		if !strings.Contains(err.Error(), "MinCommitOps") {
			t.Errorf("Open over a metastore taking %d ops: %v, want an error naming MinCommitOps", n, err)
		}
	}
	s, err := Open(ctx, cfg(metastore.MinCommitOps))
	if err != nil {
		t.Fatalf("Open at MinCommitOps: %v", err)
	}
	defer s.Close(ctx)
	if _, err := s.CreateStream(ctx, "orders", StreamOptions{Class: Standard}); err != nil {
		t.Fatalf("CreateStream at MinCommitOps: %v", err)
	}
	if err := s.DeleteStream(ctx, "orders"); err != nil {
		t.Fatalf("DeleteStream at MinCommitOps: %v", err)
	}
}
