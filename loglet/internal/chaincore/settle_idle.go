package chaincore

import (
	"time"

	settle "github.com/flightlog/flightlog/settle/settleval"
)

// Idle streams. A new settled object absorbs its stream's small settled
// objects just before it, so a stream that keeps writing keeps few; one
// that stops keeps the small objects its last passes wrote. The leader
// knows what its passes settled: it keeps a bounded table of the streams
// it settled recently (at most maxIdleStreams, the least recently settled
// forgotten first), each with its last settled ref and the sizes of its
// last objects, and a queue of them in the order they were last settled.
// A stream that has had nothing settled for IdleMergeAfter intervals and
// whose last objects are small (two or more, or one with what lies before
// it unknown to this leader) is named to the next pass (Settle.Idle, at
// most settle.MaxIdlePerPass a pass), which merges them
// (loglet/internal/settlecore, idle.go) and reports it looked (Result.IdleLooked): the
// stream is not named again until it settles again. Finding them costs no
// metastore request; the pass costs a GetRef per object merged. The table
// is lost at a takeover: the successor names only streams it settled
// itself, so a stream idle since before the takeover keeps its small
// objects (at most the binary counter's: about log2 of TargetBytes over
// the pass size) until it writes again.

// IdleMergeAfter is how many settle intervals a stream has nothing settled
// before its small settled objects are merged.
const IdleMergeAfter = 60

// maxIdleStreams bounds the streams the idle table keeps.
const maxIdleStreams = 1 << 16

// maxTailSpans bounds the objects the table keeps a stream's sizes of.
const maxTailSpans = 24

// idleTable is the leader's table of recently settled streams.
type idleTable struct {
	m map[string]*idleTail
	// q: the streams in the order their notes were made (stale notes,
	// of a stream settled again since, are skipped).
	q []idleNote
	// out: the streams named to the pass running now.
	out []string
}

type idleNote struct {
	stream string
	at     time.Time
}

// idleTail is what the leader knows of one stream's tail.
type idleTail struct {
	last settle.KnownRef
	at   time.Time // when the last settled ref was noted
	// spans: the raw bytes of its last settled objects, oldest first, by
	// start; sure: what lies before the first is known not to be small
	// (a large object, or the stream's start).
	spans []tailSpan
	sure  bool
	// looked: a pass looked at its tail since it last settled; queued: a
	// note of at is in the queue.
	looked, queued bool
}

type tailSpan struct {
	start uint64
	raw   int
}

// noteSettled records the settled refs a pass wrote, at now.
func (t *idleTable) noteSettled(r settle.Result, now time.Time) {
	if t.m == nil {
		t.m = map[string]*idleTail{}
	}
	for _, k := range r.Settled {
		id := k.Ref.Stream
		e := t.m[id]
		if e == nil {
			for len(t.m) >= maxIdleStreams && len(t.q) > 0 {
				t.evictOldest()
			}
			e = &idleTail{}
			t.m[id] = e
		}
		raw := 0
		for _, x := range k.Ref.Extents {
			raw += int(x.RawLength)
		}
		for len(e.spans) > 0 && e.spans[len(e.spans)-1].start >= k.Ref.Start {
			e.spans = e.spans[:len(e.spans)-1] // absorbed by the new object
		}
		if len(e.spans) == 0 && k.Ref.Start == 0 {
			e.sure = true
		}
		e.spans = append(e.spans, tailSpan{start: k.Ref.Start, raw: raw})
		if n := len(e.spans); n > maxTailSpans {
			e.sure = e.sure || !settle.SmallObject(e.spans[n-maxTailSpans-1].raw, 0)
			e.spans = e.spans[n-maxTailSpans:]
		}
		e.last, e.at, e.looked = k, now, false
		e.queued = true
		t.q = append(t.q, idleNote{stream: id, at: now})
	}
	for _, id := range r.IdleLooked {
		if e := t.m[id]; e != nil {
			e.looked = true
		}
	}
	t.compact()
}

// evictOldest forgets the least recently settled stream.
func (t *idleTable) evictOldest() {
	n := t.q[0]
	t.q = t.q[1:]
	if e := t.m[n.stream]; e != nil && e.at.Equal(n.at) {
		delete(t.m, n.stream)
	}
}

// compact drops stale notes once they are half the queue.
func (t *idleTable) compact() {
	if len(t.q) < 2*len(t.m)+64 {
		return
	}
	q := t.q[:0]
	for _, n := range t.q {
		if e := t.m[n.stream]; e != nil && e.at.Equal(n.at) {
			q = append(q, n)
		}
	}
	t.q = q
}

// wants: the stream's tail is small and worth a pass's look.
func (e *idleTail) wants() bool {
	if e.looked || len(e.spans) == 0 {
		return false
	}
	small := 0
	for i := len(e.spans) - 1; i >= 0 && settle.SmallObject(e.spans[i].raw, 0); i-- {
		small++
	}
	switch {
	case small >= 2:
		return true
	case small == 1:
		// What lies before it is unknown to this leader (it took over, or
		// forgot): a look costs a GetRef.
		return !e.sure && len(e.spans) == 1 && e.spans[0].start > 0
	}
	return false
}

// due is when the first queued stream turns idle (zero: none queued),
// after dropping the notes that no longer name an idle candidate.
func (t *idleTable) due(after time.Duration) time.Time {
	for len(t.q) > 0 {
		n := t.q[0]
		if e := t.m[n.stream]; e != nil && e.at.Equal(n.at) && e.wants() {
			return n.at.Add(after)
		}
		t.q = t.q[1:]
		if e := t.m[n.stream]; e != nil && e.at.Equal(n.at) {
			e.queued = false
		}
	}
	return time.Time{}
}

// take names the streams idle at now (at most settle.MaxIdlePerPass).
func (t *idleTable) take(now time.Time, after time.Duration) []settle.KnownRef {
	var out []settle.KnownRef
	for len(out) < settle.MaxIdlePerPass {
		d := t.due(after)
		if d.IsZero() || now.Before(d) {
			break
		}
		n := t.q[0]
		t.q = t.q[1:]
		e := t.m[n.stream]
		e.queued = false
		out = append(out, e.last)
		t.out = append(t.out, n.stream)
	}
	return out
}

// passed requeues the streams the pass was asked to look at and did not
// (it failed), as due now.
func (t *idleTable) passed(r settle.Result, now time.Time, after time.Duration) {
	looked := map[string]bool{}
	for _, id := range r.IdleLooked {
		looked[id] = true
	}
	var again []idleNote
	for _, id := range t.out {
		if e := t.m[id]; e != nil && !looked[id] && !e.queued && !e.looked {
			e.at, e.queued = now.Add(-after), true
			again = append(again, idleNote{stream: id, at: e.at})
		}
	}
	t.out = nil
	t.q = append(again, t.q...)
}

// idleAfter is how long a stream has nothing settled before it is idle.
func (c *Core) idleAfter() time.Duration {
	return IdleMergeAfter * c.cfg.SettleInterval
}

// idleDue is when the first idle stream's tail is due a merge (zero:
// none).
func (c *Core) idleDue() time.Time {
	return c.st.tails.due(c.idleAfter())
}
