// Package etcd is the distributed metastore.Store backend, on an etcd v3
// cluster through go.etcd.io/etcd/client/v3.
//
// The invariant it keeps is metastore's: every write is a compare-and-swap,
// and Commit applies its ops atomically. Each Put, Delete and Commit is one
// etcd transaction (Txn) whose guards are the expectations:
//
//   - NoVersion (must be absent): CreateRevision(key) == 0;
//   - a version: ModRevision(key) == the version;
//   - AnyVersion: no guard.
//
// # Versions
//
// A version is the key's ModRevision in decimal. etcd's revision is one
// counter for the whole store that every write advances, so a version is
// never repeated for a key, not even after the key is deleted and created
// again: a compare-and-swap holding a version read before a delete and
// re-create fails, as metastore requires. All puts of one Commit share the
// transaction's revision, which is what Put and Commit return.
//
// # Prefix
//
// Config.Prefix is prepended to every key on the wire and stripped from
// every key returned, so several deployments (or test runs) share one etcd
// cluster without seeing each other's keys. Limits apply to the key as
// flightlog sees it; etcd itself limits only the request size.
//
// # Limits
//
// A Commit holds at most Config.MaxCommitOps ops (default 128, etcd's
// default --max-txn-ops), reported through metastore.CommitLimiter, and at
// most MaxCommitBytes bytes, reported through metastore.CommitByteLimiter:
// Config.MaxRequestBytes (default 1572864, etcd's default
// --max-request-bytes) less RequestMargin and the user name, with each op
// counted as metastore.BaseOpBytes (its key three times, its value, 48
// bytes of framing) plus three copies of Config.Prefix. etcd checks the
// serialized request against --max-request-bytes after wrapping it in its
// raft envelope (18 bytes measured; RequestMargin keeps 1 KiB), so a Commit
// within both limits is never refused for its size when Config matches the
// cluster's flags. More is metastore.ErrTooLarge before anything is sent.
// Set both to the cluster's values: lower splits work more than needed;
// higher makes the cluster refuse what the store lets through (also
// ErrTooLarge, permanent). Values are limited to Config.MaxValueLen
// (default 1 MiB). A request etcd still finds too large (its
// request-too-large and too-many-ops errors, gRPC's "message larger than
// max") is also ErrTooLarge, and nothing was written. Only a request over a
// limit is ErrTooLarge, which callers treat as permanent; etcd's other
// ResourceExhausted answers (overload, NOSPACE) are transient.
//
// # Absorb rounds and the cluster's flags
//
// An absorb round writes one span ref per stream that appended in it (about
// 700 bytes each as counted above, with one or two extents and a 20-byte
// name) and the chain's checkpoint. It is one request while the refs plus
// one fit both --max-txn-ops and --max-request-bytes. Beyond either, the
// round splits: it records the round as pending, writes the refs in chunks
// that fit both limits (each with a check of the checkpoint's seal), and
// then advances the checkpoint, so a round of n refs takes
// 2 + ceil(n / refs-per-chunk) requests, refs-per-chunk being the smaller of
// --max-txn-ops - 1 and the refs that fit --max-request-bytes. With etcd's
// defaults (128 ops, 1.5 MiB) a round of up to 127 active streams is one
// request; 128 streams take 4, 1,000 take 10, 10,000 take 81 (measured by
// BenchmarkAbsorbRound). To keep a round of n active streams one request,
// run etcd with --max-txn-ops of at least n + 1 and --max-request-bytes
// above n times the ref size plus 1 KiB (10,000 streams: --max-txn-ops
// 16384 --max-request-bytes 10485760; etcd warns above 10 MiB), and set
// Config.MaxCommitOps and Config.MaxRequestBytes to match. A round's
// latency grows with its bytes whether it splits or not (etcd applies
// every op either way): what a split costs is requests. A single ref bigger than the whole limit
// (many extents: a round covering many slots after an outage) cannot be
// written by any split: the absorb returns ErrTooLarge for it and the round
// must cover fewer slots.
//
// # Watch
//
// Store implements metastore.Watcher with one etcd watch per call (a
// prefix range, from the store's revision when the watch is created;
// etcd's client multiplexes watches over one gRPC stream). Watch returns
// once etcd has confirmed the watch (its created notification), or fails
// with ErrUnavailable after Config.RequestTimeout. The watch requires a
// leader (clientv3.WithRequireLeader): a member cut off from its cluster
// cancels it rather than leaving it silent. A goroutine per watch drains
// the client's channel, so etcd's own buffer never grows behind a slow
// reader, and coalesces the events into one pending signal. The watch ends
// (its channel is closed) when the caller's context ends, the Store is
// closed, or etcd cancels it (compaction past the watch's revision, a lost
// leader, a server-side cancel); the client resumes a watch over a dropped
// connection by itself, from the revision it had reached, and ends it if
// that revision was compacted meanwhile.
//
// # Failures
//
// nil, ErrNotFound, ErrConflict, ErrTooLarge and ErrInvalidKey are definite.
// A write that fails any other way after it may have reached the cluster (the
// request deadline passed, the connection dropped, the leader changed, the
// proposal timed out) returns an error wrapping ErrAmbiguous, and also
// metastore.ErrUnavailable when the cluster could not be reached; the write
// may have applied, and the caller resolves it by reading the key back.
// The etcd client retries a mutation by itself only when it was never sent
// (no connection available), so it never turns an ambiguous outcome into a
// conflict behind the caller's back. Reads that fail are plain errors,
// wrapping ErrUnavailable when the cluster could not be reached. Every
// request is bounded by Config.RequestTimeout as well as the caller's
// context; a cancelled caller context is wrapped in the error.
//
// An overloaded cluster ("etcdserver: too many requests": a member's apply
// lags its commit) wraps ErrUnavailable and not ErrAmbiguous: etcd refuses
// it before proposing, so nothing was written. A full backend
// ("etcdserver: mvcc: database space exceeded", the NOSPACE alarm) wraps
// ErrUnavailable, and ErrAmbiguous for a write, since the write that
// crosses the quota can be applied and still be answered NOSPACE; writes keep
// failing until an operator compacts and defragments etcd and disarms the
// alarm. Any other ResourceExhausted is overload: ErrUnavailable, and
// ErrAmbiguous for a write.
package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flightlog/flightlog/metastore"
)

// Defaults for the zero values of Config.
const (
	DefaultDialTimeout    = 5 * time.Second
	DefaultRequestTimeout = 5 * time.Second
	// DefaultMaxCommitOps is etcd's default --max-txn-ops.
	DefaultMaxCommitOps = 128
	// DefaultMaxValueLen matches metastore.MemMaxValueLen.
	DefaultMaxValueLen = 1 << 20
	// DefaultMaxRequestBytes is etcd's default --max-request-bytes (1.5 MiB).
	DefaultMaxRequestBytes = 1572864
	// RequestMargin is what MaxCommitBytes keeps of MaxRequestBytes for
	// what etcd adds to a Txn before it checks its size: the raft envelope
	// (InternalRaftRequest: a RequestHeader with the request ID, and the
	// TxnRequest's own tag and length: at most 19 bytes, 17 or 18
	// measured; with authentication also the user name, counted apart, and
	// the auth revision: 16 more at most). 1 KiB is 30 times that, room
	// for a field or two a later etcd may add, and 0.07% of the default.
	RequestMargin = 1024
)

// clientSendMsgSize is the etcd client's default limit on a request's size.
const clientSendMsgSize = 2 << 20

// ErrAmbiguous marks a write whose outcome is unknown: it may have applied.
// It is never wrapped together with metastore.ErrConflict.
var ErrAmbiguous = errors.New("etcd: outcome unknown")

// Config says which cluster to use and how.
type Config struct {
	// Endpoints are the cluster's client URLs, e.g. "http://127.0.0.1:2379".
	// Required unless Client is set.
	Endpoints []string
	// DialTimeout bounds establishing the first connection (default 5s).
	DialTimeout time.Duration
	// RequestTimeout bounds each request, on top of the caller's context
	// (default 5s).
	RequestTimeout time.Duration
	// Prefix is prepended to every key (e.g. "flightlog/prod/"), so that
	// several deployments share one cluster. Empty: none.
	Prefix string
	// MaxCommitOps is the most ops one Commit may hold; set it to the
	// cluster's --max-txn-ops (default 128, etcd's default).
	MaxCommitOps int
	// MaxValueLen is the largest value accepted (default 1 MiB).
	MaxValueLen int
	// MaxRequestBytes is the cluster's --max-request-bytes (default
	// 1572864, etcd's default): MaxCommitBytes is derived from it, and the
	// client dialed for Endpoints sends requests up to it (an existing
	// Client must allow that itself: clientv3.Config.MaxCallSendMsgSize,
	// default 2 MiB).
	MaxRequestBytes int
	// Username and Password, if set, authenticate to the cluster.
	Username string
	Password string
	// Logger receives the client's logs (default: none).
	Logger *zap.Logger
	// Client, if set, is an existing client to use instead of dialing
	// Endpoints. Close then does not close it.
	Client *clientv3.Client
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	switch {
	case c.Client == nil && len(c.Endpoints) == 0:
		return errors.New("etcd: config: Endpoints is required")
	case c.DialTimeout < 0 || c.RequestTimeout < 0:
		return errors.New("etcd: config: timeouts must not be negative")
	case c.MaxCommitOps < 0:
		return fmt.Errorf("etcd: config: MaxCommitOps %d is negative", c.MaxCommitOps)
	case c.MaxValueLen < 0:
		return fmt.Errorf("etcd: config: MaxValueLen %d is negative", c.MaxValueLen)
	case c.MaxRequestBytes < 0:
		return fmt.Errorf("etcd: config: MaxRequestBytes %d is negative", c.MaxRequestBytes)
	}
	if d := c.withDefaults(); d.maxCommitBytes() < minCommitBytes {
		return fmt.Errorf("etcd: config: MaxRequestBytes %d leaves %d bytes per Commit, under %d", d.MaxRequestBytes, d.maxCommitBytes(), minCommitBytes)
	}
	return nil
}

// minCommitBytes is the least MaxCommitBytes accepted: room for an op with
// a key of metastore.MaxKeyLen and a small value.
const minCommitBytes = 4096

// maxCommitBytes is MaxRequestBytes less what etcd adds to a Txn before it
// checks its size: RequestMargin, and the user name.
func (c Config) maxCommitBytes() int {
	return c.MaxRequestBytes - RequestMargin - len(c.Username)
}

func (c Config) withDefaults() Config {
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.MaxCommitOps == 0 {
		c.MaxCommitOps = DefaultMaxCommitOps
	}
	if c.MaxValueLen == 0 {
		c.MaxValueLen = DefaultMaxValueLen
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c
}

// Store is a metastore.Store on etcd. It is safe for concurrent use.
type Store struct {
	cfg    Config
	client *clientv3.Client
	owned  bool
	closed atomic.Bool
	// closing is closed by the first Close: it ends every watch, also
	// over a Client the Store does not own.
	closing chan struct{}
}

var (
	_ metastore.Store             = (*Store)(nil)
	_ metastore.CommitLimiter     = (*Store)(nil)
	_ metastore.CommitByteLimiter = (*Store)(nil)
	_ metastore.Watcher           = (*Store)(nil)
)

// New returns a Store on the cluster. The connection is made lazily: an
// unreachable cluster shows up as ErrUnavailable on the first request.
func New(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Store{cfg: cfg, client: cfg.Client, closing: make(chan struct{})}
	if s.client == nil {
		c, err := clientv3.New(clientv3.Config{
			Endpoints:   cfg.Endpoints,
			DialTimeout: cfg.DialTimeout,
			Username:    cfg.Username,
			Password:    cfg.Password,
			Logger:      cfg.Logger,
			// The client's own default send limit is 2 MiB: a cluster
			// that takes more gets it.
			MaxCallSendMsgSize: max(clientSendMsgSize, cfg.MaxRequestBytes),
		})
		if err != nil {
			return nil, fmt.Errorf("etcd: connect to %v: %w", cfg.Endpoints, err)
		}
		s.client, s.owned = c, true
	}
	return s, nil
}

// Close releases the client (unless it was passed in Config.Client). Calls
// after Close return ErrUnavailable.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	close(s.closing)
	if !s.owned {
		return nil
	}
	return s.client.Close()
}

// MaxCommitOps implements metastore.CommitLimiter.
func (s *Store) MaxCommitOps() int { return s.cfg.MaxCommitOps }

// MaxCommitBytes implements metastore.CommitByteLimiter:
// Config.MaxRequestBytes less RequestMargin and the user name's length. A
// Commit within it (as OpBytes counts) and within MaxCommitOps is never
// refused by the cluster for its size, if the cluster's
// --max-request-bytes is at least Config.MaxRequestBytes.
func (s *Store) MaxCommitBytes() int { return s.cfg.maxCommitBytes() }

// OpBytes implements metastore.CommitByteLimiter: metastore.BaseOpBytes
// plus the key prefix, sent with every copy of the key.
func (s *Store) OpBytes(op metastore.Op) int {
	return metastore.BaseOpBytes(op) + metastore.CommitKeyCopies*len(s.cfg.Prefix)
}

// Prefix returns the key prefix.
func (s *Store) Prefix() string { return s.cfg.Prefix }

// Client returns the underlying etcd client.
func (s *Store) Client() *clientv3.Client { return s.client }

// Get implements metastore.Store with a linearizable read.
func (s *Store) Get(ctx context.Context, key string) (metastore.Item, error) {
	if err := s.check(key); err != nil {
		return metastore.Item{}, fmt.Errorf("etcd: get %q: %w", key, err)
	}
	rctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	resp, err := s.client.Get(rctx, s.cfg.Prefix+key)
	if err != nil {
		return metastore.Item{}, fmt.Errorf("etcd: get %q: %w", key, s.mapErr(ctx, err, false))
	}
	if len(resp.Kvs) == 0 {
		return metastore.Item{}, fmt.Errorf("etcd: get %q: %w", key, metastore.ErrNotFound)
	}
	kv := resp.Kvs[0]
	return metastore.Item{Key: key, Value: kv.Value, Version: revVersion(kv.ModRevision)}, nil
}

// Put implements metastore.Store as one Txn guarded by expect.
func (s *Store) Put(ctx context.Context, key string, value []byte, expect metastore.Version) (metastore.Version, error) {
	vs, err := s.commit(ctx, "put "+strconv.Quote(key), []metastore.Op{{Kind: metastore.OpPut, Key: key, Value: value, Expect: expect}})
	if err != nil {
		return metastore.NoVersion, err
	}
	return vs[0], nil
}

// Delete implements metastore.Store as one Txn guarded by expect.
func (s *Store) Delete(ctx context.Context, key string, expect metastore.Version) error {
	_, err := s.commit(ctx, "delete "+strconv.Quote(key), []metastore.Op{{Kind: metastore.OpDelete, Key: key, Expect: expect}})
	return err
}

// Commit implements metastore.Store as one Txn: a guard per expectation,
// then every put and delete. Every OpPut's version is the Txn's revision.
func (s *Store) Commit(ctx context.Context, ops []metastore.Op) ([]metastore.Version, error) {
	return s.commit(ctx, "commit", ops)
}

// Scan implements metastore.Store with one ranged, linearizable Get: a
// consistent snapshot in ascending key order.
func (s *Store) Scan(ctx context.Context, prefix, startAfter string, limit int) ([]metastore.Item, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("etcd: scan %q: store closed: %w", prefix, metastore.ErrUnavailable)
	}
	full := s.cfg.Prefix + prefix
	end := clientv3.GetPrefixRangeEnd(full)
	start := full
	if startAfter != "" {
		start = max(start, s.cfg.Prefix+startAfter+"\x00")
	}
	if start == "" {
		start = "\x00" // the smallest key etcd accepts
	}
	if end != "\x00" && start >= end {
		return nil, nil
	}
	opts := []clientv3.OpOption{clientv3.WithRange(end)}
	if limit > 0 {
		opts = append(opts, clientv3.WithLimit(int64(limit)))
	}
	rctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	resp, err := s.client.Get(rctx, start, opts...)
	if err != nil {
		return nil, fmt.Errorf("etcd: scan %q: %w", prefix, s.mapErr(ctx, err, false))
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	items := make([]metastore.Item, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		items[i] = metastore.Item{
			Key:     string(kv.Key[len(s.cfg.Prefix):]),
			Value:   kv.Value,
			Version: revVersion(kv.ModRevision),
		}
	}
	return items, nil
}

// Watch implements metastore.Watcher with an etcd watch of the prefixed
// range (see the package doc, Watch).
func (s *Store) Watch(ctx context.Context, prefix string) (<-chan struct{}, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("etcd: watch %q: store closed: %w", prefix, metastore.ErrUnavailable)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("etcd: watch %q: %w", prefix, err)
	}
	key, opts := s.cfg.Prefix+prefix, []clientv3.OpOption{clientv3.WithCreatedNotify()}
	if key == "" {
		key, opts = "\x00", append(opts, clientv3.WithFromKey()) // every key
	} else {
		opts = append(opts, clientv3.WithPrefix())
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	timer := time.NewTimer(s.cfg.RequestTimeout)
	defer timer.Stop()
	// The client's Watch blocks until etcd has created the watch (or wctx
	// ends), however long the cluster takes to answer: bound it.
	started := make(chan clientv3.WatchChan, 1)
	go func() { started <- s.client.Watch(wctx, key, opts...) }()
	var wch clientv3.WatchChan
	select {
	case wch = <-started:
	case <-timer.C:
		cancel()
		return nil, fmt.Errorf("etcd: watch %q: not confirmed within %v: %w", prefix, s.cfg.RequestTimeout, metastore.ErrUnavailable)
	case <-ctx.Done():
		cancel()
		return nil, fmt.Errorf("etcd: watch %q: %w", prefix, ctx.Err())
	case <-s.closing:
		cancel()
		return nil, fmt.Errorf("etcd: watch %q: store closed: %w", prefix, metastore.ErrUnavailable)
	}
	select {
	case resp, ok := <-wch:
		switch {
		case !ok:
			cancel()
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("etcd: watch %q: %w", prefix, err)
			}
			return nil, fmt.Errorf("etcd: watch %q: the client ended it before etcd confirmed it: %w", prefix, metastore.ErrUnavailable)
		case resp.Canceled || resp.Err() != nil || !resp.Created:
			cancel()
			return nil, fmt.Errorf("etcd: watch %q: refused (%v): %w", prefix, resp.Err(), metastore.ErrUnavailable)
		}
	case <-timer.C:
		cancel()
		return nil, fmt.Errorf("etcd: watch %q: not confirmed within %v: %w", prefix, s.cfg.RequestTimeout, metastore.ErrUnavailable)
	case <-ctx.Done():
		cancel()
		return nil, fmt.Errorf("etcd: watch %q: %w", prefix, ctx.Err())
	case <-s.closing:
		cancel()
		return nil, fmt.Errorf("etcd: watch %q: store closed: %w", prefix, metastore.ErrUnavailable)
	}
	out := make(chan struct{}, 1)
	go func() {
		defer close(out)
		defer cancel()
		for {
			select {
			case resp, ok := <-wch:
				if !ok || resp.Canceled || resp.Err() != nil {
					return // ended: ctx, the client closed, compacted, no leader
				}
				if len(resp.Events) > 0 {
					select {
					case out <- struct{}{}:
					default: // a signal is pending already
					}
				}
			case <-wctx.Done():
				return
			case <-s.closing:
				return
			}
		}
	}()
	return out, nil
}

// check validates a key and that the store is open.
func (s *Store) check(key string) error {
	if s.closed.Load() {
		return fmt.Errorf("store closed: %w", metastore.ErrUnavailable)
	}
	return metastore.ValidateKey(key)
}

// commit runs ops as one Txn. what names the call in errors.
func (s *Store) commit(ctx context.Context, what string, ops []metastore.Op) ([]metastore.Version, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("etcd: %s: store closed: %w", what, metastore.ErrUnavailable)
	}
	if err := s.checkOps(ops); err != nil {
		return nil, fmt.Errorf("etcd: %s: %w", what, err)
	}
	if len(ops) == 0 {
		return nil, nil
	}
	var (
		cmps     []clientv3.Cmp
		thens    []clientv3.Op
		elses    []clientv3.Op
		guarded  []int       // index into ops of each guard, for the conflict message
		checkGet map[int]int // op index → index into the Then responses (AnyVersion checks)
	)
	for i, op := range ops {
		k := s.cfg.Prefix + op.Key
		switch op.Expect {
		case metastore.AnyVersion:
		case metastore.NoVersion:
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k), "=", 0))
		default:
			rev, ok := parseVersion(op.Expect)
			if !ok {
				return nil, fmt.Errorf("etcd: %s: op on %q: version %q is not an etcd revision: %w",
					what, op.Key, op.Expect, metastore.ErrConflict)
			}
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", rev))
		}
		if op.Expect != metastore.AnyVersion {
			guarded = append(guarded, i)
			elses = append(elses, clientv3.OpGet(k, clientv3.WithKeysOnly()))
		}
		switch op.Kind {
		case metastore.OpPut:
			thens = append(thens, clientv3.OpPut(k, string(op.Value)))
		case metastore.OpDelete:
			thens = append(thens, clientv3.OpDelete(k))
		case metastore.OpCheck:
			if op.Expect == metastore.AnyVersion {
				if checkGet == nil {
					checkGet = make(map[int]int)
				}
				checkGet[i] = len(thens)
				thens = append(thens, clientv3.OpGet(k, clientv3.WithKeysOnly()))
			}
		}
	}
	rctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	resp, err := s.client.Txn(rctx).If(cmps...).Then(thens...).Else(elses...).Commit()
	if err != nil {
		return nil, fmt.Errorf("etcd: %s: %w", what, s.mapErr(ctx, err, true))
	}
	if !resp.Succeeded {
		return nil, fmt.Errorf("etcd: %s: %s: %w", what, s.conflictDetail(ops, guarded, resp), metastore.ErrConflict)
	}
	rev := revVersion(resp.Header.Revision)
	out := make([]metastore.Version, len(ops))
	for i, op := range ops {
		switch op.Kind {
		case metastore.OpPut:
			out[i] = rev
		case metastore.OpCheck:
			if j, ok := checkGet[i]; ok {
				if kvs := resp.Responses[j].GetResponseRange().GetKvs(); len(kvs) > 0 {
					out[i] = revVersion(kvs[0].ModRevision)
				}
			} else {
				out[i] = op.Expect
			}
		}
	}
	return out, nil
}

// conflictDetail says which expectation failed, from the Else gets.
func (s *Store) conflictDetail(ops []metastore.Op, guarded []int, resp *clientv3.TxnResponse) string {
	for j, i := range guarded {
		if j >= len(resp.Responses) {
			break
		}
		kvs := resp.Responses[j].GetResponseRange().GetKvs()
		op := ops[i]
		switch {
		case len(kvs) == 0 && op.Expect != metastore.NoVersion:
			return fmt.Sprintf("op on %q: absent, expected version %q", op.Key, op.Expect)
		case len(kvs) > 0 && revVersion(kvs[0].ModRevision) != op.Expect:
			return fmt.Sprintf("op on %q: at version %s, expected %q", op.Key, revVersion(kvs[0].ModRevision), op.Expect)
		}
	}
	return "an expectation did not hold"
}

// checkOps validates a Commit before anything is sent.
func (s *Store) checkOps(ops []metastore.Op) error {
	if len(ops) > s.cfg.MaxCommitOps {
		return fmt.Errorf("%d ops over the limit of %d: %w", len(ops), s.cfg.MaxCommitOps, metastore.ErrTooLarge)
	}
	seen := make(map[string]struct{}, len(ops))
	for i, op := range ops {
		if op.Kind != metastore.OpPut && op.Kind != metastore.OpDelete && op.Kind != metastore.OpCheck {
			return fmt.Errorf("op %d on %q has unknown kind %d", i, op.Key, op.Kind)
		}
		if err := metastore.ValidateKey(op.Key); err != nil {
			return fmt.Errorf("op %d on %q: %w", i, op.Key, err)
		}
		if op.Kind == metastore.OpPut && len(op.Value) > s.cfg.MaxValueLen {
			return fmt.Errorf("op %d on %q: value of %d bytes over the limit of %d: %w",
				i, op.Key, len(op.Value), s.cfg.MaxValueLen, metastore.ErrTooLarge)
		}
		if _, dup := seen[op.Key]; dup {
			return fmt.Errorf("key %q appears more than once: %w", op.Key, metastore.ErrInvalidKey)
		}
		seen[op.Key] = struct{}{}
	}
	if n, limit := metastore.CommitBytes(s, ops), s.cfg.maxCommitBytes(); n > limit {
		return fmt.Errorf("%d ops of %d bytes (as metastore.CommitBytes counts them) over the limit of %d (MaxRequestBytes %d): %w",
			len(ops), n, limit, s.cfg.MaxRequestBytes, metastore.ErrTooLarge)
	}
	return nil
}

// mapErr turns a client error into the error to report. ctx is the
// caller's; write says the request may have changed state.
//
// How errors arrive from the v3.7 client: an error the etcd server sends
// is returned as the rpctypes.EtcdError value its message names
// (clientv3.ContextError maps the status message back through
// rpctypes.Error), carrying etcd's code in its Code method; it has no
// GRPCStatus method, so status.Code of it is codes.Unknown. gRPC's own
// errors (a message over a size limit, a dropped connection) stay status
// errors. isEtcdErr matches both the EtcdError value and a status error
// carrying its message (an older client, a proxy, a test).
func (s *Store) mapErr(ctx context.Context, err error, write bool) error {
	amb := func(err error) error {
		if write {
			return fmt.Errorf("%w: %w", ErrAmbiguous, err)
		}
		return err
	}
	if cerr := ctx.Err(); cerr != nil {
		return amb(fmt.Errorf("%w (%w)", cerr, err))
	}
	switch {
	case isEtcdErr(err, rpctypes.ErrTooManyOps), isEtcdErr(err, rpctypes.ErrRequestTooLarge):
		// Checked by the server before the request is proposed.
		return fmt.Errorf("%w (%w)", metastore.ErrTooLarge, err)
	case isEtcdErr(err, rpctypes.ErrTooManyRequests):
		// The member's applied index lags its committed index by more than
		// etcd allows (5000 entries), so it accepts no new proposals. The
		// server checks this first thing in processInternalRaftRequestOnce,
		// before the request is proposed to raft: nothing was written, so
		// even a write is definite (not ErrAmbiguous). Transient: retry
		// after a backoff.
		return fmt.Errorf("etcd is overloaded (its apply lags its commit), retry later: %w (%w)", metastore.ErrUnavailable, err)
	case isEtcdErr(err, rpctypes.ErrNoSpace):
		// The backend is over --quota-backend-bytes. Usually the request
		// is refused before it is proposed (the gRPC quota check) or at
		// apply once the alarm is raised, but the write that first crosses
		// the quota is applied and then answered NOSPACE (etcdserver's
		// quotaApplierV3): a write is ambiguous. Not ErrTooLarge: the same
		// request succeeds once space is reclaimed.
		return amb(fmt.Errorf("etcd's NOSPACE alarm is raised (database space exceeded): "+
			"writes fail until an operator compacts and defragments etcd and disarms the alarm "+
			"(etcdctl compact, etcdctl defrag, etcdctl alarm disarm): %w (%w)", metastore.ErrUnavailable, err))
	case errors.Is(err, context.DeadlineExceeded):
		return amb(fmt.Errorf("no answer within %v (%v)", s.cfg.RequestTimeout, err))
	}
	code := status.Code(err)
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		code = ee.Code()
	}
	switch code {
	case codes.ResourceExhausted:
		if strings.Contains(rpctypes.ErrorDesc(err), "larger than max") {
			// gRPC's message size limit: the client refused to send the
			// request ("trying to send message larger than max"), or the
			// server's gRPC layer refused to receive it ("grpc: received
			// message larger than max", past --max-request-bytes plus
			// gRPC's overhead) before any handler ran. Nothing was written.
			// (A response over the client's receive limit reads the same,
			// but that limit is 2 GiB and flightlog's responses are small.)
			return fmt.Errorf("%w (%w)", metastore.ErrTooLarge, err)
		}
		// Any other exhausted resource is overload, transient. Where it
		// was refused is unknown, so a write is ambiguous.
		return amb(fmt.Errorf("etcd is overloaded, retry later: %w (%w)", metastore.ErrUnavailable, err))
	case codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated, codes.FailedPrecondition:
		// The server rejected the request without applying it.
		return err
	case codes.DeadlineExceeded:
		return amb(fmt.Errorf("no answer within %v (%v)", s.cfg.RequestTimeout, err))
	case codes.Unavailable, codes.Canceled:
		return amb(fmt.Errorf("%w (%w)", metastore.ErrUnavailable, err))
	}
	return amb(err)
}

// isEtcdErr reports whether err is the etcd error target (an
// rpctypes.EtcdError, such as rpctypes.ErrNoSpace): the value itself, as
// the client returns it, or a gRPC status error with its message, as the
// client docs advise comparing (by rpctypes.ErrorDesc).
func isEtcdErr(err, target error) bool {
	if errors.Is(err, target) {
		return true
	}
	var se interface{ GRPCStatus() *status.Status }
	return errors.As(err, &se) && se.GRPCStatus().Message() == target.Error()
}

func revVersion(rev int64) metastore.Version {
	return metastore.Version(strconv.FormatInt(rev, 10))
}

func parseVersion(v metastore.Version) (int64, bool) {
	rev, err := strconv.ParseInt(string(v), 10, 64)
	return rev, err == nil && rev > 0
}
