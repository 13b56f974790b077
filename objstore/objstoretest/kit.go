package objstoretest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/flightlog/flightlog/objstore"
)

// Run runs the conformance suite against the backend h describes. Each
// check is a subtest whose name says what it checks, over a store from
// h.New.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("objstoretest: Harness.New is nil")
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"ReadAfterWrite", testReadAfterWrite},
		{"RangedRead", testRangedRead},
		{"NegativeOffsetIsInvalidRange", testNegativeOffset},
		{"GetMissingIsNotFound", testNotFound},
		{"PutIfAbsentOnOccupiedKeyIsExistsAndKeepsContent", testPutExists},
		{"ConcurrentPutIfAbsentHasOneWinner", testConcurrentPut},
		{"DeleteIsIdempotentAndKeyCanBeRecreated", testDelete},
		{"ListOrderPrefixStartAfterLimit", testList},
		{"ListPaging", testListPaging},
		{"CancelledContextFailsEveryMethod", testCancelled},
		{"InvalidKeysAreRejected", testInvalidKeys},
		{"OddButLegalKeys", testOddKeys},
		{"LargeObject", testLargeObject},
		{"ReturnedSlicesAreCallerOwned", testOwnership},
		{"DurableAcrossReopen", testReopen},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, h) })
	}
}

func mustPut(t *testing.T, s objstore.Store, key string, body []byte) {
	t.Helper()
	if err := s.PutIfAbsent(context.Background(), key, body); err != nil {
		t.Fatalf("PutIfAbsent(%q, %d bytes) = %v, want nil", key, len(body), err)
	}
}

func mustGet(t *testing.T, s objstore.Store, key string, off, n int64) []byte {
	t.Helper()
	got, err := s.Get(context.Background(), key, off, n)
	if err != nil {
		t.Fatalf("Get(%q, off=%d, n=%d) = %v, want nil error", key, off, n, err)
	}
	return got
}

func checkBody(t *testing.T, s objstore.Store, key string, want []byte) {
	t.Helper()
	got := mustGet(t, s, key, 0, -1)
	if !bytes.Equal(got, want) {
		t.Fatalf("Get(%q) = %s, want %s", key, short(got), short(want))
	}
}

// short renders a body for a failure message without flooding it.
func short(b []byte) string {
	if len(b) <= 32 {
		return fmt.Sprintf("%q (%d bytes)", b, len(b))
	}
	return fmt.Sprintf("%q... (%d bytes)", b[:32], len(b))
}

func mustList(t *testing.T, s objstore.Store, prefix, startAfter string, limit int) []string {
	t.Helper()
	got, err := s.List(context.Background(), prefix, startAfter, limit)
	if err != nil {
		t.Fatalf("List(prefix=%q, startAfter=%q, limit=%d) = %v, want nil error", prefix, startAfter, limit, err)
	}
	return got
}

// usableKeys returns keys without those a PathKeys backend cannot hold
// together: any key that another key continues with "/", and any key with
// a segment over 255 bytes (Capabilities.MaxSegmentLen, if set). Other
// backends get keys back unchanged.
func usableKeys(caps Capabilities, keys []string) []string {
	if !caps.PathKeys {
		return keys
	}
	maxSeg := 255
	if caps.MaxSegmentLen > 0 {
		maxSeg = caps.MaxSegmentLen
	}
	var out []string
	for _, k := range keys {
		long := slices.ContainsFunc(strings.Split(k, "/"), func(seg string) bool { return len(seg) > maxSeg })
		isDir := slices.ContainsFunc(keys, func(o string) bool { return strings.HasPrefix(o, k+"/") })
		if !long && !isDir {
			out = append(out, k)
		}
	}
	return out
}

// expectKeys returns the keys of all that List(prefix, startAfter, limit)
// must return, honouring the backend's capabilities: with NoStartAfter the
// startAfter filter is dropped, and with UnorderedList any limit keys of
// the matching set are acceptable, so only the whole set is returned.
func expectKeys(all []string, prefix, startAfter string, caps Capabilities) []string {
	var want []string
	for _, k := range all {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		if !caps.NoStartAfter && k <= startAfter {
			continue
		}
		want = append(want, k)
	}
	slices.Sort(want)
	return want
}

// checkList compares a listing with the expected keys: exactly and in
// order for ordered backends; as a subset of the right size (limit) or the
// same set (no limit) for unordered ones.
func checkList(t *testing.T, caps Capabilities, got, want []string, limit int, call string) {
	t.Helper()
	if !caps.UnorderedList {
		if limit > 0 && len(want) > limit {
			want = want[:limit]
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s = %q, want %q", call, got, want)
		}
		return
	}
	wantLen := len(want)
	if limit > 0 && wantLen > limit {
		wantLen = limit
	}
	sorted := slices.Sorted(slices.Values(got))
	if len(slices.Compact(slices.Clone(sorted))) != len(sorted) {
		t.Fatalf("%s = %q: duplicate keys", call, got)
	}
	if len(got) != wantLen {
		t.Fatalf("%s returned %d keys %q, want %d of %q", call, len(got), got, wantLen, want)
	}
	for _, k := range got {
		if _, ok := slices.BinarySearch(want, k); !ok {
			t.Fatalf("%s returned %q, which is not among %q", call, k, want)
		}
	}
}

func testReadAfterWrite(t *testing.T, h Harness) {
	s := h.New(t)
	body := []byte("flight 7 of epoch 3")
	mustPut(t, s, "chains/0/std/0003/0007", body)
	checkBody(t, s, "chains/0/std/0003/0007", body)
	// A second object must not disturb the first.
	mustPut(t, s, "chains/0/std/0003/0008", []byte("next"))
	checkBody(t, s, "chains/0/std/0003/0007", body)
	checkBody(t, s, "chains/0/std/0003/0008", []byte("next"))
}

func testRangedRead(t *testing.T, h Harness) {
	s := h.New(t)
	const key, empty = "ranged", "empty"
	body := []byte("0123456789")
	mustPut(t, s, key, body)
	mustPut(t, s, empty, nil)
	cases := []struct {
		name   string
		key    string
		off, n int64
		want   string
	}{
		{"whole/n<0", key, 0, -1, "0123456789"},
		{"whole/n=size", key, 0, 10, "0123456789"},
		{"head", key, 0, 3, "012"},
		{"middle", key, 4, 2, "45"},
		{"lastByte", key, 9, 1, "9"},
		{"lastByte/n<0", key, 9, -1, "9"},
		{"exactlyToEnd", key, 7, 3, "789"},
		{"pastEnd", key, 7, 10, "789"},
		{"n=0", key, 3, 0, ""},
		{"n=0/off=0", key, 0, 0, ""},
		{"off=size", key, 10, 5, ""},
		{"off=size/n<0", key, 10, -1, ""},
		{"off>size", key, 11, 1, ""},
		{"off>>size", key, 1 << 40, -1, ""},
		{"empty/n<0", empty, 0, -1, ""},
		{"empty/n>0", empty, 0, 5, ""},
		{"empty/off>0", empty, 3, 1, ""},
		{"empty/n=0", empty, 0, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := s.Get(context.Background(), c.key, c.off, c.n)
			if err != nil {
				t.Fatalf("Get(%q, off=%d, n=%d) = %v, want %q", c.key, c.off, c.n, err, c.want)
			}
			if string(got) != c.want {
				t.Fatalf("Get(%q, off=%d, n=%d) = %q, want %q", c.key, c.off, c.n, got, c.want)
			}
		})
	}
}

func testNegativeOffset(t *testing.T, h Harness) {
	s := h.New(t)
	mustPut(t, s, "k", []byte("abc"))
	for _, n := range []int64{-1, 0, 1, 5} {
		got, err := s.Get(context.Background(), "k", -1, n)
		if !errors.Is(err, objstore.ErrInvalidRange) {
			t.Fatalf("Get(off=-1, n=%d) = %q, %v; want ErrInvalidRange", n, got, err)
		}
	}
}

func testNotFound(t *testing.T, h Harness) {
	s := h.New(t)
	mustPut(t, s, "a/b", []byte("x"))
	mustPut(t, s, "ab", []byte("x"))
	for _, key := range []string{"missing", "a", "a/b/c", "a/bc", "b", "A/b"} {
		for _, r := range [][2]int64{{0, -1}, {0, 0}, {5, 1}} {
			got, err := s.Get(context.Background(), key, r[0], r[1])
			if !errors.Is(err, objstore.ErrNotFound) {
				t.Fatalf("Get(%q, off=%d, n=%d) = %q, %v; want ErrNotFound", key, r[0], r[1], got, err)
			}
		}
	}
}

func testPutExists(t *testing.T, h Harness) {
	s := h.New(t)
	first := []byte("first")
	mustPut(t, s, "k", first)
	for _, body := range [][]byte{[]byte("second"), first, nil, bytes.Repeat([]byte("z"), 4096)} {
		err := s.PutIfAbsent(context.Background(), "k", body)
		if !errors.Is(err, objstore.ErrExists) {
			t.Fatalf("PutIfAbsent on occupied key (%d bytes) = %v, want ErrExists", len(body), err)
		}
		checkBody(t, s, "k", first)
	}
	// An empty object occupies its key too.
	mustPut(t, s, "empty", nil)
	if err := s.PutIfAbsent(context.Background(), "empty", []byte("x")); !errors.Is(err, objstore.ErrExists) {
		t.Fatalf("PutIfAbsent on a key holding an empty object = %v, want ErrExists", err)
	}
	checkBody(t, s, "empty", nil)
}

func testConcurrentPut(t *testing.T, h Harness) {
	s := h.New(t)
	const racers = 16
	for round := range 4 {
		key := fmt.Sprintf("race/%d", round)
		bodies := make([][]byte, racers)
		for i := range bodies {
			// Different lengths as well as contents, so a torn or mixed
			// write cannot pass for a whole one.
			bodies[i] = bytes.Repeat([]byte{byte('a' + i)}, 1000+i*97)
		}
		errs := make([]error, racers)
		var start, done sync.WaitGroup
		start.Add(1)
		for i := range racers {
			done.Go(func() {
				start.Wait()
				errs[i] = s.PutIfAbsent(context.Background(), key, bodies[i])
			})
		}
		start.Done()
		done.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil:
				if winner >= 0 {
					t.Fatalf("round %d: racers %d and %d both won PutIfAbsent(%q)", round, winner, i, key)
				}
				winner = i
			case errors.Is(err, objstore.ErrExists):
			default:
				t.Fatalf("round %d: racer %d: PutIfAbsent = %v, want nil or ErrExists", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no racer won PutIfAbsent(%q): %v", round, key, errs)
		}
		checkBody(t, s, key, bodies[winner])
	}
}

func testDelete(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := context.Background()
	if err := s.Delete(ctx, "never"); err != nil {
		t.Fatalf("Delete of a missing key = %v, want nil", err)
	}
	child := "k/child"
	if h.Caps.PathKeys {
		child = "k-child" // "k" and "k/child" cannot coexist there
	}
	mustPut(t, s, "k", []byte("one"))
	mustPut(t, s, child, []byte("child"))
	for i := range 2 {
		if err := s.Delete(ctx, "k"); err != nil {
			t.Fatalf("Delete #%d = %v, want nil", i+1, err)
		}
		if got, err := s.Get(ctx, "k", 0, -1); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("Get after Delete = %q, %v; want ErrNotFound", got, err)
		}
	}
	checkBody(t, s, child, []byte("child")) // deleting "k" leaves "k/child"
	mustPut(t, s, "k", []byte("two"))
	checkBody(t, s, "k", []byte("two"))
	if err := s.PutIfAbsent(ctx, "k", []byte("three")); !errors.Is(err, objstore.ErrExists) {
		t.Fatalf("PutIfAbsent on a recreated key = %v, want ErrExists", err)
	}
	// Deleting the only object under a prefix and recreating it.
	if err := s.Delete(ctx, child); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, child, []byte("again"))
	checkBody(t, s, child, []byte("again"))
	if got := mustList(t, s, "k", "", 0); !h.Caps.UnorderedList && !slices.Equal(got, []string{"k", child}) {
		t.Fatalf("List after deletes and recreates = %q, want [k %s]", got, child)
	}
}

// listKeys is chosen so that byte order of keys differs from the order a
// naive path walk would give: bytes just below and above '/' (0x2F), keys
// that are prefixes of other keys, and multi-byte UTF-8.
var listKeys = []string{
	"a", "a b", "a-b", "a.b", "a/b", "a/b/c", "a/b-c", "a/bc", "a0", "ab", "a~",
	"b", "b/a", "b/a/a", "b/a0", "b/a/", "é", "z/é/x",
}

func testList(t *testing.T, h Harness) {
	s := h.New(t)
	var keys []string
	for _, k := range usableKeys(h.Caps, listKeys) {
		if objstore.ValidateKey(k) != nil {
			continue // "b/a/" is not a key; it stays as a startAfter bound
		}
		keys = append(keys, k)
		mustPut(t, s, k, []byte(k))
	}
	if got := mustList(t, s, "nothing-here", "", 0); len(got) != 0 {
		t.Fatalf("List of an absent prefix = %q, want none", got)
	}
	prefixes := []string{"", "a", "a/", "a/b", "b/", "b/a/", "é", "z", "zz"}
	afters := []string{"", "a", "a/", "a/b", "a0", "b/a/", "b/a/a", "c", "\U0010FFFF"}
	for _, prefix := range prefixes {
		for _, after := range afters {
			if h.Caps.NoStartAfter && after != "" {
				continue
			}
			for _, limit := range []int{0, 1, 2, 5, 100} {
				call := fmt.Sprintf("List(prefix=%q, startAfter=%q, limit=%d)", prefix, after, limit)
				got := mustList(t, s, prefix, after, limit)
				checkList(t, h.Caps, got, expectKeys(keys, prefix, after, h.Caps), limit, call)
			}
		}
	}
}

func testListPaging(t *testing.T, h Harness) {
	if h.Caps.NoStartAfter {
		t.Skip("backend lists without startAfter, so it cannot page")
	}
	s := h.New(t)
	r := rand.New(rand.NewPCG(1, 2))
	var keys []string
	for i := range 300 {
		// Mixed depth and width, so pages end inside and between "directories".
		k := fmt.Sprintf("p/%02d/%d", r.IntN(20), i)
		if i%7 == 0 {
			k = fmt.Sprintf("p/%02d", i%25)
			if h.Caps.PathKeys {
				// A path store cannot hold "p/03" beside "p/03/x": keep a
				// leaf at that depth that sorts just after the directory.
				k += "~"
			}
		}
		if slices.Contains(keys, k) {
			continue
		}
		keys = append(keys, k)
		mustPut(t, s, k, nil)
	}
	mustPut(t, s, "q/outside", nil)
	slices.Sort(keys)
	for _, page := range []int{1, 37, 100, 1000} {
		var got []string
		after := ""
		for pages := 0; ; pages++ {
			if pages > len(keys)+1 {
				t.Fatalf("page size %d: paging does not end", page)
			}
			batch := mustList(t, s, "p/", after, page)
			if len(batch) > page {
				t.Fatalf("page size %d: List returned %d keys", page, len(batch))
			}
			if len(batch) == 0 {
				break
			}
			got = append(got, batch...)
			if h.Caps.UnorderedList {
				after = slices.Max(batch)
			} else {
				after = batch[len(batch)-1]
			}
		}
		if h.Caps.UnorderedList {
			slices.Sort(got)
		}
		if !slices.Equal(got, keys) {
			t.Fatalf("page size %d: paged listing has %d keys, want %d\n got: %q\nwant: %q", page, len(got), len(keys), got, keys)
		}
	}
}

func testCancelled(t *testing.T, h Harness) {
	s := h.New(t)
	mustPut(t, s, "k", []byte("body"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	check := func(method string, err error) {
		t.Helper()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context = %v, want an error wrapping context.Canceled", method, err)
		}
	}
	check("PutIfAbsent(new key)", s.PutIfAbsent(ctx, "new", []byte("x")))
	check("PutIfAbsent(existing key)", s.PutIfAbsent(ctx, "k", []byte("x")))
	_, err := s.Get(ctx, "k", 0, -1)
	check("Get", err)
	_, err = s.Get(ctx, "missing", 0, -1)
	check("Get(missing)", err)
	check("Delete", s.Delete(ctx, "k"))
	_, err = s.List(ctx, "", "", 0)
	check("List", err)
	// The store still works with a live context, and whatever a cancelled
	// call did, "k" was not replaced.
	got, err := s.Get(context.Background(), "k", 0, -1)
	if err != nil && !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Get after cancelled calls = %v", err)
	}
	if err == nil && string(got) != "body" {
		t.Fatalf("Get after cancelled calls = %q, want %q", got, "body")
	}
}

// InvalidKeys returns keys every backend must reject with ErrInvalidKey (a
// new slice each call: the kit's own list cannot be changed).
func InvalidKeys() []string { return append([]string(nil), invalidKeys...) }

var invalidKeys = []string{
	"", ".", "..", "a/../b", "../a", "a/..", "./a", "a/./b", "/a", "/", "a/", "a//b",
	"a\x00b", "\x00", "bad\xffutf8", strings.Repeat("k", objstore.MaxKeyLen+1),
}

func testInvalidKeys(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := context.Background()
	mustPut(t, s, "a/b", []byte("x")) // so "a/../b" etc. would find something if mapped naively
	mustPut(t, s, "b", []byte("x"))
	for _, key := range invalidKeys {
		if err := s.PutIfAbsent(ctx, key, []byte("x")); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("PutIfAbsent(%s) = %v, want ErrInvalidKey", short([]byte(key)), err)
		}
		if _, err := s.Get(ctx, key, 0, -1); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("Get(%s) = %v, want ErrInvalidKey", short([]byte(key)), err)
		}
		if err := s.Delete(ctx, key); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("Delete(%s) = %v, want ErrInvalidKey", short([]byte(key)), err)
		}
	}
	checkBody(t, s, "a/b", []byte("x"))
	checkBody(t, s, "b", []byte("x"))
	got := mustList(t, s, "", "", 0)
	checkList(t, h.Caps, got, []string{"a/b", "b"}, 0, "List after invalid keys")
}

// OddKeys returns legal keys that a backend mapping keys to names (paths,
// URLs) can easily get wrong (a new slice each call).
func OddKeys() []string { return append([]string(nil), oddKeys...) }

var oddKeys = []string{
	"with space", " leading-space", "trailing-space ", "ünïcödé/日本語/🚀",
	"100%", "%2F", "%2e%2e", "a+b", "k=v&x=y", "~tilde", "?query#frag", "back\\slash",
	"colon:name", "quote\"'`", "star*", "<angle>", "tab\there", "line\nbreak",
	"...", ".hidden", "..a", "a..", "-dash", "=eq", "+plus",
	".tmp", "tmp", "_tmp", ".objstore-tmp",
	"A", "a", "CaSe", "case", // distinct keys on case-sensitive stores
	"p", "p/q", "p/q/r", "p/q/r/s", "p/qr", "p-q", // a key that is a prefix of another
	strings.Repeat("d/", 40) + "deep",
	strings.Repeat("s", 255), strings.Repeat("s", 256),
	strings.Repeat("L", objstore.MaxKeyLen),
	strings.Repeat("x/", objstore.MaxKeyLen/2-1) + "yz",
	strings.Repeat("m", 300) + "/" + strings.Repeat("n", 300) + "/" + strings.Repeat("o", 300),
}

func testOddKeys(t *testing.T, h Harness) {
	s := h.New(t)
	oddKeys := usableKeys(h.Caps, oddKeys)
	for _, k := range oddKeys {
		if err := objstore.ValidateKey(k); err != nil {
			t.Fatalf("kit bug: odd key %q is not valid: %v", k, err)
		}
		mustPut(t, s, k, []byte("v:"+k))
	}
	for _, k := range oddKeys {
		checkBody(t, s, k, []byte("v:"+k))
		if err := s.PutIfAbsent(context.Background(), k, []byte("again")); !errors.Is(err, objstore.ErrExists) {
			t.Fatalf("second PutIfAbsent(%s) = %v, want ErrExists", short([]byte(k)), err)
		}
	}
	want := slices.Sorted(slices.Values(oddKeys))
	checkList(t, h.Caps, mustList(t, s, "", "", 0), want, 0, "List of odd keys")
	checkList(t, h.Caps, mustList(t, s, "p", "", 0), expectKeys(oddKeys, "p", "", h.Caps), 0, `List(prefix="p")`)
	checkList(t, h.Caps, mustList(t, s, "p/q", "", 0), expectKeys(oddKeys, "p/q", "", h.Caps), 0, `List(prefix="p/q")`)
	for _, k := range oddKeys {
		if err := s.Delete(context.Background(), k); err != nil {
			t.Fatalf("Delete(%s) = %v", short([]byte(k)), err)
		}
	}
	if got := mustList(t, s, "", "", 0); len(got) != 0 {
		t.Fatalf("List after deleting every odd key = %q, want none", got)
	}
}

func testLargeObject(t *testing.T, h Harness) {
	s := h.New(t)
	const size = 5 << 20
	body := make([]byte, size)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range body {
		body[i] = byte(r.Uint32())
	}
	mustPut(t, s, "large", body)
	checkBody(t, s, "large", body)
	if got := mustGet(t, s, "large", size-100, 1000); !bytes.Equal(got, body[size-100:]) {
		t.Fatalf("tail of 5 MiB object: got %d bytes, want the last 100", len(got))
	}
	if got := mustGet(t, s, "large", 1<<20, 60); !bytes.Equal(got, body[1<<20:1<<20+60]) {
		t.Fatalf("60 bytes at 1 MiB: got %s", short(got))
	}
}

func testOwnership(t *testing.T, h Harness) {
	s := h.New(t)
	body := []byte("original")
	orig := slices.Clone(body)
	mustPut(t, s, "k", body)
	if !bytes.Equal(body, orig) {
		t.Fatalf("PutIfAbsent modified its body: %q", body)
	}
	for i := range body {
		body[i] = 'X' // the store must not have retained body
	}
	checkBody(t, s, "k", orig)

	a := mustGet(t, s, "k", 0, -1)
	b := mustGet(t, s, "k", 0, -1)
	r := mustGet(t, s, "k", 2, 3)
	for i := range a {
		a[i] = 'Y'
	}
	for i := range r {
		r[i] = 'Z'
	}
	if !bytes.Equal(b, orig) {
		t.Fatalf("mutating one Get's result changed another's: %q", b)
	}
	checkBody(t, s, "k", orig)
	// Appending to a short result must not write into the store either.
	r = mustGet(t, s, "k", 0, 2)
	_ = append(r, "!!!!!!"...)
	checkBody(t, s, "k", orig)

	keys := mustList(t, s, "", "", 0)
	if len(keys) > 0 {
		keys[0] = "mutated"
	}
	checkList(t, h.Caps, mustList(t, s, "", "", 0), []string{"k"}, 0, "List after mutating an earlier listing")
}

func testReopen(t *testing.T, h Harness) {
	if h.Caps.NoReopen || h.Reopen == nil {
		t.Skip("backend declares it cannot be reopened")
	}
	s := h.New(t)
	want := map[string][]byte{
		"chains/0/std/0001/000000": []byte("flight"),
		"chains/0/std/0001/000001": nil,
		"a":                        []byte("a"),
		"a/b":                      bytes.Repeat([]byte("ab"), 10000),
		"gone":                     []byte("deleted before reopen"),
	}
	if h.Caps.PathKeys {
		delete(want, "a")
	}
	for k, v := range want {
		mustPut(t, s, k, v)
	}
	if err := s.Delete(context.Background(), "gone"); err != nil {
		t.Fatal(err)
	}
	delete(want, "gone")
	s = h.Reopen(t, s)
	for k, v := range want {
		checkBody(t, s, k, v)
		if err := s.PutIfAbsent(context.Background(), k, []byte("over")); !errors.Is(err, objstore.ErrExists) {
			t.Fatalf("after reopen, PutIfAbsent(%q) = %v, want ErrExists", k, err)
		}
	}
	if _, err := s.Get(context.Background(), "gone", 0, -1); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("after reopen, deleted key: Get = %v, want ErrNotFound", err)
	}
	keys := slices.Sorted(maps.Keys(want))
	checkList(t, h.Caps, mustList(t, s, "", "", 0), keys, 0, "List after reopen")
	// The reopened store keeps working.
	mustPut(t, s, "after", []byte("reopen"))
	checkBody(t, s, "after", []byte("reopen"))
}
