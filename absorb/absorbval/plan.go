package absorbval

import (
	"fmt"

	"github.com/flightlog/flightlog/envelope"
)

// Slot is one released slot as the absorb sees it: its object key and the
// frames of its transit bundle (object-absolute coordinates).
type Slot struct {
	Epoch, Slot uint64
	Key         string
	Frames      []envelope.FrameInfo
	// Producers are the producer marks of its batches (none for batches
	// appended without an identity).
	Producers []envelope.ProducerMark
	// Fences are the fence marks of its fence batches, in order.
	Fences []envelope.FenceMark
}

// Plan returns the refs of one round: one per stream that appears in slots,
// whose extents are that stream's frames in slot order, in the order the
// streams first appear. slots must be consecutive, in slot order. It checks
// that each stream's frames are contiguous (cut order is slot order, so a gap
// means a bug upstream) and that they continue from tails, when tails has the
// stream; it updates tails to the round's end (their Producers are the
// caller's: Plan keeps them as they are).
func Plan(class string, writer string, slots []Slot, tails map[string]StreamTail) ([]SpanRef, error) {
	var refs []SpanRef
	idx := map[string]int{}
	for i, s := range slots {
		if i > 0 && s.Slot != slots[i-1].Slot+1 {
			return nil, fmt.Errorf("absorb: round slots not consecutive: %d after %d", s.Slot, slots[i-1].Slot)
		}
		for _, f := range s.Frames {
			j, ok := idx[f.Stream]
			if !ok {
				if t, known := tails[f.Stream]; known && t.Next != f.FirstSeq {
					return nil, fmt.Errorf("absorb: stream %q: frame at %d does not continue its tail %d (slot %d)", f.Stream, f.FirstSeq, t.Next, s.Slot)
				}
				j = len(refs)
				idx[f.Stream] = j
				refs = append(refs, SpanRef{Stream: f.Stream, Class: class, Start: f.FirstSeq, End: f.FirstSeq,
					MinTS: f.MinTimestamp, MaxTS: f.MaxTimestamp, Writer: writer})
			}
			r := &refs[j]
			if f.FirstSeq != r.End {
				return nil, fmt.Errorf("absorb: stream %q: frame at %d in slot %d, expected %d", f.Stream, f.FirstSeq, s.Slot, r.End)
			}
			r.Extents = append(r.Extents, Extent{Key: s.Key, Offset: f.Offset, Length: f.Length, RawLength: f.RawLength,
				Codec: f.Codec, CRC: f.CRC, FirstSeq: f.FirstSeq, Count: f.Count, MinTimestamp: f.MinTimestamp, MaxTimestamp: f.MaxTimestamp})
			r.End += uint64(f.Count)
			r.MinTS, r.MaxTS = min(r.MinTS, f.MinTimestamp), max(r.MaxTS, f.MaxTimestamp)
		}
	}
	for _, r := range refs {
		t := tails[r.Stream] // its producer window is the leader's to keep
		t.Next, t.Timestamp = r.End, r.MaxTS
		tails[r.Stream] = t
	}
	return refs, nil
}
