package catalogcore

import "errors"

// Trim raises one incarnation's trim point to Seq (already clamped by the
// shell to the stream's durable tail): it reads the record, and writes it
// with the trim point raised, expecting the version read. The trim point
// only grows: a record already at or past Seq is Trimmed at its own point,
// writing nothing. The record of another incarnation (the name deleted and
// created again) is NotFound: a trim never lands on the wrong incarnation.
// A conflict (another writer of the record) re-reads, up to
// MaxTrimAttempts commits.
type Trim struct {
	op
	name, inc string
	seq       uint64
	rec       Record
	attempts  int
}

// NewTrim starts a trim of name's incarnation inc to seq.
func NewTrim(name, inc string, seq uint64) *Trim {
	t := &Trim{name: name, inc: inc, seq: seq}
	t.ask(ReadRecord{Name: name})
	return t
}

// errRecreated says why a trim or an offset found no record of its
// incarnation.
var errRecreated = errors.New("deleted and created again")

// Step implements Op.
func (t *Trim) Step(res Result) error {
	if t.req == nil {
		return errOver
	}
	switch req := t.req.(type) {
	case ReadRecord:
		r, ok := res.(RecordRead)
		if !ok {
			return mismatch(req, res)
		}
		switch {
		case r.NotFound:
			t.end(Outcome{Status: NotFound, Attempts: t.attempts})
		case r.Corrupt:
			t.end(Outcome{Status: Corrupt, Err: r.Err, Attempts: t.attempts})
		case r.Err != nil:
			t.end(Outcome{Status: Failed, Err: r.Err, Attempts: t.attempts})
		case r.Record.Incarnation != t.inc:
			t.end(Outcome{Status: NotFound, Record: r.Record, Err: errRecreated, Attempts: t.attempts})
		case r.Record.TrimSeq >= t.seq:
			t.end(Outcome{Status: Trimmed, Record: r.Record, Seq: r.Record.TrimSeq, Attempts: t.attempts})
		default:
			t.rec = r.Record
			t.attempts++
			t.ask(PutTrim{Record: r.Record, Seq: t.seq})
		}
	case PutTrim:
		r, ok := res.(TrimPut)
		if !ok {
			return mismatch(req, res)
		}
		switch {
		case r.Err == nil:
			rec := t.rec
			rec.TrimSeq = t.seq
			t.end(Outcome{Status: Trimmed, Record: rec, Seq: t.seq, Wrote: true, Attempts: t.attempts})
		case r.Conflict && t.attempts < MaxTrimAttempts:
			t.ask(ReadRecord{Name: t.name})
		default:
			// Not known to have applied: a retry finds out (a commit to
			// the same point is a no-op).
			t.end(Outcome{Status: Failed, Err: r.Err, Attempts: t.attempts, Exhausted: r.Conflict})
		}
	default:
		return mismatch(t.req, res)
	}
	return nil
}
