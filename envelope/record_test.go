package envelope

import (
	"bytes"
	"encoding/binary"
	"math"
	"strings"
	"testing"
)

func TestRecordRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		recs []Record
	}{
		{"empty record", []Record{{}}},
		{"body only", []Record{{Timestamp: 1, Body: []byte("hello")}}},
		{"negative timestamp", []Record{{Timestamp: -5, Body: []byte("x")}}},
		{"extreme timestamps", []Record{{Timestamp: math.MinInt64}, {Timestamp: math.MaxInt64}}},
		{"headers", []Record{{Timestamp: 1_760_000_000_000, Headers: []Header{
			{Name: []byte("a"), Value: []byte("1")},
			{Name: []byte("a"), Value: nil},
			{Name: nil, Value: []byte("v")},
		}, Body: []byte("{}")}}},
		{"max headers", []Record{{Headers: make([]Header, MaxRecordHeaders)}}},
		{"long body", []Record{{Body: bytes.Repeat([]byte("z"), 100_000)}}},
		{"json", jsonRecords(1, 50, 1024)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := encodeRecords(c.recs)
			size := 0
			for _, r := range c.recs {
				size += EncodedRecordSize(r)
			}
			if size != len(b) {
				t.Fatalf("EncodedRecordSize sum %d, encoding %d bytes", size, len(b))
			}
			got, err := DecodeRecords(b, len(c.recs))
			if err != nil {
				t.Fatal(err)
			}
			if err := recordsEqual(got, c.recs); err != nil {
				t.Fatal(err)
			}
			// Decoded slices alias b but have clipped capacity.
			for _, r := range got {
				if len(r.Body) > 0 && cap(r.Body) != len(r.Body) {
					t.Fatalf("body capacity %d, len %d", cap(r.Body), len(r.Body))
				}
			}
		})
	}
}

func TestAppendRecordDoesNotAllocate(t *testing.T) {
	r := jsonRecords(2, 1, 1024)[0]
	buf := make([]byte, 0, 4096)
	allocs := testing.AllocsPerRun(100, func() {
		buf = AppendRecord(buf[:0], r)
		_ = EncodedRecordSize(r)
	})
	if allocs != 0 {
		t.Fatalf("AppendRecord into a sized buffer: %v allocations", allocs)
	}
}

func TestDecodeRecordsAllocations(t *testing.T) {
	recs := jsonRecords(3, 100, 512)
	b := encodeRecords(recs)
	allocs := testing.AllocsPerRun(20, func() {
		if _, err := DecodeRecords(b, len(recs)); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 2 { // the []Record and the shared []Header
		t.Fatalf("DecodeRecords: %v allocations, want at most 2", allocs)
	}
}

func TestDecodeRecordsRejects(t *testing.T) {
	recs := jsonRecords(4, 5, 100)
	good := encodeRecords(recs)
	for n := range len(good) {
		_, err := DecodeRecords(good[:n], len(recs))
		mustCorrupt(t, "truncated records", err)
	}
	for _, count := range []int{-1, 0, len(recs) - 1, len(recs) + 1, MaxFrameRecords + 1, math.MaxInt} {
		_, err := DecodeRecords(good, count)
		mustCorrupt(t, "wrong count", err)
	}
	if recs, err := DecodeRecords(nil, 0); err != nil || recs != nil {
		t.Fatalf("DecodeRecords(nil, 0) = %v, %v", recs, err)
	}

	var b []byte
	b = binary.AppendVarint(b, 1)
	b = binary.AppendUvarint(b, MaxRecordHeaders+1)
	for range MaxRecordHeaders + 1 {
		b = append(b, 0, 0)
	}
	b = append(b, 0)
	_, err := DecodeRecords(b, 1)
	mustCorrupt(t, "too many headers", err)

	lies := map[string][]byte{
		"body length past end":   {0, 0, 5, 'a'},
		"body length huge":       {0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
		"header length past end": {0, 1, 9, 'n', 0, 0},
		"varint overflow":        {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0, 0},
		"header count huge":      {0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0},
		"trailing bytes":         {0, 0, 0, 0},
	}
	for name, b := range lies {
		_, err := DecodeRecords(b, 1)
		mustCorrupt(t, name, err)
	}
}

func TestDecodeRecordsMessages(t *testing.T) {
	_, err := DecodeRecords([]byte{0, 0, 5, 'a'}, 1)
	if err == nil || !strings.Contains(err.Error(), "record 0") {
		t.Fatalf("error %v does not locate the record", err)
	}
}
