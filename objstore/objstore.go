// Package objstore defines the one-bucket object store that flightlog writes
// chain slots and settled objects to, its errors, an in-memory backend (Mem)
// and a fault-injecting wrapper over any backend (FaultStore).
//
// A Store is one bucket. A class's bucket set is K Stores addressed with the
// same keys; the chain package writes a flight to all K and counts W confirms.
//
// The invariant this package keeps for everything above it: PutIfAbsent is a
// conditional create. Of any number of concurrent PutIfAbsent calls on one
// key, at most one succeeds, and an object once created is never replaced by
// PutIfAbsent. Every backend proves it by running the conformance kit in
// objstore/objstoretest.
//
// Failures come in three kinds, and callers must tell them apart:
//   - definite answers: nil, ErrExists, ErrNotFound;
//   - invalid requests: ErrInvalidKey, ErrInvalidRange (nothing was sent);
//   - refusals retrying will not cure: ErrPermanent (a missing bucket,
//     wrong credentials, a name the server rejects);
//   - everything else (timeouts, 5xx, lost responses, ErrUnavailable,
//     context cancellation after the request was sent) is ambiguous for a
//     write: the object may or may not have been created. The caller resolves
//     it by reading the key back (the chain probes the slot envelope for its
//     own nonce).
package objstore

import (
	"context"
	"unicode/utf8"

	"github.com/flightlog/flightlog/objstore/objval"
)

// Sentinel errors, re-exported from objval (the same values: errors.Is
// matches either name). Backends wrap them with %w; callers test with
// errors.Is.
var (
	// ErrNotFound is objval.ErrNotFound.
	ErrNotFound = objval.ErrNotFound
	// ErrExists is objval.ErrExists.
	ErrExists = objval.ErrExists
	// ErrInvalidKey is objval.ErrInvalidKey.
	ErrInvalidKey = objval.ErrInvalidKey
	// ErrInvalidRange is objval.ErrInvalidRange.
	ErrInvalidRange = objval.ErrInvalidRange
	// ErrUnavailable is objval.ErrUnavailable.
	ErrUnavailable = objval.ErrUnavailable
	// ErrPermanent is objval.ErrPermanent.
	ErrPermanent = objval.ErrPermanent
)

// MaxKeyLen is the longest key any backend must accept (S3's limit).
const MaxKeyLen = 1024

// Store is one bucket of objects addressed by key.
//
// Implementations are safe for concurrent use by multiple goroutines. Every
// method honours ctx: a cancelled context ends the call with an error that
// wraps ctx.Err() (for PutIfAbsent that outcome is ambiguous).
//
// Buffer ownership, as io.Writer's: PutIfAbsent does not modify body and
// does not retain it after it returns (a store that keeps bytes, as Mem
// does, copies them; a wrapper that applies a write later copies it
// first). The write path relies on it: once every copy's PutIfAbsent of a
// flight has returned, the flight's buffer is rendered over with the next
// flight (objstoretest's kit checks a backend keeps the bytes it was
// given). Get returns a slice the caller owns.
type Store interface {
	// PutIfAbsent creates key with body if and only if key holds no object.
	// It returns nil when this call created the object, ErrExists when an
	// object was already there (left unchanged), and any other error when
	// the outcome is unknown. An object is either wholly visible or absent:
	// no reader ever sees a partial body.
	PutIfAbsent(ctx context.Context, key string, body []byte) error

	// Get returns up to n bytes of the object at key starting at byte off
	// (n < 0 reads to the end). A range that runs past the end is cut short:
	// the caller detects a short object by len(result) < n. An off at or
	// past the end returns an empty slice and nil. A negative off returns
	// ErrInvalidRange; a missing key returns ErrNotFound.
	Get(ctx context.Context, key string, off, n int64) ([]byte, error)

	// Delete removes key. Deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error

	// List returns up to limit keys (limit <= 0: no limit) that begin with
	// prefix and sort after startAfter ("" = from the start), in ascending
	// byte order unless the backend declares otherwise (S3 Express directory
	// buckets list unordered and ignore startAfter; see objstoretest's
	// capabilities). List is for operators' tools only: nothing on the write
	// or takeover path lists.
	List(ctx context.Context, prefix, startAfter string, limit int) ([]string, error)
}

// ValidateKey reports whether key is acceptable to every backend: non-empty,
// at most MaxKeyLen bytes, valid UTF-8, no NUL, no "." or ".." path segment,
// no leading "/" and no empty segment. Backends call it first and wrap
// ErrInvalidKey.
func ValidateKey(key string) error {
	if key == "" || len(key) > MaxKeyLen {
		return ErrInvalidKey
	}
	if !utf8.ValidString(key) {
		return ErrInvalidKey
	}
	start := 0
	for i := 0; i <= len(key); i++ {
		if i < len(key) && key[i] == 0 {
			return ErrInvalidKey
		}
		if i == len(key) || key[i] == '/' {
			seg := key[start:i]
			if seg == "" || seg == "." || seg == ".." {
				return ErrInvalidKey
			}
			start = i + 1
		}
	}
	return nil
}
