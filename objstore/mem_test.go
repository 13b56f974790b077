package objstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/flightlog/flightlog/objstore"
	"github.com/flightlog/flightlog/objstore/objstoretest"
)

func memHarness() objstoretest.Harness {
	return objstoretest.Harness{
		New: func(testing.TB) objstore.Store { return objstore.NewMem() },
		// A Mem's storage is the process's memory: reopening it is using
		// the same value again.
		Reopen: func(_ testing.TB, s objstore.Store) objstore.Store { return s },
	}
}

func TestMemConformance(t *testing.T) { objstoretest.Run(t, memHarness()) }

func BenchmarkMem(b *testing.B) { objstoretest.RunBenchmarks(b, memHarness()) }

func TestMemCounters(t *testing.T) {
	ctx := context.Background()
	m := objstore.NewMem()
	if err := m.PutIfAbsent(ctx, "a", []byte("12345")); err != nil {
		t.Fatal(err)
	}
	if err := m.PutIfAbsent(ctx, "a", []byte("xyz")); !errors.Is(err, objstore.ErrExists) {
		t.Fatal(err)
	}
	if _, err := m.Get(ctx, "a", 1, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get(ctx, "missing", 0, -1); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatal(err)
	}
	if err := m.Delete(ctx, "missing"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.List(ctx, "", "", 0); err != nil {
		t.Fatal(err)
	}
	// Calls refused before sending are free.
	_ = m.PutIfAbsent(ctx, "../x", nil)
	_, _ = m.Get(ctx, "a", -1, 1)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, _ = m.List(cancelled, "", "", 0)

	want := objstore.Counters{Puts: 2, PutBytes: 5, PutExists: 1, Gets: 2, GetBytes: 3, GetNotFound: 1, Deletes: 1, Lists: 1}
	if got := m.Counters(); got != want {
		t.Fatalf("Counters() = %+v, want %+v", got, want)
	}
	before := m.Counters()
	if _, err := m.Get(ctx, "a", 0, -1); err != nil {
		t.Fatal(err)
	}
	if got := m.Counters().Sub(before); got != (objstore.Counters{Gets: 1, GetBytes: 5}) {
		t.Fatalf("Counters().Sub = %+v, want one 5-byte Get", got)
	}
	m.ResetCounters()
	if got := m.Counters(); got != (objstore.Counters{}) {
		t.Fatalf("after ResetCounters: %+v", got)
	}
}

func TestMemCorrupt(t *testing.T) {
	ctx := context.Background()
	m := objstore.NewMem()
	if err := m.PutIfAbsent(ctx, "k", []byte("abc")); err != nil {
		t.Fatal(err)
	}
	held, _ := m.Get(ctx, "k", 0, -1)
	if err := m.Corrupt("k", 1); err != nil {
		t.Fatal(err)
	}
	got, _ := m.Get(ctx, "k", 0, -1)
	if want := []byte{'a', 'b' ^ 0xFF, 'c'}; !slices.Equal(got, want) {
		t.Fatalf("after Corrupt(k, 1): %q, want %q", got, want)
	}
	if string(held) != "abc" {
		t.Fatalf("Corrupt changed a slice returned earlier: %q", held)
	}
	for _, off := range []int64{-1, 3, 100} {
		if err := m.Corrupt("k", off); !errors.Is(err, objstore.ErrInvalidRange) {
			t.Errorf("Corrupt(k, %d) = %v, want ErrInvalidRange", off, err)
		}
	}
	if err := m.Corrupt("missing", 0); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Corrupt(missing) = %v, want ErrNotFound", err)
	}
	if err := m.PutIfAbsent(ctx, "empty", nil); err != nil {
		t.Fatal(err)
	}
	if err := m.Corrupt("empty", 0); !errors.Is(err, objstore.ErrInvalidRange) {
		t.Errorf("Corrupt(empty, 0) = %v, want ErrInvalidRange", err)
	}
}

func TestMemCloneIsASnapshot(t *testing.T) {
	ctx := context.Background()
	m := objstore.NewMem()
	for _, k := range []string{"b", "a", "c/d"} {
		if err := m.PutIfAbsent(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	c := m.Clone()
	if got := c.Counters(); got != (objstore.Counters{}) {
		t.Fatalf("clone's counters = %+v, want zero", got)
	}
	// Writes after the snapshot show in neither direction.
	if err := m.PutIfAbsent(ctx, "late", nil); err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := c.PutIfAbsent(ctx, "clone-only", nil); err != nil {
		t.Fatal(err)
	}
	if err := m.Corrupt("b", 0); err != nil {
		t.Fatal(err)
	}
	if got, want := c.Keys(), []string{"a", "b", "c/d", "clone-only"}; !slices.Equal(got, want) {
		t.Fatalf("clone Keys() = %q, want %q", got, want)
	}
	if got, want := m.Keys(), []string{"b", "c/d", "late"}; !slices.Equal(got, want) {
		t.Fatalf("original Keys() = %q, want %q", got, want)
	}
	if got, _ := c.Get(ctx, "b", 0, -1); string(got) != "b" {
		t.Fatalf("Corrupt on the original changed the clone: %q", got)
	}
}

// Mem is a bucket in memory, with request counters for cost tests.
func ExampleMem() {
	ctx := context.Background()
	bucket := objstore.NewMem()

	_ = bucket.PutIfAbsent(ctx, "chains/0/std/0001/000000", []byte("flight"))
	err := bucket.PutIfAbsent(ctx, "chains/0/std/0001/000000", []byte("poison"))
	fmt.Println("second create:", errors.Is(err, objstore.ErrExists))

	head, _ := bucket.Get(ctx, "chains/0/std/0001/000000", 0, 3)
	fmt.Printf("first 3 bytes: %s\n", head)

	c := bucket.Counters()
	fmt.Printf("puts=%d exists=%d gets=%d lists=%d\n", c.Puts, c.PutExists, c.Gets, c.Lists)
	// Output:
	// second create: true
	// first 3 bytes: fli
	// puts=2 exists=1 gets=1 lists=0
}
