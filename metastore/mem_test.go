package metastore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/metastore/metastoretest"
)

func memHarness() metastoretest.Harness {
	return metastoretest.Harness{
		New:         func(testing.TB) metastore.Store { return metastore.NewMem() },
		MaxValueLen: metastore.MemMaxValueLen,
	}
}

func TestMemConformance(t *testing.T) {
	metastoretest.Run(t, memHarness())
}

func BenchmarkMem(b *testing.B) {
	metastoretest.RunBenchmarks(b, memHarness())
}

func TestMemCounters(t *testing.T) {
	ctx := t.Context()
	m := metastore.NewMem()
	if got := m.Counters(); got != (metastore.MemCounters{}) {
		t.Fatalf("fresh Mem counters = %+v, want zero", got)
	}
	v, err := m.Put(ctx, "a", []byte("1"), metastore.NoVersion)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Put(ctx, "a", []byte("2"), metastore.NoVersion); !errors.Is(err, metastore.ErrConflict) {
		t.Fatalf("second create: %v", err)
	}
	if _, err := m.Get(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get(ctx, "missing"); !errors.Is(err, metastore.ErrNotFound) {
		t.Fatal(err)
	}
	if _, err := m.Scan(ctx, "", "", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Commit(ctx, []metastore.Op{
		{Kind: metastore.OpPut, Key: "b", Value: []byte("1"), Expect: metastore.NoVersion},
		{Kind: metastore.OpCheck, Key: "a", Expect: v},
		{Kind: metastore.OpDelete, Key: "c", Expect: metastore.AnyVersion},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Commit(ctx, []metastore.Op{{Kind: metastore.OpCheck, Key: "a", Expect: metastore.NoVersion}}); !errors.Is(err, metastore.ErrConflict) {
		t.Fatal(err)
	}
	if err := m.Delete(ctx, "a", v); err != nil {
		t.Fatal(err)
	}
	want := metastore.MemCounters{Gets: 2, Puts: 2, Deletes: 1, Scans: 1, Commits: 2, CommitOps: 4, Conflicts: 2}
	if got := m.Counters(); got != want {
		t.Fatalf("counters = %+v, want %+v", got, want)
	}
	if got := m.Counters().Requests(); got != 8 {
		t.Fatalf("Requests() = %d, want 8", got)
	}
	m.ResetCounters()
	if got := m.Counters(); got != (metastore.MemCounters{}) {
		t.Fatalf("counters after reset = %+v, want zero", got)
	}
	if _, err := m.Get(ctx, "b"); err != nil {
		t.Fatalf("ResetCounters lost data: %v", err)
	}
	if got := m.Counters().Gets; got != 1 {
		t.Fatalf("Gets after reset and one Get = %d", got)
	}
}

// TestMemVersionsAreRevisions pins what Mem promises beyond the contract:
// one store-wide counter, so versions are distinct across keys too, and one
// Commit takes one revision.
func TestMemVersionsAreRevisions(t *testing.T) {
	ctx := context.Background()
	m := metastore.NewMem()
	va, _ := m.Put(ctx, "a", nil, metastore.NoVersion)
	vb, _ := m.Put(ctx, "b", nil, metastore.NoVersion)
	vs, err := m.Commit(ctx, []metastore.Op{
		{Kind: metastore.OpPut, Key: "c", Expect: metastore.NoVersion},
		{Kind: metastore.OpPut, Key: "d", Expect: metastore.NoVersion},
	})
	if err != nil {
		t.Fatal(err)
	}
	if va == vb || vb == vs[0] || va == vs[0] {
		t.Fatalf("versions repeat across keys: %q %q %q", va, vb, vs[0])
	}
	if vs[0] != vs[1] {
		t.Fatalf("one Commit's puts got versions %q and %q, want one revision", vs[0], vs[1])
	}
}
