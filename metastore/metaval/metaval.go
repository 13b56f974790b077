// Package metaval holds the metastore's plain values: the Version of a
// write, the Item a read returns, the Op of a Commit, and the sentinel
// errors every backend wraps. It does no I/O and holds no store: code that
// only decides (the loglet's pure cores) imports it instead of metastore,
// which re-exports every name here unchanged (metastore.Version is
// metaval.Version, metastore.ErrConflict is metaval.ErrConflict, so
// errors.Is holds across both).
//
// What the errors mean for a caller (which are definite, which ambiguous)
// is the metastore package's contract; see its documentation.
package metaval

import "errors"

// Sentinel errors. Backends wrap them with %w; callers test with errors.Is.
var (
	// ErrNotFound: Get of a key that holds no value.
	ErrNotFound = errors.New("metastore: key not found")
	// ErrConflict: an expected version did not hold (the key was absent when
	// a version was expected, present when NoVersion was expected, or at
	// another version). Nothing was written.
	ErrConflict = errors.New("metastore: version conflict")
	// ErrInvalidKey: an empty key, a key over MaxKeyLen, or one with NUL.
	ErrInvalidKey = errors.New("metastore: invalid key")
	// ErrTooLarge: a value over the backend's limit, or a Commit with more
	// ops than the backend's MaxCommitOps or bigger than its
	// MaxCommitBytes. Nothing was written. Permanent: the same request
	// fails again. An overloaded or full store is not ErrTooLarge but
	// ErrUnavailable.
	ErrTooLarge = errors.New("metastore: request too large")
	// ErrUnavailable: the store cannot be reached, is closed, or is
	// overloaded or out of space. Transient: retry after a backoff.
	// Ambiguous for writes unless the backend documents that nothing was
	// written.
	ErrUnavailable = errors.New("metastore: unavailable")
)

// Version identifies one write of one key. It is opaque: an etcd mod
// revision, a bbolt counter, an S3 ETag all fit. Versions are compared only
// for equality, and only versions of the same key.
type Version string

const (
	// NoVersion as an expectation means "the key must be absent".
	NoVersion Version = ""
	// AnyVersion as an expectation means "whatever is there" (an
	// unconditional write). flightlog itself never writes unconditionally;
	// operators' tools may.
	AnyVersion Version = "*"
)

// Item is one key with its value and the version of the write that stored it.
type Item struct {
	Key     string
	Value   []byte
	Version Version
}

// OpKind says what an Op in a Commit does.
type OpKind uint8

const (
	// OpPut writes Value at Key if Expect holds.
	OpPut OpKind = iota + 1
	// OpDelete removes Key if Expect holds (Expect == AnyVersion: whether
	// or not it exists).
	OpDelete
	// OpCheck writes nothing; the Commit applies only if Key is at Expect
	// (NoVersion: absent).
	OpCheck
)

// Op is one conditional operation of a Commit.
type Op struct {
	Kind   OpKind
	Key    string
	Value  []byte  // OpPut only
	Expect Version // NoVersion, AnyVersion or a version read earlier
}
