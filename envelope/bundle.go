package envelope

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/flightlog/flightlog/internal/invariants"
)

// FrameInfo describes one frame of a transit bundle: its footer entry.
type FrameInfo struct {
	// Stream is the stream every record of the frame belongs to.
	Stream string
	// FirstSeq is the first record's sequence number; the frame holds
	// FirstSeq .. FirstSeq+Count-1 in order.
	FirstSeq uint64
	// Count is the number of records, at least 1.
	Count uint32
	// MinTimestamp and MaxTimestamp bound the records' timestamps.
	MinTimestamp, MaxTimestamp int64
	// Offset is the object-absolute offset of the stored frame bytes.
	Offset uint64
	// Length is the stored (possibly compressed) length, at most RawLength.
	Length uint32
	// RawLength is the length of the encoded records before compression.
	RawLength uint32
	// Codec is the codec the stored bytes use.
	Codec Codec
	// CRC is the CRC-32C of the stored bytes.
	CRC uint32
}

// End returns the object-absolute offset just past the frame's stored bytes.
func (f FrameInfo) End() uint64 { return f.Offset + uint64(f.Length) }

// BundleWriter renders transit bundles: AddFrame for each frame, then Finish.
// It is reusable across bundles and not safe for concurrent use.
type BundleWriter struct {
	buf     []byte            // envelope placeholder, then the frames so far
	entries []byte            // footer entries so far
	frames  []FrameInfo       // the frames so far
	nextSeq map[string]uint64 // per stream: the sequence number after its last frame
	hint    int               // capacity for the next bundle's buf
	// scratch receives each frame's compressed bytes before they are
	// appended to buf; it is kept across frames and bundles, so buf grows
	// by what a frame takes, not by the compressor's worst case.
	scratch []byte
	// gather receives a compressed frame's parts when there are several
	// (a block codec compresses one contiguous input); kept like scratch.
	gather []byte
	// marks and markBytes are the producer marks so far (MarkProducer).
	marks     []markPos
	markBytes []byte
	// fences and fenceBytes are the fence marks so far (MarkFence).
	fences     []markPos
	fenceBytes []byte
}

// NewBundleWriter returns an empty writer.
func NewBundleWriter() *BundleWriter {
	return &BundleWriter{nextSeq: make(map[string]uint64)}
}

// minBundleCap is the least buffer a writer starts a bundle with.
const minBundleCap = 64 << 10

// Grow makes room for n more bytes in the bundle being written (its frames'
// stored bytes and its footer), so that AddFrameParts and Finish copy each
// byte once instead of growing the buffer as they go. A writer that knows
// the bundle's size at the start (the render does: the cut knows it) calls
// it first; without it the buffer grows by doubling.
func (w *BundleWriter) Grow(n int) {
	if n <= 0 {
		return
	}
	if w.buf == nil {
		w.buf = make([]byte, EnvelopeSize, EnvelopeSize+n)
		return
	}
	w.buf = slices.Grow(w.buf, n)
}

// Use has the next bundle written into buf's memory (its capacity; its
// contents are overwritten): a buffer an earlier Finish returned whose
// object is no longer needed, so that a caller that recycles objects
// spares the heap a new, zeroed buffer per bundle. The writer owns buf
// until Finish returns it. It is ignored unless the writer is empty.
func (w *BundleWriter) Use(buf []byte) {
	if w.buf != nil || len(w.frames) > 0 || cap(buf) < EnvelopeSize {
		return
	}
	w.buf = buf[:EnvelopeSize]
}

// FramePart is a run of one stream's records: the concatenation of exactly
// Count AppendRecord encodings.
type FramePart struct {
	Records []byte
	Count   int
	// Encoded vouches that Records are Count AppendRecord encodings made
	// in this process, within the record limits, with timestamps within
	// the frame's bounds and headers within its limit (the leader encodes
	// every batch at admission and knows all of it): AddFrameParts then
	// does not decode them again (a tenth of the write path's CPU at
	// 1 KiB records). A false vouch writes a bundle that readers reject as
	// corrupt; -tags invariants checks every part anyway.
	Encoded bool
}

// AddFrame appends one frame: records is the concatenation of exactly count
// AppendRecord encodings, all of stream, with sequence numbers firstSeq ..
// firstSeq+count-1 in order, and timestamps within [minTS, maxTS]. The frame
// is compressed with codec (or stored as is when that is not smaller) and
// checksummed. records is not retained.
//
// AddFrame checks what is cheap and returns a plain error (not ErrCorrupt)
// without changing the bundle if the stream name is empty or longer than
// MaxStreamNameLen, count is not in [1, MaxFrameRecords], records do not
// decode as count records within the limits or carry a timestamp outside
// [minTS, maxTS], the codec is unknown, the sequence numbers overlap or
// precede an earlier frame of the same stream in this bundle, or the bundle
// would exceed MaxFrames, MaxFooterBytes or MaxObjectBytes.
func (w *BundleWriter) AddFrame(stream string, firstSeq uint64, count int, minTS, maxTS int64, records []byte, codec Codec) error {
	return w.AddFrameParts(stream, firstSeq, minTS, maxTS, []FramePart{{Records: records, Count: count}}, codec)
}

// AddFrameParts is AddFrame of the records of parts, in order, as one
// frame: their counts add up to the frame's, and their bytes are the
// frame's raw bytes. With CodecNone (or when compressing does not pay) the
// parts are copied straight into the bundle, once; a compressed codec
// reads a single part where it lies and gathers several into the writer's
// scratch first (a block codec needs its input in one piece). parts are not
// retained.
func (w *BundleWriter) AddFrameParts(stream string, firstSeq uint64, minTS, maxTS int64, parts []FramePart, codec Codec) error {
	count, raw := 0, 0
	for _, p := range parts {
		count += p.Count
		raw += len(p.Records)
	}
	if err := w.checkFrame(stream, firstSeq, count, raw, minTS, maxTS, parts, codec); err != nil {
		return fmt.Errorf("envelope: frame of stream %q at seq %d: %w", stream, firstSeq, err)
	}
	if w.buf == nil {
		w.buf = make([]byte, EnvelopeSize, max(w.hint, minBundleCap))
	}
	if w.nextSeq == nil {
		w.nextSeq = make(map[string]uint64)
	}
	start := len(w.buf)
	used := CodecNone
	if codec != CodecNone {
		src := parts[0].Records
		if len(parts) > 1 {
			w.gather = w.gather[:0]
			for _, p := range parts {
				w.gather = append(w.gather, p.Records...)
			}
			src = w.gather
		}
		var enc []byte
		enc, used = compress(w.scratch[:0], src, codec)
		w.scratch = enc[:0]
		if used != CodecNone {
			w.buf = append(w.buf, enc...)
		}
	}
	if used == CodecNone {
		for _, p := range parts {
			w.buf = append(w.buf, p.Records...)
		}
	}
	info := FrameInfo{
		Stream:       stream,
		FirstSeq:     firstSeq,
		Count:        uint32(count),
		MinTimestamp: minTS,
		MaxTimestamp: maxTS,
		Offset:       uint64(start),
		Length:       uint32(len(w.buf) - start),
		RawLength:    uint32(raw),
		Codec:        used,
		CRC:          Checksum(w.buf[start:]),
	}
	entriesLen := len(w.entries)
	w.entries = appendFrameEntry(w.entries, info)
	if size := uint64(len(w.buf) + len(w.entries) + w.markFooter() + footerTrailerBytes); size > MaxObjectBytes || len(w.entries)+w.markFooter()+footerTrailerBytes > MaxFooterBytes {
		w.buf, w.entries = w.buf[:start], w.entries[:entriesLen]
		return fmt.Errorf("envelope: frame of stream %q at seq %d: bundle would exceed %d bytes or a %d-byte footer",
			stream, firstSeq, MaxObjectBytes, MaxFooterBytes)
	}
	w.frames = append(w.frames, info)
	w.nextSeq[stream] = firstSeq + uint64(count)
	return nil
}

// CompressFrame appends to dst the stored form of raw (the concatenation
// of AppendRecord encodings, at most MaxFrameRawBytes) under codec c, and
// returns it with the codec actually used: CodecNone, with raw appended as
// it is, when c's output would not be smaller. It is what AddFrame does to
// a frame's records, for a caller that compresses ahead of time
// (AddStoredFrame), e.g. on the producer's goroutine while the batch waits
// for its flight.
func CompressFrame(dst, raw []byte, c Codec) ([]byte, Codec) {
	if c == CodecNone || !c.known() {
		return append(dst, raw...), CodecNone
	}
	return compress(dst, raw, c)
}

// AddStoredFrame appends one frame whose stored bytes were made ahead of
// time: stored is what CompressFrame returned for rawLen bytes of count
// records, codec the codec it used, and crc = Checksum(stored). The
// stored bytes are copied into the bundle once; they are neither
// decompressed nor checksummed again (-tags invariants does both). The
// frame's fields are checked as AddFrame checks them; a stored form that
// does not decode to what the caller says writes a bundle readers reject
// as corrupt. stored is not retained.
func (w *BundleWriter) AddStoredFrame(stream string, firstSeq uint64, count int, minTS, maxTS int64, rawLen int, stored []byte, codec Codec, crc uint32) error {
	info := FrameInfo{Stream: stream, FirstSeq: firstSeq, Count: uint32(count), MinTimestamp: minTS, MaxTimestamp: maxTS,
		Length: uint32(len(stored)), RawLength: uint32(rawLen), Codec: codec, CRC: crc}
	bad := func(err error) error {
		return fmt.Errorf("envelope: frame of stream %q at seq %d: %w", stream, firstSeq, err)
	}
	switch {
	case count < 1 || count > MaxFrameRecords:
		return bad(fmt.Errorf("count %d, want 1 to %d", count, MaxFrameRecords))
	case rawLen < 0 || rawLen > MaxFrameRawBytes || len(stored) > math.MaxUint32:
		return bad(fmt.Errorf("%d bytes of records exceed %d", rawLen, MaxFrameRawBytes))
	case len(w.frames) >= MaxFrames:
		return bad(fmt.Errorf("bundle already holds %d frames", MaxFrames))
	}
	if err := checkFrameInfo(info); err != nil {
		return bad(err)
	}
	if next, ok := w.nextSeq[stream]; ok && firstSeq < next {
		return bad(fmt.Errorf("overlaps the stream's previous frame, which ends before seq %d", next))
	}
	if invariants.Enabled {
		invariants.Assert(Checksum(stored) == crc, "stored frame of %q at %d: checksum %#x, caller says %#x", stream, firstSeq, Checksum(stored), crc)
		raw, err := decompress(info, stored)
		invariants.Assert(err == nil, "stored frame of %q at %d does not decompress: %v", stream, firstSeq, err)
		_, err = scanRecords(raw, count)
		invariants.Assert(err == nil, "stored frame of %q at %d does not decode: %v", stream, firstSeq, err)
	}
	if w.buf == nil {
		w.buf = make([]byte, EnvelopeSize, max(w.hint, minBundleCap))
	}
	if w.nextSeq == nil {
		w.nextSeq = make(map[string]uint64)
	}
	start := len(w.buf)
	w.buf = append(w.buf, stored...)
	info.Offset = uint64(start)
	entriesLen := len(w.entries)
	w.entries = appendFrameEntry(w.entries, info)
	if size := uint64(len(w.buf) + len(w.entries) + w.markFooter() + footerTrailerBytes); size > MaxObjectBytes || len(w.entries)+w.markFooter()+footerTrailerBytes > MaxFooterBytes {
		w.buf, w.entries = w.buf[:start], w.entries[:entriesLen]
		return bad(fmt.Errorf("bundle would exceed %d bytes or a %d-byte footer", MaxObjectBytes, MaxFooterBytes))
	}
	w.frames = append(w.frames, info)
	w.nextSeq[stream] = firstSeq + uint64(count)
	return nil
}

func (w *BundleWriter) checkFrame(stream string, firstSeq uint64, count, raw int, minTS, maxTS int64, parts []FramePart, codec Codec) error {
	switch {
	case len(stream) == 0 || len(stream) > MaxStreamNameLen:
		return fmt.Errorf("stream name of %d bytes, want 1 to %d", len(stream), MaxStreamNameLen)
	case len(parts) == 0:
		return fmt.Errorf("no records")
	case count < 1 || count > MaxFrameRecords:
		return fmt.Errorf("count %d, want 1 to %d", count, MaxFrameRecords)
	case firstSeq > math.MaxUint64-uint64(count):
		return fmt.Errorf("sequence numbers overflow")
	case minTS > maxTS:
		return fmt.Errorf("min timestamp %d after max %d", minTS, maxTS)
	case raw > MaxFrameRawBytes:
		return fmt.Errorf("%d bytes of records exceed %d", raw, MaxFrameRawBytes)
	case count > raw/minRecordBytes:
		return fmt.Errorf("%d records cannot fit %d bytes", count, raw)
	case !codec.known():
		return fmt.Errorf("unknown codec %d", uint8(codec))
	case len(w.frames) >= MaxFrames:
		return fmt.Errorf("bundle already holds %d frames", MaxFrames)
	}
	if next, ok := w.nextSeq[stream]; ok && firstSeq < next {
		return fmt.Errorf("overlaps the stream's previous frame, which ends before seq %d", next)
	}
	headers := 0
	for i, p := range parts {
		if p.Count < 1 || p.Count > len(p.Records)/minRecordBytes {
			return fmt.Errorf("part %d: %d records in %d bytes", i, p.Count, len(p.Records))
		}
		if p.Encoded && !invariants.Enabled {
			continue
		}
		st, err := scanRecords(p.Records, p.Count)
		if err != nil {
			return err
		}
		if st.minTS < minTS || st.maxTS > maxTS {
			return fmt.Errorf("record timestamps [%d, %d] outside [%d, %d]", st.minTS, st.maxTS, minTS, maxTS)
		}
		if headers += st.headers; headers > MaxFrameHeaders {
			return fmt.Errorf("%d record headers exceed %d", headers, MaxFrameHeaders)
		}
	}
	return nil
}

// Finish renders the bundle: the envelope for (epoch, slot, n), the frames
// from offset EnvelopeSize on, and the footer. It returns the object and its
// frames, both slices the caller owns (the object keeps the capacity of the
// buffer it was written in, for a caller that recycles it through Use),
// and resets the writer for the next bundle. A bundle with no frames is
// valid.
func (w *BundleWriter) Finish(epoch, slot uint64, n Nonce) (obj []byte, frames []FrameInfo) {
	return w.finish(KindFlight, epoch, slot, n)
}

// FinishSettled renders a settled object instead of a transit bundle: the
// same layout (envelope, frames, footer: the footer is the object's block
// index, one entry per frame with its first sequence number, count and
// timestamp bounds), headed by a KindSettled envelope whose Slot is the
// first sequence number the object holds and whose Epoch is 0. Its frames
// must all be of one stream and contiguous; ParseSettled checks that.
func (w *BundleWriter) FinishSettled(firstSeq uint64, n Nonce) (obj []byte, frames []FrameInfo) {
	return w.finish(KindSettled, 0, firstSeq, n)
}

func (w *BundleWriter) finish(kind Kind, epoch, slot uint64, n Nonce) (obj []byte, frames []FrameInfo) {
	if w.buf == nil {
		w.buf = make([]byte, EnvelopeSize, EnvelopeSize+len(w.entries)+footerTrailerBytes)
	}
	footerOffset := len(w.buf)
	obj = append(w.buf, w.entries...)
	obj = binary.LittleEndian.AppendUint32(obj, uint32(len(w.frames)))
	var flags uint8
	if len(w.marks) > 0 && kind == KindFlight {
		flags |= FlagProducers
		obj = appendSection(obj, len(w.marks), w.markBytes)
	}
	if len(w.fences) > 0 && kind == KindFlight {
		flags |= FlagFences
		obj = appendSection(obj, len(w.fences), w.fenceBytes)
	}
	obj = binary.LittleEndian.AppendUint32(obj, Checksum(obj[footerOffset:]))
	env := Envelope{
		Kind:         kind,
		Flags:        flags,
		Epoch:        epoch,
		Slot:         slot,
		Nonce:        n,
		Size:         uint64(len(obj)),
		FooterOffset: uint64(footerOffset),
		FooterLength: uint32(len(obj) - footerOffset),
	}
	env.AppendTo(obj[:0]) // overwrite the placeholder in place
	frames = w.frames
	w.hint = len(obj)
	w.buf, w.frames = nil, nil
	w.entries = w.entries[:0]
	w.marks, w.markBytes = w.marks[:0], w.markBytes[:0]
	w.fences, w.fenceBytes = w.fences[:0], w.fenceBytes[:0]
	clear(w.nextSeq)
	return obj, frames
}

// markFooter is the footer bytes the producer and fence marks so far take.
func (w *BundleWriter) markFooter() int {
	n := w.fenceFooter()
	if len(w.marks) == 0 {
		return n
	}
	return n + len(w.markBytes) + producerSectionOverhead
}

// appendFrameEntry appends info's footer entry (layout in doc.go).
func appendFrameEntry(dst []byte, f FrameInfo) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(f.Stream)))
	dst = append(dst, f.Stream...)
	dst = binary.AppendUvarint(dst, f.FirstSeq)
	dst = binary.AppendUvarint(dst, uint64(f.Count))
	dst = binary.AppendVarint(dst, f.MinTimestamp)
	dst = binary.AppendUvarint(dst, uint64(f.MaxTimestamp)-uint64(f.MinTimestamp))
	dst = binary.AppendUvarint(dst, f.Offset)
	dst = binary.AppendUvarint(dst, uint64(f.Length))
	dst = binary.AppendUvarint(dst, uint64(f.RawLength))
	dst = append(dst, byte(f.Codec))
	return binary.LittleEndian.AppendUint32(dst, f.CRC)
}

// ParseFooter decodes the footer of the flight (or settled object) env heads: footer must be
// obj[env.FooterOffset : env.FooterOffset+env.FooterLength]. It checks the
// footer's length and checksum, every entry (see checkFrameInfo), that the
// frames lie within [EnvelopeSize, FooterOffset) in ascending, non-overlapping
// order, and that one stream's frames do not overlap in sequence numbers.
// Every failure wraps ErrCorrupt.
func ParseFooter(env Envelope, footer []byte) ([]FrameInfo, error) {
	if env.Kind != KindFlight && env.Kind != KindSettled {
		return nil, corruptf("footer: object is a %s, not a flight or a settled object", env.Kind)
	}
	if uint64(len(footer)) != uint64(env.FooterLength) {
		return nil, corruptf("footer: %d bytes, envelope says %d", len(footer), env.FooterLength)
	}
	if len(footer) < minFooterBytes || len(footer) > MaxFooterBytes {
		return nil, corruptf("footer: %d bytes outside [%d, %d]", len(footer), minFooterBytes, MaxFooterBytes)
	}
	body := footer[:len(footer)-4]
	if got, want := Checksum(body), binary.LittleEndian.Uint32(footer[len(body):]); got != want {
		return nil, corruptf("footer: checksum %#08x, stored %#08x", got, want)
	}
	if env.Flags != 0 {
		var err error
		if body, _, _, err = splitSections(env.Flags, body); err != nil {
			return nil, err
		}
	}
	entries := body[:len(body)-4]
	count := binary.LittleEndian.Uint32(body[len(entries):])
	if count > MaxFrames || uint64(count) > uint64(len(entries)/minFrameEntryBytes) {
		return nil, corruptf("footer: %d frames cannot fit %d bytes", count, len(entries))
	}
	if count == 0 {
		if len(entries) != 0 {
			return nil, corruptf("footer: %d bytes of entries for no frames", len(entries))
		}
		return nil, nil
	}
	frames := make([]FrameInfo, count)
	nextSeq := make(map[string]uint64, min(count, 64))
	prevEnd := uint64(EnvelopeSize)
	p := 0
	for i := range frames {
		f, np, err := parseFrameEntry(entries, p)
		if err != nil {
			return nil, corruptf("footer: frame %d: %v", i, err)
		}
		p = np
		if err := checkFrameInfo(f); err != nil {
			return nil, corruptf("footer: frame %d: %v", i, err)
		}
		if f.Offset < prevEnd || f.Offset > env.FooterOffset || uint64(f.Length) > env.FooterOffset-f.Offset {
			return nil, corruptf("footer: frame %d at [%d, +%d) outside [%d, %d) or overlapping its predecessor",
				i, f.Offset, f.Length, prevEnd, env.FooterOffset)
		}
		prevEnd = f.End()
		if next, ok := nextSeq[f.Stream]; ok && f.FirstSeq < next {
			return nil, corruptf("footer: frame %d: stream %q seq %d overlaps its previous frame ending before %d",
				i, f.Stream, f.FirstSeq, next)
		}
		nextSeq[f.Stream] = f.FirstSeq + uint64(f.Count)
		frames[i] = f
	}
	if p != len(entries) {
		return nil, corruptf("footer: %d bytes after the last frame", len(entries)-p)
	}
	return frames, nil
}

var errFieldRange = errors.New("field out of range")

// entryReader reads footer fields, remembering the first failure.
type entryReader struct {
	b   []byte
	p   int
	err error
}

func (r *entryReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.p:])
	if n <= 0 {
		r.err = varintErr(n)
		return 0
	}
	r.p += n
	return v
}

func (r *entryReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b[r.p:])
	if n <= 0 {
		r.err = varintErr(n)
		return 0
	}
	r.p += n
	return v
}

func (r *entryReader) uint32Field() uint32 {
	v := r.uvarint()
	if v > math.MaxUint32 && r.err == nil {
		r.err = errFieldRange
	}
	return uint32(v)
}

// parseFrameEntry decodes the footer entry at b[p:] and returns the position
// after it.
func parseFrameEntry(b []byte, p int) (FrameInfo, int, error) {
	var f FrameInfo
	start, end, err := lengthPrefixed(b, p)
	if err != nil {
		return f, 0, err
	}
	if n := end - start; n == 0 || n > MaxStreamNameLen {
		return f, 0, fmt.Errorf("stream name of %d bytes", n)
	}
	f.Stream = string(b[start:end])
	r := entryReader{b: b, p: end}
	f.FirstSeq = r.uvarint()
	f.Count = r.uint32Field()
	f.MinTimestamp = r.varint()
	span := r.uvarint()
	f.Offset = r.uvarint()
	f.Length = r.uint32Field()
	f.RawLength = r.uint32Field()
	if r.err != nil {
		return f, 0, r.err
	}
	if len(b)-r.p < 5 {
		return f, 0, errTruncated
	}
	// The span fits iff MinTimestamp+span <= MaxInt64; the subtraction is
	// modular and exact for every MinTimestamp.
	if span > uint64(math.MaxInt64)-uint64(f.MinTimestamp) {
		return f, 0, fmt.Errorf("timestamp span %d from %d overflows", span, f.MinTimestamp)
	}
	f.MaxTimestamp = int64(uint64(f.MinTimestamp) + span)
	f.Codec = Codec(b[r.p])
	f.CRC = binary.LittleEndian.Uint32(b[r.p+1:])
	return f, r.p + 5, nil
}
