package work

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/loglet/internal/chaincore"
)

// cutFlights opens a core (no I/O: its opening is stepped by hand), admits
// the batches mk makes, lets the flush deadline pass, and returns every
// Render request the core asks for, claimed one slot at a time.
func cutFlights(t *testing.T, cfg chaincore.Config, n int, mk func(c *chaincore.Core, i int) *chaincore.Batch) []chaincore.Render {
	t.Helper()
	now := time.Unix(1000, 0)
	c := chaincore.New(cfg, now)
	c.Advance(c.Ready())
	c.Step(now, chaincore.EpochRead{Err: fmt.Errorf("none: %w", errNotFound)})
	c.Advance(c.Ready())
	rec := chain.EpochRecord{Epoch: 1, Owner: cfg.Owner, Window: cfg.Window, K: len(cfg.Buckets), W: cfg.W, Buckets: cfg.Buckets}
	c.Step(now, chaincore.FirstMinted{Record: rec, Version: "v1"})
	c.Advance(c.Ready())
	c.Step(now, chaincore.CheckpointCreated{Held: absorb.Held{Checkpoint: absorb.Checkpoint{Epoch: 1, Owner: cfg.Owner, OwnerEpoch: 1}, Version: "v"}})
	c.Advance(c.Ready())
	for i := 0; i < n; i++ {
		if err := c.Admit(now, mk(c, i), nil, nil, true); err != nil {
			t.Fatalf("admit %d: %v", i, err)
		}
	}
	now = now.Add(time.Second)
	c.Step(now, chaincore.Tick{})
	var out []chaincore.Render
	for {
		rd := c.Ready()
		c.Advance(rd)
		found := false
		for _, r := range rd.Requests {
			if rr, ok := r.(chaincore.Render); ok {
				out = append(out, rr)
				found = true
				// Release the slot at once so the next flight is claimed.
				c.Step(now, chaincore.Rendered{Upload: rr.Upload, Obj: []byte{0}})
				for b := 0; b < len(cfg.Buckets); b++ {
					c.Step(now, chaincore.CopyDone{Upload: rr.Upload, Result: chain.CopyResult{Bucket: b, Status: chain.CopyOurs}})
				}
			}
		}
		if !found {
			return out
		}
	}
}

var errNotFound = metastoreNotFound()

func coreConfig(flight int64, frames chaincore.FrameLimits) chaincore.Config {
	return chaincore.Config{Star: "s", Class: chain.Standard, Owner: "p", Buckets: []string{"b"}, W: 1, Window: 64,
		FlushDeadline: time.Millisecond, FlightBytes: flight, MaxBatchBytes: 1 << 20, Frames: frames,
		CommitDeadline: time.Minute, StragglerTimeout: time.Minute, BacklogFlights: 1 << 20, BacklogBytes: 1 << 40,
		AbsorbInterval: time.Hour, AbsorbMaxSlots: 8}
}

func batch(st *chaincore.Stream, recs int, body string) *chaincore.Batch {
	var payload []byte
	for i := 0; i < recs; i++ {
		payload = envelope.AppendRecord(payload, envelope.Record{Timestamp: 1, Body: []byte(body)})
	}
	return &chaincore.Batch{Stream: st, Count: recs, Payload: payload, Charge: int64(len(payload)), Submitted: time.Unix(1000, 0), MinTS: 1, MaxTS: 1}
}

// renderAll renders each flight and checks its bundle parses and every
// frame decodes, streams' seqs continuing across frames and flights.
func renderAll(t *testing.T, e *Env, flights []chaincore.Render) (frames int) {
	t.Helper()
	next := map[string]uint64{}
	for _, r := range flights {
		ev := e.render(r).(chaincore.Rendered)
		if ev.Err != nil {
			t.Fatalf("render slot %d: %v", r.Upload.Slot, ev.Err)
		}
		_, infos, err := envelope.ParseBundle(ev.Obj)
		if err != nil {
			t.Fatalf("slot %d: %v", r.Upload.Slot, err)
		}
		for _, f := range infos {
			if f.FirstSeq != next[f.Stream] {
				t.Fatalf("slot %d: frame of %.20q at %d, want %d", r.Upload.Slot, f.Stream, f.FirstSeq, next[f.Stream])
			}
			if _, err := envelope.DecodeFrame(f, ev.Obj[f.Offset:f.End()]); err != nil {
				t.Fatal(err)
			}
			next[f.Stream] += uint64(f.Count)
		}
		frames += len(infos)
	}
	return frames
}

// TestCutWithinFrameCap: a stream's batches of one flight are split into
// frames of at most the frame cap.
func TestCutWithinFrameCap(t *testing.T) {
	limits := chaincore.FrameLimits{Records: envelope.MaxFrameRecords, Headers: envelope.MaxFrameHeaders, Bytes: 3 << 10}
	flights := cutFlights(t, coreConfig(1<<20, limits), 10, func(c *chaincore.Core, i int) *chaincore.Batch {
		return batch(c.Stream("a"), 1, strings.Repeat("x", 1000))
	})
	if len(flights) != 1 {
		t.Fatalf("%d flights, want 1", len(flights))
	}
	e := &Env{Codec: envelope.CodecNone, Frames: limits}
	if frames := renderAll(t, e, flights); frames != 4 {
		t.Fatalf("%d frames, want 4 (3+3+3+1 batches of ~1 KiB under a 3 KiB cap)", frames)
	}
}

// TestCutWithinRecordsPerFrame (issue 13, item 3): 1,500 batches of 1,000
// empty records in one 16 MiB flight are 1.5M records of one stream, over
// the format's records per frame: the flight renders, in two frames. Before,
// the render failed, and the halt's recovery republished the same flight
// forever.
func TestCutWithinRecordsPerFrame(t *testing.T) {
	limits := chaincore.DefaultFrameLimits(16 << 20)
	flights := cutFlights(t, coreConfig(16<<20, limits), 1500, func(c *chaincore.Core, i int) *chaincore.Batch {
		return batch(c.Stream("a"), 1000, "")
	})
	e := &Env{Codec: envelope.CodecS2, Frames: limits}
	frames := renderAll(t, e, flights)
	if frames < 2 {
		t.Fatalf("%d frames for 1.5M records", frames)
	}
	t.Logf("%d flights, %d frames", len(flights), frames)
}

// TestCutWithinFooter (issue 13, item 3): 60,000 streams with 300-byte
// names in one flight would need a footer over the format's 16 MiB: the cut
// splits them over flights that each render.
func TestCutWithinFooter(t *testing.T) {
	limits := chaincore.DefaultFrameLimits(4 << 20)
	flights := cutFlights(t, coreConfig(32<<20, limits), 60000, func(c *chaincore.Core, i int) *chaincore.Batch {
		return batch(c.Stream(fmt.Sprintf("%0300d", i)), 1, "x")
	})
	if len(flights) < 2 {
		t.Fatalf("%d flights for a footer over the limit", len(flights))
	}
	e := &Env{Codec: envelope.CodecNone, Frames: limits}
	if frames := renderAll(t, e, flights); frames != 60000 {
		t.Fatalf("%d frames, want 60000", frames)
	}
	t.Logf("%d flights", len(flights))
}

// stored is batch compressed ahead of time, as the shell does at admission.
func stored(b *chaincore.Batch, c envelope.Codec) *chaincore.Batch {
	b.Stored, b.StoredCodec = envelope.CompressFrame(nil, b.Payload, c)
	b.StoredCRC = envelope.Checksum(b.Stored)
	return b
}

// TestStoredBatchesAreFramesOfTheirOwn: a batch compressed at admission is
// one frame, never joined by its stream's neighbours; the small batches
// between stored ones are grouped. The render copies the stored bytes as
// they are.
func TestStoredBatchesAreFramesOfTheirOwn(t *testing.T) {
	limits := chaincore.DefaultFrameLimits(4 << 20)
	// Per stream: stored, small, small, stored, stored, small — 5 frames.
	flights := cutFlights(t, coreConfig(1<<20, limits), 12, func(c *chaincore.Core, i int) *chaincore.Batch {
		b := batch(c.Stream([]string{"a", "b"}[i%2]), 3, strings.Repeat("log line ", 50))
		if k := i / 2; k == 0 || k == 3 || k == 4 {
			return stored(b, envelope.CodecS2)
		}
		return b
	})
	if len(flights) != 1 {
		t.Fatalf("%d flights, want 1", len(flights))
	}
	e := &Env{Codec: envelope.CodecZstd, Frames: limits}
	if frames := renderAll(t, e, flights); frames != 10 {
		t.Fatalf("%d frames, want 10 (5 per stream)", frames)
	}
	ev := e.render(flights[0]).(chaincore.Rendered)
	for _, f := range ev.Frames {
		// Stored batches (k = 0, 3, 4) start at seqs 0, 9, 12 of each stream.
		want := envelope.CodecZstd
		if f.FirstSeq == 0 || f.FirstSeq == 9 || f.FirstSeq == 12 {
			want = envelope.CodecS2
		}
		if f.Codec != want {
			t.Fatalf("frame of %s at %d (%d records) written with %s, want %s", f.Stream, f.FirstSeq, f.Count, f.Codec, want)
		}
	}
}

// TestCutWithinFooterStoredBatches: batches stored ahead of time are a
// frame each, so 60,000 of them of one stream with a 300-byte name need a
// footer over the format's 16 MiB: the cut counts them as the render
// frames them, and every flight renders.
func TestCutWithinFooterStoredBatches(t *testing.T) {
	limits := chaincore.DefaultFrameLimits(4 << 20)
	name := strings.Repeat("n", 300)
	flights := cutFlights(t, coreConfig(32<<20, limits), 60000, func(c *chaincore.Core, i int) *chaincore.Batch {
		return stored(batch(c.Stream(name), 1, "x"), envelope.CodecS2)
	})
	if len(flights) < 2 {
		t.Fatalf("%d flights for a footer over the limit", len(flights))
	}
	e := &Env{Codec: envelope.CodecS2, Frames: limits}
	if frames := renderAll(t, e, flights); frames != 60000 {
		t.Fatalf("%d frames, want 60000", frames)
	}
}
