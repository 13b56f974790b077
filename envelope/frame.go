package envelope

import (
	"fmt"
	"math"
)

// checkFrameInfo checks the fields of f that do not depend on where the
// frame lies: it is the test both ParseFooter and DecodeFrame apply, so a
// FrameInfo taken from a span ref gets the same scrutiny as one just parsed.
func checkFrameInfo(f FrameInfo) error {
	switch {
	case len(f.Stream) == 0 || len(f.Stream) > MaxStreamNameLen:
		return fmt.Errorf("stream name of %d bytes", len(f.Stream))
	case f.Count == 0 || f.Count > MaxFrameRecords:
		return fmt.Errorf("count %d outside [1, %d]", f.Count, MaxFrameRecords)
	case f.FirstSeq > math.MaxUint64-uint64(f.Count):
		return fmt.Errorf("sequence numbers from %d overflow", f.FirstSeq)
	case f.MinTimestamp > f.MaxTimestamp:
		return fmt.Errorf("min timestamp %d after max %d", f.MinTimestamp, f.MaxTimestamp)
	case !f.Codec.known():
		return fmt.Errorf("unknown codec %d", uint8(f.Codec))
	case f.RawLength > MaxFrameRawBytes:
		return fmt.Errorf("raw length %d exceeds %d", f.RawLength, MaxFrameRawBytes)
	case uint64(f.Count) > uint64(f.RawLength/minRecordBytes):
		return fmt.Errorf("%d records cannot fit %d raw bytes", f.Count, f.RawLength)
	case f.Length == 0 || f.Length > f.RawLength:
		return fmt.Errorf("stored length %d outside [1, raw length %d]", f.Length, f.RawLength)
	case f.Codec == CodecNone && f.Length != f.RawLength:
		return fmt.Errorf("uncompressed frame of %d bytes with raw length %d", f.Length, f.RawLength)
	}
	return nil
}

// DecodeFrame decodes the records of the frame info describes from its
// stored bytes, stored = obj[info.Offset : info.End()]. It checks info's
// fields, the length and CRC-32C of stored, decompresses into at most
// RawLength bytes (checking the codec's declared length first), decodes
// exactly Count records and checks their timestamps lie within info's
// bounds. The records alias stored (CodecNone) or a new buffer. Every
// failure wraps ErrCorrupt.
func DecodeFrame(info FrameInfo, stored []byte) ([]Record, error) {
	if err := checkFrameInfo(info); err != nil {
		return nil, corruptf("frame: %v", err)
	}
	if uint64(len(stored)) != uint64(info.Length) {
		return nil, corruptf("frame: %d stored bytes, footer says %d", len(stored), info.Length)
	}
	if got := Checksum(stored); got != info.CRC {
		return nil, corruptf("frame: checksum %#08x, footer says %#08x", got, info.CRC)
	}
	raw, err := decompress(info, stored)
	if err != nil {
		return nil, err
	}
	st, err := scanRecords(raw, int(info.Count))
	if err != nil {
		return nil, corruptf("frame: %v", err)
	}
	if st.minTS < info.MinTimestamp || st.maxTS > info.MaxTimestamp {
		return nil, corruptf("frame: record timestamps [%d, %d] outside [%d, %d]",
			st.minTS, st.maxTS, info.MinTimestamp, info.MaxTimestamp)
	}
	return fillRecords(raw, int(info.Count), st.headers), nil
}

// ParseBundle parses a whole transit bundle: its envelope, which must be a
// flight's whose Size is len(obj), and its footer. The frames' stored bytes
// are obj[f.Offset:f.End()], ready for DecodeFrame. Every failure wraps
// ErrCorrupt.
func ParseBundle(obj []byte) (Envelope, []FrameInfo, error) {
	env, err := ParseEnvelope(obj)
	if err != nil {
		return Envelope{}, nil, err
	}
	if env.Kind != KindFlight {
		return Envelope{}, nil, corruptf("bundle: object is a %s, not a flight", env.Kind)
	}
	if uint64(len(obj)) != env.Size {
		return Envelope{}, nil, corruptf("bundle: %d bytes, envelope says %d", len(obj), env.Size)
	}
	frames, err := ParseFooter(env, obj[env.FooterOffset:env.Size])
	if err != nil {
		return Envelope{}, nil, err
	}
	return env, frames, nil
}

// ParseSettled parses a whole settled object: its envelope, which must be
// KindSettled with Size len(obj), and its footer, whose frames must all be
// of one stream and tile the sequence numbers from the envelope's Slot on
// without a gap. It returns the frames; [frames[0].FirstSeq, the last's
// end) is what the object holds. Every failure wraps ErrCorrupt.
func ParseSettled(obj []byte) (Envelope, []FrameInfo, error) {
	env, err := ParseEnvelope(obj)
	if err != nil {
		return Envelope{}, nil, err
	}
	if uint64(len(obj)) != env.Size {
		return Envelope{}, nil, corruptf("settled: %d bytes, envelope says %d", len(obj), env.Size)
	}
	frames, err := ParseSettledFooter(env, obj[env.FooterOffset:env.Size])
	return env, frames, err
}

// ParseSettledFooter is ParseSettled given the envelope and the footer's
// bytes alone (obj[env.FooterOffset : env.FooterOffset+env.FooterLength]),
// so a reader can locate frames without fetching the object.
func ParseSettledFooter(env Envelope, footer []byte) ([]FrameInfo, error) {
	if env.Kind != KindSettled {
		return nil, corruptf("settled: object is a %s", env.Kind)
	}
	frames, err := ParseFooter(env, footer)
	if err != nil {
		return nil, err
	}
	if len(frames) == 0 {
		return nil, corruptf("settled: no frames")
	}
	next := env.Slot
	for i, f := range frames {
		if f.Stream != frames[0].Stream || f.FirstSeq != next {
			return nil, corruptf("settled: frame %d is %q at %d, want %q at %d", i, f.Stream, f.FirstSeq, frames[0].Stream, next)
		}
		next += uint64(f.Count)
	}
	return frames, nil
}
