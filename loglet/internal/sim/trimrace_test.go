package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/loglet"
)

// TestTrimRacesRetention (a regression test) forces the interleaving that
// made seed 140 fail about one run in six under load: "leader1 read of
// express-0 returned seq 110, below the trim point 117 a Trim (to 110) had
// left before the read began". A retention pass raised the trim point of a
// retained stream after a Trim of it had written its own and before the
// trimmer read the trim point back (the debug trace of a failing run: the
// Trim's write at tick 2050, the pass's at 2065, the read-back before
// 2085), so the checker held the reads that began after the Trim to the
// pass's point. A leader's reads are held to a pass's point only once the
// pass has updated the leader's cache, after its write returns (after an
// ambiguous write, at the next 5 s refresh), so a read from the Trim's
// point was right and the checker wrong. Here the hook raises the trim
// point just after the Trim returned (through the observed metastore, as a
// retention pass's write), and then reads from the Trim's point through
// the leader, whose cache has only the Trim's.
func TestTrimRacesRetention(t *testing.T) {
	const seed = 140
	var (
		raised      bool
		from, first uint64
		hit         string
	)
	h := &hooks{
		afterTrim: func(w *world, pr *process, stream string, seq uint64) {
			if raised || !w.retainedNames[stream] {
				return
			}
			ctx := context.Background()
			// Only where the leader can read from seq now (a zone may be
			// down under the records), so that the read after the Trim
			// returned does not wait.
			if res, err := pr.star.Read(ctx, stream, loglet.ReadQuery{Start: loglet.AtSeq(seq), MaxRecords: 5}); err != nil || len(res.Records) == 0 {
				return
			}
			acked := uint64(0)
			w.h.mu.Lock()
			for _, op := range w.h.appends {
				if op.stream == stream && op.out == outAcked {
					acked = max(acked, op.ack.End)
				}
			}
			w.h.mu.Unlock()
			key := chain.StreamRecordKey(stream)
			it, err := w.metaBkt.Get(ctx, key)
			if err != nil {
				return
			}
			var rec map[string]any
			if json.Unmarshal(it.Value, &rec) != nil {
				return
			}
			cur, _ := rec["trim_seq"].(float64)
			to := min(seq+7, acked)
			if uint64(cur) != seq || to <= seq {
				return // not the Trim's own point, or no room above it
			}
			rec["trim_seq"] = to
			val, _ := json.Marshal(rec)
			if _, err := w.metaBkt.Put(ctx, key, val, it.Version); err != nil {
				return
			}
			raised, hit, from = true, stream, seq
		},
		trimDone: func(w *world, pr *process, stream string, seq uint64) {
			if !raised || stream != hit || seq != from || first != 0 {
				return
			}
			who := fmt.Sprintf("leader%d", pr.n)
			for attempt := 0; attempt < 20; attempt++ {
				call := w.h.tick()
				res, err := pr.star.Read(context.Background(), stream, loglet.ReadQuery{Start: loglet.AtSeq(seq), MaxRecords: 5})
				if err != nil || len(res.Records) == 0 {
					continue
				}
				w.h.observeRead(who, stream, seq, res.Records, res.Tail.Seq, true, call)
				first = res.Records[0].Seq + 1 // +1: seq 0 reads as "read"
				return
			}
		},
	}
	r := Run(t, Options{Seed: seed, Scenarios: MixedScenarios(seed), hooks: h})
	if !raised || first == 0 {
		t.Fatalf("seed %d: the interleaving did not happen (raised %v, read %v): the trimmer or the retained streams changed?", seed, raised, first != 0)
	}
	if first-1 != from {
		t.Fatalf("seed %d: the leader's read from the Trim's point %d returned seq %d first: its cache already had the raised point, so the test no longer races", seed, from, first-1)
	}
	report(t, "TestSim", r)
}
