package file

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flightlog/flightlog/objstore"
	"github.com/flightlog/flightlog/objstore/objstoretest"
)

func harness() objstoretest.Harness {
	return objstoretest.Harness{
		New: func(t testing.TB) objstore.Store {
			s, err := Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		Reopen: func(t testing.TB, s objstore.Store) objstore.Store {
			r, err := Open(s.(*Store).root)
			if err != nil {
				t.Fatal(err)
			}
			return r
		},
	}
}

func TestConformance(t *testing.T) { objstoretest.Run(t, harness()) }

func BenchmarkFile(b *testing.B) { objstoretest.RunBenchmarks(b, harness()) }

func mustOpen(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The on-disk names are part of the format: operators read them, and a
// change would orphan stored objects.
func TestObjectPath(t *testing.T) {
	long := strings.Repeat("x", chunkLen)
	cases := []struct {
		key  string
		dirs []string
		name string
	}{
		{"a", nil, "=a"},
		{"a/b", []string{"+a"}, "=b"},
		{"chains/0/std/0001/000007", []string{"+chains", "+0", "+std", "+0001"}, "=000007"},
		{".tmp", nil, "=.tmp"},
		{long, []string{"~" + long}, "="},
		{long + "y", []string{"~" + long}, "=y"},
		{long + "/z", []string{"~" + long, "+"}, "=z"},
		{long + long + "q/r", []string{"~" + long, "~" + long, "+q"}, "=r"},
	}
	for _, c := range cases {
		dirs, name := objectPath(c.key)
		if !slices.Equal(dirs, c.dirs) || name != c.name {
			t.Errorf("objectPath(%.20q...) = %q, %q; want %q, %q", c.key, dirs, name, c.dirs, c.name)
		}
		for _, n := range append(dirs, name) {
			if len(n) > 255 {
				t.Errorf("objectPath(%.20q...): name of %d bytes", c.key, len(n))
			}
		}
	}
}

// Listing must follow key order where name order differs; a seeded random
// set of keys built from the bytes that matter ('/' and its neighbours,
// the tags, multi-byte UTF-8) and segment lengths around chunkLen is
// listed whole, by prefix, after a bound and in pages, and compared with a
// sort of the keys.
func TestListOrderMatchesKeyOrder(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 99))
			alphabet := []string{"a", "b", "-", ".", "0", "~", "=", "+", " ", "é", "\x7f", "/"}
			randKey := func() string {
				var b strings.Builder
				n := 1 + r.IntN(6)
				if r.IntN(8) == 0 {
					n = chunkLen - 2 + r.IntN(5) // around a chunk boundary
				}
				for b.Len() < n {
					b.WriteString(alphabet[r.IntN(len(alphabet))])
				}
				return b.String()
			}
			s := mustOpen(t, t.TempDir())
			s.noSync = true // this test is about names, not durability
			ctx := context.Background()
			var keys []string
			for len(keys) < 200 {
				k := randKey()
				if r.IntN(3) == 0 {
					k = randKey() + "/" + k
				}
				if objstore.ValidateKey(k) != nil || slices.Contains(keys, k) {
					continue
				}
				keys = append(keys, k)
				if err := s.PutIfAbsent(ctx, k, []byte(k)); err != nil {
					t.Fatalf("seed %d: PutIfAbsent(%q) = %v", seed, k, err)
				}
			}
			slices.Sort(keys)
			for _, q := range []struct{ prefix, after string }{
				{"", ""}, {"a", ""}, {"a/", ""}, {"", keys[50]}, {"", keys[50] + "/"}, {"a", "a/"}, {"-", "-0"},
			} {
				var want []string
				for _, k := range keys {
					if strings.HasPrefix(k, q.prefix) && k > q.after {
						want = append(want, k)
					}
				}
				got, err := s.List(ctx, q.prefix, q.after, 0)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
					t.Fatalf("seed %d: List(%q, %q) =\n%q\nwant\n%q", seed, q.prefix, q.after, got, want)
				}
			}
			var paged []string
			for after := ""; ; {
				page, err := s.List(ctx, "", after, 7)
				if err != nil {
					t.Fatal(err)
				}
				if len(page) == 0 {
					break
				}
				paged = append(paged, page...)
				after = page[len(page)-1]
			}
			if !slices.Equal(paged, keys) {
				t.Fatalf("seed %d: paged listing =\n%q\nwant\n%q", seed, paged, keys)
			}
		})
	}
}

// A crash mid-create leaves a temporary file: never read or listed, and
// removed by a later Open once it is too old to belong to a create in
// progress.
func TestCrashedCreateLeavesNoObject(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir)
	ctx := context.Background()
	if err := s.PutIfAbsent(ctx, "kept", []byte("whole")); err != nil {
		t.Fatal(err)
	}
	// What a process that died between write and link leaves behind.
	stale := filepath.Join(dir, tmpDirName, "put-crashed")
	if err := os.WriteFile(stale, []byte("partial fli"), 0o644); err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(dir, tmpDirName, "put-in-progress")
	if err := os.WriteFile(fresh, []byte("another process"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * staleTempAge)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	keys, err := s.List(ctx, "", "", 0)
	if err != nil || !slices.Equal(keys, []string{"kept"}) {
		t.Fatalf("List with stray temporary files = %q, %v; want [kept]", keys, err)
	}
	if _, err := s.Get(ctx, tmpDirName+"/put-crashed", 0, -1); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Get of a temporary file's path = %v, want ErrNotFound", err)
	}

	s = mustOpen(t, dir) // the restart
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open left a stale temporary file: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Fatalf("Open removed a fresh temporary file, which may be another process's create: %v", err)
	}
	if got, err := s.Get(ctx, "kept", 0, -1); err != nil || string(got) != "whole" {
		t.Fatalf("after restart Get(kept) = %q, %v", got, err)
	}
	// A successful create leaves no temporary file.
	if err := s.PutIfAbsent(ctx, "another", []byte("x")); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, tmpDirName))
	if len(entries) != 1 || entries[0].Name() != "put-in-progress" {
		t.Fatalf("temporary directory holds %v, want only put-in-progress", entries)
	}
}

// Two Stores on one directory — as two processes would have — still let
// exactly one of many racing creates win: the filesystem arbitrates.
func TestTwoHandlesOneWinner(t *testing.T) {
	dir := t.TempDir()
	stores := []*Store{mustOpen(t, dir), mustOpen(t, dir)}
	ctx := context.Background()
	for round := range 20 {
		key := fmt.Sprintf("chains/0/std/0001/%06d", round)
		var wins sync.Map
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				err := stores[i%2].PutIfAbsent(ctx, key, []byte{byte(i)})
				switch {
				case err == nil:
					wins.Store(i, true)
				case !errors.Is(err, objstore.ErrExists):
					t.Errorf("racer %d: %v", i, err)
				}
			})
		}
		wg.Wait()
		var winners []int
		wins.Range(func(k, _ any) bool { winners = append(winners, k.(int)); return true })
		if len(winners) != 1 {
			t.Fatalf("round %d: winners %v, want exactly one", round, winners)
		}
		for _, s := range stores {
			got, err := s.Get(ctx, key, 0, -1)
			if err != nil || len(got) != 1 || int(got[0]) != winners[0] {
				t.Fatalf("round %d: Get = %v, %v; want the winner %d's body", round, got, err, winners[0])
			}
		}
	}
}

// Keys cannot reach outside the root, and files outside the tagged names
// (foreign files, the temporary directory) are invisible.
func TestNoEscapeAndForeignFilesIgnored(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "bucket")
	s := mustOpen(t, dir)
	if err := os.WriteFile(filepath.Join(parent, "secret"), []byte("outside"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "README"), []byte("foreign"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, k := range []string{"../secret", "/etc/passwd", "a/../../secret"} {
		if _, err := s.Get(ctx, k, 0, -1); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("Get(%q) = %v, want ErrInvalidKey", k, err)
		}
	}
	for _, k := range []string{"README", "secret", ".tmp"} {
		if _, err := s.Get(ctx, k, 0, -1); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("Get(%q) = %v, want ErrNotFound", k, err)
		}
	}
	if keys, err := s.List(ctx, "", "", 0); err != nil || len(keys) != 0 {
		t.Fatalf("List over foreign files = %q, %v; want none", keys, err)
	}
	if err := s.PutIfAbsent(ctx, ".tmp", []byte("a key named like the reserved directory")); err != nil {
		t.Fatal(err)
	}
	if keys, err := s.List(ctx, "", "", 0); err != nil || !slices.Equal(keys, []string{".tmp"}) {
		t.Fatalf("List = %q, %v; want [.tmp]", keys, err)
	}
}
