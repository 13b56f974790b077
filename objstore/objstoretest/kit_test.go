package objstoretest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/flightlog/flightlog/objstore"
	"github.com/flightlog/flightlog/objstore/objstoretest"
)

// breakageEnv selects the broken backend TestBrokenBackendKit runs the kit
// against. Unset, that test skips.
const breakageEnv = "OBJSTORETEST_BREAKAGE"

// broken wraps a correct store and breaks one part of the contract.
type broken struct {
	objstore.Store
	breakage string
}

func (b broken) PutIfAbsent(ctx context.Context, key string, body []byte) error {
	if b.breakage == "put-overwrites" {
		// Last writer wins: the bug a plain PUT without If-None-Match has.
		_ = b.Store.Delete(ctx, key)
	}
	return b.Store.PutIfAbsent(ctx, key, body)
}

func (b broken) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if b.breakage == "get-ignores-range" {
		if off < 0 {
			return nil, objstore.ErrInvalidRange
		}
		return b.Store.Get(ctx, key, 0, -1)
	}
	return b.Store.Get(ctx, key, off, n)
}

func (b broken) List(ctx context.Context, prefix, startAfter string, limit int) ([]string, error) {
	keys, err := b.Store.List(ctx, prefix, startAfter, limit)
	if b.breakage == "list-unsorted" {
		slices.Reverse(keys)
	}
	return keys, err
}

// TestBrokenBackendKit runs the kit over a deliberately broken backend. It
// only runs as TestKitFailsOnBrokenBackends' child process, which expects
// it to fail.
func TestBrokenBackendKit(t *testing.T) {
	breakage := os.Getenv(breakageEnv)
	if breakage == "" {
		t.Skip(breakageEnv + " is unset: this test runs only as a child of TestKitFailsOnBrokenBackends")
	}
	objstoretest.Run(t, objstoretest.Harness{
		New: func(testing.TB) objstore.Store {
			return broken{Store: objstore.NewMem(), breakage: breakage}
		},
		Reopen: func(_ testing.TB, s objstore.Store) objstore.Store { return s },
	})
}

// TestKitFailsOnBrokenBackends proves the kit can fail: each broken backend
// makes it fail, in the subtests that check what was broken, while the
// unbroken wrapper passes.
func TestKitFailsOnBrokenBackends(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	cases := []struct {
		breakage   string
		wantFailed []string // subtests that must be reported failing
	}{
		{"none", nil},
		{"put-overwrites", []string{
			"PutIfAbsentOnOccupiedKeyIsExistsAndKeepsContent",
			"ConcurrentPutIfAbsentHasOneWinner",
			"DurableAcrossReopen",
		}},
		{"get-ignores-range", []string{
			"RangedRead/head",
			"RangedRead/off=size",
			"LargeObject",
		}},
		{"list-unsorted", []string{
			"ListOrderPrefixStartAfterLimit",
			"ListPaging",
			"OddButLegalKeys",
		}},
	}
	for _, c := range cases {
		t.Run(c.breakage, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenBackendKit$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), breakageEnv+"="+c.breakage)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if c.wantFailed == nil {
				if err != nil {
					t.Fatalf("kit over the unbroken wrapper failed (%v):\n%s", err, out)
				}
				if !strings.Contains(string(out), "--- PASS: TestBrokenBackendKit") {
					t.Fatalf("kit over the unbroken wrapper did not run:\n%s", out)
				}
				return
			}
			if !errors.As(err, &exit) || exit.ExitCode() == 0 {
				t.Fatalf("kit over a backend with %s: exit error %v, want a non-zero exit; output:\n%s", c.breakage, err, out)
			}
			for _, name := range c.wantFailed {
				if !strings.Contains(string(out), "--- FAIL: TestBrokenBackendKit/"+name+" ") {
					t.Errorf("kit over a backend with %s did not fail subtest %s; output:\n%s", c.breakage, name, out)
				}
			}
		})
	}
}

// The capability branches of the kit run too: a correct backend passes
// whatever deviations it declares.
func TestKitCapabilitiesOnMem(t *testing.T) {
	for _, caps := range []objstoretest.Capabilities{
		{PathKeys: true},
		{UnorderedList: true, NoStartAfter: true, NoReopen: true},
	} {
		t.Run(fmt.Sprintf("%+v", caps), func(t *testing.T) {
			objstoretest.Run(t, objstoretest.Harness{
				New: func(testing.TB) objstore.Store {
					return reversed{Store: objstore.NewMem(), reverse: caps.UnorderedList}
				},
				Caps: caps,
				Reopen: func(_ testing.TB, s objstore.Store) objstore.Store {
					return s
				},
			})
		})
	}
}

// reversed lists in descending order when reverse is set, as an
// UnorderedList backend may.
type reversed struct {
	objstore.Store
	reverse bool
}

func (r reversed) List(ctx context.Context, prefix, startAfter string, limit int) ([]string, error) {
	keys, err := r.Store.List(ctx, prefix, startAfter, limit)
	if r.reverse {
		slices.Reverse(keys)
	}
	return keys, err
}
