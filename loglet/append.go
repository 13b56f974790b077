package loglet

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"time"

	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/loglet/internal/chaincore"
)

// The append path: look the stream up, admit the batch into its chain's
// core, and wait for the batch's one outcome.

// submit validates, encodes, reserves pool budget for and admits b. After it
// returns nil, the batch's outcome is known once p.Done is closed.
func (s *Star) submit(ctx context.Context, name string, b Batch) (*admitted, *lane, error) {
	return s.submitFencing(ctx, name, b, chaincore.Fencing{Token: b.FencingToken})
}

// submitFencing is submit with the batch's fencing (a fence batch sets a
// new token). A batch the stream's lane refused because a retake swapped
// another lane in since the lookup (laneSwapped) is submitted again, to
// the new lane, up to maxChainRetakes times.
func (s *Star) submitFencing(ctx context.Context, name string, b Batch, fencing chaincore.Fencing) (*admitted, *lane, error) {
	for n := 0; ; n++ {
		a, st, err := s.submitOnce(ctx, name, b, fencing)
		if err == nil {
			return a, st.lane, nil
		}
		if st == nil || !s.laneSwapped(st, err) || n == maxChainRetakes {
			return nil, nil, err
		}
	}
}

// submitOnce is one submission of b; on error, st is the stream's state
// if the lookup found it.
func (s *Star) submitOnce(ctx context.Context, name string, b Batch, fencing chaincore.Fencing) (_ *admitted, st *streamState, _ error) {
	if ctx == nil {
		return nil, nil, notCommitted(ErrNilContext)
	}
	if err := ctx.Err(); err != nil {
		// An ended context admits nothing: the batch is not committed,
		// and nothing of it is written.
		return nil, nil, notCommitted(fmt.Errorf("loglet: stream %q: the context ended before admission: %w", name, err))
	}
	if len(b.Records) == 0 || len(b.Records) > s.cfg.MaxBatchRecords {
		return nil, nil, notCommitted(fmt.Errorf("%w: %d records (want 1-%d)", ErrInvalidBatch, len(b.Records), s.cfg.MaxBatchRecords))
	}
	if err := checkProducer(b.Producer); err != nil {
		return nil, nil, notCommitted(err)
	}
	if err := checkFencingToken("", b.FencingToken); err != nil {
		return nil, nil, notCommitted(err)
	}
	st, err := s.streamForAppend(ctx, name)
	if err != nil {
		return nil, nil, notCommitted(err)
	}
	now := time.Now()
	arrival := now.UnixMilli()
	size, charge := 0, 0
	monotone := true
	headers := 0
	var prev int64
	for i, r := range b.Records {
		if len(r.Headers) > envelope.MaxRecordHeaders {
			return nil, nil, notCommitted(fmt.Errorf("%w: record %d has %d headers (max %d)", ErrInvalidBatch, i, len(r.Headers), envelope.MaxRecordHeaders))
		}
		if r.Timestamp < 0 {
			return nil, nil, notCommitted(fmt.Errorf("%w: record %d has a negative timestamp", ErrInvalidBatch, i))
		}
		ts := s.stamp(r.Timestamp, arrival)
		headers += len(r.Headers)
		if ts < prev {
			monotone = false
		}
		prev = ts
		rs := envelope.EncodedRecordSize(Record{Timestamp: ts, Headers: r.Headers, Body: r.Body})
		if rs > s.cfg.MaxRecordBytes {
			return nil, nil, notCommitted(fmt.Errorf("%w: record %d is %d bytes encoded (max %d)", ErrInvalidBatch, i, rs, s.cfg.MaxRecordBytes))
		}
		size += rs
		charge += rs + 10 - varintLen(ts) // room for any re-stamped timestamp
	}
	if headers > envelope.MaxFrameHeaders {
		return nil, nil, notCommitted(fmt.Errorf("%w: batch has %d headers in all (max %d)", ErrInvalidBatch, headers, envelope.MaxFrameHeaders))
	}
	if size > s.cfg.MaxBatchBytes {
		return nil, nil, notCommitted(fmt.Errorf("%w: batch is %d bytes encoded (max %d)", ErrInvalidBatch, size, s.cfg.MaxBatchBytes))
	}
	// Reserve the budget before encoding: a producer blocked at the budget
	// then holds no encoded copy the budget does not count.
	if err := st.lane.reserve(ctx, name, int64(charge)); err != nil {
		return nil, st, err
	}
	// One allocation for the batch and its future; the payload is carved
	// from the lane's slab (issue 16: allocations per batch).
	a := &admitted{}
	p := &a.b
	*p = chaincore.Batch{Stream: st.core, Count: len(b.Records), Headers: headers, Charge: int64(charge), Submitted: now, Done: make(chan struct{}),
		Producer: chaincore.ProducerID(b.Producer), Fencing: fencing}
	p.Payload = st.lane.slab.alloc(charge)
	recs := b.Records
	if !monotone {
		recs = make([]Record, len(b.Records)) // the core re-stamps these
	}
	for i, r := range b.Records {
		r.Timestamp = s.stamp(r.Timestamp, arrival)
		if !monotone {
			recs[i] = r
		}
		if i == 0 {
			p.MinTS = r.Timestamp
		}
		p.MinTS, p.MaxTS = min(p.MinTS, r.Timestamp), max(p.MaxTS, r.Timestamp)
		p.Payload = envelope.AppendRecord(p.Payload, r)
	}
	st.lane.precompress(p)
	if err := st.lane.admit(ctx, p, recs, b.MatchSeqNum, monotone); err != nil {
		return nil, st, err
	}
	return a, st, nil
}

// laneSwapped reports whether st's lane refused a batch (err, not
// committed) because it stopped serving and a retake of its chain has
// swapped in another lane since st was looked up (Star.swapLane): the
// batch is then submitted again, to the new lane. (A retake still under
// way leaves the refusal as it is: the lost lane's *NotLeaderError.)
func (s *Star) laneSwapped(st *streamState, err error) bool {
	return errors.Is(err, ErrNotCommitted) && s.lane(st.class) != st.lane && st.lane.deadFate() != nil
}

// admitted is a batch and the future that reports its outcome, allocated
// together.
type admitted struct {
	b chaincore.Batch
	f AckFuture
}

// stamp is the timestamp a record gets at arrival: its own, or arrival if it
// has none; one in the future is capped at arrival (S2's rule: a clock
// mistaken by a factor of 1000 must not stamp every later record of the
// stream in the year 58886), unless Config.UncappedTimestamps.
func (s *Star) stamp(ts, arrival int64) int64 {
	if ts == 0 || (ts > arrival && !s.cfg.UncappedTimestamps) {
		return arrival
	}
	return ts
}

func varintLen(v int64) int {
	u := uint64(v) << 1
	if v < 0 {
		u = ^u
	}
	return (bits.Len64(u|1) + 6) / 7
}

// Append writes b to stream and waits for its acknowledgement: the batch is
// durable in W buckets and every earlier flight of its chain is too. The
// metastore is not touched (except once for a stream this process has not
// seen). An error wraps ErrNotCommitted or ErrOutcomeUnknown.
//
// A batch with a producer identity (Batch.Producer) is committed once: a
// retry of a committed batch returns its original range (Ack.Duplicate),
// and a retry of one still in flight waits for its outcome.
func (s *Star) Append(ctx context.Context, stream string, b Batch) (Ack, error) {
	return s.appendFencing(ctx, stream, b, chaincore.Fencing{Token: b.FencingToken})
}

// appendFencing is Append with the batch's fencing.
func (s *Star) appendFencing(ctx context.Context, stream string, b Batch, fencing chaincore.Fencing) (Ack, error) {
	a, l, err := s.submitFencing(ctx, stream, b, fencing)
	for err != nil {
		ack, aerr, again, ok := answered(ctx, stream, err)
		if !ok {
			return Ack{}, err
		}
		if !again {
			return ack, aerr
		}
		// The attempt in flight was not committed: this one may be.
		a, l, err = s.submitFencing(ctx, stream, b, fencing)
	}
	p := &a.b
	select {
	case <-p.Done:
		return l.outcome(p)
	case <-ctx.Done():
		select {
		case <-p.Done: // a known outcome beats "unknown"
			return l.outcome(p)
		default:
		}
		return Ack{}, outcomeUnknown(fmt.Errorf("loglet: stream %q: gave up waiting for the ack: %w", stream, ctx.Err()))
	}
}

// CheckTail returns the stream's tail: the sequence number the next
// admitted record will get and the last admitted timestamp. It counts the
// batches this process admitted and has not acked yet: Tail.Pending says
// how many records those are (Seq−Pending is the durable tail). A
// MatchSeqNum taken from Seq while Pending is non-zero presumes they all
// succeed; if one fails, every later batch fails its match. A mismatch
// says someone's batch is at that position, not that yours landed: a
// producer that wants exactly-once retries sets Batch.Producer.
func (s *Star) CheckTail(ctx context.Context, stream string) (Tail, error) {
	if ctx == nil {
		return Tail{}, ErrNilContext
	}
	st, err := s.stream(ctx, stream)
	if err != nil {
		return Tail{}, err
	}
	st.lane.mu.Lock()
	defer st.lane.mu.Unlock()
	a, d := st.core.Assigned(), st.core.Durable()
	return Tail{Seq: a.Seq, Timestamp: a.Timestamp, Pending: a.Seq - d.Seq}, nil
}

// FenceHeader is the one header of a fence record, the record a fence
// batch (SetFencingToken) writes: its name is empty, its value "fence",
// and the record's body is the new token. A reader tells fence records
// from the host's by it.
var FenceHeader = Header{Name: []byte{}, Value: []byte("fence")}

// SetFencingToken sets stream's fencing token to token ("" clears it), if
// the stream's token is expectedOld ("" for a stream without one): from
// then on the stream admits only batches whose Batch.FencingToken is token,
// and a writer still presenting the old one is refused with a
// *FencedError. It is how a host hands a stream from one writer to
// another: the new writer (or the host for it) sets a token the old writer
// does not know.
//
// The token is set by an append: a fence batch, one record with
// FenceHeader and the token as its body, takes its place in the stream
// like any batch, so every batch before it was checked against the old
// token and every batch after it against the new one, on this leader and
// on any successor (which learns the token from the flights and the
// tails). The Ack is the fence record's. Its outcome is that of any
// append: not committed (a *FencedError when expectedOld is not the
// stream's token), the old token still holds; outcome unknown, the new
// token may or may not hold: SetFencingToken(ctx, stream, token, token)
// succeeds only if it does (it writes a second fence record, setting the
// same token). token and expectedOld are at most 36 bytes
// (envelope.MaxFencingTokenLen).
func (s *Star) SetFencingToken(ctx context.Context, stream, token, expectedOld string) (Ack, error) {
	if err := checkFencingToken("new ", token); err != nil {
		return Ack{}, notCommitted(err)
	}
	if err := checkFencingToken("expected ", expectedOld); err != nil {
		return Ack{}, notCommitted(err)
	}
	b := Batch{Records: []Record{{Headers: []Header{FenceHeader}, Body: []byte(token)}}, FencingToken: expectedOld}
	return s.appendFencing(ctx, stream, b, chaincore.Fencing{Token: expectedOld, Fence: true, Set: token})
}

// checkFencingToken validates a fencing token (what names it in the error).
func checkFencingToken(what, token string) error {
	if len(token) > envelope.MaxFencingTokenLen {
		return fmt.Errorf("%w: %sfencing token of %d bytes (max %d)", ErrInvalidBatch, what, len(token), envelope.MaxFencingTokenLen)
	}
	return nil
}
