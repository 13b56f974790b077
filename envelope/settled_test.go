package envelope

import (
	"errors"
	"testing"
)

func buildSettled(tb testing.TB, frames []testFrame) []byte {
	tb.Helper()
	w := NewBundleWriter()
	for _, f := range frames {
		lo, hi := tsBounds(f.recs)
		if err := w.AddFrame(f.stream, f.firstSeq, len(f.recs), lo, hi, encodeRecords(f.recs), f.codec); err != nil {
			tb.Fatalf("AddFrame(%q, %d): %v", f.stream, f.firstSeq, err)
		}
	}
	obj, _ := w.FinishSettled(frames[0].firstSeq, testNonce)
	return obj
}

// TestSettledRoundTrip: a settled object reads back frame by frame, its
// footer (the block index) alone locates every frame, and what is not a
// settled object of one contiguous stream is refused as corruption.
func TestSettledRoundTrip(t *testing.T) {
	obj := buildSettled(t, []testFrame{
		{"s\x1fi0123456789abcdef", 100, jsonRecords(1, 5, 80), CodecZstd},
		{"s\x1fi0123456789abcdef", 105, jsonRecords(2, 3, 80), CodecS2},
		{"s\x1fi0123456789abcdef", 108, jsonRecords(3, 1, 80), CodecNone},
	})
	env, frames, err := ParseSettled(obj)
	if err != nil {
		t.Fatal(err)
	}
	if env.Kind != KindSettled || env.Slot != 100 || env.Epoch != 0 || len(frames) != 3 {
		t.Fatalf("envelope %+v, %d frames", env, len(frames))
	}
	idx, err := ParseSettledFooter(env, obj[env.FooterOffset:])
	if err != nil || len(idx) != 3 || idx[2].FirstSeq != 108 {
		t.Fatalf("footer alone: %+v %v", idx, err)
	}
	for i, f := range frames {
		recs, err := DecodeFrame(f, obj[f.Offset:f.End()])
		if err != nil || len(recs) != int(f.Count) {
			t.Fatalf("frame %d: %d records, %v", i, len(recs), err)
		}
	}
	if _, _, err := ParseBundle(obj); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a settled object parsed as a flight: %v", err)
	}
	flight, _ := buildBundle(t, 1, 2, testNonce, []testFrame{{"a", 0, jsonRecords(1, 2, 60), CodecNone}})
	if _, _, err := ParseSettled(flight); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a flight parsed as settled: %v", err)
	}
	for name, frames := range map[string][]testFrame{
		"two streams": {{"a", 0, jsonRecords(1, 2, 60), CodecNone}, {"b", 2, jsonRecords(2, 2, 60), CodecNone}},
		"a gap":       {{"a", 0, jsonRecords(1, 2, 60), CodecNone}, {"a", 3, jsonRecords(2, 2, 60), CodecNone}},
	} {
		if _, _, err := ParseSettled(buildSettled(t, frames)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v", name, err)
		}
	}
	bad := append([]byte(nil), obj...)
	bad[len(bad)-10] ^= 1
	if _, _, err := ParseSettled(bad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a flipped footer byte: %v", err)
	}
}

func FuzzReadSettled(f *testing.F) {
	f.Fuzz(func(t *testing.T, obj []byte) {
		env, frames, err := ParseSettled(obj)
		if err != nil {
			mustCorrupt(t, "ParseSettled", err)
			return
		}
		next := env.Slot
		for _, fr := range frames {
			if fr.Stream != frames[0].Stream || fr.FirstSeq != next {
				t.Fatalf("accepted frame %+v after %d", fr, next)
			}
			next += uint64(fr.Count)
			if _, err := DecodeFrame(fr, obj[fr.Offset:fr.End()]); err != nil {
				mustCorrupt(t, "DecodeFrame", err)
			}
		}
	})
}
