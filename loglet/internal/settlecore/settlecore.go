// Package settlecore decides one settle pass of a chain as states and
// steps: which slots to settle and up to where, which cuts it needs and
// which it must re-derive, when the trim cursor moves and what is deleted
// behind it, which settled objects the doomed and pending markers under
// stars/<star>/<class>/doomed/ let it reclaim, and when the pass is
// deposed. It does no I/O and has no goroutine, clock, context or lock: a
// Pass asks for one I/O call at a time (a Request), and the executor
// steps the call's result back in (an Event). The executor
// (loglet/internal/work) makes each call and decides nothing.
//
// It imports no store package. What it decides with (records, keys,
// results, sentinel errors) comes from the pure halves chain/chainval,
// absorb/absorbval, settle/settleval, metastore/metaval and
// objstore/objval, imported under the names of the packages that re-export
// them, so chain.TrimCursor here is the very type chain's callers use;
// internal/depcheck fails if a core gains an I/O dependency.
//
// A pass runs in this order, every metastore mutation a guarded Commit
// (the checkpoint checked at the version last found sealed by the pass's
// leader; a successor's seal deposes the pass):
//
//  1. Read the trim cursor (unless the caller read it).
//  2. Delete behind the cursor: the slots in [Deleted, At) from every
//     bucket, then record Deleted = At. A failure is kept in
//     Result.DeleteErr: the deletes stay due, the pass goes on.
//  3. Reclaim (unless the leader knows none is due yet: Input.DoomedKnown):
//     scan the markers; a doomed one past its grace, or a
//     Deleting one, has its object deleted; a pending one past its grace
//     whose ref does not point at its object has it deleted too, one whose
//     ref does is only dropped. A deletion is three steps: the marker
//     turns Deleting (guarded), the object goes from every settled bucket,
//     the marker goes.
//  4. Merge the small settled objects at the tail of each idle stream the
//     leader named (idle.go). If the cursor is at Upto, the pass is done.
//  5. Re-derive the cut of every epoch between the cursor and Upto that
//     nobody recorded (a fence of the epoch from the cursor), and record
//     it in the cursor before use.
//  6. Read the slots from the cursor on (up to Upto, MaxSlots or
//     settle.MaxPassBytes), one epoch's range a request; settle the refs
//     with records in them, stream by stream (slots.go); reclaim again if
//     a merge doomed objects.
//  7. Advance the cursor to where the slots read end, then delete behind
//     it as in 2.
//
// A request that fails transiently (not a conflict, not deposed, not a
// refusal: see Transient) is asked again on the pass's own backoff (a
// Wait between tries, 10 ms doubling to 1 s, up to Config.Retries times)
// instead of failing the pass: every step is idempotent, and a pass of
// many requests against a store that fails a few percent of them would
// otherwise fail as a whole almost every time. Only the deletes behind
// the cursor (2) are not retried: they stay due and the pass goes on. The
// streams whose settling failed are settled again, those only.
package settlecore

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	absorb "github.com/flightlog/flightlog/absorb/absorbval"
	chain "github.com/flightlog/flightlog/chain/chainval"
	"github.com/flightlog/flightlog/envelope"
	metastore "github.com/flightlog/flightlog/metastore/metaval"
	objstore "github.com/flightlog/flightlog/objstore/objval"
	settle "github.com/flightlog/flightlog/settle/settleval"
)

// Config is what a pass knows of its chain and its backend.
type Config struct {
	Star  string
	Class chain.Class
	// Owner and Epoch are the pass's leader: its checkpoint seal.
	Owner string
	Epoch uint64
	// TransitK is the number of buckets of the chain (for freed bytes);
	// SettledBuckets the number of buckets of the settled set.
	TransitK, SettledBuckets int
	// DoomedGrace is how long a doomed object is kept (0: none).
	DoomedGrace time.Duration
	// MaxCommitOps bounds the ops of one Commit (0: maxBatchOps).
	MaxCommitOps int
	// Retries bounds the tries of one request after its first transient
	// failure (0: DefaultRetries; negative: none).
	Retries int
	// MaxCommitBytes bounds the bytes of one Commit as OpBytes counts
	// them (0: no bound); OpBytes is an op's size as the backend counts it
	// (nil: the key and value's lengths).
	MaxCommitBytes int
	OpBytes        func(metastore.Op) int
	// Settled objects: Codec compresses their frames, of up to FrameBytes
	// raw each (0: settle.DefaultFrameBytes), and an object grows to
	// TargetBytes raw (0: settle.DefaultTargetBytes).
	Codec                   envelope.Codec
	FrameBytes, TargetBytes int
	// Liveness: the pass asks whether each stream lives and where it is
	// trimmed (CheckLive); else every stream lives, none trimmed.
	Liveness bool
	// ReadAhead bounds the reads a Parallel request runs at once (0:
	// DefaultReadAhead); WriteAhead its object PUTs and deletes (0:
	// DefaultWriteAhead, and never fewer than ReadAhead).
	ReadAhead, WriteAhead int
	// Memory: the executor accounts the pass's buffers in a memory
	// budget; the pass asks for the bytes of the objects it renders and
	// reads back before it holds them (HoldMemory, memory.go).
	Memory bool
}

// DefaultRetries is Config.Retries' default: with the backoff doubling
// from RetryMin to RetryMax, a request is given about 2.3 s.
const DefaultRetries = 8

// The backoff between the tries of a request.
const (
	RetryMin = 10 * time.Millisecond
	RetryMax = time.Second
)

// Transient reports whether a request that failed with err may succeed if
// asked again unchanged: every failure but a conflict (a version moved: the
// pass decides what follows), a deposed pass, a cut unknown, a key or
// object not found, a request too large or invalid, and a permanent
// object-store failure.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	for _, e := range []error{metastore.ErrConflict, metastore.ErrNotFound, metastore.ErrTooLarge, metastore.ErrInvalidKey,
		objstore.ErrNotFound, objstore.ErrExists, objstore.ErrPermanent, objstore.ErrInvalidKey, objstore.ErrInvalidRange, settle.ErrDeposed, settle.ErrCutUnknown} {
		if errors.Is(err, e) {
			return false
		}
	}
	return true
}

// Input is one pass's task.
type Input struct {
	// TrimKnown: Trim and TrimVersion are the cursor as stored; else the
	// pass reads it first.
	TrimKnown   bool
	Trim        chain.TrimCursor
	TrimVersion metastore.Version
	// Upto, Checkpoint, Cuts, MaxSlots: as settle.Pass.
	Upto, Checkpoint chain.Position
	Cuts             []chain.Cut
	MaxSlots         int
	// Known, KnownFrom, KnownOK, Prev: the refs the leader knows, as
	// settle.Pass's fields of the same names.
	Known     []settle.KnownRef
	KnownFrom chain.Position
	KnownOK   bool
	Prev      []settle.KnownRef
	// DoomedKnown, DoomedDue: as settle.Pass's.
	DoomedKnown bool
	DoomedDue   time.Time
	// Idle: the last settled refs of the streams the leader found idle,
	// as settle.Pass's field of the same name (idle.go).
	Idle []settle.KnownRef
}

// MinCommitOps is the fewest ops a Commit must take for settlement: a
// repoint is the ref's put and the check of its object's marker key,
// beside the checkpoint guard (a repoint that merges, or a Commit that
// has a doomed chunk marker, needs more, and is only made where they fit);
// a reclaim's claim of a pending object is its ref's check and its
// Deleting marker, beside the guard.
const MinCommitOps = 3

// maxBatchOps bounds one Commit of a pass on a backend without a limit.
const maxBatchOps = 1024

// scanPage is the markers one Scan returns.
const scanPage = 256

// Request is one I/O call a pass asks for.
type Request interface{ isRequest() }

// Event is the result of a Request.
type Event interface{ isEvent() }

// ReadTrim asks for the chain's trim cursor. → TrimRead.
type ReadTrim struct{}

// ReadCheckpoint asks for the chain's checkpoint, to learn whether the
// pass's leader still holds it. → CheckpointRead.
type ReadCheckpoint struct{}

// Commit asks for one metastore Commit of Ops (the last op is the guard:
// an OpCheck of the checkpoint). What says what it is, for traces.
// → Committed.
type Commit struct {
	What string
	Ops  []metastore.Op
}

// DeleteSlots asks for the slots [From, To) of Epoch to be deleted from
// every bucket of the chain (chain.Trim). → SlotsDeleted.
type DeleteSlots struct{ Epoch, From, To uint64 }

// ScanMarkers asks for the markers after After (a page of at most Limit).
// → MarkersScanned.
type ScanMarkers struct {
	After string
	Limit int
}

// GetRef asks for the ref at Key. → RefGot.
type GetRef struct{ Key string }

// DeleteObject asks for the settled object Key to be deleted from settled
// bucket Bucket. → ObjectDeleted.
type DeleteObject struct {
	Bucket int
	Key    string
}

// FenceEpoch asks for a fence of Epoch from slot From, to find its cut.
// → EpochFenced.
type FenceEpoch struct{ Epoch, From uint64 }

// ReadSlots asks for the slots [From, To) of Epoch to be read, in order,
// from the chain's buckets (chain.Walk), stopping before a slot once those
// read hold MaxBytes or more. → SlotsRead.
type ReadSlots struct {
	Epoch, From, To uint64
	MaxBytes        int64
}

// Wait asks the executor to wait For before the pass goes on: the backoff
// before a request that failed transiently is asked again. → Waited.
type Wait struct{ For time.Duration }

func (ReadTrim) isRequest()       {}
func (ReadCheckpoint) isRequest() {}
func (Commit) isRequest()         {}
func (DeleteSlots) isRequest()    {}
func (ScanMarkers) isRequest()    {}
func (GetRef) isRequest()         {}
func (DeleteObject) isRequest()   {}
func (FenceEpoch) isRequest()     {}
func (ReadSlots) isRequest()      {}
func (Wait) isRequest()           {}

// TrimRead is ReadTrim's result.
type TrimRead struct {
	Cursor  chain.TrimCursor
	Version metastore.Version
	Err     error
}

// CheckpointRead is ReadCheckpoint's result: who sealed the checkpoint.
type CheckpointRead struct {
	Owner   string
	Epoch   uint64
	Version metastore.Version
	Err     error
}

// Committed is Commit's result: the versions of its ops.
type Committed struct {
	Versions []metastore.Version
	Err      error
}

// SlotsDeleted is DeleteSlots' result: the deletes that succeeded (over
// every bucket), and the first failure.
type SlotsDeleted struct {
	Deleted int
	Err     error
}

// MarkersScanned is ScanMarkers' result.
type MarkersScanned struct {
	Items []metastore.Item
	Err   error
}

// RefGot is GetRef's result (Found false: no ref there).
type RefGot struct {
	Item  metastore.Item
	Found bool
	Err   error
}

// ObjectDeleted is DeleteObject's result (an object already gone is no
// error).
type ObjectDeleted struct{ Err error }

// EpochFenced is FenceEpoch's result.
type EpochFenced struct {
	Cut uint64
	Err error
}

// SlotsRead is ReadSlots' result: the slots read, in order (up to the
// first that failed, with Err), and Full if it stopped at MaxBytes.
type SlotsRead struct {
	Slots []settle.Slot
	Full  bool
	Err   error
}

// Waited is Wait's result (Err: the executor stopped waiting, its context
// over; the pass then ends with the request's failure).
type Waited struct{ Err error }

func (TrimRead) isEvent()       {}
func (CheckpointRead) isEvent() {}
func (Committed) isEvent()      {}
func (SlotsDeleted) isEvent()   {}
func (MarkersScanned) isEvent() {}
func (RefGot) isEvent()         {}
func (ObjectDeleted) isEvent()  {}
func (EpochFenced) isEvent()    {}
func (SlotsRead) isEvent()      {}
func (Waited) isEvent()         {}

// Log is a line a pass asks its executor to log.
type Log struct {
	Msg   string
	Attrs []any // slog's key, value pairs
}

// Pass is one settle pass: New, then Next/Step until Done.
type Pass struct {
	cfg Config
	in  Input
	now time.Time

	res  settle.Result
	cuts map[uint64]uint64
	// cpVer is the checkpoint's version as last found sealed by the
	// pass's leader ("": not read yet).
	cpVer metastore.Version
	sizes map[chain.Position]int64
	// known: each stream's refs the leader knows, in order (nil: the
	// cursor is before what it knows; scan); prev: each stream's settled
	// refs as passes wrote or read them (its last ones: a merge walks back
	// through them).
	known map[string][]ref
	prev  map[string][]ref

	// markedAt is when the pass first wrote (or tried to write) a doomed
	// or pending marker; scanSkipped: it did not scan the markers
	// (Input.DoomedKnown).
	markedAt    time.Time
	scanSkipped bool
	// oldPending: the one-object pending markers (of an earlier version)
	// the last scan found, by key, with their versions: a repoint onto
	// such an object deletes its marker at that version (see repoint).
	oldPending map[string]metastore.Version

	out  Request     // the request asked, until its event
	then func(Event) // what its event does
	done bool
	err  error
	logs []Log
	// phase names where the pass is, for traces.
	phase string
	// memHeld: the bytes of rendered and read-back objects the executor
	// holds for the pass (HoldMemory).
	memHeld int64
}

// New starts a pass at now (the clock for the doomed markers' grace).
func New(cfg Config, in Input, now time.Time) *Pass {
	tooSmall := cfg.MaxCommitOps > 0 && cfg.MaxCommitOps < MinCommitOps
	if cfg.MaxCommitOps <= 0 || cfg.MaxCommitOps > maxBatchOps {
		cfg.MaxCommitOps = maxBatchOps
	}
	if cfg.ReadAhead <= 0 {
		cfg.ReadAhead = DefaultReadAhead
	}
	if cfg.WriteAhead <= 0 {
		cfg.WriteAhead = DefaultWriteAhead
	}
	cfg.WriteAhead = max(cfg.WriteAhead, cfg.ReadAhead)
	if cfg.FrameBytes <= 0 {
		cfg.FrameBytes = settle.DefaultFrameBytes
	}
	if cfg.TargetBytes <= 0 {
		cfg.TargetBytes = settle.DefaultTargetBytes
	}
	switch {
	case cfg.Retries == 0:
		cfg.Retries = DefaultRetries
	case cfg.Retries < 0:
		cfg.Retries = 0
	}
	p := &Pass{cfg: cfg, in: in, now: now, sizes: map[chain.Position]int64{}}
	p.res.Trim, p.res.TrimVersion = in.Trim, in.TrimVersion
	if tooSmall {
		p.finish(fmt.Errorf("settle: %s/%s: the metastore takes %d ops a Commit; a repoint takes %d (the ref, its object's marker check, the checkpoint guard)", cfg.Star, cfg.Class, cfg.MaxCommitOps, MinCommitOps))
		return p
	}
	if in.Checkpoint.Less(in.Upto) {
		// The cursor never passes the checkpoint: a fence, a walk and a
		// garbage probe start there, and a trimmed slot reads absent.
		p.finish(fmt.Errorf("settle: %s/%s: asked to settle up to %+v, past the checkpoint %+v", cfg.Star, cfg.Class, in.Upto, in.Checkpoint))
		return p
	}
	for _, c := range in.Cuts {
		p.addCut(c)
	}
	if in.TrimKnown {
		p.begin()
		return p
	}
	p.phase = "read-trim"
	p.call(ReadTrim{}, func(ev Event) {
		tr := ev.(TrimRead)
		if tr.Err != nil {
			p.finish(fmt.Errorf("settle: read the trim cursor of %s/%s: %w", cfg.Star, cfg.Class, tr.Err))
			return
		}
		p.res.Trim, p.res.TrimVersion = tr.Cursor, tr.Version
		p.begin()
	})
	return p
}

// Next returns the request the pass waits on (nil once done).
func (p *Pass) Next() Request { return p.out }

// Phase names the step the pass is at.
func (p *Pass) Phase() string { return p.phase }

// Step gives the pass the event of the request Next returned, at now.
func (p *Pass) Step(now time.Time, ev Event) {
	if p.out == nil {
		return
	}
	p.now = now
	then := p.then
	p.out, p.then = nil, nil
	then(ev)
}

// Done reports whether the pass is over, and its result and error.
func (p *Pass) Done() (bool, settle.Result, error) { return p.done, p.res, p.err }

// Logs returns the lines the pass asked to log since the last call.
func (p *Pass) Logs() []Log {
	l := p.logs
	p.logs = nil
	return l
}

func (p *Pass) ask(r Request, then func(Event)) {
	if p.done {
		return
	}
	switch r.(type) {
	case ReadTrim, ReadCheckpoint, Commit, ScanMarkers, GetRef, ScanRefs:
		p.res.MetaRequests++
	}
	p.out, p.then = r, then
}

// call asks r, and asks it again after a Wait while its event carries a
// transient failure (errOf) and tries are left; then gets the last event.
func (p *Pass) call(r Request, then func(Event)) {
	tries := 0
	var try func()
	try = func() {
		p.ask(r, func(ev Event) {
			if !Transient(eventErr(ev)) || tries >= p.cfg.Retries {
				then(ev)
				return
			}
			p.wait(tries, func(ok bool) {
				if !ok {
					then(ev)
					return
				}
				tries++
				try()
			})
		})
	}
	try()
}

// wait asks for the backoff before try number tries+1; then learns
// whether the wait ran its course.
func (p *Pass) wait(tries int, then func(ok bool)) {
	p.res.Retries++
	d := RetryMin << min(tries, 16)
	if d > RetryMax {
		d = RetryMax
	}
	p.ask(Wait{For: d}, func(ev Event) { then(ev.(Waited).Err == nil) })
}

// eventErr is the failure an event carries.
func eventErr(ev Event) error {
	switch e := ev.(type) {
	case TrimRead:
		return e.Err
	case CheckpointRead:
		return e.Err
	case Committed:
		return e.Err
	case SlotsDeleted:
		return e.Err
	case MarkersScanned:
		return e.Err
	case RefGot:
		return e.Err
	case ObjectDeleted:
		return e.Err
	case EpochFenced:
		return e.Err
	case SlotsRead:
		return e.Err
	case RefsScanned:
		return e.Err
	case Live:
		return e.Err
	case RangeGot:
		return e.Err
	case ObjectPut:
		return e.Err
	case ObjectGot:
		return e.Err
	case Waited:
		return e.Err
	case MemoryHeld:
		return e.Err
	}
	return nil
}

func (p *Pass) finish(err error) {
	if !p.markedAt.IsZero() {
		// The markers this pass wrote are due then at the latest, whether
		// or not it scanned: an idle merge writes doomed markers after the
		// scan, and a pass whose cursor is at Upto scans no more.
		if t := p.markedAt.Add(p.cfg.DoomedGrace); p.res.DoomedDue.IsZero() || t.Before(p.res.DoomedDue) {
			p.res.DoomedDue = t
		}
	}
	p.done, p.err, p.out, p.then, p.phase = true, err, nil, nil, "done"
}

// noteMarked records that the pass writes markers now.
func (p *Pass) noteMarked() {
	if p.markedAt.IsZero() {
		p.markedAt = p.now
	}
}

func (p *Pass) addCut(c chain.Cut) {
	if p.cuts == nil {
		p.cuts = map[uint64]uint64{}
	}
	p.cuts[c.Epoch] = c.Slot
}

// knownSettled is the settled ref of stream id ending at end that the
// leader handed the pass (Input.Prev), if any.
func (p *Pass) knownSettled(id string, end uint64) (ref, bool) {
	for _, f := range p.prev[id] {
		if f.r.End == end {
			return f, true
		}
	}
	return ref{}, false
}

// begin runs the pass from a known cursor.
func (p *Pass) begin() {
	if p.in.KnownOK && !p.res.Trim.At.Less(p.in.KnownFrom) {
		// Every ref into the slots from the cursor on is known.
		p.known = map[string][]ref{}
		for _, k := range p.in.Known {
			p.known[k.Ref.Stream] = append(p.known[k.Ref.Stream], ref{key: k.Key, ver: k.Version, r: k.Ref})
		}
	}
	p.prev = map[string][]ref{}
	for _, k := range p.in.Prev {
		p.prev[k.Ref.Stream] = append(p.prev[k.Ref.Stream], ref{key: k.Key, ver: k.Version, r: k.Ref})
	}
	for _, c := range p.res.Trim.Cuts {
		if _, ok := p.cuts[c.Epoch]; !ok {
			p.addCut(c)
		}
	}
	for _, c := range p.in.Cuts {
		p.addCut(c) // the leader's, over the cursor's
	}
	// Deletes a previous pass left undone come first: they are behind the
	// cursor already, so nothing reads them. A bucket that refuses them
	// (a zone down) does not hold settlement up: they stay due.
	p.deleteBehind(func() {
		p.reclaim(func(err error) {
			if err != nil {
				p.res.DoomedDue = p.now // due again: the leader retries
				p.finish(err)
				return
			}
			// Idle streams' tails first: the pass holds no slot yet.
			p.idleMerge(func() {
				if !p.res.Trim.At.Less(p.in.Upto) {
					p.finish(nil)
					return
				}
				p.deriveCuts(func(err error) {
					if err != nil {
						p.finish(err)
						return
					}
					p.settleSlots()
				})
			})
		})
	})
}

// readSlots reads the slots from the cursor on, up to Upto, MaxSlots or
// settle.MaxPassBytes, one epoch's range a request, and gives then the
// slots read and the position after the last one (the read error, if one
// stopped it early).
func (p *Pass) readSlots(then func(slots []settle.Slot, upto chain.Position, err error)) {
	p.phase = "read-slots"
	at := p.res.Trim.At
	segs, serr := settle.Segments(p.cuts, at, p.in.Upto)
	if serr != nil {
		serr = fmt.Errorf("%w of %s/%s", serr, p.cfg.Star, p.cfg.Class)
	}
	budget := p.in.MaxSlots
	if budget <= 0 {
		budget = settle.DefaultMaxSlots
	}
	var slots []settle.Slot
	var bytes int64
	var next func(i int)
	next = func(i int) {
		if i == len(segs) {
			if serr != nil {
				then(slots, at, serr)
				return
			}
			then(slots, p.in.Upto, nil)
			return
		}
		e, from, to := segs[i][0], segs[i][1], segs[i][2]
		limit := min(to, from+uint64(budget-len(slots)))
		tries := 0
		var read func(from uint64)
		read = func(from uint64) {
			p.ask(ReadSlots{Epoch: e, From: from, To: limit, MaxBytes: settle.MaxPassBytes - bytes}, func(ev Event) {
				sr := ev.(SlotsRead)
				for _, s := range sr.Slots {
					slots = append(slots, s)
					bytes += int64(len(s.Object))
					p.sizes[s.Pos] = int64(len(s.Object))
					at = chain.Position{Epoch: e, Next: s.Pos.Next + 1}
				}
				switch {
				case sr.Full:
					then(slots, at, nil)
				case sr.Err != nil && Transient(sr.Err) && tries < p.cfg.Retries:
					// The slots read are kept; the read goes on from the
					// first that failed.
					resume := from
					if at.Epoch == e && at.Next > from {
						resume = at.Next
					}
					p.wait(tries, func(ok bool) {
						if !ok {
							then(slots, at, sr.Err)
							return
						}
						tries++
						read(resume)
					})
				case sr.Err != nil:
					then(slots, at, sr.Err)
				case limit < to:
					then(slots, at, nil) // MaxSlots
				default:
					at = chain.Position{Epoch: e, Next: to}
					next(i + 1)
				}
			})
		}
		read(from)
	}
	next(0)
}

// settleSlots settles the slots from the cursor on, then reclaims what a
// merge doomed, advances the cursor and deletes behind it.
func (p *Pass) settleSlots() {
	p.readSlots(func(slots []settle.Slot, upto chain.Position, readErr error) {
		p.res.Slots = len(slots)
		if readErr != nil && len(slots) == 0 {
			p.finish(readErr) // nothing read: nothing settled
			return
		}
		p.phase = "settle"
		sp := settle.SlotsPass{Upto: upto, Checkpoint: p.in.Checkpoint, Cuts: p.cutsFrom(0), Slots: slots}
		p.settleStreams(sp, func(r settle.SlotsResult, serr error) {
			after := func(err error) {
				if err != nil {
					p.finish(err)
					return
				}
				p.advance(upto, func(err error) {
					if err != nil {
						p.finish(err)
						return
					}
					p.deleteBehind(func() { p.finish(readErr) })
				})
			}
			if !r.DoomedNew {
				after(serr)
				return
			}
			p.reclaim(func(err error) {
				if err != nil {
					p.res.DoomedDue = p.now
				}
				after(errors.Join(serr, err))
			})
		})
	})
}

// settleStreams settles the streams of sp's slots (slots.go), and again,
// after a Wait, the streams that failed while tries are left, the pass is
// not deposed and some failure may pass if asked again (retryable): a step
// is idempotent, so the retry of the streams that failed finishes what the
// first try began. then gets the last try's result, with DoomedNew over
// all tries, and its error.
func (p *Pass) settleStreams(sp settle.SlotsPass, then func(settle.SlotsResult, error)) {
	tries := 0
	doomed := false
	var try func()
	try = func() {
		p.settleSlotsOnce(sp, func(r settle.SlotsResult, serr error) {
			p.res.Objects += r.Objects
			p.res.Repointed += r.Repointed
			p.res.Merged += r.Merged
			p.res.Reclaimed += r.Reclaimed
			p.res.RawBytes += r.RawBytes
			p.res.StoredBytes += r.StoredBytes
			doomed = doomed || r.DoomedNew
			if serr == nil || len(r.Failed) == 0 || errors.Is(serr, settle.ErrDeposed) || !retryable(serr) || tries >= p.cfg.Retries {
				r.DoomedNew = doomed
				then(r, serr)
				return
			}
			p.wait(tries, func(ok bool) {
				if !ok {
					r.DoomedNew = doomed
					then(r, serr)
					return
				}
				tries++
				sp.Streams = r.Failed
				try()
			})
		})
	}
	try()
}

// retryable reports whether some failure joined in err is transient or a
// conflict (a ref or marker moved: settled again from a fresh read, it
// may go through). A pass whose streams all failed permanently (a bucket
// refusing writes, a ref that does not decode) ends at once: waiting out
// its backoff would only fail them again.
func retryable(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			return slices.ContainsFunc(j.Unwrap(), retryable)
		}
	}
	return Transient(err) || errors.Is(err, metastore.ErrConflict)
}

// holder reads the checkpoint and keeps its version if the pass's leader
// still holds it; else it fails with settle.ErrDeposed.
func (p *Pass) holder(then func(error)) {
	p.call(ReadCheckpoint{}, func(ev Event) {
		cr := ev.(CheckpointRead)
		if cr.Err != nil {
			then(fmt.Errorf("settle: read the checkpoint of %s/%s: %w", p.cfg.Star, p.cfg.Class, cr.Err))
			return
		}
		if cr.Owner != p.cfg.Owner || cr.Epoch != p.cfg.Epoch {
			then(fmt.Errorf("%w: %s/%s is sealed by %q for epoch %d; this pass is %q's, of epoch %d", settle.ErrDeposed, p.cfg.Star, p.cfg.Class, cr.Owner, cr.Epoch, p.cfg.Owner, p.cfg.Epoch))
			return
		}
		p.cpVer = cr.Version
		then(nil)
	})
}

// opBytes is op's size as the backend counts it.
func (p *Pass) opBytes(op metastore.Op) int {
	if p.cfg.OpBytes != nil {
		return p.cfg.OpBytes(op)
	}
	return len(op.Key) + len(op.Value)
}

// guardOp checks the checkpoint at the version holder last found.
func (p *Pass) guardOp() metastore.Op {
	return metastore.Op{Kind: metastore.OpCheck, Key: chain.CheckpointKey(p.cfg.Star, p.cfg.Class), Expect: p.cpVer}
}

// commit applies ops in one Commit that also checks the checkpoint is at a
// version sealed by this pass's leader: every metastore mutation of a pass
// goes through it, so a deposed leader's pass (a zombie that has not
// noticed yet) changes nothing once a successor has sealed the checkpoint,
// the successor's first step. The leader's own absorb moves the checkpoint
// too: a Commit that conflicts on it is retried at the new version if the
// seal is still ours. then gets the versions of ops.
func (p *Pass) commit(what string, ops []metastore.Op, then func([]metastore.Version, error)) {
	attempt := 0
	var try func()
	try = func() {
		if p.cpVer == "" {
			p.holder(func(err error) {
				if err != nil {
					then(nil, err)
					return
				}
				try()
			})
			return
		}
		p.call(Commit{What: what, Ops: append(ops[:len(ops):len(ops)], p.guardOp())}, func(ev Event) {
			c := ev.(Committed)
			if c.Err == nil {
				then(c.Versions[:len(ops)], nil)
				return
			}
			if !errors.Is(c.Err, metastore.ErrConflict) || attempt >= settle.GuardRetries {
				then(nil, c.Err)
				return
			}
			attempt++
			old := p.cpVer
			p.holder(func(err error) {
				switch {
				case err != nil:
					then(nil, err)
				case p.cpVer == old:
					then(nil, c.Err) // the conflict is another op's
				default:
					try()
				}
			})
		})
	}
	try()
}

// putTrim writes the trim cursor t over the version the pass holds.
func (p *Pass) putTrim(what string, t chain.TrimCursor, then func(metastore.Version, error)) {
	p.commit(what, []metastore.Op{{Kind: metastore.OpPut, Key: chain.TrimKey(p.cfg.Star, p.cfg.Class), Value: t.Encode(), Expect: p.res.TrimVersion}}, func(vs []metastore.Version, err error) {
		if err != nil {
			then("", err)
			return
		}
		then(vs[0], nil)
	})
}

// cutsFrom returns the known cuts of epochs from `from` on.
func (p *Pass) cutsFrom(from uint64) []chain.Cut {
	var out []chain.Cut
	for e, s := range p.cuts {
		if e >= from {
			out = append(out, chain.Cut{Epoch: e, Slot: s})
		}
	}
	slices.SortFunc(out, func(a, b chain.Cut) int { return cmp.Compare(a.Epoch, b.Epoch) })
	return out
}

// deleteBehind deletes the slots in [Deleted, At) from every bucket of the
// chain, then records Deleted = At. A failure is kept in res.DeleteErr:
// the deletes stay due, and the next pass tries them again.
func (p *Pass) deleteBehind(then func()) {
	t := p.res.Trim
	if !t.Deleted.Less(t.At) {
		then()
		return
	}
	p.phase = "delete-behind"
	fail := func(err error) {
		p.res.DeleteErr = err
		then()
	}
	segs, err := settle.Segments(p.cuts, t.Deleted, t.At)
	if err != nil {
		fail(fmt.Errorf("%w of %s/%s", err, p.cfg.Star, p.cfg.Class))
		return
	}
	var next func(i int)
	next = func(i int) {
		if i == len(segs) {
			t.Deleted = t.At
			t.Cuts = p.cutsFrom(t.At.Epoch)
			p.putTrim("record-deletes", t, func(ver metastore.Version, err error) {
				if err != nil {
					fail(fmt.Errorf("settle: record the deletes of %s/%s up to %+v: %w", p.cfg.Star, p.cfg.Class, t.At, err))
					return
				}
				p.res.Trim, p.res.TrimVersion = t, ver
				then()
			})
			return
		}
		s := segs[i]
		p.ask(DeleteSlots{Epoch: s[0], From: s[1], To: s[2]}, func(ev Event) {
			d := ev.(SlotsDeleted)
			p.res.Deleted += d.Deleted
			if d.Err != nil {
				fail(d.Err)
				return
			}
			for slot := s[1]; slot < s[2]; slot++ {
				p.res.FreedBytes += p.sizes[chain.Position{Epoch: s[0], Next: slot}] * int64(p.cfg.TransitK)
			}
			next(i + 1)
		})
	}
	next(0)
}

// deriveCuts finds the cut of every epoch between the cursor and Upto
// that neither the cursor nor the leader knows, and records it in the
// cursor before the pass uses it.
//
// A cut goes missing when an epoch record pruned it while the cursor had
// not passed the epoch: a star opened several times with settlement off,
// by a version that kept only the cuts a walk needs, then run with
// settlement on. The epoch is over (the checkpoint is past it, so its
// successor decided its cut long ago, by a fence or a clean seal), and its
// slots from the cursor on are still there: a fence of the epoch from the
// cursor finds the same cut. Fence decisions are permanent and quorum
// based: a slot the successor's fence poisoned is dead to this fence too,
// a slot is committed only with W copies of one flight, and a slot past a
// clean seal (never written) is poisoned now, so nothing dead is ever
// counted as committed. Only epochs from the cursor's on are fenced, from
// the cursor: the slots below it may be deleted, and a fence would read
// them as absent and poison them.
func (p *Pass) deriveCuts(then func(error)) {
	at := p.res.Trim.At
	var found []chain.Cut
	e := at.Epoch
	var next func()
	next = func() {
		for ; e < p.in.Upto.Epoch && e < p.in.Checkpoint.Epoch; e++ {
			if _, ok := p.cuts[e]; ok {
				continue
			}
			p.phase = "derive-cut"
			from := uint64(0)
			if e == at.Epoch {
				from = at.Next
			}
			epoch := e
			p.ask(FenceEpoch{Epoch: epoch, From: from}, func(ev Event) {
				f := ev.(EpochFenced)
				if f.Err != nil {
					then(fmt.Errorf("%w: epoch %d of %s/%s, recorded nowhere, and a fence from slot %d to re-derive it failed: %w", settle.ErrCutUnknown, epoch, p.cfg.Star, p.cfg.Class, from, f.Err))
					return
				}
				p.logs = append(p.logs, Log{Msg: "settle: re-derived the cut of an epoch recorded nowhere", Attrs: []any{"star", p.cfg.Star, "class", p.cfg.Class.String(), "epoch", epoch, "from", from, "cut", f.Cut}})
				p.addCut(chain.Cut{Epoch: epoch, Slot: f.Cut})
				found = append(found, chain.Cut{Epoch: epoch, Slot: f.Cut})
				e++
				next()
			})
			return
		}
		if len(found) == 0 {
			then(nil)
			return
		}
		// Recorded before use: a later pass, fsck and a fence of an epoch
		// the cursor passes read it there.
		t := p.res.Trim
		t.Owner = p.cfg.Owner
		t.Cuts = p.cutsFrom(t.Deleted.Epoch)
		p.putTrim("record-cuts", t, func(ver metastore.Version, err error) {
			if err != nil {
				then(fmt.Errorf("settle: record the re-derived cuts %v of %s/%s in the trim cursor: %w", found, p.cfg.Star, p.cfg.Class, err))
				return
			}
			p.res.Trim, p.res.TrimVersion = t, ver
			then(nil)
		})
	}
	next()
}

// advance moves the cursor to upto (never back) by compare-and-swap. A
// Commit that fails otherwise than deposed may still have applied (or
// another pass got as far): the cursor is read back to tell.
func (p *Pass) advance(upto chain.Position, then func(error)) {
	t := p.res.Trim
	if !t.At.Less(upto) {
		then(nil)
		return
	}
	p.phase = "advance"
	t.At, t.Owner = upto, p.cfg.Owner
	t.Cuts = p.cutsFrom(t.Deleted.Epoch)
	p.putTrim("advance", t, func(ver metastore.Version, err error) {
		wrap := func(err error) error {
			return fmt.Errorf("settle: advance the trim cursor of %s/%s to %+v: %w", p.cfg.Star, p.cfg.Class, upto, err)
		}
		if err == nil {
			p.res.Trim, p.res.TrimVersion = t, ver
			then(nil)
			return
		}
		if errors.Is(err, settle.ErrDeposed) {
			then(wrap(err))
			return
		}
		p.call(ReadTrim{}, func(ev Event) {
			tr := ev.(TrimRead)
			if tr.Err == nil && !tr.Cursor.At.Less(upto) {
				p.res.Trim, p.res.TrimVersion = tr.Cursor, tr.Version // ours applied, or someone got as far
				then(nil)
				return
			}
			then(wrap(err))
		})
	})
}

// marker is a marker as scanned.
type marker struct {
	key string
	ver metastore.Version
	m   settle.Marker
	// del: the objects it names that are to be deleted (no ref points at
	// them); none: only the marker goes. checks: for each of them that was
	// pending, an OpCheck of its ref at the version the reclaim read it
	// (metastore.NoVersion: absent), so a repoint onto the object after the
	// read fails the reclaim's Commit.
	del    []string
	checks map[string]metastore.Op
}

// reclaim deletes the settled objects marked doomed at least DoomedGrace
// ago, and notes in the result how many wait for their grace and when the
// first is due (the leader runs a pass then, idle or not). A reader still
// holding a ref that pointed at one after that finds it gone and
// re-resolves the ref, which now points at the object that absorbed it. A
// pending marker (its pass lost or never made its repoint) whose ref does
// point at the object now (a later pass adopted it) is only dropped.
//
// A deletion is three steps: a Deleting marker at the object's own key
// (settle.MarkerKey) is put in a guarded Commit of many, so a deposed
// leader's pass starts none once a successor has sealed; the object goes;
// the marker goes. A pass that dies in between leaves Deleting markers,
// which the next pass finishes. See reclaimDue for why no repoint can land
// on an object being deleted.
func (p *Pass) reclaim(then func(error)) {
	if p.in.DoomedKnown && (p.in.DoomedDue.IsZero() || p.now.Before(p.in.DoomedDue)) {
		// The leader knows nothing is due yet (the last scan, and the
		// markers passes wrote since): a scan would read every marker
		// waiting for its grace, a few a stream merged within the last
		// minute, every pass.
		p.scanSkipped = true
		p.res.DoomedDue = p.in.DoomedDue
		then(nil)
		return
	}
	p.phase = "reclaim-scan"
	p.res.MarkersScanned = true
	p.res.DoomedWaiting, p.res.DoomedDue = 0, time.Time{}
	var due []marker
	own := map[string]bool{} // the one-object markers' keys, due or not
	p.oldPending = map[string]metastore.Version{}
	var scan func(after string)
	scan = func(after string) {
		p.call(ScanMarkers{After: after, Limit: scanPage}, func(ev Event) {
			ms := ev.(MarkersScanned)
			if ms.Err != nil {
				then(ms.Err)
				return
			}
			var item func(i int)
			item = func(i int) {
				if i == len(ms.Items) {
					if len(ms.Items) < scanPage {
						p.reclaimDue(due, own, then)
						return
					}
					scan(ms.Items[len(ms.Items)-1].Key)
					return
				}
				it := ms.Items[i]
				d, err := settle.DecodeMarker(it.Value)
				if err != nil {
					then(fmt.Errorf("settle: doomed marker %s is %q, not a settled object's", it.Key, it.Value))
					return
				}
				if len(d.Objects) == 0 {
					own[it.Key] = true
					if d.Ref != "" && !d.Deleting {
						// A pending marker of an earlier version: a repoint
						// onto its object deletes it (see repoint).
						p.oldPending[it.Key] = it.Version
					}
				}
				at := time.UnixMilli(d.At)
				if !d.Deleting && p.cfg.DoomedGrace > 0 && p.now.Sub(at) < p.cfg.DoomedGrace {
					p.res.DoomedWaiting++
					if t := at.Add(p.cfg.DoomedGrace); p.res.DoomedDue.IsZero() || t.Before(p.res.DoomedDue) {
						p.res.DoomedDue = t
					}
					item(i + 1)
					return
				}
				// A doomed object, or a marker some pass began deleting, is
				// deleted; a pending one past its grace only if its ref
				// does not point at it by now (a chunk marker: each of its
				// objects so), and only if that ref is still at the version
				// read when the deletion is decided (checks).
				x := marker{key: it.Key, ver: it.Version, m: d}
				names := d.Names()
				var look func(j int)
				look = func(j int) {
					if j == len(names) {
						due = append(due, x)
						item(i + 1)
						return
					}
					n := names[j]
					if n.Ref == "" || d.Deleting {
						x.del = append(x.del, n.Key)
						look(j + 1)
						return
					}
					p.call(GetRef{Key: n.Ref}, func(ev Event) {
						rg := ev.(RefGot)
						if rg.Err != nil {
							then(rg.Err)
							return
						}
						ref := false
						ver := metastore.NoVersion
						if rg.Found {
							ver = rg.Item.Version
							sr, err := absorb.DecodeRef(rg.Item.Value)
							if err != nil {
								then(fmt.Errorf("ref %s: %w", n.Ref, err))
								return
							}
							for _, e := range sr.Extents {
								ref = ref || e.Key == n.Key
							}
						}
						if !ref {
							x.del = append(x.del, n.Key)
							if x.checks == nil {
								x.checks = map[string]metastore.Op{}
							}
							x.checks[n.Key] = metastore.Op{Kind: metastore.OpCheck, Key: n.Ref, Expect: ver}
						}
						look(j + 1)
					})
				}
				look(0)
			}
			item(0)
		})
	}
	scan("")
}

// reclaimDue deletes what the scan found due (own: the keys of the
// one-object markers it found). Referenced pending markers are dropped;
// a marker some pass began deleting (Deleting) has its objects deleted,
// then goes. Every other object to delete is first claimed: a Deleting
// marker at its own key settle.MarkerKey (a one-object marker of an
// earlier version turns Deleting in place), put in a guarded Commit that
// also checks the ref of a pending object at the version the scan read.
// A chunk marker some of whose claims failed is narrowed to those. Then
// the claimed objects go from every settled bucket, then their Deleting
// markers, and with them the chunk markers whose objects are all claimed
// (or pointed at, or named by a marker of their own already).
//
// Why no ref ends up pointing at a deleted object: a settled object's key
// names its records, so a later pass may render the same key again, find
// it in place and adopt it, while this reclaim deletes it. Every repoint
// onto an object checks in its Commit that no marker is at the object's
// MarkerKey (or deletes the earlier version's pending marker there at the
// version it read). The two Commits are ordered by the metastore: if the
// claim commits first, the repoint's check fails and the stream is
// settled again by a later pass, once the deletion is over (the object
// written afresh); if the repoint commits first, the claim's check of the
// ref fails and nothing is deleted. A Deleting marker goes only by a
// guarded Commit after the deletes, so a deposed leader's pass cannot
// remove one after its successor's seal; and a leader's passes run one at
// a time, each reclaim before its writes, so the claim a pass finds was
// finished by that pass's own reclaim, or fails its repoint.
func (p *Pass) reclaimDue(due []marker, own map[string]bool, then func(error)) {
	var dropOnly, marked, claims []marker
	var chunks []*marker
	claimed := map[string]bool{} // objects a claim of this reclaim names
	for i := range due {
		x := due[i]
		switch {
		case len(x.del) == 0:
			dropOnly = append(dropOnly, x)
		case x.m.Deleting:
			marked = append(marked, x)
		case len(x.m.Objects) == 0:
			// A one-object marker of an earlier version: it turns Deleting
			// in place.
			m := x.m
			m.Deleting = true
			claims = append(claims, marker{key: x.key, ver: x.ver, m: m, del: x.del, checks: x.checks})
			claimed[m.Key] = true
			delete(p.oldPending, x.key) // no repoint deletes it now: it is being deleted
		default:
			c := &due[i]
			chunks = append(chunks, c)
			for _, k := range x.del {
				mk := settle.MarkerKey(p.cfg.Star, p.cfg.Class, k)
				if own[mk] || claimed[k] {
					continue // a marker of its own names it already
				}
				claimed[k] = true
				claims = append(claims, marker{key: mk, ver: metastore.NoVersion, m: settle.Marker{Key: k, At: x.m.At, Deleting: true},
					del: []string{k}, checks: x.checks})
			}
		}
	}
	del := func(x marker) []metastore.Op {
		return []metastore.Op{{Kind: metastore.OpDelete, Key: x.key, Expect: x.ver}}
	}
	p.phase = "reclaim-mark"
	p.commitEach("mark-deleting", claims, func(x marker) []metastore.Op {
		var ops []metastore.Op
		if c, ok := x.checks[x.m.Key]; ok {
			ops = append(ops, c)
		}
		return append(ops, metastore.Op{Kind: metastore.OpPut, Key: x.key, Value: x.m.Encode(), Expect: x.ver})
	}, func(now []marker, err error) {
		marked = append(marked, now...)
		if err != nil {
			then(err)
			return
		}
		ok := map[string]bool{}
		for _, x := range now {
			ok[x.m.Key] = true
		}
		// The chunk markers whose objects are claimed go; one with a claim
		// that failed (its ref moved, or the marker is there already) is
		// narrowed to those, and the next pass looks at them again.
		ends := dropOnly
		var narrowed []marker
		for _, c := range chunks {
			m := c.m
			m.Objects = nil
			for _, n := range c.m.Objects {
				mk := settle.MarkerKey(p.cfg.Star, p.cfg.Class, n.Key)
				if slices.Contains(c.del, n.Key) && !own[mk] && !ok[n.Key] {
					m.Objects = append(m.Objects, n)
				}
			}
			switch {
			case len(m.Objects) == 0:
				ends = append(ends, *c)
			case len(m.Objects) == len(c.m.Objects):
				p.res.DoomedDue = p.now // as it was: looked at again
			default:
				narrowed = append(narrowed, marker{key: c.key, ver: c.ver, m: m})
			}
		}
		p.phase = "reclaim-narrow"
		p.commitEach("narrow", narrowed, func(x marker) []metastore.Op {
			return []metastore.Op{{Kind: metastore.OpPut, Key: x.key, Value: x.m.Encode(), Expect: x.ver}}
		}, func(_ []marker, err error) {
			if err != nil {
				then(err)
				return
			}
			if len(narrowed) > 0 {
				p.res.DoomedDue = p.now // their claims are tried again
			}
			p.reclaimDelete(marked, ends, del, then)
		})
	})
}

// reclaimDelete deletes the objects of the Deleting markers marked from
// every settled bucket, then the markers, in the Commits that also delete
// ends (the markers that only go: referenced pending ones, and chunk
// markers whose objects are claimed; one left by a crash is dropped by the
// next pass).
func (p *Pass) reclaimDelete(marked, ends []marker, del func(marker) []metastore.Op, then func(error)) {
	p.phase = "reclaim-delete"
	// Every object from every settled bucket, in parallel.
	var reqs []Request
	for _, x := range marked {
		for _, k := range x.del {
			for b := 0; b < p.cfg.SettledBuckets; b++ {
				reqs = append(reqs, DeleteObject{Bucket: b, Key: k})
			}
		}
	}
	p.fanOut(reqs, func(evs []Event) {
		var gone []marker
		var derr error
		i := 0
		for _, x := range marked {
			ok := true
			for _, k := range x.del {
				for b := 0; b < p.cfg.SettledBuckets; b++ {
					if err := evs[i].(ObjectDeleted).Err; err != nil && ok {
						ok = false // its marker stays: the next pass deletes again
						derr = fmt.Errorf("settle: delete doomed %s in settled bucket %d: %w", k, b, err)
					}
					i++
				}
			}
			if ok {
				gone = append(gone, x)
				p.res.DeletedObjects += len(x.del)
			}
		}
		// After their objects: a marker left by a crash here only
		// deletes again.
		p.phase = "reclaim-unmark"
		p.commitEach("unmark", append(ends, gone...), del, func(_ []marker, err error) {
			if err != nil {
				then(err)
				return
			}
			then(derr)
		})
	})
}

// commitEach commits each marker's ops (the marker's own op last), in
// Commits of many (a marker whose ops name a key the Commit names already
// starts the next: two objects of one stream pending in two chunk markers
// may both check the same ref); on a conflict (a marker moved: a pass rewrote it; or a
// ref a claim checks moved) one marker at a time, leaving out the ones
// that conflict. then gets the markers committed, with the versions their
// own ops left.
func (p *Pass) commitEach(what string, xs []marker, opsOf func(marker) []metastore.Op, then func([]marker, error)) {
	maxOps := p.cfg.MaxCommitOps - 1 // the guard
	var out []marker
	var chunk func(rest []marker)
	chunk = func(rest []marker) {
		if len(rest) == 0 {
			then(out, nil)
			return
		}
		var ops []metastore.Op
		var last []int            // each marker's own op
		keys := map[string]bool{} // a Commit names a key once: two claims may check one ref
		n := 0
		for n < len(rest) {
			o := opsOf(rest[n])
			if n > 0 && (len(ops)+len(o) > maxOps || slices.ContainsFunc(o, func(op metastore.Op) bool { return keys[op.Key] })) {
				break
			}
			for _, op := range o {
				keys[op.Key] = true
			}
			ops = append(ops, o...)
			last = append(last, len(ops)-1)
			n++
		}
		c := rest[:n]
		rest = rest[n:]
		p.commit(what, ops, func(vs []metastore.Version, err error) {
			if err == nil {
				for i, x := range c {
					x.ver = vs[last[i]]
					out = append(out, x)
				}
				chunk(rest)
				return
			}
			if !errors.Is(err, metastore.ErrConflict) {
				then(out, err)
				return
			}
			var one func(i int)
			one = func(i int) {
				if i == len(c) {
					chunk(rest)
					return
				}
				x := c[i]
				o := opsOf(x)
				p.commit(what+"-one", o, func(vs []metastore.Version, err error) {
					switch {
					case err == nil:
						x.ver = vs[len(o)-1]
						out = append(out, x)
					case !errors.Is(err, metastore.ErrConflict):
						then(out, err)
						return
					default:
						// It moved (another pass, or this one's Commit that
						// failed ambiguously and applied): the next pass
						// looks at it again, and is due now.
						p.res.DoomedDue = p.now
					}
					one(i + 1)
				})
			}
			one(0)
		})
	}
	chunk(xs)
}
