// Package objval holds the object store's sentinel errors, the values
// every backend wraps. It does no I/O and holds no store: code that only
// decides (the loglet's pure cores) imports it instead of objstore, which
// re-exports every error here under the same name (objstore.ErrPermanent is
// objval.ErrPermanent, so errors.Is holds across both).
//
// Which errors are definite and which ambiguous for a write is the objstore
// package's contract; see its documentation.
package objval

import "errors"

// Sentinel errors. Backends wrap them with %w; callers test with errors.Is.
var (
	// ErrNotFound: Get of a key that holds no object.
	ErrNotFound = errors.New("objstore: object not found")
	// ErrExists: PutIfAbsent of a key that already holds an object. The
	// existing object is unchanged. It is a definite answer: this call did
	// not create the object (though an earlier ambiguous attempt by the same
	// caller may have).
	ErrExists = errors.New("objstore: object already exists")
	// ErrInvalidKey: the key is empty, too long, not valid UTF-8, contains
	// NUL, or (for backends that map keys to paths) could escape the root.
	ErrInvalidKey = errors.New("objstore: invalid key")
	// ErrInvalidRange: a negative offset. Nothing was read.
	ErrInvalidRange = errors.New("objstore: invalid range")
	// ErrUnavailable: the bucket cannot be reached (a down zone, a closed
	// store). For PutIfAbsent it is ambiguous unless the backend documents
	// that nothing was sent.
	ErrUnavailable = errors.New("objstore: bucket unavailable")
	// ErrPermanent: the bucket refused the request for a reason retrying
	// will not cure: it does not exist, its name is invalid, the
	// credentials are unknown or wrong or lack the permission, or the
	// server does not implement the request. It is a misconfiguration:
	// callers stop and say so (the chain halts with it as the cause, Open
	// refuses to start) rather than retry. For PutIfAbsent it says only that
	// this attempt was refused; a backend whose earlier attempt of the same
	// call may have landed wraps its ambiguity marker too.
	ErrPermanent = errors.New("objstore: permanent failure")
)
