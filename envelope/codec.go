package envelope

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// Codec is a frame's compression.
type Codec uint8

// The codecs. A frame records the codec its stored bytes actually use, which
// is CodecNone whenever compression would not have made the frame smaller.
const (
	// CodecNone stores the encoded records as they are.
	CodecNone Codec = 0
	// CodecS2 is the S2 block format (github.com/klauspost/compress/s2): fast,
	// moderate ratio.
	CodecS2 Codec = 1
	// CodecZstd is one Zstandard frame with its content size declared, at the
	// encoder's fastest level with a window of zstdEncoderWindow.
	CodecZstd Codec = 2
)

// String returns "none", "s2", "zstd" or "codec(N)".
func (c Codec) String() string {
	switch c {
	case CodecNone:
		return "none"
	case CodecS2:
		return "s2"
	case CodecZstd:
		return "zstd"
	}
	return "codec(" + strconv.Itoa(int(c)) + ")"
}

// ParseCodec returns the codec String names, ignoring case.
func ParseCodec(s string) (Codec, error) {
	for _, c := range []Codec{CodecNone, CodecS2, CodecZstd} {
		if strings.EqualFold(s, c.String()) {
			return c, nil
		}
	}
	return 0, fmt.Errorf("envelope: unknown codec %q (want none, s2 or zstd)", s)
}

func (c Codec) known() bool { return c <= CodecZstd }

const (
	// zstdEncoderWindow is the window the shared encoder uses. 2 MiB keeps
	// the ratio on record data within a percent or so of larger windows.
	zstdEncoderWindow = 2 << 20
	// zstdMaxWindow is the largest window the decoder accepts, so that a
	// later encoder may raise its window without breaking readers.
	zstdMaxWindow = 8 << 20
)

// The zstd encoder and decoder are expensive to create and safe for
// concurrent EncodeAll/DecodeAll, so one of each is shared. They are made
// when the package initialises, not on first use: they keep channels, and
// one made inside a testing/synctest bubble (the simulation runs each seed
// in one) could not be used from another bubble or outside it. Their
// options are constants: an error creating them is a bug here.
var (
	zstdEncoder = onceNow(func() *zstd.Encoder {
		e, err := zstd.NewWriter(nil,
			zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithWindowSize(zstdEncoderWindow),
			zstd.WithEncoderCRC(false), // the frame's CRC-32C covers the stored bytes
		)
		if err != nil {
			panic("envelope: creating the zstd encoder: " + err.Error())
		}
		e.EncodeAll([]byte("warm"), nil) // it makes its channels on first use
		return e
	})
	zstdDecoder = onceNow(func() *zstd.Decoder {
		d, err := zstd.NewReader(nil,
			zstd.WithDecoderMaxMemory(MaxFrameRawBytes),
			zstd.WithDecoderMaxWindow(zstdMaxWindow),
			zstd.WithDecodeAllCapLimit(true), // never decode past cap(dst) = RawLength
		)
		if err != nil {
			panic("envelope: creating the zstd decoder: " + err.Error())
		}
		d.DecodeAll(zstdEncoder().EncodeAll([]byte("warm"), nil), make([]byte, 0, 8))
		return d
	})
)

// onceNow calls f now and returns a function returning its value.
func onceNow[T any](f func() T) func() T {
	v := f()
	return func() T { return v }
}

// compress appends the stored form of raw under codec c to dst and returns
// it with the codec actually used: CodecNone if c's output would not be
// smaller than raw. len(raw) <= MaxFrameRawBytes.
func compress(dst, raw []byte, c Codec) ([]byte, Codec) {
	start := len(dst)
	switch c {
	case CodecS2:
		limit := s2.MaxEncodedLen(len(raw))
		dst = slices.Grow(dst, limit)
		enc := s2.Encode(dst[start:start+limit], raw)
		if len(enc) < len(raw) {
			return dst[:start+len(enc)], CodecS2
		}
	case CodecZstd:
		dst = slices.Grow(dst, len(raw))
		dst = zstdEncoder().EncodeAll(raw, dst)
		if len(dst)-start < len(raw) {
			return dst, CodecZstd
		}
		dst = dst[:start]
	}
	return append(dst, raw...), CodecNone
}

// decompress returns the RawLength bytes that info's stored bytes decode to.
// info has passed checkFrameInfo and stored its length and CRC checks. For
// CodecNone the result is stored itself. The declared decoded length is
// checked against RawLength before anything is allocated.
func decompress(info FrameInfo, stored []byte) ([]byte, error) {
	switch info.Codec {
	case CodecNone:
		return stored, nil
	case CodecS2:
		n, err := s2.DecodedLen(stored)
		if err != nil {
			return nil, corruptf("frame: s2: %v", err)
		}
		if n != int(info.RawLength) {
			return nil, corruptf("frame: s2 declares %d bytes, footer says %d", n, info.RawLength)
		}
		out, err := s2.Decode(make([]byte, n), stored)
		if err != nil {
			return nil, corruptf("frame: s2: %v", err)
		}
		if len(out) != n {
			return nil, corruptf("frame: s2 decoded %d bytes, want %d", len(out), n)
		}
		return out, nil
	case CodecZstd:
		var h zstd.Header
		if err := h.Decode(stored); err != nil {
			return nil, corruptf("frame: zstd header: %v", err)
		}
		// Our encoder declares the content size of every frame of 256 bytes
		// or more (the format lets it omit the field below that). Either way
		// DecodeAll stops at cap(dst) = RawLength.
		switch {
		case h.Skippable:
			return nil, corruptf("frame: zstd skippable frame")
		case h.HasFCS && h.FrameContentSize != uint64(info.RawLength):
			return nil, corruptf("frame: zstd declares %d bytes, footer says %d", h.FrameContentSize, info.RawLength)
		case !h.HasFCS && info.RawLength >= 256:
			return nil, corruptf("frame: zstd frame of %d bytes declares no size", info.RawLength)
		}
		if h.WindowSize > zstdMaxWindow {
			return nil, corruptf("frame: zstd window %d exceeds %d", h.WindowSize, zstdMaxWindow)
		}
		out, err := zstdDecoder().DecodeAll(stored, make([]byte, 0, info.RawLength))
		if err != nil {
			return nil, corruptf("frame: zstd: %v", err)
		}
		if len(out) != int(info.RawLength) {
			return nil, corruptf("frame: zstd decoded %d bytes, want %d", len(out), info.RawLength)
		}
		return out, nil
	}
	return nil, corruptf("frame: unknown codec %d", uint8(info.Codec))
}
