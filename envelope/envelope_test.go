package envelope

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	cases := []Envelope{
		{Kind: KindFlight, Epoch: 3, Slot: 7, Nonce: testNonce, Size: 200, FooterOffset: 100, FooterLength: 100},
		{Kind: KindFlight, Epoch: math.MaxUint64, Slot: math.MaxUint64, Size: 68, FooterOffset: 60, FooterLength: 8},
		{Kind: KindSettled, Epoch: 1, Slot: 2, Size: MaxObjectBytes, FooterOffset: MaxObjectBytes - MaxFooterBytes, FooterLength: MaxFooterBytes},
		{Kind: KindPoison, Epoch: 9, Slot: 0, Nonce: testNonce, Size: EnvelopeSize},
	}
	for _, want := range cases {
		b := want.AppendTo([]byte("prefix"))
		if len(b) != len("prefix")+EnvelopeSize {
			t.Fatalf("AppendTo appended %d bytes, want %d", len(b)-6, EnvelopeSize)
		}
		got, err := ParseEnvelope(b[6:])
		if err != nil {
			t.Fatalf("ParseEnvelope(%+v): %v", want, err)
		}
		if got != want {
			t.Fatalf("ParseEnvelope: got %+v, want %+v", got, want)
		}
		// Trailing bytes (a whole object, or a longer ranged read) are ignored.
		if got, err := ParseEnvelope(append(b[6:], 1, 2, 3)); err != nil || got != want {
			t.Fatalf("ParseEnvelope with trailing bytes: %+v, %v", got, err)
		}
	}
}

func TestEnvelopeMagicBytes(t *testing.T) {
	b := Poison(1, 2, testNonce)
	if string(b[:4]) != "FLG1" {
		t.Fatalf("magic bytes %q, want FLG1", b[:4])
	}
}

func TestParseEnvelopeRejectsEveryByteFlip(t *testing.T) {
	for _, e := range []Envelope{
		{Kind: KindFlight, Epoch: 3, Slot: 7, Nonce: testNonce, Size: 200, FooterOffset: 100, FooterLength: 100},
		{Kind: KindPoison, Epoch: 3, Slot: 7, Nonce: testNonce, Size: EnvelopeSize},
	} {
		good := e.AppendTo(nil)
		for i := range EnvelopeSize {
			for _, mask := range []byte{0x01, 0x80, 0xff} {
				b := append([]byte(nil), good...)
				b[i] ^= mask
				_, err := ParseEnvelope(b)
				mustCorrupt(t, e.Kind.String()+" byte flip", err)
			}
		}
		for n := range EnvelopeSize {
			_, err := ParseEnvelope(good[:n])
			mustCorrupt(t, "truncated envelope", err)
		}
	}
}

// reseal recomputes an envelope's checksum after a test edits it, so the
// decoder's other checks are reached.
func reseal(b []byte) []byte {
	binary.LittleEndian.PutUint32(b[offCRC:], Checksum(b[:offCRC]))
	return b
}

func TestParseEnvelopeRejectsInconsistent(t *testing.T) {
	flight := Envelope{Kind: KindFlight, Epoch: 3, Slot: 7, Size: 200, FooterOffset: 100, FooterLength: 100}
	cases := []struct {
		name string
		edit func(b []byte)
	}{
		{"wrong magic", func(b []byte) { copy(b, "FLG2") }},
		{"version 0", func(b []byte) { binary.LittleEndian.PutUint16(b[offVersion:], 0) }},
		{"version 2", func(b []byte) { binary.LittleEndian.PutUint16(b[offVersion:], 2) }},
		{"kind 0", func(b []byte) { b[offKind] = 0 }},
		{"kind 4", func(b []byte) { b[offKind] = 4 }},
		{"unknown flags", func(b []byte) { b[offFlags] = 4 }},
		{"footer inside envelope", func(b []byte) {
			binary.LittleEndian.PutUint64(b[offFooterOffset:], 59)
			binary.LittleEndian.PutUint64(b[offSize:], 59+100)
		}},
		{"footer short of size", func(b []byte) { binary.LittleEndian.PutUint64(b[offSize:], 201) }},
		{"footer past size", func(b []byte) { binary.LittleEndian.PutUint64(b[offSize:], 199) }},
		{"footer offset past size", func(b []byte) { binary.LittleEndian.PutUint64(b[offFooterOffset:], 300) }},
		{"footer offset wraps", func(b []byte) { binary.LittleEndian.PutUint64(b[offFooterOffset:], math.MaxUint64-50) }},
		{"footer too small", func(b []byte) {
			binary.LittleEndian.PutUint32(b[offFooterLength:], 7)
			binary.LittleEndian.PutUint64(b[offSize:], 107)
		}},
		{"footer too large", func(b []byte) {
			binary.LittleEndian.PutUint32(b[offFooterLength:], MaxFooterBytes+1)
			binary.LittleEndian.PutUint64(b[offSize:], 100+MaxFooterBytes+1)
		}},
		{"object too large", func(b []byte) {
			binary.LittleEndian.PutUint64(b[offSize:], MaxObjectBytes+1)
			binary.LittleEndian.PutUint64(b[offFooterOffset:], MaxObjectBytes+1-100)
		}},
		{"poison with size", func(b []byte) { b[offKind] = byte(KindPoison) }},
		{"poison with footer", func(b []byte) {
			b[offKind] = byte(KindPoison)
			binary.LittleEndian.PutUint64(b[offSize:], EnvelopeSize)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := flight.AppendTo(nil)
			c.edit(b)
			_, err := ParseEnvelope(reseal(b))
			mustCorrupt(t, c.name, err)
		})
	}
}

func TestIsFlightOf(t *testing.T) {
	other := testNonce
	other[11]++
	flight := Envelope{Kind: KindFlight, Epoch: 5, Slot: 9, Nonce: testNonce}
	cases := []struct {
		name        string
		env         Envelope
		epoch, slot uint64
		nonce       Nonce
		want        bool
	}{
		{"ours", flight, 5, 9, testNonce, true},
		{"other epoch", flight, 6, 9, testNonce, false},
		{"other slot", flight, 5, 8, testNonce, false},
		{"other nonce", flight, 5, 9, other, false},
		{"zero nonce", flight, 5, 9, Nonce{}, false},
		{"poison with our nonce", Envelope{Kind: KindPoison, Epoch: 5, Slot: 9, Nonce: testNonce}, 5, 9, testNonce, false},
		{"settled", Envelope{Kind: KindSettled, Epoch: 5, Slot: 9, Nonce: testNonce}, 5, 9, testNonce, false},
	}
	for _, c := range cases {
		if got := c.env.IsFlightOf(c.epoch, c.slot, c.nonce); got != c.want {
			t.Errorf("%s: IsFlightOf = %t, want %t", c.name, got, c.want)
		}
	}
}

func TestPoison(t *testing.T) {
	b := Poison(4, 11, testNonce)
	if len(b) != EnvelopeSize {
		t.Fatalf("poison of %d bytes, want %d", len(b), EnvelopeSize)
	}
	e, err := ParseEnvelope(b)
	if err != nil {
		t.Fatal(err)
	}
	want := Envelope{Kind: KindPoison, Epoch: 4, Slot: 11, Nonce: testNonce, Size: EnvelopeSize}
	if e != want {
		t.Fatalf("got %+v, want %+v", e, want)
	}
	if e.IsFlightOf(4, 11, testNonce) {
		t.Fatal("a poison is nobody's flight")
	}
	if _, err := ParseFooter(e, nil); !IsCorruption(err) {
		t.Fatalf("ParseFooter of poison: %v, want corruption", err)
	}
	if _, _, err := ParseBundle(b); !IsCorruption(err) {
		t.Fatalf("ParseBundle of poison: %v, want corruption", err)
	}
}

func TestNewNonce(t *testing.T) {
	a, b := NewNonce(), NewNonce()
	if a == b || a == (Nonce{}) {
		t.Fatalf("nonces %s and %s", a, b)
	}
	if len(a.String()) != 24 {
		t.Fatalf("nonce string %q", a.String())
	}
}

func TestStrings(t *testing.T) {
	for k, want := range map[Kind]string{KindFlight: "flight", KindPoison: "poison", KindSettled: "settled", 0: "kind(0)", 9: "kind(9)"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", uint8(k), got, want)
		}
	}
	for _, c := range []Codec{CodecNone, CodecS2, CodecZstd} {
		got, err := ParseCodec(c.String())
		if err != nil || got != c {
			t.Errorf("ParseCodec(%q) = %v, %v", c.String(), got, err)
		}
	}
	if got, err := ParseCodec("ZSTD"); err != nil || got != CodecZstd {
		t.Errorf("ParseCodec(ZSTD) = %v, %v", got, err)
	}
	if _, err := ParseCodec("gzip"); err == nil || IsCorruption(err) {
		t.Errorf("ParseCodec(gzip) = %v, want a plain error", err)
	}
	if got := Codec(7).String(); got != "codec(7)" {
		t.Errorf("Codec(7).String() = %q", got)
	}
}

func TestIsCorruption(t *testing.T) {
	if IsCorruption(nil) || IsCorruption(errors.New("x")) {
		t.Fatal("IsCorruption of a non-corruption error")
	}
	_, err := ParseEnvelope(nil)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("%v does not wrap ErrCorrupt", err)
	}
}
