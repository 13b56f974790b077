package settleval

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"

	"github.com/flightlog/flightlog/chain/chainval"
	"github.com/flightlog/flightlog/envelope"
)

// Run is records of a stream from FirstSeq on, in order: one extent's.
type Run struct {
	FirstSeq uint64
	Records  []envelope.Record
}

// Render builds the settled object of stream id holding [start, end): the
// runs' records (tiling [start, end) in order) in frames of up to
// frameBytes raw, compressed with codec. The nonce is the key's
// (SettledNonce): two passes settling the same records render the same
// bytes, so copies written by different passes agree.
func Render(id string, start, end uint64, runs []Run, codec envelope.Codec, frameBytes int) ([]byte, []envelope.FrameInfo, error) {
	w := envelope.NewBundleWriter()
	var buf []byte
	var first uint64
	count := 0
	var lo, hi int64
	flush := func() error {
		if count == 0 {
			return nil
		}
		err := w.AddFrame(id, first, count, lo, hi, buf, codec)
		buf, count = buf[:0], 0
		return err
	}
	for _, run := range runs {
		for i, rec := range run.Records {
			size := envelope.EncodedRecordSize(rec)
			if count > 0 && (len(buf)+size > frameBytes || count >= envelope.MaxFrameRecords || len(buf)+size > envelope.MaxFrameRawBytes) {
				if err := flush(); err != nil {
					return nil, nil, err
				}
			}
			if count == 0 {
				first, lo, hi = run.FirstSeq+uint64(i), rec.Timestamp, rec.Timestamp
			}
			lo, hi = min(lo, rec.Timestamp), max(hi, rec.Timestamp)
			buf = envelope.AppendRecord(buf, rec)
			count++
		}
	}
	if err := flush(); err != nil {
		return nil, nil, err
	}
	obj, frames := w.FinishSettled(start, SettledNonce(chainval.SettledKey(id, start, end)))
	return obj, frames, nil
}

// SettledNonce is the envelope nonce of the settled object at key.
func SettledNonce(key string) envelope.Nonce {
	var n envelope.Nonce
	a, b := xxhash.Sum64String(key), xxhash.Sum64String("settled\x00"+key)
	binary.LittleEndian.PutUint64(n[:8], a)
	binary.LittleEndian.PutUint32(n[8:], uint32(b))
	return n
}
