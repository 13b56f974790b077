package chain

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/objstore"
)

// refusing is a bucket that refuses every call for good, as S3 does for a
// missing bucket or wrong credentials.
func refusing(name string) *objstore.FaultStore {
	f := objstore.WithFaults(objstore.NewMem(), 1)
	f.SetHook(func(call fault.Call) fault.Fault {
		return fault.Fault{Err: fmt.Errorf("%w: NoSuchBucket %s", objstore.ErrPermanent, name)}
	})
	return f
}

// TestWriteCopyStopsAtAPermanentRefusal: a copy to a bucket that refuses
// for good fails after one attempt, with the refusal as its error, rather
// than retrying until the caller's context ends.
func TestWriteCopyStopsAtAPermanentRefusal(t *testing.T) {
	f := testFlight(t, 1, 0)
	// The bound only keeps a regression from hanging the test: the copy
	// must fail long before it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := WriteCopy(ctx, refusing("b0"), f, RetryPolicy{})
	if r.Status != CopyFailed || !errors.Is(r.Err, objstore.ErrPermanent) || r.Attempts != 1 || ctx.Err() != nil {
		t.Fatalf("WriteCopy to a refusing bucket = %v after %d attempts (%v), ctx %v; want failed after 1 attempt with the permanent refusal", r.Status, r.Attempts, r.Err, ctx.Err())
	}

	// The same when the PUT says the key is taken but reading the
	// occupant is refused for good (S3 without s3:ListBucket or
	// s3:GetObject answers 403).
	mem := objstore.NewMem()
	if err := mem.PutIfAbsent(ctx, f.Key, []byte("someone else's")); err != nil {
		t.Fatal(err)
	}
	b := objstore.WithFaults(mem, 1)
	b.SetHook(func(call fault.Call) fault.Fault {
		op := call.Op
		if op == fault.Get {
			return fault.Fault{Err: fmt.Errorf("%w: AccessDenied", objstore.ErrPermanent)}
		}
		return fault.Fault{}
	})
	r = WriteCopy(ctx, b, f, RetryPolicy{})
	if r.Status != CopyFailed || !errors.Is(r.Err, objstore.ErrPermanent) || r.Attempts != 1 || ctx.Err() != nil {
		t.Fatalf("WriteCopy with the probe refused = %v after %d attempts (%v); want failed after 1 attempt with the permanent refusal", r.Status, r.Attempts, r.Err)
	}
}

// TestFenceGivesUpOnBucketsThatRefuseForGood: a fence whose slot can never
// be decided because buckets refuse for good ends at once with an
// *UndecidedError wrapping the refusal, rather than retrying until its
// context ends; with enough buckets left to decide, it still decides.
func TestFenceGivesUpOnBucketsThatRefuseForGood(t *testing.T) {
	for _, tc := range []struct {
		name    string
		k, w    int
		refuse  []int
		decides bool
	}{
		{"K=1: its bucket refuses", 1, 1, []int{0}, false},
		{"K=3 W=2: two refuse", 3, 2, []int{0, 2}, false},
		{"K=3 W=2: one refuses, two poison the slot", 3, 2, []int{1}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := BucketSet{W: tc.w, Retry: RetryPolicy{MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}}
			for i := 0; i < tc.k; i++ {
				var s objstore.Store = objstore.NewMem()
				for _, r := range tc.refuse {
					if r == i {
						s = refusing(fmt.Sprint("b", i))
					}
				}
				set.Stores = append(set.Stores, s)
				set.Names = append(set.Names, fmt.Sprint("b", i))
			}
			// The bound only keeps a regression from hanging the test.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			res, err := Fence(ctx, set, "star", Express, 1, 0, testFlight(t, 1, 0).Nonce, FenceOptions{})
			if ctx.Err() != nil {
				t.Fatalf("Fence ran until the test's bound: %v", err)
			}
			if tc.decides {
				if err != nil || res.Cut != 0 {
					t.Fatalf("Fence = cut %d, %v; want the empty slot 0 dead (cut 0)", res.Cut, err)
				}
				return
			}
			var ue *UndecidedError
			if !errors.As(err, &ue) || !errors.Is(err, objstore.ErrPermanent) || !errors.Is(err, ErrUndecided) || ue.Slot != 0 {
				t.Fatalf("Fence = %v; want an *UndecidedError at slot 0 wrapping objstore.ErrPermanent", err)
			}
		})
	}
}
