package loglet

import (
	"context"
	"fmt"
)

// The read path: resolve a position, then read from the flight index, the
// absorbed refs and the settled objects, with the tail the read covers.

// Read returns durable records of stream from q.Start on: absorbed history
// from refs and the object store, then the unabsorbed tail from the
// leader's flight index, with no gap and no duplicate between them. A start
// at or past the durable tail returns no records and the tail; a start below
// the stream's trim point (Trim, retention) reads from the trim point, and
// no record below it is returned (a trim through this Star at once, one
// another process wrote within 5 seconds: the cached trim point is re-read
// from the stream record when older than that); a start below the oldest
// otherwise readable record returns ErrHistoryTrimmed. As Reader.Read, it
// returns records or an error, never both, and damage is ErrCorrupt.
func (s *Star) Read(ctx context.Context, stream string, q ReadQuery) (ReadResult, error) {
	if ctx == nil {
		return ReadResult{}, ErrNilContext
	}
	if err := ctx.Err(); err != nil {
		return ReadResult{}, err
	}
	st, err := s.stream(ctx, stream)
	if err != nil {
		return ReadResult{}, err
	}
	return s.readStream(ctx, st, q)
}

// readStream is Read of the incarnation st.
func (s *Star) readStream(ctx context.Context, st *streamState, q ReadQuery) (ReadResult, error) {
	maxRecs, maxBytes := limits(q)
	start, held, err := s.resolveHeld(ctx, st, q.Start)
	if err != nil {
		return ReadResult{}, err
	}
	start = max(start, s.trimFloor(ctx, st, false)) // below a trim: from the first readable record
	v := st.view()
	if st.lane.deadFate() != nil {
		// Deposed: a successor writes this stream now, so history (its
		// refs) may run past this process's durable tail: read it all
		// from there, as a Reader does.
		return s.readDeposed(ctx, st, v, start, maxRecs, maxBytes, held)
	}
	if start >= v.start {
		recs, err := v.read(start, maxRecs, maxBytes)
		recs, err = recordsOrError(recs, err)
		return result(recs, start, v.durable), err
	}
	// Below the index: absorbed before we looked, so refs hold it. Where
	// history ends, go on from the flight index if the limits leave room,
	// so one Read spans both with no gap and no duplicate (and back to
	// history if the absorb moved the index on meanwhile).
	// Each pass returns records or ends the read, so a read with room left
	// returns every durable record up to the tail it reports, however the
	// absorb moves records from the index into refs meanwhile (the bound
	// only guards against a bug).
	var recs []SequencedRecord
	next, size := start, 0
	for pass := 0; pass < 1<<16 && len(recs) < maxRecs && size < maxBytes; pass++ {
		var more []SequencedRecord
		if next >= v.start {
			more, err = v.read(next, maxRecs-len(recs), maxBytes-size)
		} else {
			more, err = s.hist.readHeld(ctx, st.id, next, maxRecs-len(recs), maxBytes-size, held)
			if err == nil && len(more) == 0 && len(recs) == 0 {
				err = fmt.Errorf("loglet: read %q at %d: absorbed but not in refs", st.name, next)
			}
		}
		recs = append(recs, more...)
		if err != nil || len(more) == 0 {
			break
		}
		for _, r := range more {
			size += recordSize(r.Record)
		}
		next = more[len(more)-1].Seq + 1
		v = st.view()
	}
	// The tail moved on while refs were read: report it as of now, so it
	// is never behind the records returned.
	recs, err = recordsOrError(recs, err)
	return result(recs, start, coverTail(v.durable, recs)), err
}

// readDeposed serves a read on a chain this process no longer leads: from
// history (the successor's refs), then from what is left of its own flight
// index (released here before the successor's fence, not yet in refs).
func (s *Star) readDeposed(ctx context.Context, st *streamState, v indexView, start uint64, maxRecs, maxBytes int, held *heldFrame) (ReadResult, error) {
	recs, err := s.hist.readHeld(ctx, st.id, start, maxRecs, maxBytes, held)
	if err != nil {
		return ReadResult{}, err
	}
	next := start
	if n := len(recs); n > 0 {
		next = recs[n-1].Seq + 1
	}
	if len(recs) < maxRecs && next >= v.start {
		more, merr := v.read(next, maxRecs-len(recs), maxBytes)
		recs, err = append(recs, more...), merr
	}
	recs, err = recordsOrError(recs, err)
	return result(recs, start, coverTail(v.durable, recs)), err
}

// coverTail is tail raised to cover recs: a process may read records past
// its own durable tail (refs a successor wrote), and the Tail it reports is
// never behind the records it returns.
func coverTail(tail Tail, recs []SequencedRecord) Tail {
	if n := len(recs); n > 0 && recs[n-1].Seq+1 > tail.Seq {
		return Tail{Seq: recs[n-1].Seq + 1, Timestamp: max(tail.Timestamp, recs[n-1].Timestamp)}
	}
	return tail
}

func limits(q ReadQuery) (int, int) {
	maxRecs, maxBytes := q.MaxRecords, q.MaxBytes
	if maxRecs <= 0 {
		maxRecs = 1000
	}
	if maxBytes <= 0 {
		maxBytes = 1 << 20
	}
	return maxRecs, maxBytes
}

func result(recs []SequencedRecord, start uint64, tail Tail) ReadResult {
	res := ReadResult{Records: recs, Next: start, Tail: tail}
	if n := len(recs); n > 0 {
		res.Next = recs[n-1].Seq + 1
	}
	return res
}

// resolve turns a Position into a sequence number.
func (s *Star) resolve(ctx context.Context, st *streamState, p Position) (uint64, error) {
	seq, _, err := s.resolveHeld(ctx, st, p)
	return seq, err
}

// resolveHeld is resolve, with the frame a read by timestamp fetched from
// history to find the sequence number (nil if none), for the read that
// follows.
func (s *Star) resolveHeld(ctx context.Context, st *streamState, p Position) (uint64, *heldFrame, error) {
	v := st.view()
	switch p.kind {
	case posTailOffset:
		if p.value >= v.durable.Seq {
			return 0, nil, nil
		}
		return v.durable.Seq - p.value, nil, nil
	case posTimestamp:
		if idxMin := v.minTimestamp(); v.start > 0 && (idxMin < 0 || idxMin > p.ts) {
			seq, ok, held, err := s.hist.seqAtTimestamp(ctx, st.id, p.ts)
			if err != nil || ok {
				return seq, held, err
			}
		}
		return v.seqFromTimestamp(p.ts), nil, nil
	}
	return p.value, nil, nil
}
