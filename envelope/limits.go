package envelope

// Limits every encoder enforces and every decoder checks before it trusts a
// length: no allocation is ever sized by a length field that was not first
// bounded by the remaining input or by one of these.
const (
	// MaxObjectBytes bounds a flight or settled object's Size.
	MaxObjectBytes = 4 << 30
	// MaxFrameRawBytes bounds a frame's encoded records before compression
	// (FrameInfo.RawLength). The write path splits larger groups of batches
	// into several frames. Stored lengths are never larger: a frame whose
	// compressed form would not be smaller is stored uncompressed.
	MaxFrameRawBytes = 64 << 20
	// MaxFrameRecords bounds FrameInfo.Count, and so the []Record a frame
	// decodes into.
	MaxFrameRecords = 1 << 20
	// MaxFrameHeaders bounds the total number of record headers in one frame,
	// and so the []Header a frame decodes into.
	MaxFrameHeaders = 1 << 20
	// MaxRecordHeaders bounds the number of headers of one record.
	MaxRecordHeaders = 256
	// MaxStreamNameLen bounds a stream name in bytes. Names are non-empty.
	MaxStreamNameLen = 512
	// MaxFrames bounds the number of frames in one bundle.
	MaxFrames = 1 << 17
	// MaxFooterBytes bounds a footer's length.
	MaxFooterBytes = 16 << 20
)

const (
	// minRecordBytes is the smallest encoded record: a one-byte timestamp,
	// header count and body length.
	minRecordBytes = 3
	// minFrameEntryBytes is the smallest footer entry: name length, a
	// one-byte name, first seq, count, min timestamp, timestamp span, offset,
	// length, raw length (one byte each), codec, and a 4-byte CRC.
	minFrameEntryBytes = 14
	// footerTrailerBytes is the frame count and the footer CRC.
	footerTrailerBytes = 8
	// minFooterBytes is the footer of a bundle with no frames.
	minFooterBytes = footerTrailerBytes
)

// FrameEntryMaxBytes bounds the footer entry of a frame whose stream name
// is nameLen bytes: every varint field at its widest. A writer that cuts a
// bundle within MaxFooterBytes counts its frames with it.
func FrameEntryMaxBytes(nameLen int) int {
	return 3 + nameLen + // name length, name
		10 + 5 + 10 + 10 + 10 + 5 + 5 + // first seq, count, min ts, span, offset, length, raw length
		1 + 4 // codec, CRC
}

// FooterTrailerBytes is the fixed part of every footer (frame count, CRC).
const FooterTrailerBytes = footerTrailerBytes
