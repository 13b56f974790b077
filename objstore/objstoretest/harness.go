package objstoretest

import (
	"testing"

	"github.com/flightlog/flightlog/objstore"
)

// Capabilities declares where a backend legitimately differs from the
// ordered, StartAfter-capable listing of S3 general-purpose buckets. The kit
// tests what the backend claims and nothing it disclaims.
type Capabilities struct {
	// UnorderedList: List returns keys in no particular order (S3 Express
	// directory buckets). The kit then compares listings as sets.
	UnorderedList bool
	// NoStartAfter: List ignores startAfter (S3 Express directory buckets).
	NoStartAfter bool
	// NoReopen: the storage cannot be reopened (durability across reopen is
	// not tested). Reopen may then be nil.
	NoReopen bool
	// PathKeys: the backend stores each key as a filesystem path, as some
	// S3-compatible servers do (versitygw's posix backend), so a key
	// cannot hold an object while also being a "directory" of other keys
	// ("a" with "a/b"), and a segment is limited to 255 bytes. AWS S3 and
	// flightlog's own backends have neither limit; flightlog's key scheme
	// never needs them. The kit then leaves such keys out.
	PathKeys bool
	// MaxSegmentLen, with PathKeys: the longest key segment the backend
	// can store, when its files need more of the 255 bytes a name may
	// have (go-cloud's fileblob writes "<segment>.<16 hex>.tmp" first, so
	// 234). Zero means 255.
	MaxSegmentLen int
}

// Harness tells the kit how to get stores of the backend under test.
type Harness struct {
	// New returns a store over fresh, empty storage (a new bucket, a new
	// directory). The kit calls it once per subtest; cleanup is the
	// harness's business (t.Cleanup).
	New func(t testing.TB) objstore.Store
	// Reopen returns a new Store over the same storage as s, as a restarted
	// process would open it. s may have been used after Reopen is called
	// only if the backend allows several handles; the kit stops using s.
	Reopen func(t testing.TB, s objstore.Store) objstore.Store
	// Caps declares the backend's deviations.
	Caps Capabilities
}
