package sequencer

import "fmt"

// Stream is the sequencing state of one stream: the next sequence number to
// assign and the timestamp of the last assigned record. The zero value is an
// empty stream.
type Stream struct {
	Next          uint64 // sequence number the next admitted record gets
	LastTimestamp int64  // timestamp (ms) of the last admitted record
}

// MismatchError is returned by Assign when a batch's expected sequence number
// is not the stream's tail. Nothing was assigned.
type MismatchError struct {
	Expected uint64 // the batch's MatchSeqNum
	Tail     uint64 // the stream's next sequence number
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("sequencer: match_seq_num %d does not match tail %d", e.Expected, e.Tail)
}

// Assign gives count records the sequence numbers [start, start+count) if
// match is nil or equals the tail, and advances the tail. count must be
// positive; a zero count assigns nothing and still checks match.
func (s *Stream) Assign(count int, match *uint64) (start uint64, err error) {
	if match != nil && *match != s.Next {
		return 0, &MismatchError{Expected: *match, Tail: s.Next}
	}
	start = s.Next
	s.Next += uint64(count)
	return start, nil
}

// Stamp returns the timestamp a record gets: ts, or arrival when ts is 0,
// raised to the stream's last timestamp if it would go backwards. It
// advances LastTimestamp. Call it for each record in admission order.
func (s *Stream) Stamp(ts, arrival int64) int64 {
	if ts == 0 {
		ts = arrival
	}
	if ts < s.LastTimestamp {
		ts = s.LastTimestamp
	}
	s.LastTimestamp = ts
	return ts
}
