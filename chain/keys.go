package chain

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// NewIncarnation returns a fresh incarnation: 'i' and 16 random hex digits
// (the 'i' sorts after every digit, so a stream's incarnated ref keys sort
// after every key of the old, incarnation-less layout).
func NewIncarnation() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("chain: no randomness for an incarnation: %v", err))
	}
	return "i" + hex.EncodeToString(b[:])
}

// ValidateStreamKeys checks that every key a stream of this name can
// produce fits the limit of every backend: its record and its refs in the
// metastore (metastore.MaxKeyLen), its settled objects in the object store
// (objstore.MaxKeyLen). Names are checked at creation, so a stream can never
// be accepted and then fail every absorb round.
func ValidateStreamKeys(name string) error {
	if err := ValidateStreamName(name); err != nil {
		return err
	}
	id := StreamID(name, "i0000000000000000")
	longest := RefKey(id, ^uint64(0))
	if n := len(longest); n > metastore.MaxKeyLen {
		return fmt.Errorf("%w: stream name of %d bytes makes ref keys of %d bytes, over the metastore's %d (escaped, a name may take up to 3 bytes a byte)", ErrInvalidName, len(name), n, metastore.MaxKeyLen)
	}
	if n := max(len(StreamRecordKey(name)), len(StreamNameKey(name)), len(DeletedKey(id))); n > metastore.MaxKeyLen {
		return fmt.Errorf("%w: stream name of %d bytes makes a record key of %d bytes, over the metastore's %d", ErrInvalidName, len(name), n, metastore.MaxKeyLen)
	}
	if n := len(SettledKey(id, ^uint64(0), ^uint64(0))); n > objstore.MaxKeyLen {
		return fmt.Errorf("%w: stream name of %d bytes makes settled object keys of %d bytes, over the object store's %d", ErrInvalidName, len(name), n, objstore.MaxKeyLen)
	}
	return nil
}
