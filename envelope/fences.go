package envelope

import (
	"encoding/binary"
	"fmt"
)

// FlagFences is the envelope flag (Envelope.Flags) of a flight whose footer
// carries a fence section: the fence batches among its records
// (FenceMark). A flight without it decodes as before.
const FlagFences uint8 = 2

// knownFlags are the flags a flight's envelope may carry.
const knownFlags = FlagProducers | FlagFences

// MaxFencingTokenLen bounds a stream's fencing token in bytes. The empty
// token is a stream without one.
const MaxFencingTokenLen = 36

// FenceMark says that record Seq of Stream is a fence batch: from it on,
// the stream accepts appends only with fencing token Token ("" clears the
// token). A successor learns each stream's token from the marks of the
// flights it walks.
type FenceMark struct {
	Stream string
	Seq    uint64
	Token  string
}

// fenceMarkMinBytes is the smallest encoded fence mark: frame index,
// offset, token length (an empty token).
const fenceMarkMinBytes = 3

// FenceMarkMaxBytes bounds the footer bytes one fence mark takes, the
// section's fixed part included: a writer that cuts a bundle within
// MaxFooterBytes counts its fence marks with it.
const FenceMarkMaxBytes = producerSectionOverhead + 5 + 5 + 1 + MaxFencingTokenLen

// MarkFence records that record seq of the frame added last is a fence
// batch setting token. Fence marks of one frame must come in sequence
// order. It returns a plain error, changing nothing, if there is no frame,
// seq is not within the frame or not after the previous fence mark of the
// frame, or token is longer than MaxFencingTokenLen.
func (w *BundleWriter) MarkFence(seq uint64, token string) error {
	if len(w.frames) == 0 {
		return fmt.Errorf("envelope: fence mark with no frame")
	}
	fi := len(w.frames) - 1
	f := w.frames[fi]
	switch {
	case len(token) > MaxFencingTokenLen:
		return fmt.Errorf("envelope: fencing token of %d bytes, want at most %d", len(token), MaxFencingTokenLen)
	case seq < f.FirstSeq || seq-f.FirstSeq >= uint64(f.Count):
		return fmt.Errorf("envelope: fence mark at %d outside frame %d [%d, +%d)", seq, fi, f.FirstSeq, f.Count)
	}
	if n := len(w.fences); n > 0 && w.fences[n-1].frame == fi && seq < w.fences[n-1].end {
		return fmt.Errorf("envelope: fence mark at %d is not after the previous one, at %d", seq, w.fences[n-1].end-1)
	}
	if len(w.entries)+w.markFooter()+FenceMarkMaxBytes+footerTrailerBytes > MaxFooterBytes {
		return fmt.Errorf("envelope: fence mark would exceed a %d-byte footer", MaxFooterBytes)
	}
	w.fenceBytes = binary.AppendUvarint(w.fenceBytes, uint64(fi))
	w.fenceBytes = binary.AppendUvarint(w.fenceBytes, seq-f.FirstSeq)
	w.fenceBytes = binary.AppendUvarint(w.fenceBytes, uint64(len(token)))
	w.fenceBytes = append(w.fenceBytes, token...)
	w.fences = append(w.fences, markPos{frame: fi, end: seq + 1})
	return nil
}

// fenceFooter is the footer bytes the fence marks so far take.
func (w *BundleWriter) fenceFooter() int {
	if len(w.fences) == 0 {
		return 0
	}
	return len(w.fenceBytes) + producerSectionOverhead
}

// splitSections splits a flight's footer body (without its CRC) into its
// frame part (entries and frame count), its producer section and its fence
// section, as env's flags say they are there. The fence section comes
// last.
func splitSections(flags uint8, body []byte) (frames, producers, fences []byte, err error) {
	if flags&FlagFences != 0 {
		if body, fences, err = splitSection(body, "fence"); err != nil {
			return nil, nil, nil, err
		}
	}
	if flags&FlagProducers != 0 {
		if body, producers, err = splitSection(body, "producer"); err != nil {
			return nil, nil, nil, err
		}
	}
	return body, producers, fences, nil
}

// ParseFences decodes the fence marks of the flight env heads, whose footer
// (obj[env.FooterOffset:env.Size]) lists frames (as ParseFooter returned
// them). A flight without FlagFences has none: nil. It checks that each
// mark names a record of its frame, that a frame's marks come in order,
// and the tokens' lengths. Every failure wraps ErrCorrupt.
func ParseFences(env Envelope, footer []byte, frames []FrameInfo) ([]FenceMark, error) {
	if env.Flags&FlagFences == 0 {
		return nil, nil
	}
	if len(footer) < minFooterBytes || uint64(len(footer)) != uint64(env.FooterLength) {
		return nil, corruptf("fences: footer of %d bytes, envelope says %d", len(footer), env.FooterLength)
	}
	body := footer[:len(footer)-4]
	if got, want := Checksum(body), binary.LittleEndian.Uint32(footer[len(body):]); got != want {
		return nil, corruptf("fences: footer checksum %#08x, stored %#08x", got, want)
	}
	_, _, sec, err := splitSections(env.Flags, body)
	if err != nil {
		return nil, err
	}
	r := entryReader{b: sec}
	n := r.uvarint()
	if r.err != nil {
		return nil, corruptf("fences: count: %v", r.err)
	}
	if n > uint64(len(sec)-r.p)/fenceMarkMinBytes {
		return nil, corruptf("fences: %d marks cannot fit %d bytes", n, len(sec)-r.p)
	}
	marks := make([]FenceMark, 0, n)
	prev := markPos{frame: -1}
	for i := uint64(0); i < n; i++ {
		fi, off := r.uvarint(), r.uvarint()
		if r.err != nil {
			return nil, corruptf("fences: mark %d: %v", i, r.err)
		}
		start, end, err := lengthPrefixed(sec, r.p)
		if err != nil {
			return nil, corruptf("fences: mark %d: token: %v", i, err)
		}
		r.p = end
		if fi >= uint64(len(frames)) {
			return nil, corruptf("fences: mark %d names frame %d of %d", i, fi, len(frames))
		}
		f := frames[fi]
		if off >= uint64(f.Count) {
			return nil, corruptf("fences: mark %d: record %d outside frame %d of %d records", i, off, fi, f.Count)
		}
		if end-start > MaxFencingTokenLen {
			return nil, corruptf("fences: mark %d: token of %d bytes", i, end-start)
		}
		if int(fi) < prev.frame || (int(fi) == prev.frame && f.FirstSeq+off < prev.end) {
			return nil, corruptf("fences: mark %d out of order", i)
		}
		prev = markPos{frame: int(fi), end: f.FirstSeq + off + 1}
		marks = append(marks, FenceMark{Stream: f.Stream, Seq: f.FirstSeq + off, Token: string(sec[start:end])})
	}
	if r.p != len(sec) {
		return nil, corruptf("fences: %d bytes after the last mark", len(sec)-r.p)
	}
	return marks, nil
}
