package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/status"

	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/metastore/etcd"
)

// txnSizes is a client interceptor that records the serialized size of
// every Txn request the client sends (what etcd checks against
// --max-request-bytes, less its raft envelope). With send false it answers
// every Txn itself with errNotSent, so no server is needed.
type txnSizes struct {
	send  bool
	mu    sync.Mutex
	sizes []int
}

var errNotSent = status.Error(codes.InvalidArgument, "test: Txn recorded, not sent")

func (s *txnSizes) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if method == "/etcdserverpb.KV/Txn" {
		b, err := encoding.GetCodecV2(grpcproto.Name).Marshal(req)
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.sizes = append(s.sizes, b.Len())
		s.mu.Unlock()
		b.Free()
		if !s.send {
			return errNotSent
		}
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (s *txnSizes) last(t *testing.T) int {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.sizes) == 0 {
		t.Fatal("no Txn was sent")
	}
	return s.sizes[len(s.sizes)-1]
}

// recording returns a store whose client records Txn sizes.
func recording(t *testing.T, eps []string, send bool, cfg etcd.Config) (*etcd.Store, *txnSizes) {
	t.Helper()
	rec := &txnSizes{send: send}
	c, err := clientv3.New(clientv3.Config{Endpoints: eps, Logger: zap.NewNop(), DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(rec.intercept)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	cfg.Client = c
	return open(t, cfg), rec
}

// wireBytes is what an op sends besides its framing: every copy of its key
// (with the prefix) and its value.
func wireBytes(op metastore.Op, prefix string) int {
	return metastore.CommitKeyCopies*(len(prefix)+len(op.Key)) + len(op.Value)
}

// TestCommitBytesBoundsTheWire: for random Commits (kinds, expectations,
// revisions, key and value lengths, prefixes), the Txn the client sends is
// never bigger than the store's metastore.CommitBytes, and the framing per
// op is within CommitOpOverhead. No server is needed: the Txn is recorded
// and not sent.
func TestCommitBytesBoundsTheWire(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	key := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(1 + r.IntN(255))
		}
		return string(b)
	}
	prefixes := []string{"", "p/", "flightlog/prod/eu-west-1/", strings.Repeat("x", 200)}
	stores := make([]*etcd.Store, len(prefixes))
	recs := make([]*txnSizes, len(prefixes))
	for i, p := range prefixes {
		stores[i], recs[i] = recording(t, []string{"http://127.0.0.1:1"}, false,
			etcd.Config{Prefix: p, MaxValueLen: 4 << 20, MaxRequestBytes: 1 << 30})
	}
	worst := 0 // the most framing seen on one op
	for iter := range 1000 {
		i := r.IntN(len(prefixes))
		n := 1 + r.IntN(8)
		if iter < 300 {
			n = 1
		}
		ops := make([]metastore.Op, n)
		for j := range ops {
			op := metastore.Op{Kind: []metastore.OpKind{metastore.OpPut, metastore.OpDelete, metastore.OpCheck}[r.IntN(3)]}
			op.Key = fmt.Sprintf("%d/%s", j, key(r.IntN(metastore.MaxKeyLen-4)))
			switch r.IntN(4) {
			case 0:
				op.Expect = metastore.NoVersion
			case 1:
				op.Expect = metastore.AnyVersion
			default:
				op.Expect = metastore.Version(fmt.Sprint(1 + r.Int64N(1<<(1+r.IntN(62)))))
			}
			if op.Kind == metastore.OpPut {
				switch r.IntN(8) {
				case 0:
					op.Value = make([]byte, r.IntN(3<<20))
				case 1, 2, 3:
					op.Value = make([]byte, r.IntN(70000))
				default:
					op.Value = make([]byte, r.IntN(128))
				}
			}
			ops[j] = op
		}
		if _, err := stores[i].Commit(context.Background(), ops); !errors.Is(err, errNotSent) {
			t.Fatalf("Commit: %v, want the recorder's error", err)
		}
		got := recs[i].last(t)
		bound := metastore.CommitBytes(stores[i], ops)
		if got > bound {
			t.Fatalf("Txn of %d ops (prefix %d bytes) is %d bytes, over the bound %d", n, len(prefixes[i]), got, bound)
		}
		if n == 1 {
			worst = max(worst, got-wireBytes(ops[0], prefixes[i]))
		}
	}
	// The worst case by construction: a guarded put with a long key, a
	// 64-bit revision and a value of over 2 MiB (4-byte lengths).
	op := metastore.Op{Kind: metastore.OpPut, Key: key(500), Value: make([]byte, 5<<19), Expect: "4611686018427387904"}
	stores[3].Commit(context.Background(), []metastore.Op{op})
	worst = max(worst, recs[3].last(t)-wireBytes(op, prefixes[3]))
	t.Logf("the most framing on one op: %d bytes (CommitOpOverhead %d)", worst, metastore.CommitOpOverhead)
	if worst > metastore.CommitOpOverhead || worst < metastore.CommitOpOverhead-1 {
		t.Fatalf("framing up to %d bytes per op; CommitOpOverhead %d should bound it closely", worst, metastore.CommitOpOverhead)
	}
	// What an absorb round sends per ref: a create-if-absent put of ~500
	// bytes under a ~60-byte key.
	op = metastore.Op{Kind: metastore.OpPut, Key: "refs/f19e_orders%2Feu-west%2F00000/00000000000000000003", Value: make([]byte, 500)}
	stores[0].Commit(context.Background(), []metastore.Op{op})
	t.Logf("a ref's op: %d bytes on the wire, OpBytes %d", recs[0].last(t), metastore.OpBytes(stores[0], op))
}

// TestMaxCommitBytes: the store declares MaxCommitBytes from its config,
// refuses a Commit over it with ErrTooLarge before sending it, and a Commit
// of exactly that size, with the most ops under a long prefix, is accepted
// by a server at etcd's default --max-request-bytes. A client configured
// past the server's limit gets ErrTooLarge from the server.
func TestMaxCommitBytes(t *testing.T) {
	eps := endpoints(t)
	s := open(t, etcd.Config{Endpoints: eps, Prefix: randomPrefix() + strings.Repeat("p", 300) + "/"})
	t.Cleanup(func() { s.Client().Delete(context.Background(), s.Prefix(), clientv3.WithPrefix()) })
	if got, want := metastore.MaxCommitBytes(s), etcd.DefaultMaxRequestBytes-etcd.RequestMargin; got != want {
		t.Fatalf("MaxCommitBytes = %d, want %d", got, want)
	}
	if op := (metastore.Op{Key: "k", Value: []byte("v")}); s.OpBytes(op) != metastore.BaseOpBytes(op)+3*len(s.Prefix()) {
		t.Fatalf("OpBytes = %d, want BaseOpBytes %d and the prefix thrice", s.OpBytes(op), metastore.BaseOpBytes(op))
	}
	ctx := context.Background()
	limit := metastore.MaxCommitBytes(s)
	// 128 ops (the op limit), two of them big enough to fill the limit.
	ops := make([]metastore.Op, etcd.DefaultMaxCommitOps)
	for i := range ops {
		ops[i] = metastore.Op{Kind: metastore.OpPut, Key: fmt.Sprintf("fill/%03d", i), Value: []byte("v"), Expect: metastore.NoVersion}
	}
	rest := limit - metastore.CommitBytes(s, ops)
	ops[0].Value = make([]byte, 1+rest/2)
	ops[1].Value = make([]byte, 2+rest-rest/2)
	if n := metastore.CommitBytes(s, ops); n != limit+1 {
		t.Fatalf("test setup: %d bytes, want %d", n, limit+1)
	}
	_, err := s.Commit(ctx, ops)
	if !errors.Is(err, metastore.ErrTooLarge) || !strings.Contains(err.Error(), "as metastore.CommitBytes counts them") {
		t.Fatalf("Commit of %d bytes over the limit %d: %v; want ErrTooLarge before sending", limit+1, limit, err)
	}
	if _, err := s.Get(ctx, "fill/000"); !errors.Is(err, metastore.ErrNotFound) {
		t.Fatalf("a refused Commit wrote: %v", err)
	}
	ops[1].Value = ops[1].Value[1:]
	if _, err := s.Commit(ctx, ops); err != nil {
		t.Fatalf("Commit of %d ops, exactly MaxCommitBytes (%d): %v", len(ops), limit, err)
	}
	if got, want := open(t, etcd.Config{Endpoints: eps, Username: "someone", MaxRequestBytes: 1 << 20}).MaxCommitBytes(), 1<<20-etcd.RequestMargin-len("someone"); got != want {
		t.Fatalf("MaxCommitBytes with a user name = %d, want %d", got, want)
	}
	// Past the server's limit: a client that allows 4 MiB sends 2 MiB.
	big := open(t, etcd.Config{Endpoints: eps, Prefix: s.Prefix(), MaxRequestBytes: 4 << 20})
	over := []metastore.Op{
		{Kind: metastore.OpPut, Key: "over/1", Value: make([]byte, 1<<20), Expect: metastore.AnyVersion},
		{Kind: metastore.OpPut, Key: "over/2", Value: make([]byte, 1<<20), Expect: metastore.AnyVersion},
	}
	if _, err := big.Commit(ctx, over); !errors.Is(err, metastore.ErrTooLarge) || errors.Is(err, etcd.ErrAmbiguous) {
		t.Fatalf("Commit past the server's --max-request-bytes: %v; want ErrTooLarge, not ambiguous", err)
	}
}

// TestRaftEnvelopeWithinMargin measures, against the real server, what
// etcd adds to a Txn before it checks --max-request-bytes: it finds the
// largest Txn the server accepts and compares its size with the server's
// limit (etcd's default). RequestMargin must cover it.
func TestRaftEnvelopeWithinMargin(t *testing.T) {
	eps := endpoints(t)
	prefix := fresh(t).Prefix()
	s, rec := recording(t, eps, true, etcd.Config{Prefix: prefix, MaxValueLen: 4 << 20, MaxRequestBytes: 4 << 20})
	ctx := context.Background()
	put := func(n int) (int, error) {
		_, err := s.Put(ctx, "envelope", make([]byte, n), metastore.AnyVersion)
		return rec.last(t), err
	}
	// The largest value accepted, by bisection: lo is accepted, hi is not.
	lo, hi := etcd.DefaultMaxRequestBytes-4096, etcd.DefaultMaxRequestBytes
	if _, err := put(lo); err != nil {
		t.Fatalf("Put of %d bytes: %v", lo, err)
	}
	if _, err := put(hi); !errors.Is(err, metastore.ErrTooLarge) {
		t.Fatalf("Put of %d bytes: %v; want the server's ErrTooLarge (is it at the default --max-request-bytes?)", hi, err)
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if _, err := put(mid); err == nil {
			lo = mid
		} else if errors.Is(err, metastore.ErrTooLarge) {
			hi = mid
		} else {
			t.Fatalf("Put of %d bytes: %v", mid, err)
		}
	}
	accepted, _ := put(lo)
	envelope := etcd.DefaultMaxRequestBytes - accepted
	t.Logf("largest Txn accepted: %d bytes (value %d): etcd's raft envelope is %d bytes (RequestMargin %d)", accepted, lo, envelope, etcd.RequestMargin)
	if envelope <= 0 || envelope > 19 {
		t.Fatalf("raft envelope of %d bytes, want 1 to 19 (unauthenticated)", envelope)
	}
}

func TestConfigValidateMaxRequestBytes(t *testing.T) {
	for _, c := range []etcd.Config{
		{Endpoints: []string{"x"}, MaxRequestBytes: -1},
		{Endpoints: []string{"x"}, MaxRequestBytes: etcd.RequestMargin},
	} {
		if _, err := etcd.New(c); err == nil {
			t.Errorf("New(MaxRequestBytes %d) = nil error, want a validation error", c.MaxRequestBytes)
		}
	}
}

// TestRaisedMaxRequestBytes: against a cluster whose --max-request-bytes is
// over the client's default send limit of 2 MiB (set
// FLIGHTLOG_ETCD_MAX_REQUEST_BYTES to it; skipped otherwise), a Commit of
// MaxCommitBytes goes through: the store raises the client's send limit.
func TestRaisedMaxRequestBytes(t *testing.T) {
	eps := endpoints(t)
	limit, _ := strconv.Atoi(os.Getenv("FLIGHTLOG_ETCD_MAX_REQUEST_BYTES"))
	if limit <= 2<<20 {
		t.Skip("FLIGHTLOG_ETCD_MAX_REQUEST_BYTES is not set over 2 MiB")
	}
	s := open(t, etcd.Config{Endpoints: eps, Prefix: randomPrefix(), MaxRequestBytes: limit})
	t.Cleanup(func() { s.Client().Delete(context.Background(), s.Prefix(), clientv3.WithPrefix()) })
	var ops []metastore.Op
	for room := s.MaxCommitBytes(); room > 0; {
		op := metastore.Op{Kind: metastore.OpPut, Key: fmt.Sprintf("big/%03d", len(ops)), Expect: metastore.NoVersion}
		op.Value = make([]byte, min(1<<20, room-s.OpBytes(op)))
		room -= s.OpBytes(op)
		ops = append(ops, op)
	}
	if n := metastore.CommitBytes(s, ops); n != s.MaxCommitBytes() {
		t.Fatalf("test setup: %d bytes, want %d", n, s.MaxCommitBytes())
	}
	if _, err := s.Commit(context.Background(), ops); err != nil {
		t.Fatalf("Commit of %d bytes (MaxRequestBytes %d): %v", s.MaxCommitBytes(), limit, err)
	}
}
