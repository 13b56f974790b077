package envelope

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
)

// jsonRecords returns n JSON-like records of about size bytes each, from a
// fixed seed, shaped like service logs: repeated keys, a few varying values.
func jsonRecords(seed uint64, n, size int) []Record {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	levels := []string{"debug", "info", "info", "info", "warn", "error"}
	paths := []string{"/v1/orders", "/v1/orders/{id}", "/v1/users", "/healthz", "/v1/payments/authorize"}
	words := []string{"cache", "miss", "upstream", "retry", "timeout", "ok", "accepted", "queued", "flushed", "slot", "epoch", "committed"}
	recs := make([]Record, n)
	ts := int64(1_760_000_000_000)
	for i := range recs {
		ts += int64(rng.IntN(5))
		body := fmt.Appendf(nil, `{"ts":%d,"level":%q,"service":"checkout","host":"ip-10-0-%d-%d","path":%q,"status":%d,"latency_ms":%.3f,"trace_id":"%016x%016x","user_id":%d,"msg":"`,
			ts, levels[rng.IntN(len(levels))], rng.IntN(4), rng.IntN(256), paths[rng.IntN(len(paths))],
			[]int{200, 200, 200, 201, 204, 404, 500}[rng.IntN(7)], rng.Float64()*250, rng.Uint64(), rng.Uint64(), rng.IntN(1_000_000))
		for len(body) < size-2 {
			body = append(body, words[rng.IntN(len(words))]...)
			body = append(body, ' ')
		}
		body = append(body[:min(len(body), size-2)], '"', '}')
		recs[i] = Record{
			Timestamp: ts,
			Headers: []Header{
				{Name: []byte("content-type"), Value: []byte("application/json")},
				{Name: []byte("producer"), Value: fmt.Appendf(nil, "svc-%d", rng.IntN(8))},
			},
			Body: body,
		}
	}
	return recs
}

func encodeRecords(recs []Record) []byte {
	n := 0
	for _, r := range recs {
		n += EncodedRecordSize(r)
	}
	b := make([]byte, 0, n)
	for _, r := range recs {
		b = AppendRecord(b, r)
	}
	return b
}

func tsBounds(recs []Record) (lo, hi int64) {
	lo, hi = recs[0].Timestamp, recs[0].Timestamp
	for _, r := range recs {
		lo, hi = min(lo, r.Timestamp), max(hi, r.Timestamp)
	}
	return lo, hi
}

// testFrame is one frame a test adds to a bundle.
type testFrame struct {
	stream   string
	firstSeq uint64
	recs     []Record
	codec    Codec
}

func buildBundle(tb testing.TB, epoch, slot uint64, n Nonce, frames []testFrame) ([]byte, []FrameInfo) {
	tb.Helper()
	w := NewBundleWriter()
	for _, f := range frames {
		lo, hi := tsBounds(f.recs)
		if err := w.AddFrame(f.stream, f.firstSeq, len(f.recs), lo, hi, encodeRecords(f.recs), f.codec); err != nil {
			tb.Fatalf("AddFrame(%q, %d): %v", f.stream, f.firstSeq, err)
		}
	}
	return w.Finish(epoch, slot, n)
}

// footerOf renders a footer from frame entries, with a valid checksum, so
// tests can lie in any field but the checksum.
func footerOf(frames []FrameInfo) []byte {
	var b []byte
	for _, f := range frames {
		b = appendFrameEntry(b, f)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(frames)))
	return binary.LittleEndian.AppendUint32(b, Checksum(b))
}

func recordsEqual(a, b []Record) error {
	if len(a) != len(b) {
		return fmt.Errorf("%d records, want %d", len(a), len(b))
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Timestamp != y.Timestamp || string(x.Body) != string(y.Body) || len(x.Headers) != len(y.Headers) {
			return fmt.Errorf("record %d: got %+v, want %+v", i, x, y)
		}
		for j := range x.Headers {
			if string(x.Headers[j].Name) != string(y.Headers[j].Name) || string(x.Headers[j].Value) != string(y.Headers[j].Value) {
				return fmt.Errorf("record %d header %d: got %q=%q, want %q=%q", i, j,
					x.Headers[j].Name, x.Headers[j].Value, y.Headers[j].Name, y.Headers[j].Value)
			}
		}
	}
	return nil
}

func mustCorrupt(tb testing.TB, what string, err error) {
	tb.Helper()
	if err == nil {
		tb.Fatalf("%s: no error, want corruption", what)
	}
	if !IsCorruption(err) {
		tb.Fatalf("%s: error %v does not wrap ErrCorrupt", what, err)
	}
	if msg := err.Error(); len(msg) < 10 || msg[:10] != "envelope: " {
		tb.Fatalf("%s: message %q does not start with \"envelope: \"", what, msg)
	}
}

var testNonce = Nonce{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
