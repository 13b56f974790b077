package chainval

import (
	"encoding/hex"
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

// Classes returns every class, in key order (a new slice each call: no
// importer can change the classes another iterates).
func Classes() []Class { return []Class{Standard, Express} }

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

// ParseSlotKey is SlotKey's inverse: ok is false for a key that is not a
// slot key (a settled object's, a snapshot's).
func ParseSlotKey(key string) (star string, c Class, epoch, slot uint64, ok bool) {
	rest, found := strings.CutPrefix(key, "chains/")
	if !found {
		return "", 0, 0, 0, false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 4 || parts[0] == "" || len(parts[2]) != 20 || len(parts[3]) != 20 {
		return "", 0, 0, 0, false
	}
	c, err := ParseClass(parts[1])
	if err != nil {
		return "", 0, 0, 0, false
	}
	e, err1 := strconv.ParseUint(parts[2], 10, 64)
	s, err2 := strconv.ParseUint(parts[3], 10, 64)
	if err1 != nil || err2 != nil {
		return "", 0, 0, 0, false
	}
	return parts[0], c, e, s, true
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

// CatalogGenKey is the metastore key of star's catalogue generation: every
// trim and delete of a stream of star puts it (unconditionally, with a fresh
// value) in the Commit that writes the stream record, so a reader that finds
// it unchanged knows no such commit applied in between.
func CatalogGenKey(star string) string { return "stars/" + star + "/catalog-gen" }

// StreamRecordKey is the metastore key of a stream's record.
func StreamRecordKey(name string) string { return "streams/" + StreamKey(name) }

// StreamNameKey is the metastore key of a stream's entry in the name index:
// the raw name (no NUL: metastore keys take any other byte), so a scan
// lists streams in name order and a name prefix is a key prefix.
func StreamNameKey(name string) string { return NameIndexPrefix + name }

// NameIndexPrefix prefixes every key of the stream name index.
const NameIndexPrefix = "names/"

// DeletedPrefix prefixes every deleted-incarnation marker: DeleteStream
// writes one in the Commit that deletes the stream record, and the star's
// leader deletes it once every ref of the incarnation is reclaimed and its
// chain will write no more (so a crash, an ambiguous delete or refs absorbed
// after the delete are all reclaimed). Its value is the deleted record.
const DeletedPrefix = "deleted/"

// DeletedNamePrefix prefixes the deleted-incarnation markers of one name.
func DeletedNamePrefix(name string) string { return DeletedPrefix + StreamKey(name) + "/" }

// DeletedKey is the metastore key of the deleted-incarnation marker of the
// stream whose ID is id (an incarnation-less stream's ends in "/").
func DeletedKey(id string) string {
	name, inc := SplitStreamID(id)
	return DeletedNamePrefix(name) + inc
}

// Streams have incarnations (docs/design.md, "The stream catalogue"): a
// stream record carries an incarnation minted at creation, and everything
// derived from the stream (frames in bundles, refs, tails) is keyed by the
// stream's ID, its name and incarnation together, so a name deleted and
// created again starts a fresh stream that never reads as the old one. A
// stream created before incarnations existed has none; its ID is its name
// and its keys keep the old layout.

// idSep separates a stream's name from its incarnation in its ID. Names
// have no control characters, so it cannot occur in one.
const idSep = "\x1f"

// IncarnationLen is the length of an incarnation: 'i' and 16 hex digits.
const IncarnationLen = 17

// ValidIncarnation reports whether inc is "" (none) or an incarnation as
// chain.NewIncarnation makes them.
func ValidIncarnation(inc string) bool {
	if inc == "" {
		return true
	}
	if len(inc) != IncarnationLen || inc[0] != 'i' {
		return false
	}
	_, err := hex.DecodeString(inc[1:])
	return err == nil
}

// StreamID is the identity of one incarnation of a stream: what its frames,
// refs and tails are keyed by. Without an incarnation it is the name.
func StreamID(name, incarnation string) string {
	if incarnation == "" {
		return name
	}
	return name + idSep + incarnation
}

// SplitStreamID returns the name and incarnation of a stream ID.
func SplitStreamID(id string) (name, incarnation string) {
	if i := strings.LastIndex(id, idSep); i >= 0 {
		return id[:i], id[i+len(idSep):]
	}
	return id, ""
}

// RefPrefix is the metastore key prefix of every span ref of the stream
// whose ID is id. The prefix of an incarnation-less stream also prefixes
// the refs of later incarnations of its name: IsRefOf tells them apart.
func RefPrefix(id string) string {
	name, inc := SplitStreamID(id)
	if inc == "" {
		return "refs/" + StreamKey(name) + "/"
	}
	return "refs/" + StreamKey(name) + "/" + inc + "/"
}

// RefKey is the metastore key of the span ref of the stream whose ID is id
// that ends (is exclusive) at endSeq.
func RefKey(id string, endSeq uint64) string {
	return RefPrefix(id) + pad(endSeq)
}

// IsRefOf reports whether key, found under RefPrefix(id), is a ref of id
// itself (not of a later incarnation of an incarnation-less name).
func IsRefOf(id, key string) bool {
	rest, ok := strings.CutPrefix(key, RefPrefix(id))
	return ok && !strings.Contains(rest, "/")
}

// SettledPrefixKey is the object key prefix of the settled objects of the
// stream whose ID is id: settled/<stream-key>/<incarnation>/, or
// settled/<stream-key>/ for a stream without an incarnation.
func SettledPrefixKey(id string) string {
	name, inc := SplitStreamID(id)
	if inc == "" {
		return "settled/" + StreamKey(name) + "/"
	}
	return "settled/" + StreamKey(name) + "/" + inc + "/"
}

// SettledKey is the object key of the settled object of the stream whose
// ID is id that holds records [startSeq, endSeq): the range is in the key,
// so an object found in place under a key holds exactly those records.
func SettledKey(id string, startSeq, endSeq uint64) string {
	return SettledPrefixKey(id) + pad(startSeq) + "-" + pad(endSeq)
}

// IsSettledKey reports whether key is a settled object's key (of any
// stream), as opposed to a chain slot's.
func IsSettledKey(key string) bool { return strings.HasPrefix(key, "settled/") }
