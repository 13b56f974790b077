package envelope

import (
	"testing"

	"pgregory.net/rapid"
)

func genRecord() *rapid.Generator[Record] {
	bytesGen := rapid.SliceOfN(rapid.Byte(), 0, 64)
	return rapid.Custom(func(t *rapid.T) Record {
		n := rapid.IntRange(0, 4).Draw(t, "headers")
		var hs []Header
		for range n {
			hs = append(hs, Header{Name: bytesGen.Draw(t, "name"), Value: bytesGen.Draw(t, "value")})
		}
		return Record{
			Timestamp: rapid.Int64().Draw(t, "ts"),
			Headers:   hs,
			Body:      rapid.SliceOfN(rapid.Byte(), 0, 2048).Draw(t, "body"),
		}
	})
}

// TestPropertyBundleRoundTrip: whatever frames a writer accepts, a reader
// gets back exactly, at the offsets and with the metadata the writer
// reported.
func TestPropertyBundleRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w := NewBundleWriter()
		nframes := rapid.IntRange(0, 6).Draw(t, "frames")
		streams := []string{"a", "b", "stream/with/a/longer/name"}
		next := map[string]uint64{}
		var want [][]Record
		for range nframes {
			stream := rapid.SampledFrom(streams).Draw(t, "stream")
			recs := rapid.SliceOfN(genRecord(), 1, 20).Draw(t, "records")
			codec := rapid.SampledFrom(allCodecs).Draw(t, "codec")
			seq := next[stream] + rapid.Uint64Range(0, 3).Draw(t, "gap")
			lo, hi := tsBounds(recs)
			raw := encodeRecords(recs)
			if err := w.AddFrame(stream, seq, len(recs), lo, hi, raw, codec); err != nil {
				t.Fatalf("AddFrame: %v", err)
			}
			next[stream] = seq + uint64(len(recs))
			want = append(want, recs)
		}
		epoch, slot := rapid.Uint64().Draw(t, "epoch"), rapid.Uint64().Draw(t, "slot")
		obj, frames := w.Finish(epoch, slot, testNonce)
		env, parsed, err := ParseBundle(obj)
		if err != nil {
			t.Fatalf("ParseBundle: %v", err)
		}
		if !env.IsFlightOf(epoch, slot, testNonce) {
			t.Fatalf("envelope %+v", env)
		}
		if len(parsed) != len(want) {
			t.Fatalf("%d frames, want %d", len(parsed), len(want))
		}
		for i, f := range parsed {
			if f != frames[i] {
				t.Fatalf("frame %d: parsed %+v, written %+v", i, f, frames[i])
			}
			recs, err := DecodeFrame(f, obj[f.Offset:f.End()])
			if err != nil {
				t.Fatalf("DecodeFrame %d: %v", i, err)
			}
			if err := recordsEqual(recs, want[i]); err != nil {
				t.Fatalf("frame %d: %v", i, err)
			}
		}
	})
}

func TestPropertyRecordSize(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := genRecord().Draw(t, "record")
		prefix := rapid.SliceOfN(rapid.Byte(), 0, 8).Draw(t, "prefix")
		b := AppendRecord(append([]byte(nil), prefix...), r)
		if got := len(b) - len(prefix); got != EncodedRecordSize(r) {
			t.Fatalf("appended %d bytes, EncodedRecordSize %d", got, EncodedRecordSize(r))
		}
		recs, err := DecodeRecords(b[len(prefix):], 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := recordsEqual(recs, []Record{r}); err != nil {
			t.Fatal(err)
		}
	})
}
