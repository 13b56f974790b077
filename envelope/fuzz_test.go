package envelope

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// The fuzz targets: one per decoder, one reading whole bundles, and one
// round trip. Each asserts that failures are corruption errors (never
// panics), and that whatever decodes also re-encodes to the same meaning.

func FuzzParseEnvelope(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte, resign bool) {
		if resign && len(b) >= EnvelopeSize {
			// Re-sign the mutated bytes so the checks behind the CRC are reached.
			b = reseal(bytes.Clone(b))
		}
		e, err := ParseEnvelope(b)
		if err != nil {
			mustCorrupt(t, "ParseEnvelope", err)
			return
		}
		// The envelope has one encoding: it re-encodes to the bytes it came from.
		if again := e.AppendTo(nil); !bytes.Equal(again, b[:EnvelopeSize]) {
			t.Fatalf("re-encoded %x, parsed from %x", again, b[:EnvelopeSize])
		}
		switch e.Kind {
		case KindPoison:
			if e.Size != EnvelopeSize || e.FooterLength != 0 {
				t.Fatalf("accepted poison %+v", e)
			}
		case KindFlight, KindSettled:
			if e.FooterOffset < EnvelopeSize || e.FooterOffset+uint64(e.FooterLength) != e.Size {
				t.Fatalf("accepted %+v", e)
			}
		default:
			t.Fatalf("accepted kind %d", e.Kind)
		}
	})
}

func FuzzParseFooter(f *testing.F) {
	f.Fuzz(func(t *testing.T, footerOffset uint64, footer []byte, resign bool) {
		if resign && len(footer) >= 4 {
			// Re-sign the mutated bytes so the entry parser is reached.
			footer = bytes.Clone(footer)
			binary.LittleEndian.PutUint32(footer[len(footer)-4:], Checksum(footer[:len(footer)-4]))
		}
		env := Envelope{Kind: KindFlight, FooterOffset: footerOffset, FooterLength: uint32(len(footer)),
			Size: footerOffset + uint64(len(footer))}
		frames, err := ParseFooter(env, footer)
		if err != nil {
			mustCorrupt(t, "ParseFooter", err)
			return
		}
		prevEnd := uint64(EnvelopeSize)
		for i, fr := range frames {
			if fr.Offset < prevEnd || fr.End() > footerOffset || fr.End() < fr.Offset {
				t.Fatalf("frame %d at [%d, %d) accepted after %d with footer at %d", i, fr.Offset, fr.End(), prevEnd, footerOffset)
			}
			if err := checkFrameInfo(fr); err != nil {
				t.Fatalf("frame %d accepted: %v", i, err)
			}
			prevEnd = fr.End()
		}
		// Re-encoding (canonically) gives the same frames back.
		again := footerOf(frames)
		env.FooterLength = uint32(len(again))
		reparsed, err := ParseFooter(env, again)
		if err != nil {
			t.Fatalf("re-encoded footer: %v", err)
		}
		if len(reparsed) != len(frames) {
			t.Fatalf("re-encoded footer: %d frames, want %d", len(reparsed), len(frames))
		}
		for i := range frames {
			if reparsed[i] != frames[i] {
				t.Fatalf("frame %d: %+v, want %+v", i, reparsed[i], frames[i])
			}
		}
	})
}

func FuzzDecodeFrame(f *testing.F) {
	f.Fuzz(func(t *testing.T, codec byte, count, rawLength uint32, minTS, maxTS int64, stored []byte, badCRC bool) {
		info := FrameInfo{Stream: "s", Count: count, MinTimestamp: minTS, MaxTimestamp: maxTS,
			Offset: EnvelopeSize, Length: uint32(len(stored)), RawLength: rawLength, Codec: Codec(codec),
			CRC: Checksum(stored)} // a valid CRC, so the fuzzer reaches the decompressors
		if badCRC {
			info.CRC++
		}
		recs, err := DecodeFrame(info, stored)
		if err != nil {
			mustCorrupt(t, "DecodeFrame", err)
			return
		}
		if badCRC || len(recs) != int(count) {
			t.Fatalf("accepted %d records (bad CRC %t) for count %d", len(recs), badCRC, count)
		}
		raw := encodeRecords(recs)
		again, err := DecodeRecords(raw, len(recs))
		if err != nil {
			t.Fatalf("re-encoded records: %v", err)
		}
		if err := recordsEqual(again, recs); err != nil {
			t.Fatal(err)
		}
		for i, r := range recs {
			if r.Timestamp < minTS || r.Timestamp > maxTS {
				t.Fatalf("record %d timestamp %d outside [%d, %d]", i, r.Timestamp, minTS, maxTS)
			}
		}
	})
}

func FuzzDecodeRecords(f *testing.F) {
	f.Fuzz(func(t *testing.T, count uint16, b []byte) {
		recs, err := DecodeRecords(b, int(count))
		if err != nil {
			mustCorrupt(t, "DecodeRecords", err)
			return
		}
		if len(recs) != int(count) {
			t.Fatalf("%d records, want %d", len(recs), count)
		}
		raw := encodeRecords(recs)
		if len(raw) > len(b) {
			t.Fatalf("canonical re-encoding of %d bytes is longer than the %d-byte input", len(raw), len(b))
		}
		again, err := DecodeRecords(raw, len(recs))
		if err != nil {
			t.Fatalf("re-encoded records: %v", err)
		}
		if err := recordsEqual(again, recs); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzReadBundle reads a whole object the way a reader does.
func FuzzReadBundle(f *testing.F) {
	f.Fuzz(func(t *testing.T, obj []byte) {
		env, frames, err := ParseBundle(obj)
		if err != nil {
			mustCorrupt(t, "ParseBundle", err)
			return
		}
		if env.Size != uint64(len(obj)) {
			t.Fatalf("accepted size %d for %d bytes", env.Size, len(obj))
		}
		for _, fr := range frames {
			if _, err := DecodeFrame(fr, obj[fr.Offset:fr.End()]); err != nil {
				mustCorrupt(t, "DecodeFrame", err)
			}
		}
	})
}

// FuzzRoundTrip builds a bundle from fuzzed records and reads it back.
// data is cut into records: each record takes a length byte, then a header
// flag byte, then that many body bytes.
func FuzzRoundTrip(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte, codec byte, perFrame byte, ts int64) {
		var recs []Record
		for len(data) >= 2 {
			n, hdr := int(data[0]), data[1]
			data = data[2:]
			n = min(n, len(data))
			r := Record{Timestamp: ts + int64(len(recs))%7 - 3, Body: data[:n]}
			if hdr&1 != 0 {
				r.Headers = []Header{{Name: []byte{hdr}, Value: data[:n/2]}}
			}
			recs = append(recs, r)
			data = data[n:]
		}
		if len(recs) == 0 {
			return
		}
		per := int(perFrame%8) + 1
		var frames []testFrame
		for i := 0; i < len(recs); i += per {
			stream := "s" + strconv.Itoa(i%3)
			frames = append(frames, testFrame{stream, uint64(i), recs[i:min(i+per, len(recs))], Codec(codec % 3)})
		}
		obj, written := buildBundle(t, 1, 2, testNonce, frames)
		_, parsed, err := ParseBundle(obj)
		if err != nil {
			t.Fatalf("ParseBundle: %v", err)
		}
		for i, fr := range parsed {
			if fr != written[i] {
				t.Fatalf("frame %d: parsed %+v, written %+v", i, fr, written[i])
			}
			got, err := DecodeFrame(fr, obj[fr.Offset:fr.End()])
			if err != nil {
				t.Fatalf("DecodeFrame %d: %v", i, err)
			}
			if err := recordsEqual(got, frames[i].recs); err != nil {
				t.Fatalf("frame %d: %v", i, err)
			}
		}
	})
}

var writeCorpus = flag.Bool("envelope.writecorpus", false, "rewrite the generated seed files under testdata/fuzz")

// TestWriteFuzzCorpus regenerates the committed seed corpus from real
// encodings: go test ./envelope -run TestWriteFuzzCorpus -envelope.writecorpus
// It leaves files whose names do not start with "seed-" (crashers the fuzzer
// found, kept as regressions) alone.
func TestWriteFuzzCorpus(t *testing.T) {
	if !*writeCorpus {
		t.Skip("run with -envelope.writecorpus to rewrite the seed corpus")
	}
	for name, seeds := range fuzzSeeds(t) {
		dir := filepath.Join("testdata", "fuzz", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		old, _ := filepath.Glob(filepath.Join(dir, "seed-*"))
		for _, p := range old {
			os.Remove(p)
		}
		for i, s := range seeds {
			p := filepath.Join(dir, fmt.Sprintf("seed-%02d-%s", i, s.name))
			if err := os.WriteFile(p, marshalCorpus(s.args...), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

type fuzzSeed struct {
	name string
	args []any
}

func fuzzSeeds(t *testing.T) map[string][]fuzzSeed {
	seeds := map[string][]fuzzSeed{}
	add := func(target, name string, args ...any) {
		seeds[target] = append(seeds[target], fuzzSeed{name, args})
	}

	mixed, _ := buildBundle(t, 1, 2, testNonce, []testFrame{
		{"a", 0, jsonRecords(1, 3, 60), CodecNone},
		{"b", 10, jsonRecords(2, 4, 80), CodecS2},
		{"c", 20, jsonRecords(3, 4, 80), CodecZstd},
		{"a", 3, []Record{{Timestamp: -1}}, CodecNone},
	})
	zstdBig, _ := buildBundle(t, 5, 6, testNonce, []testFrame{{"big", 0, jsonRecords(4, 3, 200), CodecZstd}})
	empty, _ := NewBundleWriter().Finish(7, 8, testNonce)
	bundles := map[string][]byte{"mixed": mixed, "zstd": zstdBig, "empty": empty}

	add("FuzzParseEnvelope", "flight", mixed[:EnvelopeSize], true)
	add("FuzzParseEnvelope", "poison", Poison(3, 4, testNonce), true)
	add("FuzzParseEnvelope", "settled", Envelope{Kind: KindSettled, Epoch: 1, Slot: 1, Size: 100, FooterOffset: 80, FooterLength: 20}.AppendTo(nil), true)
	add("FuzzParseEnvelope", "short", mixed[:EnvelopeSize-1], false)

	for _, name := range []string{"mixed", "zstd", "empty"} {
		obj := bundles[name]
		env, frames, err := ParseBundle(obj)
		if err != nil {
			t.Fatal(err)
		}
		add("FuzzReadBundle", name, obj)
		add("FuzzParseFooter", name, env.FooterOffset, obj[env.FooterOffset:], true)
		for i, fr := range frames {
			add("FuzzDecodeFrame", fmt.Sprintf("%s-%d-%s", name, i, fr.Codec),
				byte(fr.Codec), fr.Count, fr.RawLength, fr.MinTimestamp, fr.MaxTimestamp, obj[fr.Offset:fr.End()], false)
		}
	}
	add("FuzzReadBundle", "poison", Poison(3, 4, testNonce))
	add("FuzzReadSettled", "three-frames", buildSettled(t, []testFrame{
		{"s", 7, jsonRecords(6, 3, 80), CodecZstd}, {"s", 10, jsonRecords(7, 2, 80), CodecS2}, {"s", 12, jsonRecords(8, 1, 40), CodecNone}}))
	add("FuzzReadSettled", "flight", mixed)

	add("FuzzDecodeRecords", "json", uint16(3), encodeRecords(jsonRecords(5, 3, 60)))
	add("FuzzDecodeRecords", "headers", uint16(2), encodeRecords([]Record{
		{Timestamp: 1, Headers: []Header{{Name: []byte("k"), Value: []byte("v")}, {Name: []byte("k2")}}, Body: []byte("b")},
		{Timestamp: -1 << 40},
	}))
	add("FuzzDecodeRecords", "empty", uint16(0), []byte{})
	add("FuzzDecodeRecords", "minimal", uint16(1), []byte{0, 0, 0})

	add("FuzzRoundTrip", "text", []byte("\x05\x00hello\x05\x01world\x00\x00\x10\x03json-ish record!"), byte(1), byte(1), int64(1_760_000_000_000))
	add("FuzzRoundTrip", "zstd", bytes.Repeat([]byte("\x20\x01{\"k\":\"value\",\"n\":12345678901}"), 12), byte(2), byte(3), int64(-5))
	add("FuzzRoundTrip", "none", []byte("\x03\x00abc"), byte(0), byte(0), int64(0))
	return seeds
}

// marshalCorpus writes values in the "go test fuzz v1" corpus file format.
func marshalCorpus(args ...any) []byte {
	var b bytes.Buffer
	b.WriteString("go test fuzz v1\n")
	for _, a := range args {
		switch v := a.(type) {
		case []byte:
			fmt.Fprintf(&b, "[]byte(%q)\n", v)
		case byte:
			fmt.Fprintf(&b, "byte(%q)\n", v)
		case bool, uint16, uint32, uint64, int64:
			fmt.Fprintf(&b, "%T(%v)\n", v, v)
		default:
			panic(fmt.Sprintf("corpus value of type %T", a))
		}
	}
	return b.Bytes()
}
