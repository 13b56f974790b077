package chain

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
)

// Class is a chain's storage class. Each stream has one.
type Class uint8

// The two classes.
const (
	// Standard: one bucket (K=1, W=1) by default; batches toward large,
	// request-priced writes.
	Standard Class = iota
	// Express: K=3, W=2 across zones by default; fast acks, one slow or down
	// zone invisible to producers.
	Express
)

// Classes lists every class, in key order.
var Classes = []Class{Standard, Express}

// String returns "standard" or "express": the <class> key segment.
func (c Class) String() string {
	switch c {
	case Standard:
		return "standard"
	case Express:
		return "express"
	}
	return "class(" + strconv.Itoa(int(c)) + ")"
}

// ParseClass parses "standard" or "express".
func ParseClass(s string) (Class, error) {
	switch strings.ToLower(s) {
	case "standard":
		return Standard, nil
	case "express":
		return Express, nil
	}
	return 0, fmt.Errorf("chain: unknown class %q (want standard or express)", s)
}

// ErrInvalidName is wrapped by the errors of ValidateStarName and
// ValidateStreamName.
var ErrInvalidName = errors.New("chain: invalid name")

// MaxStarNameLen bounds star names; MaxStreamNameLen bounds stream names.
const (
	MaxStarNameLen   = 64
	MaxStreamNameLen = 512
)

// ValidateStarName accepts 1..64 bytes of [a-z0-9._-], not starting with a
// dot: star names appear raw in object and metastore keys.
func ValidateStarName(s string) error {
	if s == "" || len(s) > MaxStarNameLen || s[0] == '.' {
		return fmt.Errorf("%w: star %q: want 1-%d of [a-z0-9._-], not starting with '.'", ErrInvalidName, s, MaxStarNameLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: star %q: byte %q at %d: want [a-z0-9._-]", ErrInvalidName, s, c, i)
		}
	}
	return nil
}

// ValidateStreamName accepts 1..512 bytes of valid UTF-8 with no control
// characters. Any such name is safe: keys use StreamKey, never the raw name.
func ValidateStreamName(s string) error {
	if s == "" || len(s) > MaxStreamNameLen {
		return fmt.Errorf("%w: stream name must be 1-%d bytes, got %d", ErrInvalidName, MaxStreamNameLen, len(s))
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: stream name is not valid UTF-8", ErrInvalidName)
	}
	for i, r := range s {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: stream name has control character %U at byte %d", ErrInvalidName, r, i)
		}
	}
	return nil
}

// StreamKey returns the key segment for a stream: four hex digits of the
// name's xxhash (so S3 spreads streams over partitions), '_', then the name
// with every byte outside [A-Za-z0-9._-] percent-escaped. It contains no
// '/', is never "." or "..", and differs for different names.
func StreamKey(name string) string {
	var b strings.Builder
	b.Grow(5 + len(name)*3/2)
	fmt.Fprintf(&b, "%04x_", xxhash.Sum64String(name)>>48)
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// PlaceStream returns the star a stream belongs to among stars, by jump
// consistent hashing of the name's xxhash: stable for a given list, and
// adding a star at the end moves only about 1/len(stars) of the streams.
func PlaceStream(name string, stars []string) string {
	if len(stars) == 0 {
		return ""
	}
	return stars[jumpHash(xxhash.Sum64String(name), len(stars))]
}

// jumpHash is Lamping and Veach's jump consistent hash.
func jumpHash(key uint64, buckets int) int {
	var b, j int64 = -1, 0
	for j < int64(buckets) {
		b = j
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((key>>33)+1)))
	}
	return int(b)
}

func pad(n uint64) string { return fmt.Sprintf("%020d", n) }

// SlotKey is the object key of a slot in every bucket of the set.
func SlotKey(star string, c Class, epoch, slot uint64) string {
	return "chains/" + star + "/" + c.String() + "/" + pad(epoch) + "/" + pad(slot)
}

// EpochKey is the metastore key of a chain's epoch record.
func EpochKey(star string, c Class) string {
	return "stars/" + star + "/" + c.String() + "/epoch"
}

// CheckpointKey is the metastore key of a chain's absorb checkpoint.
func CheckpointKey(star string, c Class) string {
	return "stars/" + star + "/" + c.String() + "/checkpoint"
}

// TrimKey is the metastore key of a chain's trim cursor.
func TrimKey(star string, c Class) string {
	return "stars/" + star + "/" + c.String() + "/trim"
}

// StreamRecordKey is the metastore key of a stream's record.
func StreamRecordKey(name string) string { return "streams/" + StreamKey(name) }

// RefKey is the metastore key of the span ref of a stream that ends (is
// exclusive) at endSeq.
func RefKey(name string, endSeq uint64) string {
	return "refs/" + StreamKey(name) + "/" + pad(endSeq)
}
