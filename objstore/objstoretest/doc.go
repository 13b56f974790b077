// Package objstoretest is the conformance kit for objstore.Store backends.
//
// It owns the executable form of the Store contract: every backend, the
// in-memory fake and the real ones alike, calls Run from a test and
// RunBenchmarks from a benchmark with a Harness that creates (and, where
// possible, reopens) its storage:
//
//	func TestConformance(t *testing.T) {
//		objstoretest.Run(t, objstoretest.Harness{
//			New:    func(t testing.TB) objstore.Store { ... },
//			Reopen: func(t testing.TB, s objstore.Store) objstore.Store { ... },
//		})
//	}
//
// The invariant the kit keeps is that a backend that passes it can be used
// by the chain: conditional create has exactly one winner and never
// replaces an object, ranged reads follow the contract at every edge,
// errors are the package's sentinels, and returned memory is the caller's.
// Where a backend legitimately differs (unordered listing, no startAfter, no
// reopen) it says so in Capabilities and the kit tests only what it claims.
//
// The kit tests itself: deliberately broken backends must make it fail
// (see the package's own tests).
package objstoretest
