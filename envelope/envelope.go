package envelope

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"strconv"
)

// EnvelopeSize is the fixed size of the envelope that begins every slot and
// settled object. The first frame of a transit bundle starts at this offset.
const EnvelopeSize = 60

// Magic is the first four bytes of every object, read as a little-endian
// uint32: the ASCII bytes "FLG1".
const Magic uint32 = 'F' | 'L'<<8 | 'G'<<16 | '1'<<24

// FormatVersion is the only envelope version this package writes and reads.
// A decoder rejects any other version as corrupt: the layout after the
// version field is only known for this one.
const FormatVersion uint16 = 1

// Byte offsets of the envelope fields (see doc.go for the table).
const (
	offMagic        = 0
	offVersion      = 4
	offKind         = 6
	offFlags        = 7
	offEpoch        = 8
	offSlot         = 16
	offNonce        = 24
	offSize         = 36
	offFooterOffset = 44
	offFooterLength = 52
	offCRC          = 56
)

// Kind says what an object is.
type Kind uint8

// The kinds of object an envelope can head.
const (
	// KindFlight is a transit bundle: one flight's frames and their footer,
	// written by the leader of the epoch into one chain slot.
	KindFlight Kind = 1
	// KindPoison is a bare envelope a fencer writes into a slot to kill it.
	// Its epoch and slot name the slot; its nonce is the fencer's own.
	KindPoison Kind = 2
	// KindSettled heads a per-stream settled object written by the auditor
	// (package settle): the layout of a flight (frames, then a footer that is
	// the object's block index), one stream's frames in sequence order from
	// the envelope's Slot, which holds the first sequence number; Epoch is 0.
	// See BundleWriter.FinishSettled and ParseSettled.
	KindSettled Kind = 3
)

// String returns "flight", "poison", "settled" or "kind(N)".
func (k Kind) String() string {
	switch k {
	case KindFlight:
		return "flight"
	case KindPoison:
		return "poison"
	case KindSettled:
		return "settled"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Nonce identifies one writer's attempt at a slot. A writer whose PUT failed
// ambiguously reads the envelope back: its own nonce there means its flight
// is the occupant.
type Nonce [12]byte

// NewNonce returns a nonce from crypto/rand.
func NewNonce() Nonce {
	var n Nonce
	rand.Read(n[:]) // never returns an error; it aborts the program instead
	return n
}

// String returns the nonce as 24 lowercase hex digits.
func (n Nonce) String() string { return hex.EncodeToString(n[:]) }

// Envelope is the decoded form of the 60-byte header of every object.
type Envelope struct {
	// Kind is flight, poison or settled.
	Kind Kind
	// Flags: version 1 defines two, FlagProducers and FlagFences (a
	// flight's footer carries producer marks, fence marks); ParseEnvelope
	// rejects any other bit, and
	// any flag on a poison or settled object.
	Flags uint8
	// Epoch and Slot name the chain slot the object was written for.
	Epoch, Slot uint64
	// Nonce is the writer's (for poison, the fencer's) nonce.
	Nonce Nonce
	// Size is the whole object's size in bytes, envelope included.
	Size uint64
	// FooterOffset and FooterLength locate the footer, object-absolute.
	// Both are zero for poison.
	FooterOffset uint64
	FooterLength uint32
}

// AppendTo appends exactly EnvelopeSize bytes, the encoded envelope with its
// checksum, to dst and returns the extended slice. It does not validate e:
// encoding an envelope that ParseEnvelope would reject is the caller's bug.
func (e Envelope) AppendTo(dst []byte) []byte {
	start := len(dst)
	dst = binary.LittleEndian.AppendUint32(dst, Magic)
	dst = binary.LittleEndian.AppendUint16(dst, FormatVersion)
	dst = append(dst, byte(e.Kind), e.Flags)
	dst = binary.LittleEndian.AppendUint64(dst, e.Epoch)
	dst = binary.LittleEndian.AppendUint64(dst, e.Slot)
	dst = append(dst, e.Nonce[:]...)
	dst = binary.LittleEndian.AppendUint64(dst, e.Size)
	dst = binary.LittleEndian.AppendUint64(dst, e.FooterOffset)
	dst = binary.LittleEndian.AppendUint32(dst, e.FooterLength)
	return binary.LittleEndian.AppendUint32(dst, Checksum(dst[start:start+offCRC]))
}

// ParseEnvelope decodes the envelope in b[:EnvelopeSize]; bytes past it are
// ignored, so b may be a whole object or a ranged read of its head. It checks
// the magic, the version, the checksum, the kind, that the flags are known
// (FlagProducers, FlagFences, on a flight only), and that the sizes agree with the kind:
//   - flight and settled: EnvelopeSize <= FooterOffset,
//     FooterOffset+FooterLength == Size, and a footer length within
//     [minFooterBytes, MaxFooterBytes], Size <= MaxObjectBytes;
//   - poison: Size == EnvelopeSize and no footer.
//
// Every failure wraps ErrCorrupt.
func ParseEnvelope(b []byte) (Envelope, error) {
	if len(b) < EnvelopeSize {
		return Envelope{}, corruptf("short envelope: %d bytes, need %d", len(b), EnvelopeSize)
	}
	b = b[:EnvelopeSize]
	if m := binary.LittleEndian.Uint32(b[offMagic:]); m != Magic {
		return Envelope{}, corruptf("bad magic %#08x", m)
	}
	if v := binary.LittleEndian.Uint16(b[offVersion:]); v != FormatVersion {
		return Envelope{}, corruptf("unknown version %d", v)
	}
	if got, want := Checksum(b[:offCRC]), binary.LittleEndian.Uint32(b[offCRC:]); got != want {
		return Envelope{}, corruptf("checksum %#08x, stored %#08x", got, want)
	}
	e := Envelope{
		Kind:         Kind(b[offKind]),
		Flags:        b[offFlags],
		Epoch:        binary.LittleEndian.Uint64(b[offEpoch:]),
		Slot:         binary.LittleEndian.Uint64(b[offSlot:]),
		Size:         binary.LittleEndian.Uint64(b[offSize:]),
		FooterOffset: binary.LittleEndian.Uint64(b[offFooterOffset:]),
		FooterLength: binary.LittleEndian.Uint32(b[offFooterLength:]),
	}
	copy(e.Nonce[:], b[offNonce:offSize])
	if e.Flags&^knownFlags != 0 || (e.Flags != 0 && e.Kind != KindFlight) {
		return Envelope{}, corruptf("unknown flags %#02x for kind %d", e.Flags, uint8(e.Kind))
	}
	switch e.Kind {
	case KindFlight, KindSettled:
		switch {
		case e.Size > MaxObjectBytes:
			return Envelope{}, corruptf("%s of %d bytes exceeds %d", e.Kind, e.Size, uint64(MaxObjectBytes))
		case e.FooterOffset < EnvelopeSize:
			return Envelope{}, corruptf("footer offset %d inside the envelope", e.FooterOffset)
		case e.FooterLength < minFooterBytes || e.FooterLength > MaxFooterBytes:
			return Envelope{}, corruptf("footer length %d outside [%d, %d]", e.FooterLength, minFooterBytes, MaxFooterBytes)
		case e.FooterOffset > e.Size || e.Size-e.FooterOffset != uint64(e.FooterLength):
			return Envelope{}, corruptf("footer [%d, +%d) does not end the %d-byte object", e.FooterOffset, e.FooterLength, e.Size)
		}
	case KindPoison:
		if e.Size != EnvelopeSize || e.FooterOffset != 0 || e.FooterLength != 0 {
			return Envelope{}, corruptf("poison with size %d and footer [%d, +%d)", e.Size, e.FooterOffset, e.FooterLength)
		}
	default:
		return Envelope{}, corruptf("unknown kind %d", uint8(e.Kind))
	}
	return e, nil
}

// IsFlightOf reports whether e heads a flight copy written for (epoch, slot)
// by the writer holding nonce n: "this copy is ours". A poison, a settled
// object, or a flight with any of the three different is not.
func (e Envelope) IsFlightOf(epoch, slot uint64, n Nonce) bool {
	return e.Kind == KindFlight && e.Epoch == epoch && e.Slot == slot && e.Nonce == n
}

// Poison returns a complete poison object for (epoch, slot): just its
// envelope, carrying the fencer's nonce n. The slice is newly allocated.
func Poison(epoch, slot uint64, n Nonce) []byte {
	e := Envelope{Kind: KindPoison, Epoch: epoch, Slot: slot, Nonce: n, Size: EnvelopeSize}
	return e.AppendTo(make([]byte, 0, EnvelopeSize))
}
