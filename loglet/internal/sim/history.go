package sim

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flightlog/flightlog/loglet"
)

// outcome is how an append ended.
type outcome uint8

const (
	outPending outcome = iota
	outAcked
	outNotCommitted
	outUnknown
)

func (o outcome) String() string {
	return [...]string{"pending", "acked", "not-committed", "unknown"}[o]
}

// appendOp is one Append (or one session Submit+Wait) and its outcome.
type appendOp struct {
	id       uint32
	producer int
	proc     int // the process it was sent to
	stream   string
	recs     []loglet.Record
	match    *uint64
	call     int64
	ret      int64
	out      outcome
	ack      loglet.Ack
	err      error
}

// readOp is one read that returned records (or none) from a position.
type readOp struct {
	who       string
	stream    string
	from      uint64 // the seq of the first record (a read from below a trim point starts at it)
	asked     uint64 // where the read was asked to start
	ids       []uint64
	at        time.Time // virtual time of the return
	tail      uint64    // durable tail the leader reported; hasTail false for a Reader
	hasTail   bool
	call, ret int64
}

// tailOp is one CheckTail: on the leader the assigned tail (at least the
// committed length), on a Reader the absorbed tail (at most it).
type tailOp struct {
	who       string
	stream    string
	t         uint64
	lower     bool // leader: t >= committed length
	call, ret int64
}

// trimOp is one Star.Trim call: the seq asked for, and (when it returned
// nil) the trim point it left and the one the stream record carried just
// after.
type trimOp struct {
	stream string
	seq    uint64
	ok     bool // returned nil: the trim point is at least actual
	// left (ok) is the trim point the Trim itself left, which the
	// leader's reads are held to from its return: the seq asked for,
	// clamped as the record read back says, and at least the point the
	// record had before the call. actual may be more: a retention pass can
	// raise the point between the Trim's return and the read-back, and
	// reads are not held to a pass's point at once (observedTrim).
	left      uint64
	actual    uint64 // ok: the stream record's trim point just after
	call, ret int64
	retAt     time.Time // virtual time of the return
	err       error
}

// history is everything the workload observed, in a logical clock that
// orders calls and returns as they happened (the clock is the porcupine
// timestamp: virtual time does not advance between most events).
type history struct {
	clock atomic.Int64

	mu      sync.Mutex
	appends []*appendOp
	byID    map[uint32]*appendOp
	reads   []readOp
	tails   []tailOp
	trims   []trimOp
	// retentionTrims counts the trims retention passes wrote (observed).
	retentionTrims int
	bad            []string
	readErr        map[string]int
}

func newHistory() *history {
	return &history{byID: map[uint32]*appendOp{}, readErr: map[string]int{}}
}

func (h *history) tick() int64 { return h.clock.Add(1) }

func (h *history) violation(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.bad) < 50 {
		h.bad = append(h.bad, fmt.Sprintf(format, args...))
	}
}

// recordID names record idx of append op id; bodies start with it.
func recordID(op uint32, idx int) uint64 { return uint64(op)<<16 | uint64(idx) }

const bodyPrefixLen = 16 // "op%08d.r%03d|"

func bodyPrefix(op uint32, idx int) string { return fmt.Sprintf("op%08d.r%03d|", op, idx) }

// parseRecordID reads the identity a body starts with.
func parseRecordID(body []byte) (uint64, bool) {
	if len(body) < bodyPrefixLen || !bytes.HasPrefix(body, []byte("op")) || body[10] != '.' || body[11] != 'r' || body[15] != '|' {
		return 0, false
	}
	op, err1 := strconv.ParseUint(string(body[2:10]), 10, 32)
	idx, err2 := strconv.ParseUint(string(body[12:15]), 10, 16)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return recordID(uint32(op), int(idx)), true
}

func (h *history) newAppend(producer, proc int, stream string, recs []loglet.Record, match *uint64) *appendOp {
	h.mu.Lock()
	op := &appendOp{id: uint32(len(h.appends) + 1), producer: producer, proc: proc, stream: stream, match: match}
	h.appends = append(h.appends, op)
	h.byID[op.id] = op
	h.mu.Unlock()
	for i := range recs {
		r := recs[i]
		r.Body = append([]byte(bodyPrefix(op.id, i)), r.Body...)
		op.recs = append(op.recs, r)
	}
	op.call = h.tick()
	return op
}

// finish records an append's outcome and checks that it is exactly one of
// the three, with a well-formed ack.
func (h *history) finish(op *appendOp, ack loglet.Ack, err error) {
	ret := h.tick()
	nc, unk := errors.Is(err, loglet.ErrNotCommitted), errors.Is(err, loglet.ErrOutcomeUnknown)
	var out outcome
	switch {
	case err == nil:
		out = outAcked
		if n := uint64(len(op.recs)); ack.End-ack.Start != n || ack.End < ack.Start {
			h.violation("op %d on %s: ack [%d, %d) for %d records", op.id, op.stream, ack.Start, ack.End, n)
		}
		if ack.Tail.Seq < ack.End {
			h.violation("op %d on %s: ack [%d, %d) with tail %d below its end", op.id, op.stream, ack.Start, ack.End, ack.Tail.Seq)
		}
		if op.match != nil && ack.Start != *op.match {
			h.violation("op %d on %s: MatchSeqNum %d but acked at %d", op.id, op.stream, *op.match, ack.Start)
		}
	case nc && unk:
		h.violation("op %d on %s: error matches both ErrNotCommitted and ErrOutcomeUnknown: %v", op.id, op.stream, err)
		out = outUnknown
	case nc:
		out = outNotCommitted
		var mm *loglet.SeqNumMismatchError
		if errors.As(err, &mm) && (op.match == nil || mm.Tail.Seq == *op.match) {
			h.violation("op %d on %s: mismatch error %v for MatchSeqNum %v", op.id, op.stream, err, op.match)
		}
	case unk:
		out = outUnknown
	default:
		h.violation("op %d on %s: error is neither not-committed nor outcome-unknown: %v", op.id, op.stream, err)
		out = outUnknown
	}
	h.mu.Lock()
	if op.out != outPending {
		h.violation("op %d on %s: a second outcome %v after %v", op.id, op.stream, out, op.out)
	}
	op.out, op.ack, op.err, op.ret = out, ack, err, ret
	h.mu.Unlock()
}

// observeRead records a read and checks its shape: records start at from,
// are consecutive, each body is the one its identity says, and (on the
// leader) nothing at or past the durable tail is returned.
func (h *history) observeRead(who, stream string, from uint64, recs []loglet.SequencedRecord, tail uint64, hasTail bool, call int64) {
	ret := h.tick()
	asked := from
	if len(recs) > 0 && recs[0].Seq > from && h.trimPoint(stream, recs[0].Seq, ret) {
		from = recs[0].Seq // started at a trim point (checkTrims checks which)
	}
	ids := make([]uint64, 0, len(recs))
	for i, r := range recs {
		if r.Seq != from+uint64(i) {
			h.violation("%s read of %s from %d: record %d has seq %d", who, stream, from, i, r.Seq)
			return
		}
		if hasTail && r.Seq >= tail {
			h.violation("%s read of %s from %d: seq %d at or past the durable tail %d it reported", who, stream, from, r.Seq, tail)
		}
		id, ok := parseRecordID(r.Body)
		if !ok {
			h.violation("%s read of %s: seq %d has a body no producer wrote: %q", who, stream, r.Seq, trunc(r.Body))
			return
		}
		h.checkContent(who, stream, r, id)
		ids = append(ids, id)
	}
	h.mu.Lock()
	h.reads = append(h.reads, readOp{who: who, stream: stream, from: from, asked: asked, ids: ids, at: time.Now(), tail: tail, hasTail: hasTail, call: call, ret: ret})
	h.mu.Unlock()
}

// checkContent compares a read record byte for byte with what was
// submitted under its identity.
func (h *history) checkContent(who, stream string, r loglet.SequencedRecord, id uint64) {
	h.mu.Lock()
	op := h.byID[uint32(id>>16)]
	h.mu.Unlock()
	idx := int(id & 0xffff)
	switch {
	case op == nil || idx >= len(op.recs):
		h.violation("%s read of %s: seq %d carries identity %x that was never submitted", who, stream, r.Seq, id)
	case op.stream != stream:
		h.violation("%s read of %s: seq %d is op %d's record, appended to %s", who, stream, r.Seq, op.id, op.stream)
	case !bytes.Equal(op.recs[idx].Body, r.Body) || !sameHeaders(op.recs[idx].Headers, r.Headers):
		h.violation("%s read of %s: seq %d (op %d record %d) differs from what was submitted", who, stream, r.Seq, op.id, idx)
	}
}

func sameHeaders(a, b []loglet.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i].Name, b[i].Name) || !bytes.Equal(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}

// trimPoint reports whether seq is a trim point stream may have had
// before clock tick by: the seq a Trim called before then asked for, or the
// point one left.
func (h *history) trimPoint(stream string, seq uint64, by int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range h.trims {
		if t.stream == stream && t.call < by && (t.seq == seq || (t.ok && t.actual == seq)) {
			return true
		}
	}
	return false
}

// observedTrim records a trim point a stream record was written with by
// the leader's retention pass: known from that moment as a point reads may
// start at, and as what the final record may hold. Reads are not held to
// it at once (the pass updates the leader's cache after its write).
func (h *history) observedTrim(stream string, seq uint64) {
	call := h.tick()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.trims = append(h.trims, trimOp{stream: stream, seq: seq, call: call, ret: math.MaxInt64, ok: true, left: seq, actual: seq})
	h.retentionTrims++
}

// trimStart records a Trim call; trimEnd its outcome.
func (h *history) trimStart(stream string, seq uint64) int {
	call := h.tick()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.trims = append(h.trims, trimOp{stream: stream, seq: seq, call: call})
	return len(h.trims) - 1
}

func (h *history) trimEnd(i int, err error, left, actual uint64) {
	ret := h.tick()
	h.mu.Lock()
	defer h.mu.Unlock()
	t := &h.trims[i]
	t.ret, t.retAt, t.err, t.ok, t.left, t.actual = ret, time.Now(), err, err == nil, left, actual
}

func (h *history) observeTail(who, stream string, t uint64, lower bool, call int64) {
	ret := h.tick()
	h.mu.Lock()
	h.tails = append(h.tails, tailOp{who: who, stream: stream, t: t, lower: lower, call: call, ret: ret})
	h.mu.Unlock()
}

func (h *history) readError(who string) {
	h.mu.Lock()
	h.readErr[who]++
	h.mu.Unlock()
}

func trunc(b []byte) []byte {
	if len(b) > 40 {
		return b[:40]
	}
	return b
}
