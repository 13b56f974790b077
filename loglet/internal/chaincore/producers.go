package chaincore

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	absorb "github.com/flightlog/flightlog/absorb/absorbval"
	"github.com/flightlog/flightlog/envelope"
)

// The producer window: exactly once across retries (docs/design.md,
// "Producers: exactly once across retries"). A batch may carry its
// producer's identity (Batch.Producer). Per stream, the core remembers the
// last batches of each producer that are committed, and the ones in flight:
// a retry of a committed batch is answered with its original range
// (*DuplicateError), a retry of one in flight waits for its outcome
// (*InFlightError), and a retry older than what is remembered is refused
// (*ProducerWindowError). The window travels with the tails
// (absorb.StreamTail.Producers) and the flights' producer marks, so a
// successor rebuilds it from the tails snapshot and its walk.

// ProducerID is a batch's producer identity: producer ID's batch number Seq.
// A retry of a batch carries the same ProducerID. The zero value (ID "")
// is a batch without one.
type ProducerID struct {
	ID  string
	Seq uint64
}

// ProducerWindow bounds each stream's dedupe window.
type ProducerWindow struct {
	// Producers is how many producers a stream remembers (the least
	// recently committed is forgotten first); 0: DefaultProducerWindow's.
	Producers int
	// Age is how long a producer's committed batches are remembered after
	// its last commit; 0: DefaultProducerWindow's.
	Age time.Duration
}

// DefaultProducerWindow is the window of a zero ProducerWindow's fields.
var DefaultProducerWindow = ProducerWindow{Producers: 1024, Age: 10 * time.Minute}

// ProducerBatches is how many of one producer's last committed batches a
// stream remembers: a producer may have this many batches in the air and
// still have each retry answered.
const ProducerBatches = 8

func (w ProducerWindow) orDefault() ProducerWindow {
	if w.Producers <= 0 {
		w.Producers = DefaultProducerWindow.Producers
	}
	if w.Age <= 0 {
		w.Age = DefaultProducerWindow.Age
	}
	return w
}

// DuplicateError: the batch's producer identity is a committed batch's.
// Nothing was admitted; Ack is the original batch's range, with the
// stream's durable tail now.
type DuplicateError struct{ Ack Ack }

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("leader: a duplicate of the committed batch [%d, %d)", e.Ack.Start, e.Ack.End)
}

// InFlightError: a batch with the same producer identity is admitted and
// has no outcome yet. Nothing was admitted; the shell waits for Batch's
// outcome (its Done) and answers the retry with it: acked, the retry is a
// duplicate of its range; not committed, the retry may be admitted again.
type InFlightError struct{ Batch *Batch }

func (e *InFlightError) Error() string {
	return fmt.Sprintf("leader: batch %d of producer %q is in flight", e.Batch.Producer.Seq, e.Batch.Producer.ID)
}

// ProducerWindowError: the batch is older than the producer's batches the
// stream remembers (it has committed ProducerBatches later ones), so
// whether it is committed cannot be told. Nothing was admitted.
type ProducerWindowError struct {
	ID          string
	Seq, Oldest uint64
}

func (e *ProducerWindowError) Error() string {
	return fmt.Sprintf("leader: batch %d of producer %q is past the dedupe window (the oldest remembered is %d)", e.Seq, e.ID, e.Oldest)
}

// producers is one stream's window: the committed batches remembered per
// producer, and the batches in flight.
type producers struct {
	byID     map[string]*producerState
	inflight map[ProducerID]*Batch
}

// producerState is one producer's committed batches a stream remembers, in
// Seq order, at most ProducerBatches; at is when the last was learned.
type producerState struct {
	batches []absorb.ProducerTail
	at      time.Time
}

func (st *Stream) window() *producers {
	if st.prod == nil {
		st.prod = &producers{byID: map[string]*producerState{}, inflight: map[ProducerID]*Batch{}}
	}
	return st.prod
}

// admitProducer decides a batch with a producer identity before it is
// sequenced: nil admits it (and the caller calls inFlight once it is).
func (c *Core) admitProducer(st *Stream, b *Batch) error {
	p := st.window()
	if in := p.inflight[b.Producer]; in != nil {
		c.stats.inFlightWaits++
		return &InFlightError{Batch: in}
	}
	ps := c.producerState(p, b.Producer.ID)
	if ps == nil {
		return nil
	}
	for _, t := range ps.batches {
		if t.Seq == b.Producer.Seq {
			c.stats.duplicates++
			return &DuplicateError{Ack: Ack{Start: t.Start, End: t.End, Tail: st.durable}}
		}
	}
	if len(ps.batches) >= ProducerBatches && b.Producer.Seq < ps.batches[0].Seq {
		c.stats.pastWindow++
		return &ProducerWindowError{ID: b.Producer.ID, Seq: b.Producer.Seq, Oldest: ps.batches[0].Seq}
	}
	return nil
}

// producerState returns producer id's remembered batches, forgetting them
// once they are older than the window's age.
func (c *Core) producerState(p *producers, id string) *producerState {
	ps := p.byID[id]
	if ps != nil && c.now.Sub(ps.at) > c.cfg.ProducerWindow.orDefault().Age {
		delete(p.byID, id)
		return nil
	}
	return ps
}

// producerDecided takes b's outcome into its stream's window: it is no
// longer in flight, and if it is acked its range is remembered.
func (c *Core) producerDecided(b *Batch, f Fate) {
	p := b.Stream.window()
	if p.inflight[b.Producer] == b {
		delete(p.inflight, b.Producer)
	}
	if f.Kind == Acked {
		c.remember(b.Stream, absorb.ProducerTail{ID: b.Producer.ID, Seq: b.Producer.Seq, Start: b.Start, End: b.End(), At: c.now.UnixMilli()}, c.now)
	}
}

// remember adds a committed batch to st's window, within its bounds.
func (c *Core) remember(st *Stream, t absorb.ProducerTail, at time.Time) {
	p := st.window()
	ps := p.byID[t.ID]
	if ps == nil {
		ps = &producerState{}
		p.byID[t.ID] = ps
		if w := c.cfg.ProducerWindow.orDefault(); len(p.byID) > w.Producers {
			c.evictOldest(p, t.ID)
		}
	}
	ps.batches = addProducerTail(ps.batches, t)
	if at.After(ps.at) {
		ps.at = at
	}
}

// evictOldest forgets the producer whose last commit is the oldest (never
// keep, the one being added).
func (c *Core) evictOldest(p *producers, keep string) {
	var oldest string
	var at time.Time
	for id, ps := range p.byID {
		if id != keep && (oldest == "" || ps.at.Before(at) || (ps.at.Equal(at) && id < oldest)) {
			oldest, at = id, ps.at
		}
	}
	delete(p.byID, oldest)
	c.stats.producersEvicted++
}

// addProducerTail inserts t into batches (Seq order; a Seq already there
// is kept as it is) and keeps the last ProducerBatches, in place: the
// list is this producer's own (the tails' lists are copied before they
// change, foldProducers).
func addProducerTail(batches []absorb.ProducerTail, t absorb.ProducerTail) []absorb.ProducerTail {
	i, found := slices.BinarySearchFunc(batches, t.Seq, func(x absorb.ProducerTail, s uint64) int { return cmp.Compare(x.Seq, s) })
	if found {
		return batches
	}
	if len(batches) >= ProducerBatches {
		if i == 0 {
			return batches // older than every batch kept
		}
		copy(batches, batches[1:i]) // the oldest goes
		batches[i-1] = t
		return batches
	}
	return slices.Insert(batches, i, t)
}

// loadProducers fills a new stream's window from its tail.
func (c *Core) loadProducers(st *Stream, ts []absorb.ProducerTail) {
	for _, t := range ts {
		c.remember(st, t, time.UnixMilli(t.At))
	}
}

// producerMarks lists the producer marks of a flight's batches, for the
// absorb's plan (live flights; a walk reads them from the flight's footer).
func producerMarks(batches []*Batch) []envelope.ProducerMark {
	var out []envelope.ProducerMark
	for _, b := range batches {
		if b.Producer.ID != "" {
			out = append(out, envelope.ProducerMark{Stream: b.Stream.name, FirstSeq: b.Start, Count: uint32(b.Count), ID: b.Producer.ID, Seq: b.Producer.Seq})
		}
	}
	return out
}

// foldProducers takes the producer marks of a planned round's slots into
// the tails (their windows, as of the round's end), and bounds each window
// it changed: the age, ProducerBatches per producer, and the producers.
func (c *Core) foldProducers(slots []absorb.Slot) {
	now := c.now.UnixMilli()
	var changed map[string][]absorb.ProducerTail
	for _, s := range slots {
		for _, m := range s.Producers {
			if changed == nil {
				changed = map[string][]absorb.ProducerTail{}
			}
			ts, ok := changed[m.Stream]
			if !ok {
				t, _ := c.ab.tails.get(m.Stream)
				ts = slices.Clone(t.Producers) // a tail's list may be shared with a plan's undo
			}
			changed[m.Stream] = append(ts, absorb.ProducerTail{ID: m.ID, Seq: m.Seq, Start: m.FirstSeq, End: m.FirstSeq + uint64(m.Count), At: now})
		}
	}
	w := c.cfg.ProducerWindow.orDefault()
	for name, ts := range changed {
		t, ok := c.ab.tails.get(name)
		if !ok {
			continue // Plan put every stream of the round's frames there
		}
		t.Producers = boundProducerTails(ts, now-w.Age.Milliseconds(), w.Producers)
		c.ab.tails.set(name, t)
	}
}

// boundProducerTails keeps, of a stream's remembered batches, one of each
// (ID, Seq) (the first), of producers whose last commit is at or after
// since, at most ProducerBatches each (the highest Seqs) and producers
// producers (the most recent). It sorts ts in place and returns a new
// slice, by ID then Seq.
func boundProducerTails(ts []absorb.ProducerTail, since int64, producers int) []absorb.ProducerTail {
	slices.SortStableFunc(ts, func(a, b absorb.ProducerTail) int {
		if c := cmp.Compare(a.ID, b.ID); c != 0 {
			return c
		}
		return cmp.Compare(a.Seq, b.Seq)
	})
	ts = slices.CompactFunc(ts, func(a, b absorb.ProducerTail) bool { return a.ID == b.ID && a.Seq == b.Seq })
	last := map[string]int64{}
	count := map[string]int{}
	for _, t := range ts {
		last[t.ID] = max(last[t.ID], t.At)
		count[t.ID]++
	}
	ids := make([]string, 0, len(last))
	for id, at := range last {
		if at >= since {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b string) int {
		if c := cmp.Compare(last[b], last[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	if len(ids) > producers {
		ids = ids[:producers]
	}
	keep := make(map[string]bool, len(ids))
	for _, id := range ids {
		keep[id] = true
	}
	out := make([]absorb.ProducerTail, 0, len(ts))
	seen := map[string]int{}
	for _, t := range ts {
		if !keep[t.ID] {
			continue
		}
		seen[t.ID]++
		if count[t.ID]-seen[t.ID] < ProducerBatches {
			out = append(out, t)
		}
	}
	return out
}
