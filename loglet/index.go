package loglet

import (
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

// wake tells read sessions following the stream that it grew. Called with
// the lane lock NOT held; takes it briefly.
func (st *streamState) wake() {
	st.lane.mu.Lock()
	if st.waiters != nil {
		close(st.waiters)
		st.waiters = nil
	}
	st.lane.mu.Unlock()
}

// changed returns a channel closed at the stream's next release. Lane lock
// held.
func (st *streamState) changed() <-chan struct{} {
	if st.waiters == nil {
		st.waiters = make(chan struct{})
	}
	return st.waiters
}

// flightIndex keeps released batches, per stream and in release order, to
// serve reads, under a byte budget: past it the oldest released batches are
// evicted first. Guarded by the lane's mutex.
type flightIndex struct {
	budget int64
	bytes  int64
	fifo   []*pending // every indexed batch, in release order
	head   int
}

func (x *flightIndex) add(st *streamState, p *pending) {
	st.entries = append(st.entries, p)
	x.fifo = append(x.fifo, p)
	x.bytes += int64(len(p.payload))
	for x.bytes > x.budget && x.head < len(x.fifo) {
		old := x.fifo[x.head]
		x.fifo[x.head] = nil
		x.head++
		x.bytes -= int64(len(old.payload))
		// Per stream, eviction is also oldest first.
		if e := old.st.entries; len(e) > 0 && e[0] == old {
			e[0] = nil
			old.st.entries = e[1:]
		}
	}
	if x.head > 1024 && x.head*2 > len(x.fifo) {
		n := copy(x.fifo, x.fifo[x.head:])
		clear(x.fifo[n:])
		x.fifo, x.head = x.fifo[:n], 0
	}
}

// read serves up to maxRecords/maxBytes records of st from seq on. It
// returns ErrHistoryTrimmed if seq is below the oldest indexed record and
// above 0 of what was ever written here. Lane lock held.
func (st *streamState) read(seq uint64, maxRecords, maxBytes int) ([]SequencedRecord, error) {
	e := st.entries
	if seq >= st.durable.Seq {
		return nil, nil
	}
	if len(e) == 0 || seq < e[0].start {
		return nil, ErrHistoryTrimmed
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
