package metastoretest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/flightlog/flightlog/metastore"
)

// Run runs the conformance suite against the backend h describes. Each
// subtest gets a fresh store from h.New and names the property it checks.
func Run(t *testing.T, h Harness) {
	if h.New == nil {
		t.Fatal("metastoretest: Harness.New is nil")
	}
	k := kit{h: h}
	for _, g := range []struct {
		name  string
		tests []kitTest
	}{
		{"Get", k.getTests()},
		{"Put", k.putTests()},
		{"Delete", k.deleteTests()},
		{"Keys", k.keyTests()},
		{"Values", k.valueTests()},
		{"Race", k.raceTests()},
		{"Commit", k.commitTests()},
		{"Scan", k.scanTests()},
		{"Context", k.contextTests()},
		{"Reopen", k.reopenTests()},
		{"Watch", k.watchTests()}, // only a metastore.Watcher; skipped otherwise
	} {
		t.Run(g.name, func(t *testing.T) {
			for _, kt := range g.tests {
				t.Run(kt.name, func(t *testing.T) {
					kt.run(t, h.New(t))
				})
			}
		})
	}
}

type kitTest struct {
	name string
	run  func(t *testing.T, s metastore.Store)
}

type kit struct{ h Harness }

// ---- helpers -------------------------------------------------------------

func put(t *testing.T, s metastore.Store, key, value string, expect metastore.Version) metastore.Version {
	t.Helper()
	v, err := s.Put(t.Context(), key, []byte(value), expect)
	if err != nil {
		t.Fatalf("Put(%q, %q, expect %q): %v", key, value, expect, err)
	}
	if v == metastore.NoVersion || v == metastore.AnyVersion {
		t.Fatalf("Put(%q) returned version %q, which is reserved for expectations", key, v)
	}
	return v
}

func get(t *testing.T, s metastore.Store, key string) metastore.Item {
	t.Helper()
	it, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	if it.Key != key {
		t.Fatalf("Get(%q) returned Key %q", key, it.Key)
	}
	return it
}

// wantValue fails unless key holds value (at version v when v != "").
func wantValue(t *testing.T, s metastore.Store, key, value string, v metastore.Version) {
	t.Helper()
	it := get(t, s, key)
	if string(it.Value) != value {
		t.Fatalf("Get(%q) value = %q, want %q", key, it.Value, value)
	}
	if v != metastore.NoVersion && it.Version != v {
		t.Fatalf("Get(%q) version = %q, want %q", key, it.Version, v)
	}
}

func wantAbsent(t *testing.T, s metastore.Store, key string) {
	t.Helper()
	it, err := s.Get(t.Context(), key)
	if !errors.Is(err, metastore.ErrNotFound) {
		t.Fatalf("Get(%q) = %q@%q, %v; want ErrNotFound", key, it.Value, it.Version, err)
	}
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: err = %v, want %v", what, err, want)
	}
}

func scanKeys(t *testing.T, s metastore.Store, prefix, startAfter string, limit int) []string {
	t.Helper()
	items, err := s.Scan(t.Context(), prefix, startAfter, limit)
	if err != nil {
		t.Fatalf("Scan(%q, %q, %d): %v", prefix, startAfter, limit, err)
	}
	keys := make([]string, len(items))
	for i, it := range items {
		keys[i] = it.Key
	}
	return keys
}

func wantKeys(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: keys\n got %q\nwant %q", what, got, want)
	}
}

// ---- Get -----------------------------------------------------------------

func (k kit) getTests() []kitTest {
	return []kitTest{
		{"missing_key_is_ErrNotFound", func(t *testing.T, s metastore.Store) {
			_, err := s.Get(t.Context(), "nope")
			wantErr(t, "Get of a key never written", err, metastore.ErrNotFound)
		}},
		{"returns_what_Put_stored", func(t *testing.T, s metastore.Store) {
			v := put(t, s, "k", "hello", metastore.NoVersion)
			wantValue(t, s, "k", "hello", v)
		}},
	}
}

// ---- Put -----------------------------------------------------------------

func (k kit) putTests() []kitTest {
	return []kitTest{
		{"NoVersion_creates_once", func(t *testing.T, s metastore.Store) {
			v := put(t, s, "k", "first", metastore.NoVersion)
			_, err := s.Put(t.Context(), "k", []byte("second"), metastore.NoVersion)
			wantErr(t, "second create of the same key", err, metastore.ErrConflict)
			wantValue(t, s, "k", "first", v)
		}},
		{"right_version_replaces_with_a_new_version", func(t *testing.T, s metastore.Store) {
			v1 := put(t, s, "k", "one", metastore.NoVersion)
			v2 := put(t, s, "k", "two", v1)
			if v2 == v1 {
				t.Fatalf("CAS returned the version it replaced: %q", v2)
			}
			wantValue(t, s, "k", "two", v2)
		}},
		{"stale_version_conflicts", func(t *testing.T, s metastore.Store) {
			v1 := put(t, s, "k", "one", metastore.NoVersion)
			v2 := put(t, s, "k", "two", v1)
			_, err := s.Put(t.Context(), "k", []byte("three"), v1)
			wantErr(t, "Put expecting a replaced version", err, metastore.ErrConflict)
			wantValue(t, s, "k", "two", v2)
		}},
		{"expected_version_on_missing_key_conflicts", func(t *testing.T, s metastore.Store) {
			// A real version (of another key), so a backend cannot pass by
			// rejecting malformed versions.
			v := put(t, s, "other", "x", metastore.NoVersion)
			_, err := s.Put(t.Context(), "missing", []byte("y"), v)
			wantErr(t, "Put expecting a version of an absent key", err, metastore.ErrConflict)
			wantAbsent(t, s, "missing")
		}},
		{"AnyVersion_is_unconditional", func(t *testing.T, s metastore.Store) {
			v1 := put(t, s, "k", "created", metastore.AnyVersion)
			wantValue(t, s, "k", "created", v1)
			v2 := put(t, s, "k", "replaced", metastore.AnyVersion)
			if v2 == v1 {
				t.Fatalf("unconditional Put returned the version it replaced: %q", v2)
			}
			wantValue(t, s, "k", "replaced", v2)
		}},
		{"versions_of_a_key_never_repeat", func(t *testing.T, s metastore.Store) {
			seen := map[metastore.Version]int{}
			v := metastore.NoVersion
			for i := range 30 {
				v = put(t, s, "k", fmt.Sprint(i), v)
				if j, dup := seen[v]; dup {
					t.Fatalf("write %d returned version %q, already returned by write %d", i, v, j)
				}
				seen[v] = i
				if i%3 == 2 {
					if err := s.Delete(t.Context(), "k", v); err != nil {
						t.Fatalf("Delete: %v", err)
					}
					v = metastore.NoVersion
				}
			}
		}},
		{"no_ABA_after_delete_and_recreate", func(t *testing.T, s metastore.Store) {
			ctx := t.Context()
			old := put(t, s, "k", "A", metastore.NoVersion)
			if err := s.Delete(ctx, "k", old); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			fresh := put(t, s, "k", "B", metastore.NoVersion)
			if fresh == old {
				t.Fatalf("re-created key got the version %q it had before the delete", fresh)
			}
			_, err := s.Put(ctx, "k", []byte("C"), old)
			wantErr(t, "Put with a version read before delete+recreate", err, metastore.ErrConflict)
			err = s.Delete(ctx, "k", old)
			wantErr(t, "Delete with a version read before delete+recreate", err, metastore.ErrConflict)
			_, err = s.Commit(ctx, []metastore.Op{{Kind: metastore.OpCheck, Key: "k", Expect: old}})
			wantErr(t, "OpCheck with a version read before delete+recreate", err, metastore.ErrConflict)
			wantValue(t, s, "k", "B", fresh)
		}},
	}
}

// ---- Delete --------------------------------------------------------------

func (k kit) deleteTests() []kitTest {
	return []kitTest{
		{"right_version_removes", func(t *testing.T, s metastore.Store) {
			v := put(t, s, "k", "x", metastore.NoVersion)
			if err := s.Delete(t.Context(), "k", v); err != nil {
				t.Fatalf("Delete with the current version: %v", err)
			}
			wantAbsent(t, s, "k")
		}},
		{"wrong_version_conflicts", func(t *testing.T, s metastore.Store) {
			v1 := put(t, s, "k", "x", metastore.NoVersion)
			v2 := put(t, s, "k", "y", v1)
			err := s.Delete(t.Context(), "k", v1)
			wantErr(t, "Delete with a replaced version", err, metastore.ErrConflict)
			wantValue(t, s, "k", "y", v2)
		}},
		{"version_on_missing_key_conflicts", func(t *testing.T, s metastore.Store) {
			v := put(t, s, "other", "x", metastore.NoVersion)
			err := s.Delete(t.Context(), "missing", v)
			wantErr(t, "Delete of an absent key expecting a version", err, metastore.ErrConflict)
		}},
		{"NoVersion_on_present_key_conflicts", func(t *testing.T, s metastore.Store) {
			v := put(t, s, "k", "x", metastore.NoVersion)
			err := s.Delete(t.Context(), "k", metastore.NoVersion)
			wantErr(t, "Delete expecting absence of a present key", err, metastore.ErrConflict)
			wantValue(t, s, "k", "x", v)
		}},
		{"AnyVersion_removes_and_missing_is_nil", func(t *testing.T, s metastore.Store) {
			put(t, s, "k", "x", metastore.NoVersion)
			if err := s.Delete(t.Context(), "k", metastore.AnyVersion); err != nil {
				t.Fatalf("Delete AnyVersion of a present key: %v", err)
			}
			wantAbsent(t, s, "k")
			if err := s.Delete(t.Context(), "k", metastore.AnyVersion); err != nil {
				t.Fatalf("Delete AnyVersion of a missing key = %v, want nil", err)
			}
		}},
	}
}

// ---- Keys ----------------------------------------------------------------

func (k kit) keyTests() []kitTest {
	return []kitTest{
		{"invalid_keys_are_ErrInvalidKey", func(t *testing.T, s metastore.Store) {
			ctx := t.Context()
			for _, key := range []string{"", strings.Repeat("k", metastore.MaxKeyLen+1), "a\x00b"} {
				name := fmt.Sprintf("key %.20q (len %d)", key, len(key))
				_, err := s.Get(ctx, key)
				wantErr(t, "Get of "+name, err, metastore.ErrInvalidKey)
				_, err = s.Put(ctx, key, []byte("v"), metastore.AnyVersion)
				wantErr(t, "Put of "+name, err, metastore.ErrInvalidKey)
				err = s.Delete(ctx, key, metastore.AnyVersion)
				wantErr(t, "Delete of "+name, err, metastore.ErrInvalidKey)
				_, err = s.Commit(ctx, []metastore.Op{
					{Kind: metastore.OpPut, Key: "valid", Value: []byte("v"), Expect: metastore.NoVersion},
					{Kind: metastore.OpPut, Key: key, Value: []byte("v"), Expect: metastore.AnyVersion},
				})
				wantErr(t, "Commit with "+name, err, metastore.ErrInvalidKey)
				wantAbsent(t, s, "valid")
			}
		}},
		{"longest_and_odd_keys_work", func(t *testing.T, s metastore.Store) {
			keys := []string{
				strings.Repeat("k", metastore.MaxKeyLen),
				"with space", "slash/es/", "\xff\xfe", "ünïcödé", "%2F..%00",
			}
			for _, key := range keys {
				v := put(t, s, key, key, metastore.NoVersion)
				wantValue(t, s, key, key, v)
			}
			want := slices.Clone(keys)
			slices.Sort(want)
			wantKeys(t, "Scan of every key", scanKeys(t, s, "", "", 0), want)
		}},
	}
}

// ---- Values --------------------------------------------------------------

func (k kit) valueTests() []kitTest {
	tests := []kitTest{
		{"empty_value_allowed", func(t *testing.T, s metastore.Store) {
			v := put(t, s, "k", "", metastore.NoVersion)
			wantValue(t, s, "k", "", v)
			v2, err := s.Put(t.Context(), "k", nil, v)
			if err != nil {
				t.Fatalf("Put of a nil value: %v", err)
			}
			wantValue(t, s, "k", "", v2)
		}},
		{"binary_values_with_zero_bytes", func(t *testing.T, s metastore.Store) {
			val := make([]byte, 0, 512)
			for i := range 512 {
				val = append(val, byte(i))
			}
			val = append(val, 0, 0, 0)
			v := put(t, s, "bin", string(val), metastore.NoVersion)
			wantValue(t, s, "bin", string(val), v)
			items, err := s.Scan(t.Context(), "bin", "", 0)
			if err != nil || len(items) != 1 || !bytes.Equal(items[0].Value, val) {
				t.Fatalf("Scan of a binary value: %v, %d items", err, len(items))
			}
		}},
		{"caller_owns_slices_both_ways", func(t *testing.T, s metastore.Store) {
			ctx := t.Context()
			in := []byte("original")
			v, err := s.Put(ctx, "p", in, metastore.NoVersion)
			if err != nil {
				t.Fatal(err)
			}
			copy(in, "MUTATED!")
			wantValue(t, s, "p", "original", v)

			ops := []metastore.Op{{Kind: metastore.OpPut, Key: "c", Value: []byte("original"), Expect: metastore.NoVersion}}
			if _, err := s.Commit(ctx, ops); err != nil {
				t.Fatal(err)
			}
			copy(ops[0].Value, "MUTATED!")
			wantValue(t, s, "c", "original", metastore.NoVersion)

			it := get(t, s, "p")
			copy(it.Value, "MUTATED!")
			wantValue(t, s, "p", "original", v)

			items, err := s.Scan(ctx, "", "", 0)
			if err != nil || len(items) != 2 {
				t.Fatalf("Scan: %v, %d items", err, len(items))
			}
			for _, it := range items {
				copy(it.Value, "MUTATED!")
			}
			wantValue(t, s, "c", "original", metastore.NoVersion)
			wantValue(t, s, "p", "original", v)
		}},
	}
	if n := k.h.MaxValueLen; n > 0 {
		tests = append(tests, kitTest{"value_size_limit_is_ErrTooLarge", func(t *testing.T, s metastore.Store) {
			ctx := t.Context()
			big := bytes.Repeat([]byte{0xab}, n)
			if _, err := s.Put(ctx, "max", big, metastore.NoVersion); err != nil {
				t.Fatalf("Put of a value of exactly the declared limit (%d bytes): %v", n, err)
			}
			it := get(t, s, "max")
			if !bytes.Equal(it.Value, big) {
				t.Fatalf("value at the limit read back as %d bytes", len(it.Value))
			}
			over := append(big, 0xcd)
			_, err := s.Put(ctx, "over", over, metastore.NoVersion)
			wantErr(t, fmt.Sprintf("Put of %d bytes", len(over)), err, metastore.ErrTooLarge)
			wantAbsent(t, s, "over")
			_, err = s.Commit(ctx, []metastore.Op{
				{Kind: metastore.OpPut, Key: "small", Value: []byte("s"), Expect: metastore.NoVersion},
				{Kind: metastore.OpPut, Key: "over", Value: over, Expect: metastore.NoVersion},
			})
			wantErr(t, fmt.Sprintf("Commit with a value of %d bytes", len(over)), err, metastore.ErrTooLarge)
			wantAbsent(t, s, "small")
			wantAbsent(t, s, "over")
		}})
	}
	return tests
}

// ---- Races ---------------------------------------------------------------

const racers = 16

// race runs f in racers goroutines released together and returns their
// errors.
func race(f func(i int) error) []error {
	errs := make([]error, racers)
	var start, done sync.WaitGroup
	start.Add(1)
	for i := range racers {
		done.Go(func() {
			start.Wait()
			errs[i] = f(i)
		})
	}
	start.Done()
	done.Wait()
	return errs
}

// oneWinner fails unless exactly one of errs is nil and every other is
// ErrConflict, and returns the winner's index.
func oneWinner(t *testing.T, what string, errs []error) int {
	t.Helper()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("%s: racers %d and %d both won", what, winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, metastore.ErrConflict):
			t.Fatalf("%s: racer %d: err = %v, want nil or ErrConflict", what, i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("%s: no racer won", what)
	}
	return winner
}

func (k kit) raceTests() []kitTest {
	return []kitTest{
		{"one_winner_among_16_creates", func(t *testing.T, s metastore.Store) {
			ctx := t.Context()
			vs := make([]metastore.Version, racers)
			errs := race(func(i int) (err error) {
				vs[i], err = s.Put(ctx, "k", []byte(fmt.Sprint(i)), metastore.NoVersion)
				return err
			})
			w := oneWinner(t, "racing creates", errs)
			wantValue(t, s, "k", fmt.Sprint(w), vs[w])
		}},
		{"one_winner_among_16_CASes_from_one_version", func(t *testing.T, s metastore.Store) {
			ctx := t.Context()
			base := put(t, s, "k", "base", metastore.NoVersion)
			vs := make([]metastore.Version, racers)
			errs := race(func(i int) (err error) {
				vs[i], err = s.Put(ctx, "k", []byte(fmt.Sprint(i)), base)
				return err
			})
			w := oneWinner(t, "racing CASes", errs)
			wantValue(t, s, "k", fmt.Sprint(w), vs[w])
		}},
		{"one_winner_among_16_commits_from_one_version", func(t *testing.T, s metastore.Store) {
			ctx := t.Context()
			base := put(t, s, "k", "base", metastore.NoVersion)
			errs := race(func(i int) error {
				_, err := s.Commit(ctx, []metastore.Op{
					{Kind: metastore.OpPut, Key: "k", Value: []byte(fmt.Sprint(i)), Expect: base},
					{Kind: metastore.OpPut, Key: fmt.Sprintf("claim/%02d", i), Value: []byte("won"), Expect: metastore.NoVersion},
				})
				return err
			})
			w := oneWinner(t, "racing commits", errs)
			wantValue(t, s, "k", fmt.Sprint(w), metastore.NoVersion)
			wantKeys(t, "claims after racing commits", scanKeys(t, s, "claim/", "", 0), []string{fmt.Sprintf("claim/%02d", w)})
		}},
	}
}

// ---- Commit --------------------------------------------------------------

func (k kit) commitTests() []kitTest {
	return []kitTest{
		{"empty_is_a_noop", func(t *testing.T, s metastore.Store) {
			vs, err := s.Commit(t.Context(), nil)
			if err != nil || len(vs) != 0 {
				t.Fatalf("Commit(nil) = %q, %v; want no versions, nil", vs, err)
			}
		}},
		{"all_or_nothing", func(t *testing.T, s metastore.Store) {
			// One failing expectation among several, at each position: no
			// op may apply, whatever order a backend works in.
			ctx := t.Context()
			// Stale versions are the same key's: versions of different
			// keys may coincide.
			vaStale := put(t, s, "a", "stale", metastore.NoVersion)
			va := put(t, s, "a", "a0", vaStale)
			vb := put(t, s, "b", "b0", metastore.NoVersion)
			vcStale := put(t, s, "c", "stale", metastore.NoVersion)
			vc := put(t, s, "c", "c0", vcStale)
			good := []metastore.Op{
				{Kind: metastore.OpPut, Key: "a", Value: []byte("a1"), Expect: va},
				{Kind: metastore.OpDelete, Key: "b", Expect: vb},
				{Kind: metastore.OpPut, Key: "new", Value: []byte("n1"), Expect: metastore.NoVersion},
				{Kind: metastore.OpCheck, Key: "c", Expect: vc},
			}
			bad := []metastore.Op{
				{Kind: metastore.OpPut, Key: "c", Value: []byte("c1"), Expect: metastore.NoVersion}, // c exists
				{Kind: metastore.OpPut, Key: "missing", Value: []byte("m"), Expect: va},             // absent
				{Kind: metastore.OpCheck, Key: "a", Expect: vaStale},                                // replaced version
				{Kind: metastore.OpDelete, Key: "c", Expect: vcStale},                               // replaced version
			}
			for bi, b := range bad {
				// A key may appear once: drop the good op on b's key.
				others := slices.DeleteFunc(slices.Clone(good), func(op metastore.Op) bool { return op.Key == b.Key })
				for pos := 0; pos <= len(others); pos++ {
					ops := slices.Insert(slices.Clone(others), pos, b)
					_, err := s.Commit(ctx, ops)
					wantErr(t, fmt.Sprintf("Commit with bad op %d at position %d", bi, pos), err, metastore.ErrConflict)
					wantValue(t, s, "a", "a0", va)
					wantValue(t, s, "b", "b0", vb)
					wantValue(t, s, "c", "c0", vc)
					wantAbsent(t, s, "new")
					wantAbsent(t, s, "missing")
				}
			}
		}},
		{"OpCheck_semantics", func(t *testing.T, s metastore.Store) {
			ctx := t.Context()
			v := put(t, s, "k", "x", metastore.NoVersion)
			vs, err := s.Commit(ctx, []metastore.Op{{Kind: metastore.OpCheck, Key: "k", Expect: v}})
			if err != nil || len(vs) != 1 || vs[0] != v {
				t.Fatalf("OpCheck at the current version = %q, %v; want [%q], nil", vs, err, v)
			}
			wantValue(t, s, "k", "x", v) // a check writes nothing
			vs, err = s.Commit(ctx, []metastore.Op{{Kind: metastore.OpCheck, Key: "absent", Expect: metastore.NoVersion}})
			if err != nil || len(vs) != 1 || vs[0] != metastore.NoVersion {
				t.Fatalf("OpCheck NoVersion of an absent key = %q, %v; want [\"\"], nil", vs, err)
			}
			wantAbsent(t, s, "absent")
			vs, err = s.Commit(ctx, []metastore.Op{{Kind: metastore.OpCheck, Key: "k", Expect: metastore.AnyVersion}})
			if err != nil || len(vs) != 1 || vs[0] != v {
				t.Fatalf("OpCheck AnyVersion of a present key = %q, %v; want [%q], nil", vs, err, v)
			}
			_, err = s.Commit(ctx, []metastore.Op{{Kind: metastore.OpCheck, Key: "k", Expect: metastore.NoVersion}})
			wantErr(t, "OpCheck NoVersion of a present key", err, metastore.ErrConflict)
			v2 := put(t, s, "k", "y", v)
			_, err = s.Commit(ctx, []metastore.Op{
				{Kind: metastore.OpCheck, Key: "k", Expect: v},
				{Kind: metastore.OpPut, Key: "guarded", Value: []byte("g"), Expect: metastore.NoVersion},
			})
			wantErr(t, "OpCheck of a replaced version guarding a put", err, metastore.ErrConflict)
			wantAbsent(t, s, "guarded")
			vs, err = s.Commit(ctx, []metastore.Op{
				{Kind: metastore.OpCheck, Key: "k", Expect: v2},
				{Kind: metastore.OpPut, Key: "guarded", Value: []byte("g"), Expect: metastore.NoVersion},
			})
			if err != nil {
				t.Fatalf("OpCheck of the current version guarding a put: %v", err)
			}
			wantValue(t, s, "guarded", "g", vs[1])
			wantValue(t, s, "k", "y", v2)
		}},
		{"mixed_put_delete_check_returns_one_version_per_op", func(t *testing.T, s metastore.Store) {
			ctx := t.Context()
			va := put(t, s, "a", "a0", metastore.NoVersion)
			vb := put(t, s, "b", "b0", metastore.NoVersion)
			vc := put(t, s, "c", "c0", metastore.NoVersion)
			vs, err := s.Commit(ctx, []metastore.Op{
				{Kind: metastore.OpPut, Key: "a", Value: []byte("a1"), Expect: va},
				{Kind: metastore.OpDelete, Key: "b", Expect: vb},
				{Kind: metastore.OpCheck, Key: "c", Expect: vc},
				{Kind: metastore.OpPut, Key: "d", Value: []byte("d1"), Expect: metastore.NoVersion},
				{Kind: metastore.OpDelete, Key: "never", Expect: metastore.AnyVersion},
			})
			if err != nil {
				t.Fatalf("Commit: %v", err)
			}
			if len(vs) != 5 {
				t.Fatalf("Commit of 5 ops returned %d versions", len(vs))
			}
			if vs[0] == va || vs[0] == metastore.NoVersion {
				t.Fatalf("OpPut version = %q (was %q)", vs[0], va)
			}
			if vs[1] != metastore.NoVersion || vs[4] != metastore.NoVersion {
				t.Fatalf("OpDelete versions = %q, %q; want NoVersion", vs[1], vs[4])
			}
			if vs[2] != vc {
				t.Fatalf("OpCheck version = %q, want %q", vs[2], vc)
			}
			wantValue(t, s, "a", "a1", vs[0])
			wantAbsent(t, s, "b")
			wantValue(t, s, "c", "c0", vc)
			wantValue(t, s, "d", "d1", vs[3])
		}},
		{"returned_versions_serve_the_next_CAS", func(t *testing.T, s metastore.Store) {
			ctx := t.Context()
			vs, err := s.Commit(ctx, []metastore.Op{
				{Kind: metastore.OpPut, Key: "x", Value: []byte("1"), Expect: metastore.NoVersion},
				{Kind: metastore.OpPut, Key: "y", Value: []byte("1"), Expect: metastore.NoVersion},
			})
			if err != nil {
				t.Fatal(err)
			}
			vx := put(t, s, "x", "2", vs[0])
			vs2, err := s.Commit(ctx, []metastore.Op{
				{Kind: metastore.OpPut, Key: "x", Value: []byte("3"), Expect: vx},
				{Kind: metastore.OpPut, Key: "y", Value: []byte("3"), Expect: vs[1]},
			})
			if err != nil {
				t.Fatalf("Commit with versions from Put and Commit: %v", err)
			}
			if err := s.Delete(ctx, "y", vs2[1]); err != nil {
				t.Fatalf("Delete with a version from Commit: %v", err)
			}
			wantValue(t, s, "x", "3", vs2[0])
			wantAbsent(t, s, "y")
		}},
		{"duplicate_key_fails_and_applies_nothing", func(t *testing.T, s metastore.Store) {
			_, err := s.Commit(t.Context(), []metastore.Op{
				{Kind: metastore.OpPut, Key: "other", Value: []byte("o"), Expect: metastore.NoVersion},
				{Kind: metastore.OpPut, Key: "k", Value: []byte("1"), Expect: metastore.NoVersion},
				{Kind: metastore.OpPut, Key: "k", Value: []byte("2"), Expect: metastore.AnyVersion},
			})
			if err == nil {
				t.Fatal("Commit naming a key twice succeeded")
			}
			wantAbsent(t, s, "k")
			wantAbsent(t, s, "other")
		}},
		{"op_count_limit", func(t *testing.T, s metastore.Store) {
			ctx := t.Context()
			n := metastore.MaxCommitOps(s)
			declared := n > 0
			if !declared {
				n = 256 // no declared limit: a large commit must work
			}
			ops := make([]metastore.Op, n+1)
			for i := range ops {
				ops[i] = metastore.Op{Kind: metastore.OpPut, Key: fmt.Sprintf("op/%05d", i), Value: []byte("v"), Expect: metastore.NoVersion}
			}
			if declared {
				_, err := s.Commit(ctx, ops)
				wantErr(t, fmt.Sprintf("Commit of %d ops, over the declared limit", n+1), err, metastore.ErrTooLarge)
				if got := scanKeys(t, s, "op/", "", 0); len(got) != 0 {
					t.Fatalf("a Commit over the limit applied %d ops", len(got))
				}
			}
			if _, err := s.Commit(ctx, ops[:n]); err != nil {
				t.Fatalf("Commit of %d ops (declared limit: %v): %v", n, declared, err)
			}
			if got := scanKeys(t, s, "op/", "", 0); len(got) != n {
				t.Fatalf("after a Commit of %d puts, Scan finds %d keys", n, len(got))
			}
		}},
		{"concurrent_writers_keep_two_keys_equal", func(t *testing.T, s metastore.Store) {
			// 8 writers each CAS-increment x and y together until each has
			// won 25 times; a reader checks every snapshot it gets.
			const writers, wins = 8, 25
			ctx := t.Context()
			put(t, s, "x", "0", metastore.NoVersion)
			put(t, s, "y", "0", metastore.NoVersion)
			var wg sync.WaitGroup
			errs := make(chan error, writers+1)
			stop := make(chan struct{})
			var commits, conflicts [writers]int
			for w := range writers {
				wg.Go(func() {
					for commits[w] < wins {
						x, err := s.Get(ctx, "x")
						if err != nil {
							errs <- err
							return
						}
						y, err := s.Get(ctx, "y")
						if err != nil {
							errs <- err
							return
						}
						nx, ny := atoi(x.Value)+1, atoi(y.Value)+1
						_, err = s.Commit(ctx, []metastore.Op{
							{Kind: metastore.OpPut, Key: "x", Value: fmt.Appendf(nil, "%d", nx), Expect: x.Version},
							{Kind: metastore.OpPut, Key: "y", Value: fmt.Appendf(nil, "%d", ny), Expect: y.Version},
						})
						switch {
						case err == nil:
							commits[w]++
						case errors.Is(err, metastore.ErrConflict):
							conflicts[w]++
						default:
							errs <- err
							return
						}
					}
				})
			}
			var rd sync.WaitGroup
			rd.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					items, err := s.Scan(ctx, "", "", 0)
					if err != nil {
						errs <- err
						return
					}
					if len(items) != 2 || !bytes.Equal(items[0].Value, items[1].Value) {
						errs <- fmt.Errorf("a Scan during the transactions saw %d items: %s", len(items), describe(items))
						return
					}
				}
			})
			wg.Wait()
			close(stop)
			rd.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			x, y := get(t, s, "x"), get(t, s, "y")
			if atoi(x.Value) != writers*wins || atoi(y.Value) != writers*wins {
				t.Fatalf("after %d successful increments x=%s y=%s (conflicts per writer %v)", writers*wins, x.Value, y.Value, conflicts)
			}
		}},
	}
}

func describe(items []metastore.Item) string {
	var b strings.Builder
	for _, it := range items {
		fmt.Fprintf(&b, "%s=%q ", it.Key, it.Value)
	}
	return b.String()
}

func atoi(b []byte) int {
	n := 0
	for _, c := range b {
		n = n*10 + int(c-'0')
	}
	return n
}

// ---- Scan ----------------------------------------------------------------

func (k kit) scanTests() []kitTest {
	return []kitTest{
		{"ascending_order", func(t *testing.T, s metastore.Store) {
			r := rand.New(rand.NewPCG(1, 2))
			var keys []string
			for i := range 60 {
				keys = append(keys, fmt.Sprintf("k/%c%03d", 'a'+r.IntN(26), i))
			}
			want := slices.Clone(keys)
			slices.Sort(want)
			r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
			for _, key := range keys {
				put(t, s, key, key, metastore.NoVersion)
			}
			wantKeys(t, "Scan of keys written in random order", scanKeys(t, s, "", "", 0), want)
			items, err := s.Scan(t.Context(), "", "", 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range items {
				g := get(t, s, it.Key)
				if string(it.Value) != it.Key || it.Version != g.Version {
					t.Fatalf("Scan item %q = %q@%q, Get says %q@%q", it.Key, it.Value, it.Version, g.Value, g.Version)
				}
			}
		}},
		{"prefix_boundaries", func(t *testing.T, s metastore.Store) {
			for _, key := range []string{"a", "a/", "a/x", "a/x/y", "a0", "b", "`", "a.z"} {
				put(t, s, key, key, metastore.NoVersion)
			}
			for _, c := range []struct {
				prefix string
				want   []string
			}{
				{"a/", []string{"a/", "a/x", "a/x/y"}},
				{"a", []string{"a", "a.z", "a/", "a/x", "a/x/y", "a0"}},
				{"a/x", []string{"a/x", "a/x/y"}},
				{"a/x/y/", nil},
				{"b", []string{"b"}},
				{"c", nil},
				{"", []string{"`", "a", "a.z", "a/", "a/x", "a/x/y", "a0", "b"}},
			} {
				wantKeys(t, fmt.Sprintf("Scan(prefix %q)", c.prefix), scanKeys(t, s, c.prefix, "", 0), c.want)
			}
		}},
		{"startAfter_is_strictly_after", func(t *testing.T, s metastore.Store) {
			for _, key := range []string{"p/1", "p/2", "p/3", "q/1"} {
				put(t, s, key, key, metastore.NoVersion)
			}
			for _, c := range []struct {
				startAfter string
				want       []string
			}{
				{"p/1", []string{"p/2", "p/3"}},  // an existing key is excluded
				{"p/15", []string{"p/2", "p/3"}}, // between keys
				{"p/", []string{"p/1", "p/2", "p/3"}},
				{"a", []string{"p/1", "p/2", "p/3"}}, // before the prefix
				{"p/3", nil},
				{"z", nil}, // past the prefix
			} {
				wantKeys(t, fmt.Sprintf("Scan(prefix \"p/\", startAfter %q)", c.startAfter), scanKeys(t, s, "p/", c.startAfter, 0), c.want)
			}
		}},
		{"limit", func(t *testing.T, s metastore.Store) {
			all := []string{"l/a", "l/b", "l/c", "l/d"}
			for _, key := range all {
				put(t, s, key, key, metastore.NoVersion)
			}
			for _, c := range []struct {
				limit int
				want  []string
			}{
				{1, all[:1]}, {3, all[:3]}, {4, all}, {100, all}, {0, all}, {-1, all},
			} {
				wantKeys(t, fmt.Sprintf("Scan(limit %d)", c.limit), scanKeys(t, s, "l/", "", c.limit), c.want)
			}
			wantKeys(t, "Scan(startAfter \"l/b\", limit 1)", scanKeys(t, s, "l/", "l/b", 1), []string{"l/c"})
		}},
		{"paging_through_500_keys", func(t *testing.T, s metastore.Store) {
			ctx := t.Context()
			const n, page = 500, 37
			var want []string
			ops := make([]metastore.Op, 0, 50)
			for i := range n {
				key := fmt.Sprintf("page/%05d", i*7)
				want = append(want, key)
				ops = append(ops, metastore.Op{Kind: metastore.OpPut, Key: key, Value: []byte(key), Expect: metastore.NoVersion})
				if len(ops) == cap(ops) || i == n-1 {
					if _, err := s.Commit(ctx, ops); err != nil {
						t.Fatal(err)
					}
					ops = ops[:0]
				}
			}
			put(t, s, "pagf", "outside", metastore.NoVersion)
			put(t, s, "pag", "outside", metastore.NoVersion)
			var got []string
			after := ""
			for pages := 0; ; pages++ {
				if pages > n {
					t.Fatal("paging does not end")
				}
				keys := scanKeys(t, s, "page/", after, page)
				if len(keys) > page {
					t.Fatalf("page of %d keys with limit %d", len(keys), page)
				}
				if len(keys) == 0 {
					break
				}
				got = append(got, keys...)
				after = keys[len(keys)-1]
			}
			wantKeys(t, "keys gathered by paging", got, want)
		}},
		{"empty_result_is_not_an_error", func(t *testing.T, s metastore.Store) {
			items, err := s.Scan(t.Context(), "nothing/", "", 10)
			if err != nil || len(items) != 0 {
				t.Fatalf("Scan of an empty range = %d items, %v", len(items), err)
			}
		}},
		{"consistent_snapshot", func(t *testing.T, s metastore.Store) {
			// A writer moves a token between 8 keys, one Commit per move;
			// every Scan must see exactly one token.
			ctx := t.Context()
			const slots, moves = 8, 200
			for i := range slots {
				put(t, s, fmt.Sprintf("snap/%d", i), map[bool]string{true: "T", false: "-"}[i == 0], metastore.NoVersion)
			}
			errc := make(chan error, 1)
			done := make(chan struct{})
			go func() {
				defer close(done)
				at := 0
				for m := range moves {
					from, to := fmt.Sprintf("snap/%d", at), fmt.Sprintf("snap/%d", (at+1)%slots)
					a, err := s.Get(ctx, from)
					if err == nil {
						var b metastore.Item
						if b, err = s.Get(ctx, to); err == nil {
							_, err = s.Commit(ctx, []metastore.Op{
								{Kind: metastore.OpPut, Key: from, Value: []byte("-"), Expect: a.Version},
								{Kind: metastore.OpPut, Key: to, Value: []byte("T"), Expect: b.Version},
							})
						}
					}
					if err != nil {
						errc <- fmt.Errorf("move %d: %w", m, err)
						return
					}
					at = (at + 1) % slots
				}
			}()
			for scans := 0; ; scans++ {
				select {
				case <-done:
					select {
					case err := <-errc:
						t.Fatal(err)
					default:
					}
					return
				default:
				}
				items, err := s.Scan(ctx, "snap/", "", 0)
				if err != nil {
					t.Fatal(err)
				}
				tokens := 0
				for _, it := range items {
					if string(it.Value) == "T" {
						tokens++
					}
				}
				if len(items) != slots || tokens != 1 {
					<-done
					t.Fatalf("Scan %d during atomic moves saw %d keys and %d tokens, want %d and 1", scans, len(items), tokens, slots)
				}
			}
		}},
	}
}

// ---- Context -------------------------------------------------------------

func (k kit) contextTests() []kitTest {
	return []kitTest{
		{"cancelled_context_fails_every_call", func(t *testing.T, s metastore.Store) {
			v := put(t, s, "k", "x", metastore.NoVersion)
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			_, err := s.Get(ctx, "k")
			wantErr(t, "Get with a cancelled context", err, context.Canceled)
			_, err = s.Put(ctx, "k", []byte("y"), v)
			wantErr(t, "Put with a cancelled context", err, context.Canceled)
			err = s.Delete(ctx, "k", v)
			wantErr(t, "Delete with a cancelled context", err, context.Canceled)
			_, err = s.Scan(ctx, "", "", 0)
			wantErr(t, "Scan with a cancelled context", err, context.Canceled)
			_, err = s.Commit(ctx, []metastore.Op{{Kind: metastore.OpPut, Key: "k", Value: []byte("z"), Expect: v}})
			wantErr(t, "Commit with a cancelled context", err, context.Canceled)
		}},
	}
}

// ---- Reopen --------------------------------------------------------------

func (k kit) reopenTests() []kitTest {
	if k.h.Reopen == nil {
		return []kitTest{{"skipped", func(t *testing.T, _ metastore.Store) {
			t.Skip("Harness.Reopen is nil: durability across reopen not tested")
		}}}
	}
	return []kitTest{
		{"writes_survive_reopen", func(t *testing.T, s metastore.Store) {
			ctx := t.Context()
			va := put(t, s, "a", "a1", metastore.NoVersion)
			vb := put(t, s, "b", "b1", metastore.NoVersion)
			vs, err := s.Commit(ctx, []metastore.Op{
				{Kind: metastore.OpPut, Key: "c", Value: []byte("c1"), Expect: metastore.NoVersion},
				{Kind: metastore.OpDelete, Key: "b", Expect: vb},
			})
			if err != nil {
				t.Fatal(err)
			}
			s = k.h.Reopen(t, s)
			wantValue(t, s, "a", "a1", va)
			wantAbsent(t, s, "b")
			wantValue(t, s, "c", "c1", vs[0])
			wantKeys(t, "Scan after reopen", scanKeys(t, s, "", "", 0), []string{"a", "c"})
			put(t, s, "a", "a2", va) // versions read before the reopen still serve a CAS
		}},
		{"versions_never_repeat_across_reopen", func(t *testing.T, s metastore.Store) {
			// k is written last before the reopen, so a backend that
			// recovered its counter from the live keys would hand out k's
			// old versions again.
			ctx := t.Context()
			for i := range 5 {
				put(t, s, fmt.Sprintf("o%d", i), "x", metastore.NoVersion)
			}
			var olds []metastore.Version
			v := metastore.NoVersion
			for i := range 4 {
				v = put(t, s, "k", fmt.Sprint(i), v)
				olds = append(olds, v)
			}
			if err := s.Delete(ctx, "k", v); err != nil {
				t.Fatal(err)
			}
			s = k.h.Reopen(t, s)
			for i := range 6 {
				fresh := put(t, s, "k", fmt.Sprint("new", i), metastore.NoVersion)
				if slices.Contains(olds, fresh) {
					t.Fatalf("after reopen, k re-created got version %q, which k had before (%q)", fresh, olds)
				}
				for _, old := range olds {
					_, err := s.Put(ctx, "k", []byte("stale"), old)
					wantErr(t, fmt.Sprintf("CAS with version %q from before delete+reopen+recreate", old), err, metastore.ErrConflict)
				}
				olds = append(olds, fresh)
				if err := s.Delete(ctx, "k", fresh); err != nil {
					t.Fatal(err)
				}
			}
		}},
	}
}
