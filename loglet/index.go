package loglet

import (
	"fmt"
	"sort"

	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/sequencer"
)

// streamState is one stream this process leads. Its fields below name are
// guarded by its lane's mutex.
type streamState struct {
	name  string
	class Class
	lane  *lane // its class's lane; nil if the class is disabled here

	seq     sequencer.Stream // assigned tail
	durable Tail             // released tail
	entries []*pending
	waiters chan struct{} // closed and replaced on each release
}

// changed returns a channel closed at the stream's next release. Lane lock
// held.
func (st *streamState) changed() <-chan struct{} {
	if st.waiters == nil {
		st.waiters = make(chan struct{})
	}
	return st.waiters
}

// flightIndex accounts the released, unabsorbed batches the leader keeps
// per stream (streamState.entries) to serve the tail of each stream until
// the absorb records them. The backlog bounds it. Guarded by the lane lock.
type flightIndex struct {
	bytes int64
}

func (x *flightIndex) add(st *streamState, p *pending) {
	st.entries = append(st.entries, p)
	x.bytes += int64(len(p.payload))
}

// drop removes p, which must be st's oldest entry, once it is absorbed.
func (x *flightIndex) drop(p *pending) {
	e := p.st.entries
	if len(e) > 0 && e[0] == p {
		e[0] = nil
		p.st.entries = e[1:]
		x.bytes -= int64(len(p.payload))
	}
}

// read serves up to maxRecords/maxBytes records of st from seq on, from the
// flight index. seq must not be below indexStart(). Lane lock held.
func (st *streamState) read(seq uint64, maxRecords, maxBytes int) ([]SequencedRecord, error) {
	e := st.entries
	if seq >= st.durable.Seq {
		return nil, nil
	}
	if len(e) == 0 || seq < e[0].start {
		return nil, fmt.Errorf("loglet: %d is below the flight index (%d)", seq, st.indexStart())
	}
	i := sort.Search(len(e), func(i int) bool { return e[i].start+uint64(e[i].count) > seq })
	var out []SequencedRecord
	size := 0
	for ; i < len(e); i++ {
		recs, err := envelope.DecodeRecords(e[i].payload, e[i].count)
		if err != nil {
			return out, err // cannot happen: we encoded it
		}
		for j, r := range recs {
			s := e[i].start + uint64(j)
			if s < seq {
				continue
			}
			rs := len(r.Body)
			for _, h := range r.Headers {
				rs += len(h.Name) + len(h.Value)
			}
			if len(out) >= maxRecords || (len(out) > 0 && size+rs > maxBytes) {
				return out, nil
			}
			size += rs
			out = append(out, SequencedRecord{Seq: s, Record: r})
		}
	}
	return out, nil
}

// indexStart is the first sequence number the flight index serves: below
// it, records are read from history (refs). Lane lock held.
func (st *streamState) indexStart() uint64 {
	if len(st.entries) > 0 {
		return st.entries[0].start
	}
	return st.durable.Seq
}

// seqFromTimestamp returns the first indexed sequence number whose record
// has a timestamp >= ms, or the durable tail. Lane lock held.
func (st *streamState) seqFromTimestamp(ms int64) uint64 {
	e := st.entries
	i := sort.Search(len(e), func(i int) bool { return e[i].maxTS >= ms })
	if i == len(e) {
		return st.durable.Seq
	}
	recs, err := envelope.DecodeRecords(e[i].payload, e[i].count)
	if err == nil {
		for j, r := range recs {
			if r.Timestamp >= ms {
				return e[i].start + uint64(j)
			}
		}
	}
	return e[i].start
}
