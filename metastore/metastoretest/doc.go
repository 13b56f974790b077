// Package metastoretest is the conformance kit every metastore.Store backend
// runs: Run checks the contract documented on metastore.Store (conditional
// writes, no version reuse, atomic Commit, ordered snapshot Scan, buffer
// ownership, key validation, cancellation, durability across reopen, and,
// for a backend that implements the optional metastore.Watcher, its
// signals) and RunBenchmarks measures the calls flightlog makes.
//
// The invariant it keeps: a backend that passes Run can stand in for any
// other under the layers above (chain epochs, absorb, settle). A backend
// wires itself in with a Harness:
//
//	func TestConformance(t *testing.T) {
//		metastoretest.Run(t, metastoretest.Harness{
//			New: func(t testing.TB) metastore.Store { return metastore.NewMem() },
//		})
//	}
//
// The kit is itself tested against deliberately broken backends, each of
// which must make it fail (see kit_test.go).
package metastoretest
