package envelope

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

// bundleWithFences renders a flight of two streams' frames with producer
// marks and fence marks; producers false leaves the producer marks out.
func bundleWithFences(t testing.TB, producers bool) []byte {
	t.Helper()
	w := NewBundleWriter()
	recs := []Record{{Timestamp: 1, Body: []byte("a")}, {Timestamp: 2, Body: []byte("b")}, {Timestamp: 3, Body: []byte("c")}}
	if err := w.AddFrame("s1", 10, 3, 1, 3, encodeRecords(recs), CodecNone); err != nil {
		t.Fatal(err)
	}
	if producers {
		if err := w.MarkProducer(10, 1, "p1", 7); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.MarkFence(11, "tok-b"); err != nil {
		t.Fatal(err)
	}
	if err := w.MarkFence(12, ""); err != nil {
		t.Fatal(err)
	}
	if err := w.AddFrame("s2", 0, 2, 1, 2, encodeRecords(recs[:2]), CodecS2); err != nil {
		t.Fatal(err)
	}
	if err := w.MarkFence(0, "x"); err != nil {
		t.Fatal(err)
	}
	obj, _ := w.Finish(3, 4, Nonce{1})
	return obj
}

func TestFenceMarksRoundTrip(t *testing.T) {
	for _, producers := range []bool{true, false} {
		obj := bundleWithFences(t, producers)
		env, frames, marks, err := ParseBundleProducers(obj)
		if err != nil {
			t.Fatal(err)
		}
		wantFlags := FlagFences
		if producers {
			wantFlags |= FlagProducers
		}
		if env.Flags != wantFlags || len(frames) != 2 || len(marks) != map[bool]int{true: 1, false: 0}[producers] {
			t.Fatalf("producers %v: flags %#x, %d frames, producer marks %+v", producers, env.Flags, len(frames), marks)
		}
		fences, err := ParseFences(env, obj[env.FooterOffset:env.Size], frames)
		if err != nil {
			t.Fatal(err)
		}
		want := []FenceMark{{"s1", 11, "tok-b"}, {"s1", 12, ""}, {"s2", 0, "x"}}
		if len(fences) != len(want) {
			t.Fatalf("fences %+v, want %+v", fences, want)
		}
		for i := range want {
			if fences[i] != want[i] {
				t.Fatalf("fence %d: %+v, want %+v", i, fences[i], want[i])
			}
		}
	}
}

func TestMarkFenceRefuses(t *testing.T) {
	w := NewBundleWriter()
	if err := w.MarkFence(0, "a"); err == nil {
		t.Fatal("a fence mark with no frame was accepted")
	}
	recs := []Record{{Timestamp: 1, Body: []byte("a")}, {Timestamp: 2, Body: []byte("b")}}
	if err := w.AddFrame("s", 5, 2, 1, 2, encodeRecords(recs), CodecNone); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		seq   uint64
		token string
	}{{4, "a"}, {7, "a"}, {5, strings.Repeat("t", MaxFencingTokenLen+1)}} {
		if err := w.MarkFence(c.seq, c.token); err == nil {
			t.Fatalf("fence mark at %d with a %d-byte token accepted", c.seq, len(c.token))
		}
	}
	if err := w.MarkFence(6, strings.Repeat("t", MaxFencingTokenLen)); err != nil {
		t.Fatal(err)
	}
	if err := w.MarkFence(5, "a"); err == nil {
		t.Fatal("a fence mark before the previous one was accepted")
	}
}

func FuzzParseFences(f *testing.F) {
	for _, producers := range []bool{true, false} {
		obj := bundleWithFences(f, producers)
		env, _ := ParseEnvelope(obj)
		f.Add(obj[env.FooterOffset:], env.Flags, true)
	}
	obj := bundleWithMarks(f)
	env, _ := ParseEnvelope(obj)
	f.Add(obj[env.FooterOffset:], env.Flags|FlagFences, true)
	f.Fuzz(func(t *testing.T, footer []byte, flags uint8, resign bool) {
		if resign && len(footer) >= 4 {
			footer = bytes.Clone(footer)
			binary.LittleEndian.PutUint32(footer[len(footer)-4:], Checksum(footer[:len(footer)-4]))
		}
		e := Envelope{Kind: KindFlight, Flags: flags & knownFlags, FooterOffset: env.FooterOffset, FooterLength: uint32(len(footer)),
			Size: env.FooterOffset + uint64(len(footer))}
		frames, err := ParseFooter(e, footer)
		if err != nil {
			mustCorrupt(t, "ParseFooter", err)
			return
		}
		if _, err := ParseProducers(e, footer, frames); err != nil {
			mustCorrupt(t, "ParseProducers", err)
		}
		marks, err := ParseFences(e, footer, frames)
		if err != nil {
			mustCorrupt(t, "ParseFences", err)
			return
		}
		for i, m := range marks {
			ok := false
			for _, fr := range frames {
				if fr.Stream == m.Stream && m.Seq >= fr.FirstSeq && m.Seq < fr.FirstSeq+uint64(fr.Count) {
					ok = true
				}
			}
			if !ok || len(m.Token) > MaxFencingTokenLen {
				t.Fatalf("fence mark %d %+v accepted outside the frames %+v", i, m, frames)
			}
		}
	})
}
