package envelope

import (
	"encoding/binary"
	"fmt"
)

// FlagProducers is the envelope flag (Envelope.Flags) of a flight whose
// footer carries a producer section: the identity of each batch that came
// with one (ProducerMark). A flight without it has the footer of older
// versions, which still decodes as it did.
const FlagProducers uint8 = 1

// MaxProducerIDLen bounds a producer ID in bytes. IDs are non-empty.
const MaxProducerIDLen = 256

// ProducerMark says which producer batch a run of one frame's records is:
// records [FirstSeq, FirstSeq+Count) of Stream were appended by producer ID
// as its batch Seq. A successor learns the producers' last batches from
// the marks of the flights it walks.
type ProducerMark struct {
	Stream   string
	FirstSeq uint64
	Count    uint32
	ID       string
	Seq      uint64
}

// producerMarkMinBytes is the smallest encoded mark: frame index, offset,
// count, ID length, a one-byte ID, and the producer sequence.
const producerMarkMinBytes = 6

// producerSectionOverhead is the producer section's fixed part at its
// widest: the mark count (a uvarint) and the section length (4 bytes).
const producerSectionOverhead = 5 + 4

// ProducerMarkMaxBytes bounds the footer bytes one mark with an ID of
// idLen bytes takes, the section's fixed part included: a writer that cuts
// a bundle within MaxFooterBytes counts its marks with it.
func ProducerMarkMaxBytes(idLen int) int {
	return producerSectionOverhead + 5 + 5 + 5 + 2 + idLen + 10
}

// MarkProducer records that the last count records of the frame added
// last, starting at firstSeq, are producer id's batch seq. Marks of one
// frame must come in sequence order and not overlap. It returns a plain
// error, changing nothing, if there is no frame, the run is not within the
// frame, overlaps the previous mark, or id is empty or longer than
// MaxProducerIDLen.
func (w *BundleWriter) MarkProducer(firstSeq uint64, count int, id string, seq uint64) error {
	if len(w.frames) == 0 {
		return fmt.Errorf("envelope: producer mark with no frame")
	}
	fi := len(w.frames) - 1
	f := w.frames[fi]
	switch {
	case len(id) == 0 || len(id) > MaxProducerIDLen:
		return fmt.Errorf("envelope: producer ID of %d bytes, want 1 to %d", len(id), MaxProducerIDLen)
	case count < 1 || firstSeq < f.FirstSeq || firstSeq-f.FirstSeq > uint64(f.Count) || uint64(count) > uint64(f.Count)-(firstSeq-f.FirstSeq):
		return fmt.Errorf("envelope: producer mark [%d, +%d) outside frame %d [%d, +%d)", firstSeq, count, fi, f.FirstSeq, f.Count)
	}
	if n := len(w.marks); n > 0 && w.marks[n-1].frame == fi && firstSeq < w.marks[n-1].end {
		return fmt.Errorf("envelope: producer mark at %d overlaps the previous one, which ends at %d", firstSeq, w.marks[n-1].end)
	}
	if len(w.entries)+len(w.markBytes)+w.fenceFooter()+ProducerMarkMaxBytes(len(id))+footerTrailerBytes > MaxFooterBytes {
		return fmt.Errorf("envelope: producer mark would exceed a %d-byte footer", MaxFooterBytes)
	}
	w.markBytes = binary.AppendUvarint(w.markBytes, uint64(fi))
	w.markBytes = binary.AppendUvarint(w.markBytes, firstSeq-f.FirstSeq)
	w.markBytes = binary.AppendUvarint(w.markBytes, uint64(count))
	w.markBytes = binary.AppendUvarint(w.markBytes, uint64(len(id)))
	w.markBytes = append(w.markBytes, id...)
	w.markBytes = binary.AppendUvarint(w.markBytes, seq)
	w.marks = append(w.marks, markPos{frame: fi, end: firstSeq + uint64(count)})
	return nil
}

// markPos is where the writer's last mark of a frame ends.
type markPos struct {
	frame int
	end   uint64
}

// appendSection appends a mark section of n marks (their bytes): the
// count, the marks, and the section's length.
func appendSection(dst []byte, n int, marks []byte) []byte {
	start := len(dst)
	dst = binary.AppendUvarint(dst, uint64(n))
	dst = append(dst, marks...)
	return binary.LittleEndian.AppendUint32(dst, uint32(len(dst)-start))
}

// splitSection splits the mark section (count and marks, then its 4-byte
// length) named what off the end of a footer body.
func splitSection(body []byte, what string) (rest, section []byte, err error) {
	if len(body) < 8 {
		return nil, nil, corruptf("footer: %d bytes cannot hold a %s section", len(body), what)
	}
	n := binary.LittleEndian.Uint32(body[len(body)-4:])
	rest = body[:len(body)-4]
	if uint64(n) > uint64(len(rest))-4 || n == 0 {
		return nil, nil, corruptf("footer: %s section of %d bytes in %d", what, n, len(rest))
	}
	return rest[:len(rest)-int(n)], rest[len(rest)-int(n):], nil
}

// ParseProducers decodes the producer marks of the flight env heads, whose
// footer (obj[env.FooterOffset:env.Size]) lists frames (as ParseFooter
// returned them). A flight without FlagProducers has none: nil. It checks
// that each mark lies within its frame, that a frame's marks come in
// order without overlapping, and the IDs' lengths. Every failure wraps
// ErrCorrupt.
func ParseProducers(env Envelope, footer []byte, frames []FrameInfo) ([]ProducerMark, error) {
	if env.Flags&FlagProducers == 0 {
		return nil, nil
	}
	if len(footer) < minFooterBytes || uint64(len(footer)) != uint64(env.FooterLength) {
		return nil, corruptf("producers: footer of %d bytes, envelope says %d", len(footer), env.FooterLength)
	}
	body := footer[:len(footer)-4]
	if got, want := Checksum(body), binary.LittleEndian.Uint32(footer[len(body):]); got != want {
		return nil, corruptf("producers: footer checksum %#08x, stored %#08x", got, want)
	}
	_, sec, _, err := splitSections(env.Flags, body)
	if err != nil {
		return nil, err
	}
	r := entryReader{b: sec}
	n := r.uvarint()
	if r.err != nil {
		return nil, corruptf("producers: count: %v", r.err)
	}
	if n > uint64(len(sec)-r.p)/producerMarkMinBytes {
		return nil, corruptf("producers: %d marks cannot fit %d bytes", n, len(sec)-r.p)
	}
	marks := make([]ProducerMark, 0, n)
	prev := markPos{frame: -1}
	for i := uint64(0); i < n; i++ {
		fi, off, count := r.uvarint(), r.uvarint(), r.uvarint()
		if r.err != nil {
			return nil, corruptf("producers: mark %d: %v", i, r.err)
		}
		start, end, err := lengthPrefixed(sec, r.p)
		if err != nil {
			return nil, corruptf("producers: mark %d: ID: %v", i, err)
		}
		r.p = end
		seq := r.uvarint()
		if r.err != nil {
			return nil, corruptf("producers: mark %d: %v", i, r.err)
		}
		if fi >= uint64(len(frames)) {
			return nil, corruptf("producers: mark %d names frame %d of %d", i, fi, len(frames))
		}
		f := frames[fi]
		if count == 0 || off > uint64(f.Count) || count > uint64(f.Count)-off {
			return nil, corruptf("producers: mark %d: [%d, +%d) outside frame %d of %d records", i, off, count, fi, f.Count)
		}
		if idLen := end - start; idLen == 0 || idLen > MaxProducerIDLen {
			return nil, corruptf("producers: mark %d: ID of %d bytes", i, idLen)
		}
		if int(fi) < prev.frame || (int(fi) == prev.frame && f.FirstSeq+off < prev.end) {
			return nil, corruptf("producers: mark %d out of order", i)
		}
		prev = markPos{frame: int(fi), end: f.FirstSeq + off + count}
		marks = append(marks, ProducerMark{Stream: f.Stream, FirstSeq: f.FirstSeq + off, Count: uint32(count), ID: string(sec[start:end]), Seq: seq})
	}
	if r.p != len(sec) {
		return nil, corruptf("producers: %d bytes after the last mark", len(sec)-r.p)
	}
	return marks, nil
}

// ParseBundleProducers is ParseBundle, also returning the producer marks
// (and checking the fence marks parse).
func ParseBundleProducers(obj []byte) (Envelope, []FrameInfo, []ProducerMark, error) {
	env, frames, err := ParseBundle(obj)
	if err != nil {
		return env, nil, nil, err
	}
	marks, err := ParseProducers(env, obj[env.FooterOffset:env.Size], frames)
	if err != nil {
		return Envelope{}, nil, nil, err
	}
	if _, err := ParseFences(env, obj[env.FooterOffset:env.Size], frames); err != nil {
		return Envelope{}, nil, nil, err
	}
	return env, frames, marks, nil
}
