package chain

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestStreamIDsAndRefKeys: an incarnation-less ID is the name and keeps
// the old key layout; an incarnated ID has keys of its own, under the name's
// prefix but never among the old layout's (IsRefOf tells them apart), so a
// name created again never reads an old incarnation's refs.
func TestStreamIDsAndRefKeys(t *testing.T) {
	inc := NewIncarnation()
	if !ValidIncarnation(inc) || !ValidIncarnation("") || ValidIncarnation("i12") || ValidIncarnation("x0123456789abcdef") {
		t.Fatal("ValidIncarnation")
	}
	if NewIncarnation() == inc {
		t.Fatal("two incarnations alike")
	}
	for _, name := range []string{"a", "orders/eu", "ü ß", strings.Repeat("x", 400)} {
		legacy, fresh := StreamID(name, ""), StreamID(name, inc)
		if legacy != name {
			t.Fatalf("incarnation-less ID %q", legacy)
		}
		if n, i := SplitStreamID(fresh); n != name || i != inc {
			t.Fatalf("split %q = %q %q", fresh, n, i)
		}
		if n, i := SplitStreamID(legacy); n != name || i != "" {
			t.Fatalf("split %q = %q %q", legacy, n, i)
		}
		if RefKey(legacy, 7) != "refs/"+StreamKey(name)+"/"+fmt.Sprintf("%020d", 7) {
			t.Fatalf("legacy ref key changed: %s", RefKey(legacy, 7))
		}
		k := RefKey(fresh, 7)
		if !strings.HasPrefix(k, RefPrefix(legacy)) || IsRefOf(legacy, k) || !IsRefOf(fresh, k) || IsRefOf(fresh, RefKey(legacy, 7)) {
			t.Fatalf("ref keys of %q and %q are not told apart: %s", legacy, fresh, k)
		}
		// Every incarnated key sorts after every legacy key of the name.
		if !(RefKey(legacy, ^uint64(0)) < RefKey(fresh, 0)) {
			t.Fatal("an incarnated ref key sorts among the legacy ones")
		}
	}
}

// TestStreamKeysAtTheLimit: the longest name whose keys fit is accepted,
// one byte more is refused with ErrInvalidName at creation, for plain and
// escaped names.
func TestStreamKeysAtTheLimit(t *testing.T) {
	for _, c := range []string{"a", "é", "%"} {
		longest := ""
		for n := 1; n <= MaxStreamNameLen; n++ {
			name := strings.Repeat(c, n)
			if len(name) > MaxStreamNameLen {
				break
			}
			if err := ValidateStreamKeys(name); err != nil {
				if !errors.Is(err, ErrInvalidName) {
					t.Fatalf("%d×%q: %v", n, c, err)
				}
				break
			}
			longest = name
		}
		if longest == "" {
			t.Fatalf("no name of %q fits", c)
		}
		if len(RefKey(StreamID(longest, NewIncarnation()), ^uint64(0))) > 512 {
			t.Fatalf("accepted %d×%q, whose ref key is over 512 bytes", len(longest), c)
		}
		if err := ValidateStreamKeys(longest + c); err == nil {
			t.Fatalf("one byte past the longest %q name accepted", c)
		}
		t.Logf("longest name of %q: %d bytes", c, len(longest))
	}
}
