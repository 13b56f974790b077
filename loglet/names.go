package loglet

import (
	"fmt"
	"strings"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/metastore"
)

// maxStreamNameLen is the longest stream name CreateStream accepts, in
// bytes of [A-Za-z0-9._-] (463): the longest whose every key (its record
// and refs in the metastore, its settled objects in the object store) fits
// the backends' key limits, found from the key layout itself
// (chain.ValidateStreamKeys), so it follows any change of the layout. A
// byte outside that set is percent-escaped in keys and counts three.
var maxStreamNameLen = func() int {
	lo, hi := 0, chain.MaxStreamNameLen // the answer is in [lo, hi]
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if chain.ValidateStreamKeys(strings.Repeat("a", mid)) == nil {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}()

// escapedLen is the length of name as its keys hold it (percent-escaped).
func escapedLen(name string) int {
	return len(chain.StreamKey(name)) - len(chain.StreamKey(""))
}

// nameError is the error for a stream name no stream can have. It matches
// ErrInvalidStreamName, ErrInvalidBatch (which named it before) and the
// chain's cause (chain.ErrInvalidName).
type nameError struct {
	name  string
	cause error
}

func (e *nameError) Error() string {
	n := len(e.name)
	if n > 0 && n <= chain.MaxStreamNameLen {
		if err := chain.ValidateStreamName(e.name); err != nil {
			// Not UTF-8, or a control character: say which.
			why := strings.TrimPrefix(err.Error(), chain.ErrInvalidName.Error()+": stream name ")
			why = strings.TrimPrefix(strings.TrimPrefix(why, "has "), "is ")
			return fmt.Sprintf("%v: %s", ErrInvalidStreamName, why)
		}
	}
	size := fmt.Sprintf("%d bytes", n)
	if esc := escapedLen(e.name); esc != n {
		size = fmt.Sprintf("%d bytes, %d escaped", n, esc)
	}
	return fmt.Sprintf("%v of %s: want 1-%d (each byte outside [A-Za-z0-9._-] counts 3)", ErrInvalidStreamName, size, maxStreamNameLen)
}

func (e *nameError) Unwrap() []error {
	return []error{ErrInvalidStreamName, ErrInvalidBatch, e.cause}
}

// checkNewStreamName refuses a name CreateStream must not create: one no
// stream can have, or whose keys would not fit a backend's key limit.
func checkNewStreamName(name string) error {
	if err := chain.ValidateStreamKeys(name); err != nil {
		return &nameError{name: name, cause: err}
	}
	return nil
}

// checkStreamName refuses a name no stream can be looked up by: not a
// stream name at all, or one whose record key would not fit the
// metastore. It is more lenient than checkNewStreamName: a stream created
// before incarnations existed has shorter keys, and its name may be longer
// than a new stream's can be.
func checkStreamName(name string) error {
	err := chain.ValidateStreamName(name)
	if err == nil && len(chain.StreamRecordKey(name)) > metastore.MaxKeyLen {
		err = fmt.Errorf("%w: stream name of %d bytes makes a record key over the metastore's %d", chain.ErrInvalidName, len(name), metastore.MaxKeyLen)
	}
	if err != nil {
		return &nameError{name: name, cause: err}
	}
	return nil
}
