package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flightlog/flightlog/metastore"
)

// wire is what the v3.7 client returns for err as the server sent it:
// clientv3.ContextError turns a status whose message is a known etcd error
// into the rpctypes.EtcdError value (with etcd's code, not the wire's).
func wire(err error) error { return clientv3.ContextError(context.Background(), err) }

// TestMapErr classifies the errors the etcd client returns. Overload and
// NOSPACE are transient (ErrUnavailable), never ErrTooLarge: callers give up
// at once on ErrTooLarge. Only a request over a size or ops limit is.
func TestMapErr(t *testing.T) {
	type want struct {
		tooLarge, unavailable, ambiguous bool
		msg                              []string // substrings of the message
	}
	tooLarge := want{tooLarge: true}
	// Refused before it was proposed: nothing was written, read or write.
	overloadDefinite := want{unavailable: true}
	// Unavailable, and a write may have applied.
	unavailable := func(write bool) want { return want{unavailable: true, ambiguous: write} }
	noSpace := func(write bool) want {
		return want{unavailable: true, ambiguous: write, msg: []string{"NOSPACE", "compact", "defrag", "disarm"}}
	}
	timeout := func(write bool) want { return want{ambiguous: write} }

	// The server answers "too many requests" with the client-side
	// rpctypes.ErrTooManyRequests, which gRPC sends as codes.Unknown; the
	// client maps the message back to that EtcdError value.
	if got := wire(status.Error(codes.Unknown, "etcdserver: too many requests")); got != rpctypes.ErrTooManyRequests {
		t.Fatalf("ContextError(Unknown too many requests) = %#v, want rpctypes.ErrTooManyRequests", got)
	}
	if got := wire(rpctypes.ErrGRPCNoSpace); got != rpctypes.ErrNoSpace {
		t.Fatalf("ContextError(ErrGRPCNoSpace) = %#v, want rpctypes.ErrNoSpace", got)
	}

	cases := []struct {
		name  string
		err   error
		read  want
		write want
	}{
		{"status ResourceExhausted too many requests", status.Error(codes.ResourceExhausted, "etcdserver: too many requests"), overloadDefinite, overloadDefinite},
		{"rpctypes.ErrTooManyRequests", rpctypes.ErrTooManyRequests, overloadDefinite, overloadDefinite},
		{"rpctypes.ErrGRPCRequestTooManyRequests", rpctypes.ErrGRPCRequestTooManyRequests, overloadDefinite, overloadDefinite},
		{"too many requests from the wire", wire(status.Error(codes.Unknown, "etcdserver: too many requests")), overloadDefinite, overloadDefinite},
		{"rpctypes.ErrNoSpace", rpctypes.ErrNoSpace, noSpace(false), noSpace(true)},
		{"rpctypes.ErrGRPCNoSpace", rpctypes.ErrGRPCNoSpace, noSpace(false), noSpace(true)},
		{"NOSPACE from the wire", wire(status.Error(codes.ResourceExhausted, "etcdserver: mvcc: database space exceeded")), noSpace(false), noSpace(true)},
		{"other ResourceExhausted", status.Error(codes.ResourceExhausted, "proxy: rate limit exceeded"), unavailable(false), unavailable(true)},
		{"client send over max", status.Errorf(codes.ResourceExhausted, "trying to send message larger than max (%d vs. %d)", 3<<20, 2<<20), tooLarge, tooLarge},
		{"server receive over max", status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", 3<<20, 2<<20), tooLarge, tooLarge},
		{"rpctypes.ErrRequestTooLarge", rpctypes.ErrRequestTooLarge, tooLarge, tooLarge},
		{"rpctypes.ErrGRPCRequestTooLarge", rpctypes.ErrGRPCRequestTooLarge, tooLarge, tooLarge},
		{"rpctypes.ErrTooManyOps", rpctypes.ErrTooManyOps, tooLarge, tooLarge},
		{"rpctypes.ErrGRPCTooManyOps", rpctypes.ErrGRPCTooManyOps, tooLarge, tooLarge},
		{"status Unavailable", status.Error(codes.Unavailable, "connection refused"), unavailable(false), unavailable(true)},
		{"rpctypes.ErrNoLeader", rpctypes.ErrNoLeader, unavailable(false), unavailable(true)},
		{"rpctypes.ErrLeaderChanged", rpctypes.ErrLeaderChanged, unavailable(false), unavailable(true)},
		{"rpctypes.ErrTimeout", rpctypes.ErrTimeout, unavailable(false), unavailable(true)},
		{"request deadline", context.DeadlineExceeded, timeout(false), timeout(true)},
		{"status DeadlineExceeded", status.Error(codes.DeadlineExceeded, "context deadline exceeded"), timeout(false), timeout(true)},
		{"rpctypes.ErrGRPCDeadlineExceeded", rpctypes.ErrGRPCDeadlineExceeded, timeout(false), timeout(true)},
	}
	s := &Store{cfg: Config{}.withDefaults()}
	check := func(t *testing.T, got error, w want) {
		t.Helper()
		if is := errors.Is(got, metastore.ErrTooLarge); is != w.tooLarge {
			t.Errorf("errors.Is(%v, ErrTooLarge) = %v, want %v", got, is, w.tooLarge)
		}
		if is := errors.Is(got, metastore.ErrUnavailable); is != w.unavailable {
			t.Errorf("errors.Is(%v, ErrUnavailable) = %v, want %v", got, is, w.unavailable)
		}
		if is := errors.Is(got, ErrAmbiguous); is != w.ambiguous {
			t.Errorf("errors.Is(%v, ErrAmbiguous) = %v, want %v", got, is, w.ambiguous)
		}
		if errors.Is(got, metastore.ErrConflict) || errors.Is(got, metastore.ErrNotFound) {
			t.Errorf("%v is ErrConflict or ErrNotFound", got)
		}
		for _, m := range w.msg {
			if !strings.Contains(got.Error(), m) {
				t.Errorf("%q does not mention %q", got, m)
			}
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Run("read", func(t *testing.T) { check(t, s.mapErr(context.Background(), c.err, false), c.read) })
			t.Run("write", func(t *testing.T) { check(t, s.mapErr(context.Background(), c.err, true), c.write) })
		})
	}

	// A caller whose context ended first: its error, and a write is
	// ambiguous whatever the cause.
	t.Run("caller context done", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		for _, e := range []error{rpctypes.ErrTooManyRequests, rpctypes.ErrNoSpace, status.Error(codes.Unavailable, "x")} {
			got := s.mapErr(ctx, e, true)
			if !errors.Is(got, context.Canceled) || !errors.Is(got, ErrAmbiguous) || errors.Is(got, metastore.ErrTooLarge) {
				t.Errorf("mapErr(cancelled, %v, write) = %v, want context.Canceled and ErrAmbiguous", e, got)
			}
		}
	})

	// Wrapped client errors classify the same.
	t.Run("wrapped", func(t *testing.T) {
		for _, e := range []error{rpctypes.ErrTooManyRequests, rpctypes.ErrNoSpace} {
			got := s.mapErr(context.Background(), fmt.Errorf("txn: %w", e), true)
			if !errors.Is(got, metastore.ErrUnavailable) || errors.Is(got, metastore.ErrTooLarge) {
				t.Errorf("mapErr(wrapped %v) = %v, want ErrUnavailable, not ErrTooLarge", e, got)
			}
		}
	})
}
