// Package metastore defines the small versioned key-value store that holds
// flightlog's control state (epoch records, chain checkpoints, stream records,
// span refs), its errors, and an in-memory backend.
//
// The invariant this package keeps for everything above it: every write is
// conditional on the version the writer last saw (compare-and-swap), and
// Commit applies a group of conditional writes atomically: all of them or
// none. Of any number of racing writers expecting the same version, at most
// one succeeds. Every backend proves it by running metastore/metastoretest.
//
// The write path never calls a metastore: acks depend only on object
// storage. The absorb, epochs and stream lifecycle do, a few tens of requests
// per second per star at most.
//
// Failures: nil, ErrNotFound and ErrConflict are definite. Any other error
// from a write (timeouts, lost responses, ErrUnavailable) is ambiguous: the
// write may have applied. Callers resolve it by re-reading; every value
// flightlog writes carries the writer's identity and a counter so the writer
// recognises its own write.
package metastore

import (
	"context"

	"github.com/flightlog/flightlog/metastore/metaval"
)

// Sentinel errors, re-exported from metaval (the same values: errors.Is
// matches either name). Backends wrap them with %w; callers test with
// errors.Is.
var (
	// ErrNotFound is metaval.ErrNotFound.
	ErrNotFound = metaval.ErrNotFound
	// ErrConflict is metaval.ErrConflict.
	ErrConflict = metaval.ErrConflict
	// ErrInvalidKey is metaval.ErrInvalidKey.
	ErrInvalidKey = metaval.ErrInvalidKey
	// ErrTooLarge is metaval.ErrTooLarge.
	ErrTooLarge = metaval.ErrTooLarge
	// ErrUnavailable is metaval.ErrUnavailable.
	ErrUnavailable = metaval.ErrUnavailable
)

// MaxKeyLen is the longest key every backend must accept.
const MaxKeyLen = 512

// Version is metaval.Version: the opaque identity of one write of one key.
type Version = metaval.Version

const (
	// NoVersion is metaval.NoVersion: as an expectation, "the key must be
	// absent".
	NoVersion = metaval.NoVersion
	// AnyVersion is metaval.AnyVersion: as an expectation, "whatever is
	// there".
	AnyVersion = metaval.AnyVersion
)

// Item is metaval.Item: one key with its value and version.
type Item = metaval.Item

// OpKind is metaval.OpKind: what an Op in a Commit does.
type OpKind = metaval.OpKind

const (
	// OpPut is metaval.OpPut.
	OpPut = metaval.OpPut
	// OpDelete is metaval.OpDelete.
	OpDelete = metaval.OpDelete
	// OpCheck is metaval.OpCheck.
	OpCheck = metaval.OpCheck
)

// Op is metaval.Op: one conditional operation of a Commit.
type Op = metaval.Op

// Store is a versioned key-value store with compare-and-swap.
//
// Implementations are safe for concurrent use and linearizable: a Get that
// starts after a write returned sees that write or a later one. Every method
// honours ctx. Values are small (flightlog writes at most a few KiB); a
// backend documents its limit and returns ErrTooLarge past it.
//
// Buffer ownership: Put and Commit do not retain value slices after they
// return; Get and Scan return slices the caller owns.
type Store interface {
	// Get returns the key's value and version, or ErrNotFound.
	Get(ctx context.Context, key string) (Item, error)

	// Put writes value at key if expect holds (NoVersion: key absent;
	// AnyVersion: unconditional; otherwise the key's current version) and
	// returns the new version. A mismatch returns ErrConflict.
	Put(ctx context.Context, key string, value []byte, expect Version) (Version, error)

	// Delete removes key if expect holds (AnyVersion: unconditionally, and
	// a missing key is then not an error). A mismatch, including a missing
	// key when a version was expected, returns ErrConflict.
	Delete(ctx context.Context, key string, expect Version) error

	// Scan returns up to limit items (limit <= 0: no limit) whose keys begin
	// with prefix and sort strictly after startAfter ("" = from the start),
	// in ascending byte order of key. A Scan is a consistent snapshot.
	Scan(ctx context.Context, prefix, startAfter string, limit int) ([]Item, error)

	// Commit applies ops atomically: if every op's expectation holds, all
	// apply and Commit returns one Version per op (the new version for
	// OpPut, NoVersion for OpDelete, the checked version for OpCheck);
	// otherwise nothing applies and it returns ErrConflict. A key may appear
	// at most once in ops: a Commit naming a key twice fails and applies
	// nothing. An empty ops is a no-op.
	Commit(ctx context.Context, ops []Op) ([]Version, error)
}

// Watcher is implemented by stores that can tell a reader when keys under
// a prefix change, so that it re-reads at once instead of polling. It is
// optional: a caller holding a Store without it (or whose watch ends)
// polls.
//
// Watch starts a watch of every key that begins with prefix and returns
// once the watch is in place: every write that is applied after Watch
// returns and puts or deletes a key under prefix (by Put, Delete or one op
// of a Commit) is signalled on the returned channel. A signal is a change
// notification only, carrying no data: the caller re-reads what it
// follows. Signals are coalesced: the channel holds at most one pending
// signal, so any number of writes between two receives are one signal, and
// a watch never buffers more than that however slow its reader. A write
// may be signalled spuriously (a write under prefix that the caller does
// not care about, or more than once).
//
// The channel is closed when the watch ends: ctx ended, the store was
// closed, or the backend lost the watch (etcd: the watch was cancelled or
// compacted, the member lost its leader). Writes after the end are not
// signalled, and a write between the last signal and the end may not have
// been: a caller that sees the channel closed re-reads, and then polls or
// watches again. The watch's resources are released once ctx ends (the
// caller cancels it when done); every Watch's ctx must end eventually.
//
// An empty prefix watches every key. Watch fails, and starts nothing, when
// ctx has ended (wrapping ctx's error) or the watch cannot be put in place:
// ErrUnavailable when the store is closed or cannot be reached within its
// request timeout. Safe for concurrent use.
type Watcher interface {
	Watch(ctx context.Context, prefix string) (<-chan struct{}, error)
}

// CommitLimiter is implemented by backends whose transactions hold a limited
// number of ops (etcd's --max-txn-ops). Callers split work to fit; a Store
// without it takes any number. A limit below MinCommitOps is refused by the
// loglet's Open: some of its Commits cannot be split (a stream's delete is
// three ops that must apply together).
type CommitLimiter interface {
	MaxCommitOps() int
}

// MinCommitOps is the fewest ops per Commit a backend must take (etcd's
// default --max-txn-ops is 128): the loglet's largest Commit that cannot
// be split (DeleteStream: the stream record, its name-index entry and its
// deleted-incarnation marker) plus one.
const MinCommitOps = 4

// MaxCommitOps returns s's limit on ops per Commit, or 0 for no limit.
func MaxCommitOps(s Store) int {
	if l, ok := s.(CommitLimiter); ok {
		return l.MaxCommitOps()
	}
	return 0
}

// CommitByteLimiter is implemented by backends whose requests are limited
// in size (etcd's --max-request-bytes). A Commit whose CommitBytes exceeds
// MaxCommitBytes fails with ErrTooLarge, nothing written; one within it is
// never refused for its size (it may still be refused for its op count:
// see CommitLimiter). Callers split work to fit; a Store without it takes
// any size (its values are still limited one by one).
type CommitByteLimiter interface {
	// MaxCommitBytes is the most bytes one Commit may hold, as OpBytes
	// counts them.
	MaxCommitBytes() int
	// OpBytes is op's size as the backend counts it: BaseOpBytes(op) plus
	// what the backend adds to every op (etcd: its key prefix, with every
	// copy of the key). The size of a Commit is the sum over its ops.
	OpBytes(op Op) int
}

// MaxCommitBytes returns s's limit on CommitBytes per Commit, or 0 for no
// limit.
func MaxCommitBytes(s Store) int {
	if l, ok := s.(CommitByteLimiter); ok {
		return l.MaxCommitBytes()
	}
	return 0
}

// OpBytes returns op's size as s counts it against MaxCommitBytes: its
// CommitByteLimiter's count, or BaseOpBytes(op) for a store without one.
func OpBytes(s Store, op Op) int {
	if l, ok := s.(CommitByteLimiter); ok {
		return l.OpBytes(op)
	}
	return BaseOpBytes(op)
}

// CommitBytes returns the size of a Commit of ops as s counts it against
// MaxCommitBytes: the sum of their OpBytes.
func CommitBytes(s Store, ops []Op) int {
	n := 0
	for _, op := range ops {
		n += OpBytes(s, op)
	}
	return n
}

// How an op's size is counted (BaseOpBytes): CommitKeyCopies times its
// key, plus its value, plus CommitOpOverhead.
//
// The numbers are etcd's, the one backend with a request size limit, and
// are measured against its wire format (metastore/etcd's tests check them
// against the requests the client sends and the limit the server
// applies). etcd checks the serialized protobuf request, the TxnRequest in
// etcd's raft envelope, against --max-request-bytes. A Commit is one
// TxnRequest, and each op adds up to three entries to it: a guard (a
// Compare: the key, the target, the expected revision), an action (a
// RequestOp: a PutRequest with the key and the value, a DeleteRangeRequest
// or a keys-only RangeRequest with the key) and a keys-only read of the
// key run when a guard fails, which names the conflicting op. So a key is
// sent up to three times and a value once; what else an op adds (field
// tags, length prefixes, the target, the revision) is at most 47 bytes for
// a key under 16 KiB and a value under 256 MiB. A TxnRequest holds nothing
// but these entries, so a Commit's size is the sum of its ops'. What a
// backend adds per op (a key prefix) it adds in its OpBytes; what it adds
// per request (etcd's raft envelope) it keeps out of its MaxCommitBytes.
const (
	// CommitKeyCopies is how many times BaseOpBytes counts an op's key.
	CommitKeyCopies = 3
	// CommitOpOverhead is what BaseOpBytes adds per op besides its key
	// copies and value: a bound on etcd's framing of one op (47 bytes).
	CommitOpOverhead = 48
)

// BaseOpBytes returns CommitKeyCopies*len(op.Key) + len(op.Value) +
// CommitOpOverhead: op's size before anything its backend adds.
func BaseOpBytes(op Op) int {
	return CommitKeyCopies*len(op.Key) + len(op.Value) + CommitOpOverhead
}

// ValidateKey reports whether key is acceptable to every backend.
func ValidateKey(key string) error {
	if key == "" || len(key) > MaxKeyLen {
		return ErrInvalidKey
	}
	for i := 0; i < len(key); i++ {
		if key[i] == 0 {
			return ErrInvalidKey
		}
	}
	return nil
}
