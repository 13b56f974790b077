package envelope

import (
	"encoding/binary"
	"errors"
	"math"
	"math/bits"
	"strconv"
)

// Header is one record header: a name and a value, both raw bytes.
type Header struct {
	Name, Value []byte
}

// Record is one stream record as this package encodes it. Its sequence
// number is not stored: it follows from the frame's first sequence number and
// the record's position in the frame.
type Record struct {
	// Timestamp is in milliseconds since the Unix epoch.
	Timestamp int64
	// Headers are kept in order; names need not be unique.
	Headers []Header
	// Body is the record's payload.
	Body []byte
}

// AppendRecord appends the encoding of r to dst and returns the extended
// slice. The encoding (see doc.go) is
//
//	varint(Timestamp) uvarint(len(Headers)) {uvarint(len(Name)) Name uvarint(len(Value)) Value}... uvarint(len(Body)) Body
//
// where varint is the zigzag varint of encoding/binary. It allocates only if
// dst lacks capacity: size dst with EncodedRecordSize to avoid that.
// AppendRecord does not check limits; AddFrame does, and rejects a frame
// holding a record with more than MaxRecordHeaders headers.
func AppendRecord(dst []byte, r Record) []byte {
	dst = binary.AppendVarint(dst, r.Timestamp)
	dst = binary.AppendUvarint(dst, uint64(len(r.Headers)))
	for _, h := range r.Headers {
		dst = binary.AppendUvarint(dst, uint64(len(h.Name)))
		dst = append(dst, h.Name...)
		dst = binary.AppendUvarint(dst, uint64(len(h.Value)))
		dst = append(dst, h.Value...)
	}
	dst = binary.AppendUvarint(dst, uint64(len(r.Body)))
	return append(dst, r.Body...)
}

// EncodedRecordSize returns exactly the number of bytes AppendRecord(dst, r)
// appends.
func EncodedRecordSize(r Record) int {
	n := varintLen(r.Timestamp) + uvarintLen(uint64(len(r.Headers)))
	for _, h := range r.Headers {
		n += uvarintLen(uint64(len(h.Name))) + len(h.Name)
		n += uvarintLen(uint64(len(h.Value))) + len(h.Value)
	}
	return n + uvarintLen(uint64(len(r.Body))) + len(r.Body)
}

// uvarintLen is the length of v's uvarint: 7 bits a byte, at least one.
func uvarintLen(v uint64) int {
	return (bits.Len64(v|1) + 6) / 7
}

func varintLen(v int64) int {
	u := uint64(v) << 1
	if v < 0 {
		u = ^u
	}
	return uvarintLen(u)
}

// recordStats is what one validating pass over encoded records learns.
type recordStats struct {
	headers      int // total headers
	minTS, maxTS int64
}

// errTruncated and its siblings are the record-walk failures, shared by the
// decoder (which reports them as corruption) and AddFrame (which reports
// them as the caller's bug).
var (
	errTruncated   = errors.New("truncated")
	errBadVarint   = errors.New("malformed varint")
	errTooManyHdrs = errors.New("too many headers")
	errTrailing    = errors.New("trailing bytes after the last record")
)

// recordError locates a walk failure.
type recordError struct {
	index int
	err   error
}

func (e *recordError) Error() string {
	return "record " + strconv.Itoa(e.index) + ": " + e.err.Error()
}

// scanRecords walks exactly count records in b without allocating, checks
// that they are well formed, within the per-record and per-frame limits, and
// consume all of b, and returns their statistics. It assumes
// 1 <= count <= len(b)/minRecordBytes.
func scanRecords(b []byte, count int) (recordStats, error) {
	st := recordStats{minTS: math.MaxInt64, maxTS: math.MinInt64}
	p := 0
	for i := range count {
		ts, n := binary.Varint(b[p:])
		if n <= 0 {
			return st, &recordError{i, varintErr(n)}
		}
		p += n
		st.minTS = min(st.minTS, ts)
		st.maxTS = max(st.maxTS, ts)
		nh, n := binary.Uvarint(b[p:])
		if n <= 0 {
			return st, &recordError{i, varintErr(n)}
		}
		p += n
		if nh > MaxRecordHeaders {
			return st, &recordError{i, errTooManyHdrs}
		}
		st.headers += int(nh)
		if st.headers > MaxFrameHeaders {
			return st, &recordError{i, errTooManyHdrs}
		}
		for range 2*nh + 1 { // name, value per header, then the body
			var err error
			if _, p, err = lengthPrefixed(b, p); err != nil {
				return st, &recordError{i, err}
			}
		}
	}
	if p != len(b) {
		return st, &recordError{count - 1, errTrailing}
	}
	return st, nil
}

// lengthPrefixed reads a uvarint length at b[p:] and returns the start of
// the bytes it prefixes and the position after them, checking that they lie
// within b.
func lengthPrefixed(b []byte, p int) (start, end int, err error) {
	l, n := binary.Uvarint(b[p:])
	if n <= 0 {
		return 0, 0, varintErr(n)
	}
	start = p + n
	if l > uint64(len(b)-start) {
		return 0, 0, errTruncated
	}
	return start, start + int(l), nil
}

func varintErr(n int) error {
	if n == 0 {
		return errTruncated
	}
	return errBadVarint
}

// DecodeRecords decodes exactly count records that together make up all of
// b. The returned records' Name, Value and Body slices alias b (with their
// capacity clipped, so appending to one never overwrites another); empty ones
// are nil. It allocates the []Record and one []Header shared by all records,
// after checking count and the header total against the input and the
// limits. count 0 decodes an empty b. Every failure wraps ErrCorrupt.
func DecodeRecords(b []byte, count int) ([]Record, error) {
	if count == 0 && len(b) == 0 {
		return nil, nil
	}
	if count <= 0 || count > MaxFrameRecords || count > len(b)/minRecordBytes {
		return nil, corruptf("%d records cannot fit %d bytes", count, len(b))
	}
	st, err := scanRecords(b, count)
	if err != nil {
		return nil, corruptf("%v", err)
	}
	return fillRecords(b, count, st.headers), nil
}

// fillRecords decodes count records from b, which scanRecords accepted.
func fillRecords(b []byte, count, headers int) []Record {
	recs := make([]Record, count)
	var hdrs []Header
	if headers > 0 {
		hdrs = make([]Header, headers)
	}
	p := 0
	for i := range recs {
		r := &recs[i]
		var n int
		r.Timestamp, n = binary.Varint(b[p:])
		p += n
		nh, n := binary.Uvarint(b[p:])
		p += n
		if nh > 0 {
			r.Headers = hdrs[:nh:nh]
			hdrs = hdrs[nh:]
			for j := range r.Headers {
				r.Headers[j].Name, p = field(b, p)
				r.Headers[j].Value, p = field(b, p)
			}
		}
		r.Body, p = field(b, p)
	}
	return recs
}

// field returns the length-prefixed bytes at b[p:] (nil if empty) and the
// position after them; scanRecords has already checked them.
func field(b []byte, p int) ([]byte, int) {
	l, n := binary.Uvarint(b[p:])
	p += n
	if l == 0 {
		return nil, p
	}
	end := p + int(l)
	return b[p:end:end], end
}
