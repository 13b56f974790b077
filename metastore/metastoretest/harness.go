package metastoretest

import (
	"testing"

	"github.com/flightlog/flightlog/metastore"
)

// Harness tells the kit how to get stores of the backend under test.
type Harness struct {
	// New returns a store over fresh, empty storage (a new file, a fresh
	// key prefix on a shared server). The kit calls it once per subtest;
	// cleanup is the harness's business (t.Cleanup).
	New func(t testing.TB) metastore.Store
	// Reopen closes nothing itself: it returns a new Store over the same
	// storage as s, as a restarted process would open it (for bbolt, after
	// closing s, since bbolt allows one handle per file). nil: the storage
	// cannot be reopened and durability across reopen is not tested.
	Reopen func(t testing.TB, s metastore.Store) metastore.Store
	// MaxValueLen is the largest value the backend accepts, as it documents
	// it. When it is > 0 the kit checks that a value of exactly that length
	// is stored and one a byte longer fails with ErrTooLarge, writing
	// nothing. 0: the limit is not tested.
	MaxValueLen int
}
