package loglet

import (
	"sync"

	"fmt"
	"sort"

	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/internal/invariants"
	"github.com/flightlog/flightlog/loglet/internal/chaincore"
)

// streamState is one stream this process leads: its name and class, its
// class's lane (nil if the class is disabled here), and its state in the
// lane's core (read under the lane's lock).
type streamState struct {
	name  string
	id    string // chain.StreamID: name and incarnation
	class Class
	lane  *lane
	core  *chaincore.Stream

	goneOnce sync.Once
	gone     chan struct{} // closed when DeleteStream drops this incarnation
}

// dropped marks the state deleted: its read sessions wake and end.
func (st *streamState) dropped() {
	st.goneOnce.Do(func() { close(st.gone) })
}

// indexView is a stream's flight index as of one moment: the released,
// unabsorbed batches (their payloads are immutable, so they are decoded
// without the lane lock), the first sequence number they serve, and the
// durable tail.
type indexView struct {
	entries []*chaincore.Batch
	start   uint64
	durable Tail
}

// view takes st's index view under the lane lock.
func (st *streamState) view() indexView {
	l := st.lane
	l.mu.Lock()
	defer l.mu.Unlock()
	return indexView{entries: st.core.Index(), start: st.core.IndexStart(), durable: durableTail(st.core.Durable())}
}

// read serves up to maxRecords/maxBytes records from seq on. seq must not be
// below v.start.
func (v indexView) read(seq uint64, maxRecords, maxBytes int) ([]SequencedRecord, error) {
	e := v.entries
	if seq >= v.durable.Seq {
		return nil, nil
	}
	if len(e) == 0 || seq < e[0].Start {
		return nil, fmt.Errorf("loglet: %d is below the flight index (%d)", seq, v.start)
	}
	i := sort.Search(len(e), func(i int) bool { return e[i].End() > seq })
	var out []SequencedRecord
	size := 0
	for ; i < len(e); i++ {
		recs, err := envelope.DecodeRecords(e[i].Payload, e[i].Count)
		if err != nil {
			if invariants.Enabled {
				invariants.Assert(false, "flight index entry at %d of %s does not decode: %v", e[i].Start, e[i].Stream.Name(), err)
			}
			return out, fmt.Errorf("loglet: flight index entry at %d: %w", e[i].Start, err) // we encoded it: a bug
		}
		for j, r := range recs {
			s := e[i].Start + uint64(j)
			if s < seq {
				continue
			}
			rs := recordSize(r)
			if len(out) >= maxRecords || (len(out) > 0 && size+rs > maxBytes) {
				return out, nil
			}
			size += rs
			out = append(out, SequencedRecord{Seq: s, Record: r})
		}
	}
	return out, nil
}

// seqFromTimestamp returns the first indexed sequence number whose record
// has a timestamp >= ms, or the durable tail.
func (v indexView) seqFromTimestamp(ms int64) uint64 {
	e := v.entries
	i := sort.Search(len(e), func(i int) bool { return e[i].MaxTS >= ms })
	if i == len(e) {
		return v.durable.Seq
	}
	recs, err := envelope.DecodeRecords(e[i].Payload, e[i].Count)
	if err == nil {
		for j, r := range recs {
			if r.Timestamp >= ms {
				return e[i].Start + uint64(j)
			}
		}
	}
	return e[i].Start
}

// minTimestamp is the first indexed record's timestamp (-1: none).
func (v indexView) minTimestamp() int64 {
	if len(v.entries) == 0 {
		return -1
	}
	return v.entries[0].MinTS
}

func durableTail(t chaincore.Tail) Tail { return Tail{Seq: t.Seq, Timestamp: t.Timestamp} }
