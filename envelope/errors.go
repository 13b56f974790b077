package envelope

import (
	"errors"
	"fmt"
	"hash/crc32"
)

// ErrCorrupt is wrapped by every error a decoder in this package returns:
// the input is truncated, oversized, of an unknown magic, version, kind or
// codec, fails a checksum, or is internally inconsistent. Test with
// errors.Is(err, ErrCorrupt) or IsCorruption.
//
// Encoder-side errors (a caller passing an invalid frame to AddFrame) are
// plain errors and do not wrap ErrCorrupt.
var ErrCorrupt = errors.New("envelope: corrupt input")

// IsCorruption reports whether err says that some input failed to decode.
// A caller holding several copies of an object skips a copy for which this
// is true and tries the next one.
func IsCorruption(err error) bool { return errors.Is(err, ErrCorrupt) }

// corruptError carries a specific message ("envelope: ...") and unwraps to
// ErrCorrupt, so the message does not repeat the sentinel's text.
type corruptError struct{ msg string }

func (e *corruptError) Error() string { return e.msg }
func (e *corruptError) Unwrap() error { return ErrCorrupt }

// corruptf returns an error wrapping ErrCorrupt. format must not start with
// the package prefix; corruptf adds it.
func corruptf(format string, args ...any) error {
	return &corruptError{msg: "envelope: " + fmt.Sprintf(format, args...)}
}

// castagnoli is the CRC-32C table. On amd64 and arm64 the standard library
// uses the CPU's CRC32 instructions for it.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the CRC-32C (Castagnoli) of b: the checksum every format
// in this package uses, exported so that span refs and readers can verify a
// stored frame run with the same function.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
