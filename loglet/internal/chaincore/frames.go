package chaincore

import "github.com/flightlog/flightlog/envelope"

// FrameLimits bound one frame of a transit bundle: its records, record
// headers, and raw (uncompressed) bytes. Render splits a stream's batches
// of a flight into frames within them; the cut counts the frames the same
// way, so every flight it claims renders.
type FrameLimits struct {
	Records int
	Headers int
	Bytes   int64
}

// DefaultFrameLimits are the format's limits with a raw-size cap of bytes.
func DefaultFrameLimits(bytes int64) FrameLimits {
	return FrameLimits{Records: envelope.MaxFrameRecords, Headers: envelope.MaxFrameHeaders, Bytes: min(bytes, envelope.MaxFrameRawBytes)}
}

// FrameFill is what a stream's current frame holds so far.
type FrameFill struct {
	Records, Headers int
	Bytes            int64
	// Stored: the frame is one batch stored ahead of time (Batch.Stored),
	// and takes no other.
	Stored bool
}

// Fits reports whether b can join a frame that holds f (an empty frame
// takes any one batch: a batch is within every limit on its own). A batch
// stored ahead of time is a frame of its own.
func (l FrameLimits) Fits(f FrameFill, b *RenderPart) bool {
	return f.Records == 0 ||
		(!f.Stored && b.Stored == nil &&
			f.Records+b.Count <= l.Records && f.Headers+b.Headers <= l.Headers && f.Bytes+int64(len(b.Payload)) <= l.Bytes)
}

// Add returns f with b in it.
func (f FrameFill) Add(b *RenderPart) FrameFill {
	return FrameFill{Records: f.Records + b.Count, Headers: f.Headers + b.Headers, Bytes: f.Bytes + int64(len(b.Payload)), Stored: b.Stored != nil}
}

// bundleShape follows the frames a flight being cut will render to (each
// stream's batches in arrival order, split greedily within the frame
// limits) and keeps it within the bundle's limits: frames, footer bytes.
type bundleShape struct {
	limits FrameLimits
	fills  map[*Stream]FrameFill
	frames int
	footer int
}

func newBundleShape(l FrameLimits) *bundleShape {
	if l == (FrameLimits{}) {
		l = DefaultFrameLimits(envelope.MaxFrameRawBytes)
	}
	return &bundleShape{limits: l, fills: map[*Stream]FrameFill{}, footer: envelope.FooterTrailerBytes}
}

// add takes b into the flight if the bundle stays within its limits, and
// reports whether it did.
func (s *bundleShape) add(b *Batch) bool {
	part := b.part()
	fill, ok := s.fills[b.Stream]
	if !ok || !s.limits.Fits(fill, &part) {
		entry := envelope.FrameEntryMaxBytes(len(b.Stream.name))
		if s.frames > 0 && (s.frames+1 > envelope.MaxFrames || s.footer+entry > envelope.MaxFooterBytes) {
			return false
		}
		s.frames++
		s.footer += entry
		fill = FrameFill{}
	}
	if b.Producer.ID != "" {
		mark := envelope.ProducerMarkMaxBytes(len(b.Producer.ID))
		if s.frames > 1 && s.footer+mark > envelope.MaxFooterBytes {
			return false
		}
		s.footer += mark
	}
	if b.Fencing.Fence {
		if s.frames > 1 && s.footer+envelope.FenceMarkMaxBytes > envelope.MaxFooterBytes {
			return false
		}
		s.footer += envelope.FenceMarkMaxBytes
	}
	s.fills[b.Stream] = fill.Add(&part)
	return true
}

// part is b as a render takes it.
func (b *Batch) part() RenderPart {
	return RenderPart{Start: b.Start, Count: b.Count, Headers: b.Headers, MinTS: b.MinTS, MaxTS: b.MaxTS,
		Payload: b.Payload, Stored: b.Stored, StoredCodec: b.StoredCodec, StoredCRC: b.StoredCRC, Producer: b.Producer,
		Fence: b.Fencing.Fence, SetToken: b.Fencing.Set}
}

// renderOf is what a Render of batches carries: each stream's batches as
// parts, streams in the order each first appears. Two allocations, whatever
// the number of streams: the streams, and every part in one slice that the
// streams' Parts share (each its own range, in the order of the streams).
func renderOf(batches []*Batch) []RenderStream {
	var streams []RenderStream
	counts := make([]int, 0, 8)
	for _, b := range batches {
		st := b.Stream
		if st.renderIdx == 0 {
			streams = append(streams, RenderStream{Name: st.name})
			counts = append(counts, 0)
			st.renderIdx = len(streams)
		}
		counts[st.renderIdx-1]++
	}
	parts := make([]RenderPart, len(batches))
	at := 0
	for i, n := range counts {
		streams[i].Parts = parts[at : at : at+n]
		at += n
	}
	for _, b := range batches {
		s := &streams[b.Stream.renderIdx-1]
		s.Parts = append(s.Parts, b.part())
	}
	for _, b := range batches {
		b.Stream.renderIdx = 0
	}
	return streams
}
