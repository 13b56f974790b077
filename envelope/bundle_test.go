package envelope

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math"
	"testing"
)

var allCodecs = []Codec{CodecNone, CodecS2, CodecZstd}

func TestBundleRoundTrip(t *testing.T) {
	random := make([]byte, 4096)
	rand.Read(random)
	for _, codec := range allCodecs {
		cases := []struct {
			name   string
			frames []testFrame
		}{
			{"one frame", []testFrame{{"orders", 0, jsonRecords(1, 10, 1024), codec}}},
			{"tiny record", []testFrame{{"s", 5, []Record{{}}, codec}}},
			{"many streams", []testFrame{
				{"a", 0, jsonRecords(2, 3, 200), codec},
				{"b", 100, jsonRecords(3, 40, 1024), codec},
				{"a", 3, jsonRecords(4, 2, 50), codec}, // same stream, next seqs
				{"c/with/slashes", math.MaxUint64 - 1, []Record{{Body: []byte("last")}}, codec},
			}},
			{"incompressible", []testFrame{{"rnd", 0, []Record{{Body: random}}, codec}}},
			{"mixed codecs", []testFrame{
				{"x", 0, jsonRecords(5, 20, 512), CodecS2},
				{"y", 0, jsonRecords(6, 20, 512), codec},
				{"z", 0, jsonRecords(7, 20, 512), CodecZstd},
			}},
		}
		for _, c := range cases {
			t.Run(fmt.Sprintf("codec=%s/%s", codec, c.name), func(t *testing.T) {
				obj, frames := buildBundle(t, 2, 17, testNonce, c.frames)
				env, parsed, err := ParseBundle(obj)
				if err != nil {
					t.Fatal(err)
				}
				if !env.IsFlightOf(2, 17, testNonce) || env.Size != uint64(len(obj)) {
					t.Fatalf("envelope %+v", env)
				}
				if len(parsed) != len(frames) || len(frames) != len(c.frames) {
					t.Fatalf("%d parsed frames, %d written, want %d", len(parsed), len(frames), len(c.frames))
				}
				next := uint64(EnvelopeSize)
				for i, f := range parsed {
					if f != frames[i] {
						t.Fatalf("frame %d: parsed %+v, written %+v", i, f, frames[i])
					}
					if f.Offset != next {
						t.Fatalf("frame %d at %d, want contiguous at %d", i, f.Offset, next)
					}
					next = f.End()
					if f.Codec != CodecNone && f.Codec != c.frames[i].codec {
						t.Fatalf("frame %d codec %s, asked %s", i, f.Codec, c.frames[i].codec)
					}
					if f.Length > f.RawLength {
						t.Fatalf("frame %d stored %d > raw %d", i, f.Length, f.RawLength)
					}
					recs, err := DecodeFrame(f, obj[f.Offset:f.End()])
					if err != nil {
						t.Fatalf("frame %d: %v", i, err)
					}
					if err := recordsEqual(recs, c.frames[i].recs); err != nil {
						t.Fatalf("frame %d: %v", i, err)
					}
				}
				if next != env.FooterOffset {
					t.Fatalf("frames end at %d, footer at %d", next, env.FooterOffset)
				}
			})
		}
	}
}

func TestIncompressibleFallsBackToNone(t *testing.T) {
	random := make([]byte, 4096)
	rand.Read(random)
	for _, codec := range allCodecs {
		_, frames := buildBundle(t, 1, 1, testNonce, []testFrame{{"r", 0, []Record{{Body: random}}, codec}})
		if frames[0].Codec != CodecNone || frames[0].Length != frames[0].RawLength {
			t.Fatalf("codec %s on random bytes: stored as %s, %d of %d bytes", codec, frames[0].Codec, frames[0].Length, frames[0].RawLength)
		}
	}
	for _, codec := range []Codec{CodecS2, CodecZstd} {
		_, frames := buildBundle(t, 1, 1, testNonce, []testFrame{{"j", 0, jsonRecords(1, 20, 1024), codec}})
		if frames[0].Codec != codec {
			t.Fatalf("codec %s on JSON: stored as %s", codec, frames[0].Codec)
		}
	}
}

func TestEmptyBundle(t *testing.T) {
	w := NewBundleWriter()
	obj, frames := w.Finish(1, 2, testNonce)
	if len(frames) != 0 || len(obj) != EnvelopeSize+minFooterBytes {
		t.Fatalf("empty bundle: %d bytes, %d frames", len(obj), len(frames))
	}
	if _, frames, err := ParseBundle(obj); err != nil || len(frames) != 0 {
		t.Fatalf("ParseBundle(empty) = %v, %v", frames, err)
	}
	var zero BundleWriter // the zero value works too
	if _, _, err := ParseBundle(must(zero.Finish(1, 2, testNonce))); err != nil {
		t.Fatal(err)
	}
	if err := zero.AddFrame("s", 0, 1, 0, 0, encodeRecords([]Record{{}}), CodecNone); err != nil {
		t.Fatal(err)
	}
}

func must(obj []byte, _ []FrameInfo) []byte { return obj }

func TestWriterReuse(t *testing.T) {
	w := NewBundleWriter()
	recs := jsonRecords(1, 20, 512)
	add := func(stream string, seq uint64) {
		lo, hi := tsBounds(recs)
		if err := w.AddFrame(stream, seq, len(recs), lo, hi, encodeRecords(recs), CodecS2); err != nil {
			t.Fatal(err)
		}
	}
	add("a", 0)
	first, firstFrames := w.Finish(1, 1, testNonce)
	keep := bytes.Clone(first)
	add("a", 0) // the per-stream seq check resets with the bundle
	add("b", 7)
	second, secondFrames := w.Finish(1, 2, testNonce)
	if !bytes.Equal(first, keep) {
		t.Fatal("reusing the writer modified an earlier object")
	}
	if len(firstFrames) != 1 || len(secondFrames) != 2 {
		t.Fatalf("frames %d and %d", len(firstFrames), len(secondFrames))
	}
	for _, obj := range [][]byte{first, second} {
		if _, _, err := ParseBundle(obj); err != nil {
			t.Fatal(err)
		}
	}
	// A returned object owns its buffer (spare capacity included, for
	// Use): appending to it must not reach the writer's next bundle.
	add("c", 0)
	third, _ := w.Finish(1, 3, testNonce)
	keep3 := bytes.Clone(third)
	_ = append(second, bytes.Repeat([]byte{0xFF}, cap(second)-len(second))...)
	_ = append(first, bytes.Repeat([]byte{0xFF}, cap(first)-len(first))...)
	if !bytes.Equal(third, keep3) {
		t.Fatal("appending to an earlier object modified a later one")
	}
}

func TestAddFrameRejects(t *testing.T) {
	recs := jsonRecords(1, 3, 100)
	good := encodeRecords(recs)
	lo, hi := tsBounds(recs)
	tooManyHeaders := encodeRecords([]Record{{Headers: make([]Header, MaxRecordHeaders+1)}})
	cases := []struct {
		name     string
		stream   string
		firstSeq uint64
		count    int
		lo, hi   int64
		records  []byte
		codec    Codec
	}{
		{"empty stream", "", 0, 3, lo, hi, good, CodecNone},
		{"long stream", string(make([]byte, MaxStreamNameLen+1)), 0, 3, lo, hi, good, CodecNone},
		{"count 0", "s", 0, 0, lo, hi, good, CodecNone},
		{"count short", "s", 0, 2, lo, hi, good, CodecNone},
		{"count long", "s", 0, 4, lo, hi, good, CodecNone},
		{"count huge", "s", 0, math.MaxInt, lo, hi, good, CodecNone},
		{"seq overflow", "s", math.MaxUint64 - 1, 3, lo, hi, good, CodecNone},
		{"min after max", "s", 0, 3, hi, lo, good, CodecNone},
		{"timestamps outside", "s", 0, 3, lo + 1, hi, good, CodecNone},
		{"unknown codec", "s", 0, 3, lo, hi, good, Codec(3)},
		{"garbage", "s", 0, 1, 0, 0, []byte{0xff, 0xff, 0xff}, CodecNone},
		{"too many headers", "s", 0, 1, 0, 0, tooManyHeaders, CodecNone},
		{"seq overlaps earlier frame", "a", 2, 3, lo, hi, good, CodecNone},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := NewBundleWriter()
			if err := w.AddFrame("a", 0, 3, lo, hi, good, CodecNone); err != nil {
				t.Fatal(err)
			}
			err := w.AddFrame(c.stream, c.firstSeq, c.count, c.lo, c.hi, c.records, c.codec)
			if err == nil {
				t.Fatal("AddFrame accepted it")
			}
			if IsCorruption(err) {
				t.Fatalf("encoder error %v wraps ErrCorrupt", err)
			}
			// The rejected frame left no trace.
			obj, frames := w.Finish(1, 1, testNonce)
			if len(frames) != 1 {
				t.Fatalf("%d frames after a rejected AddFrame", len(frames))
			}
			if _, _, err := ParseBundle(obj); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// smallBundle is a bundle with a frame of each codec, small enough to mutate
// byte by byte.
func smallBundle(t testing.TB) []byte {
	obj, _ := buildBundle(t, 1, 2, testNonce, []testFrame{
		{"a", 0, jsonRecords(1, 3, 120), CodecNone},
		{"b", 10, jsonRecords(2, 4, 120), CodecS2},
		{"c", 20, jsonRecords(3, 4, 120), CodecZstd},
	})
	return obj
}

// readAll parses obj and decodes every frame: what a reader does.
func readAll(obj []byte) error {
	_, frames, err := ParseBundle(obj)
	if err != nil {
		return err
	}
	for _, f := range frames {
		if _, err := DecodeFrame(f, obj[f.Offset:f.End()]); err != nil {
			return err
		}
	}
	return nil
}

func TestBundleTruncatedAtEveryLength(t *testing.T) {
	obj := smallBundle(t)
	if err := readAll(obj); err != nil {
		t.Fatal(err)
	}
	for n := range len(obj) {
		_, _, err := ParseBundle(obj[:n])
		mustCorrupt(t, fmt.Sprintf("bundle truncated to %d of %d bytes", n, len(obj)), err)
	}
}

func TestBundleEveryByteFlipDetected(t *testing.T) {
	// Every byte of a bundle is covered by a checksum: the envelope's, a
	// frame's or the footer's. So a reader detects any single flipped byte.
	obj := smallBundle(t)
	for i := range obj {
		b := bytes.Clone(obj)
		b[i] ^= 0x20
		mustCorrupt(t, fmt.Sprintf("byte %d flipped", i), readAll(b))
	}
}

func TestParseFooterRejectsInconsistent(t *testing.T) {
	obj := smallBundle(t)
	env, frames, err := ParseBundle(obj)
	if err != nil {
		t.Fatal(err)
	}
	edit := func(i int, f func(*FrameInfo)) []FrameInfo {
		fs := append([]FrameInfo(nil), frames...)
		f(&fs[i])
		return fs
	}
	cases := []struct {
		name   string
		frames []FrameInfo
	}{
		{"starts inside envelope", edit(0, func(f *FrameInfo) { f.Offset = 10 })},
		{"overlaps predecessor", edit(1, func(f *FrameInfo) { f.Offset-- })},
		{"reaches footer", edit(2, func(f *FrameInfo) { f.Offset = env.FooterOffset - uint64(f.Length) + 1 })},
		{"past footer", edit(2, func(f *FrameInfo) { f.Offset = env.FooterOffset + 1 })},
		{"offset wraps", edit(2, func(f *FrameInfo) { f.Offset = math.MaxUint64 - 2 })},
		{"out of order", []FrameInfo{frames[1], frames[0], frames[2]}},
		{"stream seq overlap", edit(1, func(f *FrameInfo) { f.Stream, f.FirstSeq = "a", 2 })},
		{"empty stream", edit(0, func(f *FrameInfo) { f.Stream = "" })},
		{"long stream", edit(0, func(f *FrameInfo) { f.Stream = string(make([]byte, MaxStreamNameLen+1)) })},
		{"count 0", edit(0, func(f *FrameInfo) { f.Count = 0 })},
		{"count past raw", edit(0, func(f *FrameInfo) { f.Count = f.RawLength })},
		{"seq overflow", edit(0, func(f *FrameInfo) { f.FirstSeq = math.MaxUint64 })},
		{"unknown codec", edit(0, func(f *FrameInfo) { f.Codec = 9 })},
		{"none with raw != stored", edit(0, func(f *FrameInfo) { f.RawLength++ })},
		{"stored > raw", edit(1, func(f *FrameInfo) { f.RawLength = f.Length - 1 })},
		{"raw too large", edit(1, func(f *FrameInfo) { f.RawLength = MaxFrameRawBytes + 1 })},
		{"length 0", edit(1, func(f *FrameInfo) { f.Length = 0 })},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			footer := footerOf(c.frames)
			e := env
			e.FooterLength = uint32(len(footer))
			_, err := ParseFooter(e, footer)
			mustCorrupt(t, c.name, err)
		})
	}

	// Lies in the footer's own framing, each with a valid checksum.
	body := footerOf(frames)
	body = body[:len(body)-footerTrailerBytes]
	framing := map[string][]byte{
		"count too high":  withTrailer(body, uint32(len(frames)+1)),
		"count too low":   withTrailer(body, uint32(len(frames)-1)),
		"count huge":      withTrailer(body, math.MaxUint32),
		"zero with bytes": withTrailer(body, 0),
		"trailing bytes":  withTrailer(append(bytes.Clone(body), 0), uint32(len(frames))),
		"span overflows": withTrailer(appendFrameEntry(nil, FrameInfo{Stream: "s", Count: 1, MinTimestamp: 1, MaxTimestamp: math.MinInt64,
			Offset: 60, Length: 3, RawLength: 3}), 1),
	}
	for name, footer := range framing {
		e := env
		e.FooterLength = uint32(len(footer))
		_, err := ParseFooter(e, footer)
		mustCorrupt(t, name, err)
	}

	// The footer slice must be the one the envelope locates.
	footer := obj[env.FooterOffset:]
	_, err = ParseFooter(env, footer[:len(footer)-1])
	mustCorrupt(t, "short footer", err)
	_, err = ParseFooter(env, append(bytes.Clone(footer), 0))
	mustCorrupt(t, "long footer", err)
	poison := env
	poison.Kind = KindPoison
	_, err = ParseFooter(poison, footer)
	mustCorrupt(t, "footer of poison", err)
}

func withTrailer(entries []byte, count uint32) []byte {
	b := binary.LittleEndian.AppendUint32(bytes.Clone(entries), count)
	return binary.LittleEndian.AppendUint32(b, Checksum(b))
}

func TestDecodeFrameRejectsLies(t *testing.T) {
	obj := smallBundle(t)
	_, frames, err := ParseBundle(obj)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range frames {
		stored := obj[f.Offset:f.End()]
		// recrc re-signs a lie so that the checks past the CRC are reached.
		type lie struct {
			name   string
			info   FrameInfo
			stored []byte
		}
		withCRC := func(name string, info FrameInfo, stored []byte) lie {
			info.CRC = Checksum(stored)
			return lie{name, info, stored}
		}
		lies := []lie{
			{"bad crc", func() FrameInfo { g := f; g.CRC++; return g }(), stored},
			{"short stored", f, stored[:len(stored)-1]},
			withCRC("count+1", func() FrameInfo { g := f; g.Count++; return g }(), stored),
			withCRC("count-1", func() FrameInfo { g := f; g.Count--; return g }(), stored),
			withCRC("max ts too low", func() FrameInfo { g := f; g.MaxTimestamp = g.MinTimestamp - 1; g.MinTimestamp -= 1000; return g }(), stored),
			withCRC("min ts too high", func() FrameInfo { g := f; g.MinTimestamp = g.MaxTimestamp + 1; g.MaxTimestamp += 1000; return g }(), stored),
		}
		if f.Codec != CodecNone {
			lies = append(lies,
				withCRC("raw length +1", func() FrameInfo { g := f; g.RawLength++; return g }(), stored),
				withCRC("raw length -1", func() FrameInfo { g := f; g.RawLength--; return g }(), stored),
				withCRC("truncated stream", func() FrameInfo { g := f; g.Length--; return g }(), stored[:len(stored)-1]),
				withCRC("other codec", func() FrameInfo { g := f; g.Codec = CodecS2 + CodecZstd - f.Codec; return g }(), stored),
			)
		}
		for _, l := range lies {
			_, err := DecodeFrame(l.info, l.stored)
			mustCorrupt(t, fmt.Sprintf("codec %s: %s", f.Codec, l.name), err)
		}
	}
}

func TestDecodeFrameDeclaredLengths(t *testing.T) {
	// A compressed stream declaring a huge decoded size is refused before
	// anything is allocated for it.
	raw := encodeRecords(jsonRecords(1, 10, 200))
	huge := binary.AppendUvarint(nil, 1<<31)
	huge = append(huge, 0, 0, 0, 0)
	info := FrameInfo{Stream: "s", Count: 10, Offset: 60, Length: uint32(len(huge)), RawLength: uint32(len(raw)), Codec: CodecS2,
		MinTimestamp: math.MinInt64, MaxTimestamp: math.MaxInt64, CRC: Checksum(huge)}
	_, err := DecodeFrame(info, huge)
	mustCorrupt(t, "s2 declaring 2 GiB", err)

	// A zstd frame whose header declares more than RawLength.
	w := NewBundleWriter()
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	if err := w.AddFrame("s", 0, 10, lo, hi, raw, CodecZstd); err != nil {
		t.Fatal(err)
	}
	obj, frames := w.Finish(1, 1, testNonce)
	f := frames[0]
	stored := bytes.Clone(obj[f.Offset:f.End()])
	f.RawLength = uint32(len(raw)) * 2
	f.CRC = Checksum(stored)
	_, err = DecodeFrame(f, stored)
	mustCorrupt(t, "zstd declaring other size", err)
}

// TestAddFramePartsIsAddFrameOfTheConcatenation: a frame given in parts,
// with or without Grow, with or without Encoded, renders the very bytes
// AddFrame renders from the parts' concatenation, for every codec.
func TestAddFramePartsIsAddFrameOfTheConcatenation(t *testing.T) {
	recs := jsonRecords(11, 30, 700)
	cuts := [][]int{{30}, {1, 29}, {10, 10, 10}, {1, 1, 1, 27}}
	for _, codec := range allCodecs {
		for _, cut := range cuts {
			for _, grow := range []bool{false, true} {
				for _, encoded := range []bool{false, true} {
					t.Run(fmt.Sprintf("codec=%s/parts=%v/grow=%v/encoded=%v", codec, cut, grow, encoded), func(t *testing.T) {
						lo, hi := tsBounds(recs)
						want := NewBundleWriter()
						if err := want.AddFrame("s", 7, len(recs), lo, hi, encodeRecords(recs), codec); err != nil {
							t.Fatal(err)
						}
						wantObj, _ := want.Finish(1, 2, testNonce)
						w := NewBundleWriter()
						if grow {
							w.Grow(len(wantObj) - EnvelopeSize)
						}
						var parts []FramePart
						at := 0
						for _, n := range cut {
							parts = append(parts, FramePart{Records: encodeRecords(recs[at : at+n]), Count: n, Encoded: encoded})
							at += n
						}
						if err := w.AddFrameParts("s", 7, lo, hi, parts, codec); err != nil {
							t.Fatal(err)
						}
						obj, frames := w.Finish(1, 2, testNonce)
						if !bytes.Equal(obj, wantObj) {
							t.Fatalf("parts render %d bytes, the concatenation %d, and they differ", len(obj), len(wantObj))
						}
						if grow && cap(obj) != len(obj) {
							t.Fatalf("object capacity %d, length %d: grown by more than the bundle", cap(obj), len(obj))
						}
						if _, err := DecodeFrame(frames[0], obj[frames[0].Offset:frames[0].End()]); err != nil {
							t.Fatal(err)
						}
					})
				}
			}
		}
	}
}

// TestAddFramePartsRejects: a part whose count does not match its bytes,
// or whose records lie outside the frame's bounds, is refused unless it is
// vouched for; the bundle is left unchanged.
func TestAddFramePartsRejects(t *testing.T) {
	recs := jsonRecords(12, 4, 300)
	lo, hi := tsBounds(recs)
	good := FramePart{Records: encodeRecords(recs[:2]), Count: 2}
	for _, tc := range []struct {
		name string
		p    FramePart
	}{
		{"count too high", FramePart{Records: encodeRecords(recs[2:]), Count: 3}},
		{"count too low", FramePart{Records: encodeRecords(recs[2:]), Count: 1}},
		{"zero count", FramePart{Records: encodeRecords(recs[2:]), Count: 0}},
		{"late timestamp", FramePart{Records: encodeRecords([]Record{{Timestamp: hi + 1}}), Count: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := NewBundleWriter()
			if err := w.AddFrameParts("s", 0, lo, hi, []FramePart{good, tc.p}, CodecNone); err == nil {
				t.Fatal("accepted")
			}
			if obj, frames := w.Finish(1, 1, testNonce); len(frames) != 0 {
				t.Fatalf("a refused frame was kept: %d frames, %d bytes", len(frames), len(obj))
			}
		})
	}
	if err := NewBundleWriter().AddFrameParts("s", 0, lo, hi, nil, CodecNone); err == nil {
		t.Fatal("no parts accepted")
	}
}

// TestUseRecyclesTheBuffer: a bundle written into a recycled object's
// buffer (garbage in it) is the same bytes as one written afresh, in that
// buffer's memory; a buffer too small for the envelope is ignored.
func TestUseRecyclesTheBuffer(t *testing.T) {
	recs := jsonRecords(13, 20, 500)
	lo, hi := tsBounds(recs)
	render := func(w *BundleWriter) []byte {
		if err := w.AddFrame("s", 0, len(recs), lo, hi, encodeRecords(recs), CodecNone); err != nil {
			t.Fatal(err)
		}
		obj, _ := w.Finish(3, 4, testNonce)
		return obj
	}
	want := render(NewBundleWriter())
	old := bytes.Repeat([]byte{0xA5}, 2*len(want))
	w := NewBundleWriter()
	w.Use(old[:0])
	got := render(w)
	if !bytes.Equal(got, want) {
		t.Fatal("a bundle written into a recycled buffer differs")
	}
	if &got[0] != &old[0] {
		t.Fatal("the recycled buffer was not used")
	}
	w.Use(make([]byte, 0, EnvelopeSize-1))
	if got := render(w); !bytes.Equal(got, want) {
		t.Fatal("a bundle after a too-small buffer differs")
	}
}
