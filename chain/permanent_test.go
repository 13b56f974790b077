package chain

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/flightlog/flightlog/objstore"
)

// refusing is a bucket that refuses every call for good, as S3 does for a
// missing bucket or wrong credentials.
func refusing(name string) *objstore.FaultStore {
	f := objstore.WithFaults(objstore.NewMem(), 1)
	f.SetHook(func(op objstore.Op, key string) objstore.Fault {
		return objstore.Fault{Err: fmt.Errorf("%w: NoSuchBucket %s", objstore.ErrPermanent, name)}
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
	b.SetHook(func(op objstore.Op, key string) objstore.Fault {
		if op == objstore.OpGet {
			return objstore.Fault{Err: fmt.Errorf("%w: AccessDenied", objstore.ErrPermanent)}
		}
		return objstore.Fault{}
	})
	r = WriteCopy(ctx, b, f, RetryPolicy{})
	if r.Status != CopyFailed || !errors.Is(r.Err, objstore.ErrPermanent) || r.Attempts != 1 || ctx.Err() != nil {
		t.Fatalf("WriteCopy with the probe refused = %v after %d attempts (%v); want failed after 1 attempt with the permanent refusal", r.Status, r.Attempts, r.Err)
	}
}
