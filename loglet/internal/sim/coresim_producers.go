package sim

import (
	"errors"
	"fmt"
	"time"

	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/loglet/internal/chaincore"
)

// Producers in the core simulation (issue 25): every batch carries a
// producer identity, and its producer retries it, with the same identity,
// whenever it cannot know the outcome: an outcome-unknown batch, a batch
// orphaned by a crash, a producer that gave up waiting (a retry while the
// first attempt is in flight), an ack the producer never saw, and a batch
// refused by a chain that could not take it. Every retry goes to the
// process producers use then (after a takeover, the successor). At the
// end a fresh process is asked once more for every batch. The checker:
// no batch is committed twice (its records appear once in the chain), and
// every answer a producer got (an ack, a duplicate's range, the outcome of
// the attempt it waited for) names the range the batch's records hold.

// coreProducers is how many producer identities the workload uses.
const coreProducers = 16

// coreRetryLimit bounds one batch's retries.
const coreRetryLimit = 40

// coreLogical is one producer batch, across its attempts.
type coreLogical struct {
	stream   string
	id       chaincore.ProducerID
	recs     []envelope.Record
	payload  []byte
	minTS    int64
	attempts int
	answers  []coreAnswer
	retries  int
	retryAt  time.Time // zero: no retry scheduled
	waiting  *chaincore.Batch
	window   bool // answered past the window
	fencing  chaincore.Fencing
	fenced   bool // refused for its fencing token: never retried
}

// coreAnswer is a range a producer was told its batch holds.
type coreAnswer struct {
	start, end uint64
	how        string
	proc       int
}

// newLogical gives a new batch its producer identity.
func (cw *coreWorld) newLogical(stream string, recs []envelope.Record, payload []byte, ts int64) *coreLogical {
	pid := cw.ops % coreProducers
	if cw.producerSeq == nil {
		cw.producerSeq = map[int]uint64{}
	}
	cw.producerSeq[pid]++
	lg := &coreLogical{stream: stream, id: chaincore.ProducerID{ID: fmt.Sprintf("prod-%d", pid), Seq: cw.producerSeq[pid]},
		recs: recs, payload: payload, minTS: ts}
	cw.logicals = append(cw.logicals, lg)
	return lg
}

// scheduleRetry has lg's producer send it again after d.
func (cw *coreWorld) scheduleRetry(lg *coreLogical, d time.Duration) {
	if lg.window || lg.fenced || lg.retries >= coreRetryLimit {
		return
	}
	at := cw.now.Add(d)
	if lg.retryAt.IsZero() || at.Before(lg.retryAt) {
		lg.retryAt = at
	}
}

// nextRetry returns the batch whose retry is due first (nil: none).
func (cw *coreWorld) nextRetry() *coreLogical {
	var best *coreLogical
	for _, lg := range cw.logicals {
		if cw.soakDead(lg.stream) {
			continue // deleted: a producer's retry is refused (the catalogue's, not modelled)
		}
		if !lg.retryAt.IsZero() && (best == nil || lg.retryAt.Before(best.retryAt)) {
			best = lg
		}
	}
	return best
}

// producerOutcome takes a batch's outcome to its producer: an answer, or a
// retry.
func (cw *coreWorld) producerOutcome(pr *coreProc, b *chaincore.Batch) {
	cb := cw.byBatch[b]
	if cb == nil {
		return
	}
	lg := cb.lg
	if lg.waiting == b {
		lg.waiting = nil
		if b.Fate.Kind == chaincore.Acked {
			lg.answers = append(lg.answers, coreAnswer{b.Start, b.End(), "the outcome waited for", pr.n})
		}
	}
	switch b.Fate.Kind {
	case chaincore.Acked:
		lg.answers = append(lg.answers, coreAnswer{b.Start, b.End(), "ack", pr.n})
		if cw.rng.IntN(8) == 0 { // the ack is lost on its way: the producer retries
			cw.scheduleRetry(lg, time.Duration(cw.rng.IntN(300))*time.Millisecond)
		}
	default:
		cw.scheduleRetry(lg, time.Duration(20+cw.rng.IntN(300))*time.Millisecond)
	}
}

// orphaned has the producers of a crashed process's undecided batches
// retry them.
func (cw *coreWorld) orphaned(pr *coreProc) {
	for _, cb := range cw.batches {
		if cb.proc == pr && cb.b.Fate.Kind == chaincore.Pending {
			cw.scheduleRetry(cb.lg, time.Duration(50+cw.rng.IntN(500))*time.Millisecond)
		}
	}
	for _, lg := range cw.logicals {
		if lg.waiting != nil && cw.byBatch[lg.waiting] != nil && cw.byBatch[lg.waiting].proc == pr {
			lg.waiting = nil
			cw.scheduleRetry(lg, time.Duration(50+cw.rng.IntN(500))*time.Millisecond)
		}
	}
}

// retry sends lg again, with its identity, to pr.
func (cw *coreWorld) retry(lg *coreLogical, pr *coreProc, final bool) {
	lg.retryAt = time.Time{}
	lg.retries++
	if pr.stopped || pr.crashed || !pr.opened {
		cw.scheduleRetry(lg, 100*time.Millisecond)
		return
	}
	st := pr.streams[lg.stream]
	if st == nil {
		st = pr.core.Stream(lg.stream)
		pr.streams[lg.stream] = st
	}
	payload := append([]byte(nil), lg.payload...)
	b := &chaincore.Batch{Stream: st, Count: len(lg.recs), Payload: payload, Charge: int64(len(payload)), Submitted: cw.now,
		MinTS: lg.minTS, MaxTS: lg.minTS, Producer: lg.id, Fencing: lg.fencing}
	err := pr.core.Admit(cw.now, b, lg.recs, nil, true)
	var dup *chaincore.DuplicateError
	var in *chaincore.InFlightError
	var win *chaincore.ProducerWindowError
	var fe *chaincore.FencedError
	switch {
	case err == nil:
		lg.attempts++
		cw.addBatch(&coreBatch{proc: pr, stream: lg.stream, b: b, recs: lg.recs, lg: lg})
		cw.tracef("p%d retry %s/%d admitted %s[%d,%d)", pr.n, lg.id.ID, lg.id.Seq, lg.stream, b.Start, b.End())
		if final {
			cw.finalAdmits = append(cw.finalAdmits, lg)
		}
		cw.drain(pr)
	case errors.As(err, &dup):
		lg.answers = append(lg.answers, coreAnswer{dup.Ack.Start, dup.Ack.End, "duplicate", pr.n})
		cw.res.Duplicates++
		cw.tracef("p%d retry %s/%d duplicate [%d,%d)", pr.n, lg.id.ID, lg.id.Seq, dup.Ack.Start, dup.Ack.End)
	case errors.As(err, &in):
		lg.waiting = in.Batch
		cw.res.InFlightRetries++
		cw.tracef("p%d retry %s/%d waits for its attempt in flight", pr.n, lg.id.ID, lg.id.Seq)
	case errors.As(err, &win):
		lg.window = true
		cw.res.PastWindow++
		cw.tracef("p%d retry %s/%d past the window: %v", pr.n, lg.id.ID, lg.id.Seq, err)
	case errors.As(err, &fe):
		lg.fenced = true
		cw.res.FencedRefusals++
		cw.tracef("p%d retry %s/%d fenced: %v", pr.n, lg.id.ID, lg.id.Seq, err)
	default:
		cw.tracef("p%d retry %s/%d refused: %v", pr.n, lg.id.ID, lg.id.Seq, err)
		cw.scheduleRetry(lg, 100*time.Millisecond)
	}
}

// addBatch records an admitted attempt.
func (cw *coreWorld) addBatch(cb *coreBatch) {
	cw.batches = append(cw.batches, cb)
	if cw.byBatch == nil {
		cw.byBatch = map[*chaincore.Batch]*coreBatch{}
	}
	cw.byBatch[cb.b] = cb
}

// retryAllFinal asks the final process about every batch once more.
func (cw *coreWorld) retryAllFinal(final *coreProc) {
	if cw.soak != nil {
		// A day's batches are past the producers' window (its age) by the
		// final open: exactly once holds within the window, which the
		// soak's own retries exercise.
		return
	}
	for _, lg := range cw.logicals {
		if !lg.window && !cw.soakDead(lg.stream) {
			lg.retries = 0
			cw.retry(lg, final, true)
			lg.retryAt = time.Time{}
		}
	}
}

// checkProducers checks exactly once against the chain walked from the
// bare buckets: each batch's records appear at most once, and only where
// every answer its producer got says; a batch the final process admitted
// afresh is not in the chain already.
func (cw *coreWorld) checkProducers(walked map[string][]envelope.Record) {
	where := map[string][]uint64{} // body → seqs holding it
	for _, recs := range walked {
		for seq, r := range recs {
			where[string(r.Body)] = append(where[string(r.Body)], uint64(seq))
		}
	}
	fresh := map[*coreLogical]bool{}
	for _, lg := range cw.finalAdmits {
		fresh[lg] = true
	}
	for _, lg := range cw.logicals {
		seqs := where[string(lg.recs[0].Body)]
		if len(seqs) > 1 {
			cw.violation("batch %s/%d of %s is committed %d times (at seqs %v): exactly once broken", lg.id.ID, lg.id.Seq, lg.stream, len(seqs), seqs)
			continue
		}
		if fresh[lg] && len(seqs) == 1 {
			cw.violation("the final process admitted batch %s/%d of %s afresh, but the chain holds it at %d: its window did not survive the takeover", lg.id.ID, lg.id.Seq, lg.stream, seqs[0])
		}
		got := walked[lg.stream]
		for _, a := range lg.answers {
			ok := a.end-a.start == uint64(len(lg.recs)) && a.end <= uint64(len(got))
			for i := 0; ok && i < len(lg.recs); i++ {
				ok = string(got[a.start+uint64(i)].Body) == string(lg.recs[i].Body)
			}
			if !ok {
				cw.violation("batch %s/%d of %s: p%d's %s names [%d,%d), which does not hold it (it is at %v)", lg.id.ID, lg.id.Seq, lg.stream, a.proc, a.how, a.start, a.end, seqs)
			}
		}
	}
}

// otherAttemptAt reports whether another attempt of cb's producer batch,
// not known uncommitted, was admitted at cb's seqs (a retry admitted by a
// successor can take the very seqs of a deposed leader's attempt).
func (cw *coreWorld) otherAttemptAt(cb *coreBatch) bool {
	for _, o := range cw.batches {
		if o != cb && o.lg == cb.lg && o.stream == cb.stream && o.b.Start == cb.b.Start && o.b.Fate.Kind != chaincore.NotCommitted {
			return true
		}
	}
	return false
}
