package envelope

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// bundleWithMarks renders a flight of two streams' frames, with producer
// marks on some of their records.
func bundleWithMarks(t testing.TB) []byte {
	t.Helper()
	w := NewBundleWriter()
	recs := []Record{{Timestamp: 1, Body: []byte("a")}, {Timestamp: 2, Body: []byte("b")}, {Timestamp: 3, Body: []byte("c")}}
	if err := w.AddFrame("s1", 10, 3, 1, 3, encodeRecords(recs), CodecNone); err != nil {
		t.Fatal(err)
	}
	if err := w.MarkProducer(10, 1, "p1", 7); err != nil {
		t.Fatal(err)
	}
	if err := w.MarkProducer(11, 2, "p2", 1); err != nil {
		t.Fatal(err)
	}
	if err := w.AddFrame("s2", 0, 2, 1, 2, encodeRecords(recs[:2]), CodecS2); err != nil {
		t.Fatal(err)
	}
	if err := w.MarkProducer(1, 1, "p1", 8); err != nil {
		t.Fatal(err)
	}
	obj, _ := w.Finish(3, 4, Nonce{1})
	return obj
}

func TestProducerMarksRoundTrip(t *testing.T) {
	obj := bundleWithMarks(t)
	env, frames, marks, err := ParseBundleProducers(obj)
	if err != nil {
		t.Fatal(err)
	}
	if env.Flags != FlagProducers || len(frames) != 2 {
		t.Fatalf("flags %#x, %d frames", env.Flags, len(frames))
	}
	want := []ProducerMark{{"s1", 10, 1, "p1", 7}, {"s1", 11, 2, "p2", 1}, {"s2", 1, 1, "p1", 8}}
	if len(marks) != len(want) {
		t.Fatalf("marks %+v, want %+v", marks, want)
	}
	for i := range want {
		if marks[i] != want[i] {
			t.Fatalf("mark %d: %+v, want %+v", i, marks[i], want[i])
		}
	}
	for _, f := range frames { // the frames read as before
		if _, err := DecodeFrame(f, obj[f.Offset:f.End()]); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBundleWithoutMarksHasNoFlag(t *testing.T) {
	w := NewBundleWriter()
	if err := w.AddFrame("s", 0, 1, 1, 1, encodeRecords([]Record{{Timestamp: 1}}), CodecNone); err != nil {
		t.Fatal(err)
	}
	obj, _ := w.Finish(1, 0, Nonce{})
	env, frames, marks, err := ParseBundleProducers(obj)
	if err != nil || env.Flags != 0 || len(frames) != 1 || marks != nil {
		t.Fatalf("flags %#x, %d frames, marks %v, err %v", env.Flags, len(frames), marks, err)
	}
	// A writer reused after a bundle with marks starts without them.
	_ = bundleWithMarks(t)
}

func TestMarkProducerRefuses(t *testing.T) {
	w := NewBundleWriter()
	if err := w.MarkProducer(0, 1, "p", 1); err == nil {
		t.Fatal("mark with no frame accepted")
	}
	if err := w.AddFrame("s", 5, 2, 1, 1, encodeRecords([]Record{{Timestamp: 1}, {Timestamp: 1}}), CodecNone); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		first uint64
		count int
		id    string
	}{{4, 1, "p"}, {6, 2, "p"}, {5, 0, "p"}, {5, 1, ""}, {5, 1, string(make([]byte, MaxProducerIDLen+1))}} {
		if err := w.MarkProducer(c.first, c.count, c.id, 1); err == nil {
			t.Errorf("mark %+v accepted", c)
		}
	}
	if err := w.MarkProducer(5, 2, "p", 1); err != nil {
		t.Fatal(err)
	}
	if err := w.MarkProducer(6, 1, "q", 1); err == nil {
		t.Error("overlapping mark accepted")
	}
}

func TestProducerFlagOnlyOnFlights(t *testing.T) {
	e := Envelope{Kind: KindPoison, Flags: FlagProducers, Size: EnvelopeSize}
	if _, err := ParseEnvelope(e.AppendTo(nil)); !IsCorruption(err) {
		t.Fatalf("poison with the producers flag: %v", err)
	}
	e = Envelope{Kind: KindFlight, Flags: 4, Size: 100, FooterOffset: 60, FooterLength: 40}
	if _, err := ParseEnvelope(e.AppendTo(nil)); !IsCorruption(err) {
		t.Fatalf("unknown flag: %v", err)
	}
}

func FuzzParseProducers(f *testing.F) {
	obj := bundleWithMarks(f)
	env, _ := ParseEnvelope(obj)
	f.Add(obj[env.FooterOffset:], uint8(FlagProducers), true)
	f.Add(obj[env.FooterOffset:], uint8(0), false)
	f.Fuzz(func(t *testing.T, footer []byte, flags uint8, resign bool) {
		if resign && len(footer) >= 4 {
			footer = bytes.Clone(footer)
			binary.LittleEndian.PutUint32(footer[len(footer)-4:], Checksum(footer[:len(footer)-4]))
		}
		e := Envelope{Kind: KindFlight, Flags: flags & FlagProducers, FooterOffset: env.FooterOffset, FooterLength: uint32(len(footer)),
			Size: env.FooterOffset + uint64(len(footer))}
		frames, err := ParseFooter(e, footer)
		if err != nil {
			mustCorrupt(t, "ParseFooter", err)
			return
		}
		marks, err := ParseProducers(e, footer, frames)
		if err != nil {
			mustCorrupt(t, "ParseProducers", err)
			return
		}
		for i, m := range marks {
			ok := false
			for _, fr := range frames {
				if fr.Stream == m.Stream && m.FirstSeq >= fr.FirstSeq && m.FirstSeq+uint64(m.Count) <= fr.FirstSeq+uint64(fr.Count) {
					ok = true
				}
			}
			if !ok || m.Count == 0 || len(m.ID) == 0 || len(m.ID) > MaxProducerIDLen {
				t.Fatalf("mark %d %+v accepted outside the frames %+v", i, m, frames)
			}
		}
	})
}
