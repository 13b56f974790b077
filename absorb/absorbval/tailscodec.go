package absorbval

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/flightlog/flightlog/envelope"
)

// The binary tails snapshot (format version 2; version 1 is the JSON
// document older versions wrote, still read). All integers are varints
// (encoding/binary: unsigned, or zigzag-signed for timestamps); a string
// is its length here and its bytes in the string block, in the order the
// entries use them, so a decoder makes one string of the block and cuts
// every stream ID, fencing token and producer ID out of it (one
// allocation, not one per stream):
//
//	magic "FLTS" | version 2
//	epoch | next | len(base) base | streams | len(block) block
//	streams × entry: len(id) | next | ts(signed) | len(fence) | producers
//	                 producers × (len(id) | seq | start | end | at(signed))
//	CRC-32C of everything before it, 4 bytes little-endian
//
// Every length is checked against what is left, the block and the entries
// must be used up exactly, and the checksum must match: damage is an
// ErrCorrupt, never a panic or a short read.
const (
	tailsMagic    = "FLTS"
	tailsVersion  = 2
	tailsMinEntry = 5 // the fewest bytes an entry takes
	tailsMinProd  = 5 // the fewest bytes a producer tail takes
)

// TailsHeader is what a tails snapshot says about itself: its position,
// the full snapshot it is a delta over ("" for a full one), and how many
// streams it holds.
type TailsHeader struct {
	Epoch, Next uint64
	Base        string
	Streams     int
}

// TailsEncoder writes a binary tails snapshot one stream at a time, in the
// caller's order (the caller keeps it deterministic: a retried write must
// produce the same bytes, see absorb.PutSnapshot), each stream once. The
// zero value is not usable: NewTailsEncoder.
type TailsEncoder struct {
	h       TailsHeader
	added   int
	block   []byte
	entries []byte
}

// NewTailsEncoder starts a snapshot of h.Streams streams as of (h.Epoch,
// h.Next) over h.Base; Add must then be called exactly h.Streams times.
// blockHint sizes the string block (0: a guess).
func NewTailsEncoder(h TailsHeader, blockHint int) *TailsEncoder {
	if blockHint <= 0 {
		blockHint = h.Streams * 16
	}
	return &TailsEncoder{h: h, block: make([]byte, 0, blockHint), entries: make([]byte, 0, h.Streams*12)}
}

// Add appends stream id's tail.
func (e *TailsEncoder) Add(id string, t StreamTail) {
	e.added++
	e.str(id)
	e.entries = binary.AppendUvarint(e.entries, t.Next)
	e.entries = binary.AppendVarint(e.entries, t.Timestamp)
	e.str(t.FencingToken)
	e.entries = binary.AppendUvarint(e.entries, uint64(len(t.Producers)))
	for _, p := range t.Producers {
		e.str(p.ID)
		e.entries = binary.AppendUvarint(e.entries, p.Seq)
		e.entries = binary.AppendUvarint(e.entries, p.Start)
		e.entries = binary.AppendUvarint(e.entries, p.End)
		e.entries = binary.AppendVarint(e.entries, p.At)
	}
}

func (e *TailsEncoder) str(s string) {
	e.entries = binary.AppendUvarint(e.entries, uint64(len(s)))
	e.block = append(e.block, s...)
}

// Finish returns the snapshot object. It fails if Add was not called
// exactly the number of times the header said (a bug in the caller).
func (e *TailsEncoder) Finish() ([]byte, error) {
	if e.added != e.h.Streams {
		return nil, fmt.Errorf("absorb: tails snapshot encoder: %d streams added, %d announced", e.added, e.h.Streams)
	}
	out := make([]byte, 0, 48+len(e.h.Base)+len(e.block)+len(e.entries))
	out = append(out, tailsMagic...)
	out = append(out, tailsVersion)
	out = binary.AppendUvarint(out, e.h.Epoch)
	out = binary.AppendUvarint(out, e.h.Next)
	out = binary.AppendUvarint(out, uint64(len(e.h.Base)))
	out = append(out, e.h.Base...)
	out = binary.AppendUvarint(out, uint64(e.h.Streams))
	out = binary.AppendUvarint(out, uint64(len(e.block)))
	out = append(out, e.block...)
	out = append(out, e.entries...)
	c := envelope.Checksum(out)
	return binary.LittleEndian.AppendUint32(out, c), nil
}

// EncodeTails renders a snapshot object in the binary format (streams in
// the order of their IDs, so the same tails always encode the same).
func EncodeTails(t Tails) []byte {
	ids := make([]string, 0, len(t.Streams))
	block := 0
	for id := range t.Streams {
		ids = append(ids, id)
		block += len(id)
	}
	slices.Sort(ids)
	e := NewTailsEncoder(TailsHeader{Epoch: t.Epoch, Next: t.Next, Base: t.Base, Streams: len(ids)}, block)
	for _, id := range ids {
		e.Add(id, t.Streams[id])
	}
	b, _ := e.Finish() // Add was called len(ids) times
	return b
}

// DecodeTails parses a snapshot object (binary, or the JSON of older
// versions), checking its checksum; a stream listed twice is damage.
func DecodeTails(b []byte) (Tails, error) {
	var t Tails
	var dup string
	h, err := DecodeTailsFunc(b, func(h TailsHeader) { t.Streams = make(map[string]StreamTail, h.Streams) }, func(id string, st StreamTail) {
		if _, ok := t.Streams[id]; ok && dup == "" {
			dup = id
		}
		t.Streams[id] = st
	})
	if err != nil {
		return Tails{}, err
	}
	if dup != "" {
		return Tails{}, fmt.Errorf("%w: tails snapshot lists stream %q twice", ErrCorrupt, dup)
	}
	t.Epoch, t.Next, t.Base = h.Epoch, h.Next, h.Base
	return t, nil
}

// DecodeTailsFunc parses a snapshot object (binary, or the JSON of older
// versions) without building a map: after the checksum and the header
// check out, it calls start with the header and then each with every
// stream's tail, in the snapshot's order. It does not check that a
// stream appears once (DecodeTails does; a caller building its own index
// can count). On an error (ErrCorrupt for any damage) whatever each was
// given must be discarded: the damage may be past it.
func DecodeTailsFunc(b []byte, start func(TailsHeader), each func(id string, t StreamTail)) (TailsHeader, error) {
	if len(b) < 4 {
		return TailsHeader{}, fmt.Errorf("%w: tails snapshot of %d bytes", ErrCorrupt, len(b))
	}
	body, sum := b[:len(b)-4], b[len(b)-4:]
	if envelope.Checksum(body) != binary.LittleEndian.Uint32(sum) {
		return TailsHeader{}, fmt.Errorf("%w: tails snapshot checksum mismatch", ErrCorrupt)
	}
	if len(body) > 0 && body[0] == '{' {
		return decodeTailsJSON(body, start, each)
	}
	d := tailsDecoder{b: body}
	h, block, err := d.header()
	if err != nil {
		return TailsHeader{}, fmt.Errorf("%w: tails snapshot: %v", ErrCorrupt, err)
	}
	start(h)
	if err := d.entries(h.Streams, block, each); err != nil {
		return TailsHeader{}, fmt.Errorf("%w: tails snapshot: %v", ErrCorrupt, err)
	}
	return h, nil
}

// decodeTailsJSON reads the format of older versions: a JSON document
// (the checksum is checked).
func decodeTailsJSON(body []byte, start func(TailsHeader), each func(id string, t StreamTail)) (TailsHeader, error) {
	var t Tails
	if err := json.Unmarshal(body, &t); err != nil {
		return TailsHeader{}, fmt.Errorf("%w: tails snapshot: %v", ErrCorrupt, err)
	}
	h := TailsHeader{Epoch: t.Epoch, Next: t.Next, Base: t.Base, Streams: len(t.Streams)}
	start(h)
	for id, st := range t.Streams {
		each(id, st)
	}
	return h, nil
}

// tailsDecoder reads a binary snapshot's body (its checksum checked).
type tailsDecoder struct {
	b   []byte
	off int
}

func (d *tailsDecoder) uvarint(what string) (uint64, error) {
	v, n := binary.Uvarint(d.b[min(d.off, len(d.b)):])
	if n <= 0 {
		return 0, fmt.Errorf("%s at byte %d: bad varint", what, d.off)
	}
	d.off += n
	return v, nil
}

func (d *tailsDecoder) varint(what string) (int64, error) {
	v, n := binary.Varint(d.b[min(d.off, len(d.b)):])
	if n <= 0 {
		return 0, fmt.Errorf("%s at byte %d: bad varint", what, d.off)
	}
	d.off += n
	return v, nil
}

// count reads a count of things of at least unit bytes each that must fit
// in what is left after it.
func (d *tailsDecoder) count(what string, unit int) (int, error) {
	v, err := d.uvarint(what)
	if err != nil {
		return 0, err
	}
	if limit := (len(d.b) - d.off) / unit; v > uint64(limit) {
		return 0, fmt.Errorf("%s at byte %d: %d, past the %d bytes left", what, d.off, v, len(d.b)-d.off)
	}
	return int(v), nil
}

// header reads everything before the entries; block is the string block.
func (d *tailsDecoder) header() (TailsHeader, string, error) {
	var h TailsHeader
	if len(d.b) < len(tailsMagic)+1 || string(d.b[:len(tailsMagic)]) != tailsMagic {
		return h, "", fmt.Errorf("not a tails snapshot (no magic)")
	}
	if v := d.b[len(tailsMagic)]; v != tailsVersion {
		return h, "", fmt.Errorf("format version %d, this build reads 1 and %d", v, tailsVersion)
	}
	d.off = len(tailsMagic) + 1
	var err error
	if h.Epoch, err = d.uvarint("epoch"); err != nil {
		return h, "", err
	}
	if h.Next, err = d.uvarint("next"); err != nil {
		return h, "", err
	}
	n, err := d.count("base length", 1)
	if err != nil {
		return h, "", err
	}
	h.Base = string(d.b[d.off : d.off+n])
	d.off += n
	if h.Streams, err = d.count("stream count", tailsMinEntry); err != nil {
		return h, "", err
	}
	if n, err = d.count("string block length", 1); err != nil {
		return h, "", err
	}
	block := string(d.b[d.off : d.off+n])
	d.off += n
	if h.Streams > (len(d.b)-d.off)/tailsMinEntry {
		return h, "", fmt.Errorf("%d streams in %d bytes of entries", h.Streams, len(d.b)-d.off)
	}
	return h, block, nil
}

// entries reads n entries, cutting their strings from block, and checks
// that both are used up exactly.
func (d *tailsDecoder) entries(n int, block string, each func(id string, t StreamTail)) error {
	pos := 0
	str := func(what string) (string, error) {
		l, err := d.uvarint(what)
		if err != nil {
			return "", err
		}
		if l > uint64(len(block)-pos) {
			return "", fmt.Errorf("%s at byte %d: %d, past the %d bytes left in the string block", what, d.off, l, len(block)-pos)
		}
		s := block[pos : pos+int(l)]
		pos += int(l)
		return s, nil
	}
	for i := range n {
		id, err := str("stream ID length")
		if err != nil {
			return fmt.Errorf("stream %d: %w", i, err)
		}
		var t StreamTail
		if t.Next, err = d.uvarint("next"); err != nil {
			return fmt.Errorf("stream %q: %w", id, err)
		}
		if t.Timestamp, err = d.varint("timestamp"); err != nil {
			return fmt.Errorf("stream %q: %w", id, err)
		}
		if t.FencingToken, err = str("fencing token length"); err != nil {
			return fmt.Errorf("stream %q: %w", id, err)
		}
		np, err := d.count("producer count", tailsMinProd)
		if err != nil {
			return fmt.Errorf("stream %q: %w", id, err)
		}
		if np > 0 {
			t.Producers = make([]ProducerTail, np)
			for j := range t.Producers {
				if err := d.producer(&t.Producers[j], str); err != nil {
					return fmt.Errorf("stream %q producer %d: %w", id, j, err)
				}
			}
		}
		each(id, t)
	}
	if d.off != len(d.b) {
		return fmt.Errorf("%d bytes after the last of %d streams", len(d.b)-d.off, n)
	}
	if pos != len(block) {
		return fmt.Errorf("%d bytes of the string block unused", len(block)-pos)
	}
	return nil
}

func (d *tailsDecoder) producer(p *ProducerTail, str func(string) (string, error)) error {
	var err error
	if p.ID, err = str("ID length"); err != nil {
		return err
	}
	if p.Seq, err = d.uvarint("seq"); err != nil {
		return err
	}
	if p.Start, err = d.uvarint("start"); err != nil {
		return err
	}
	if p.End, err = d.uvarint("end"); err != nil {
		return err
	}
	p.At, err = d.varint("at")
	return err
}
