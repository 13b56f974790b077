package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/objstore"
)

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// producer appends to streams. Producers with id%3 == 0 own a stream and
// append with MatchSeqNum; id%3 == 1 append one-shot to shared streams;
// id%3 == 2 pipeline batches through AppendSessions on shared streams.
type producer struct {
	w      *world
	id     int
	rng    *rand.Rand
	next   uint64   // exclusive stream: the tail as this producer knows it
	resync bool     // after a restart: learn next from CheckTail
	last   *process // the process of the previous operation
}

func (w *world) newProducer(id int) *producer {
	return &producer{w: w, id: id, rng: rand.New(rand.NewPCG(w.o.Seed, uint64(id)+100))}
}

func (p *producer) batch() []loglet.Record {
	if p.w.p.tinyBatch > 0 && p.rng.Float64() < p.w.p.tinyBatch {
		return tinyRecords(p.rng)
	}
	n := 1 + p.rng.IntN(4)
	recs := make([]loglet.Record, n)
	for i := range recs {
		size := 8 + p.rng.IntN(64)
		if p.rng.IntN(8) == 0 {
			size = 512 + p.rng.IntN(4096)
		}
		body := make([]byte, size)
		for j := range body {
			body[j] = byte('a' + p.rng.IntN(26))
		}
		recs[i].Body = body
		if p.rng.IntN(3) == 0 {
			recs[i].Headers = []loglet.Header{{Name: []byte("producer"), Value: []byte(fmt.Sprint(p.id))}}
		}
	}
	return recs
}

// waitCtx is the context an append waits under: usually long, sometimes
// short enough that the producer gives up (outcome unknown).
func (p *producer) waitCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if p.rng.Float64() < p.w.p.shortCtx {
		return context.WithTimeout(ctx, nsUpTo(p.rng, 40*time.Millisecond))
	}
	return context.WithTimeout(ctx, 2*time.Minute)
}

// nsUpTo draws a wait in (0, d] at nanosecond resolution. Waits drawn in
// whole milliseconds made goroutines wake at the same virtual instant, and
// which of them ran first (the scheduler's choice, not the seed's) changed
// the run: distinct instants keep a seed's run the same from one replay to
// the next.
func nsUpTo(r *rand.Rand, d time.Duration) time.Duration {
	return 1 + time.Duration(r.Int64N(int64(d)))
}

func (p *producer) think(ctx context.Context) bool {
	return sleepCtx(ctx, nsUpTo(p.rng, 30*time.Millisecond))
}

// sleepCtx waits d (virtual time in a bubble) and reports whether ctx was
// still live when it ended.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (p *producer) run(ctx context.Context, n int) {
	for i := 0; i < n && ctx.Err() == nil; {
		pr := p.w.procFor(p)
		if p.last != nil && p.last != pr {
			p.resync = true // moved to the successor: learn the tail anew
		}
		p.last = pr
		switch p.id % 3 {
		case 0:
			i += p.exclusive(ctx, pr)
		case 1:
			i += p.shared(ctx, pr)
		default:
			i += p.session(ctx, pr)
		}
		if !p.think(ctx) {
			return
		}
	}
}

func (p *producer) append(ctx context.Context, pr *process, stream string, recs []loglet.Record, match *uint64) *appendOp {
	h := p.w.h
	op := h.newAppend(p.id, pr.n, stream, recs, match)
	actx, cancel := p.waitCtx(ctx)
	ended := p.rng.IntN(50) == 0
	if ended {
		cancel() // a context that ended before the call: nothing may be admitted
	}
	ack, err := pr.star.Append(actx, stream, loglet.Batch{Records: op.recs, MatchSeqNum: match})
	cancel()
	if ended && !errors.Is(err, loglet.ErrNotCommitted) {
		h.violation("op %d on %s: Append with an ended context returned %v, not ErrNotCommitted", op.id, stream, err)
	}
	h.finish(op, ack, err)
	return op
}

// exclusive appends to the producer's own stream with MatchSeqNum, and
// after an unknown outcome retries idempotently with the same MatchSeqNum.
func (p *producer) exclusive(ctx context.Context, pr *process) int {
	s := pr.star
	stream := p.w.exclusive[p.id]
	if p.resync {
		call := p.w.h.tick()
		t, err := s.CheckTail(ctx, stream)
		if err != nil {
			return 1
		}
		p.w.h.observeTail(fmt.Sprintf("producer%d@proc-%d", p.id, pr.n), stream, t.Seq, true, call)
		p.next, p.resync = t.Seq, false
	}
	recs := p.batch()
	ops := 0
	for attempt := 0; attempt < 3; attempt++ {
		m := p.next
		op := p.append(ctx, pr, stream, recs, &m)
		ops++
		var mm *loglet.SeqNumMismatchError
		switch {
		case op.out == outAcked:
			p.next = op.ack.End
			return ops
		case errors.As(op.err, &mm):
			p.next = mm.Tail.Seq // an earlier unknown attempt was admitted
			return ops
		case op.out == outUnknown && p.w.p.faults.ShortContexts:
			continue // retry with the same MatchSeqNum: idempotent
		}
		return ops
	}
	return ops
}

// shared appends one-shot to a random shared stream; after an unknown
// outcome it retries once without MatchSeqNum (which may duplicate the
// content under a new identity: the documented hazard).
func (p *producer) shared(ctx context.Context, pr *process) int {
	c := chain.Classes()[p.rng.IntN(2)]
	stream := p.w.streams[c][p.rng.IntN(len(p.w.streams[c]))]
	recs := p.batch()
	op := p.append(ctx, pr, stream, recs, nil)
	if op.out == outUnknown && p.w.p.faults.ShortContexts && p.rng.IntN(2) == 0 {
		p.append(ctx, pr, stream, recs, nil)
		return 2
	}
	return 1
}

// session submits several batches through one AppendSession and waits for
// them in completion order, checking that a future completes only after
// every earlier one (acks in submit order).
func (p *producer) session(ctx context.Context, pr *process) int {
	h := p.w.h
	s := pr.star
	c := chain.Classes()[p.rng.IntN(2)]
	stream := p.w.streams[c][p.rng.IntN(len(p.w.streams[c]))]
	sess, err := s.OpenAppendSession(ctx, stream)
	if err != nil {
		return 1
	}
	type sub struct {
		op  *appendOp
		fut *loglet.AckFuture
	}
	var subs []sub
	n := 1 + p.rng.IntN(8)
	for i := 0; i < n; i++ {
		op := h.newAppend(p.id, pr.n, stream, p.batch(), nil)
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		fut, err := sess.Submit(sctx, loglet.Batch{Records: op.recs})
		cancel()
		if err != nil {
			if !errors.Is(err, loglet.ErrNotCommitted) {
				h.violation("op %d on %s: Submit failed without ErrNotCommitted: %v", op.id, stream, err)
			}
			h.finish(op, loglet.Ack{}, err)
			break
		}
		subs = append(subs, sub{op, fut})
	}
	wctx, cancel := p.waitCtx(ctx)
	defer cancel()
	timeout := time.NewTimer(time.Until(deadlineOf(wctx)))
	defer timeout.Stop()
	left := append([]sub(nil), subs...)
	for len(left) > 0 {
		chans := make([]<-chan struct{}, len(left))
		for i, sb := range left {
			chans[i] = sb.fut.Done()
		}
		i := selectDone(chans, timeout.C)
		if i < 0 {
			break
		}
		sb := left[i]
		ack, err := sb.fut.Wait(wctx)
		if err == nil {
			for _, earlier := range left[:i] {
				select {
				case <-earlier.fut.Done():
				default:
					h.violation("session on %s: op %d acked [%d, %d) before earlier op %d completed", stream, sb.op.id, ack.Start, ack.End, earlier.op.id)
				}
			}
		}
		h.finish(sb.op, ack, err)
		left = append(left[:i:i], left[i+1:]...)
	}
	for _, sb := range left { // gave up waiting: outcome unknown (unless known by now)
		ack, err := sb.fut.Wait(wctx)
		h.finish(sb.op, ack, err)
	}
	var prev uint64
	for i, sb := range subs {
		if sb.op.out == outAcked {
			if i > 0 && sb.op.ack.Start < prev {
				h.violation("session on %s: op %d acked at %d below an earlier submit's end %d", stream, sb.op.id, sb.op.ack.Start, prev)
			}
			prev = sb.op.ack.End
		}
	}
	cctx, ccancel := context.WithTimeout(ctx, time.Minute)
	_ = sess.Close(cctx)
	ccancel()
	return max(1, len(subs))
}

func deadlineOf(ctx context.Context) time.Time {
	d, ok := ctx.Deadline()
	if !ok {
		return time.Now().Add(time.Hour)
	}
	return d
}

// startReaders starts the readers against pr, until pr.stopReaders: random
// leader reads and CheckTails, a read session per class following a stream,
// and a non-leader Reader (reads, tails and a polling session) in pr's
// network.
func (w *world) startReaders(pr *process) {
	h := w.h
	ctx, cancel := context.WithCancel(context.Background())
	pr.rmu.Lock()
	pr.readStop = cancel
	pr.rmu.Unlock()
	bg := &pr.readersWG
	all := append(append([]string(nil), w.streams[0]...), w.streams[1]...)
	for _, s := range w.exclusive {
		all = append(all, s)
	}
	// Each reader goroutine draws from its own generator, so what it reads
	// does not depend on how the readers interleave.
	draws := func(i uint64) (intn func(int) int, pause func(int) bool) {
		rng := rand.New(rand.NewPCG(w.o.Seed, uint64(pr.n)*64+i+7777))
		intn = rng.IntN
		pause = func(max int) bool { return sleepCtx(ctx, nsUpTo(rng, time.Duration(max)*time.Millisecond)) }
		return intn, pause
	}
	who := fmt.Sprintf("leader%d", pr.n)
	bg.Add(1)
	go func() { // leader: random reads and tails
		defer bg.Done()
		intn, pause := draws(0)
		for pause(40) {
			stream := all[intn(len(all))]
			call := h.tick()
			t, err := pr.star.CheckTail(ctx, stream)
			if err != nil {
				continue
			}
			h.observeTail(who, stream, t.Seq, true, call)
			from := uint64(intn(int(t.Seq) + 1))
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			call = h.tick()
			res, err := pr.star.Read(rctx, stream, loglet.ReadQuery{Start: loglet.AtSeq(from), MaxRecords: 1 + intn(50)})
			cancel()
			if err != nil {
				h.readError(who)
				continue
			}
			h.observeRead(who, stream, from, res.Records, res.Tail.Seq, true, call)
		}
	}()
	for _, c := range chain.Classes() {
		bg.Add(1)
		go func() { // leader: a session following one stream
			defer bg.Done()
			intn, _ := draws(1 + uint64(c))
			stream := w.streams[c][intn(len(w.streams[c]))]
			rs, err := pr.star.OpenReadSession(ctx, stream, loglet.ReadQuery{Start: loglet.AtSeq(0), MaxRecords: 1 + intn(20)})
			if err != nil {
				return
			}
			w.follow(ctx, who+"-session", stream, rs)
		}()
	}
	rd, err := w.newReader(pr)
	if err != nil {
		h.violation("NewReader: %v", err)
		return
	}
	bg.Add(1)
	go func() { // a non-leader: reads and tails
		defer bg.Done()
		intn, pause := draws(3)
		for pause(80) {
			stream := all[intn(len(all))]
			call := h.tick()
			t, err := rd.CheckTail(ctx, stream)
			if err != nil {
				h.readError("reader")
				continue
			}
			h.observeTail("reader", stream, t.Seq, false, call)
			from := uint64(intn(int(t.Seq) + 1))
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			call = h.tick()
			res, err := rd.Read(rctx, stream, loglet.ReadQuery{Start: loglet.AtSeq(from), MaxRecords: 1 + intn(50)})
			cancel()
			if err != nil {
				h.readError("reader")
				continue
			}
			h.observeRead("reader", stream, from, res.Records, 0, false, call)
		}
	}()
	bg.Add(1)
	go func() { // a non-leader over the healthy stores: no call may fail
		defer bg.Done()
		intn, pause := draws(5)
		bare, err := loglet.NewReader(loglet.ReaderConfig{Meta: w.meta, Standard: w.memSet(loglet.Standard).Stores, Express: w.memSet(loglet.Express).Stores})
		if err != nil {
			h.violation("NewReader: %v", err)
			return
		}
		for pause(30) {
			stream := w.streams[intn(2)][intn(len(w.streams[0]))]
			t, err := bare.CheckTail(ctx, stream)
			w.bareCall(ctx, "CheckTail", stream, err)
			if err != nil {
				continue
			}
			q := loglet.ReadQuery{Start: loglet.AtSeq(uint64(intn(int(t.Seq) + 1))), MaxRecords: 1 + intn(50)}
			if intn(3) == 0 {
				q.Start = loglet.TailOffset(uint64(intn(8)))
			}
			_, err = bare.Read(ctx, stream, q)
			w.bareCall(ctx, "Read", stream, err)
		}
	}()
	bg.Add(1)
	go func() { // a non-leader: a polling session
		defer bg.Done()
		intn, _ := draws(4)
		stream := all[intn(len(all))]
		rs, err := rd.OpenReadSession(ctx, stream, loglet.ReadQuery{Start: loglet.AtSeq(0), MaxRecords: 1 + intn(20)})
		if err != nil {
			return
		}
		w.follow(ctx, "reader-session", stream, rs)
	}()
}

// bareCall counts one call of the Reader over the healthy stores (the
// bare buckets and metastore, below every fault): a failure there is
// spurious, a reader failing because the writer made progress, and a
// violation.
func (w *world) bareCall(ctx context.Context, what, stream string, err error) {
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	w.res.BareReads++
	if err == nil || ctx.Err() != nil {
		return
	}
	w.res.BareReadErrors++
	if w.res.BareReadErrors <= 3 && len(w.h.bad) < 50 {
		w.h.bad = append(w.h.bad, fmt.Sprintf("a Reader over the healthy stores failed: %s(%s): %v", what, stream, err))
	}
}

// follow receives from a read session until ctx ends, checking that records
// come once each, in order.
func (w *world) follow(ctx context.Context, who, stream string, rs *loglet.ReadSession) {
	for {
		from := rs.Next()
		call := w.h.tick()
		recs, err := rs.Recv(ctx)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, loglet.ErrClosed) {
				w.h.readError(who)
				t := time.NewTimer(20 * time.Millisecond) // back off; the session keeps its position
				select {
				case <-t.C:
					continue
				case <-ctx.Done():
					t.Stop()
				}
			}
			return
		}
		if len(recs) == 0 || (recs[0].Seq != from && !(recs[0].Seq > from && w.h.trimPoint(stream, recs[0].Seq, w.h.tick()))) {
			w.h.violation("%s on %s: Recv after %d returned %d records starting at %v", who, stream, from, len(recs), firstSeq(recs))
			return
		}
		w.h.observeRead(who, stream, from, recs, 0, false, call)
	}
}

func firstSeq(recs []loglet.SequencedRecord) any {
	if len(recs) == 0 {
		return "none"
	}
	return recs[0].Seq
}

// newReader returns a Reader seeing the same faulty stores as pr (another
// process in the same network), or a frozen metastore (StaleReader).
func (w *world) newReader(pr *process) (*loglet.Reader, error) {
	cfg := loglet.ReaderConfig{Meta: pr.mf, PollInterval: 50 * time.Millisecond}
	if w.o.Broken.StaleReader {
		if w.stale == nil {
			w.stale = frozenCopy(context.Background(), w.meta)
		}
		cfg.Meta = w.stale
	}
	for _, f := range pr.fs[loglet.Standard] {
		cfg.Standard = append(cfg.Standard, objstore.Store(f))
	}
	for _, f := range pr.fs[loglet.Express] {
		cfg.Express = append(cfg.Express, objstore.Store(f))
	}
	return loglet.NewReader(cfg)
}

// streamsAll lists every stream of the run.
func (w *world) streamsAll() []string {
	all := append(append([]string(nil), w.streams[0]...), w.streams[1]...)
	for i := 0; i < w.p.producers; i++ {
		if s, ok := w.exclusive[i]; ok {
			all = append(all, s)
		}
	}
	w.smu.Lock()
	all = append(all, w.crowd...)
	w.smu.Unlock()
	return all
}

// readAll reads a stream from 0 to the end with read, recording each read.
func (w *world) readAll(ctx context.Context, who, stream string, read func(ctx context.Context, from uint64) (loglet.ReadResult, error), hasTail bool) ([]loglet.SequencedRecord, error) {
	var out []loglet.SequencedRecord
	next := uint64(0)
	for {
		call := w.h.tick()
		var res loglet.ReadResult
		var err error
		for attempt := 0; attempt < 5; attempt++ {
			if res, err = read(ctx, next); err == nil {
				break
			}
		}
		if err != nil {
			return out, fmt.Errorf("%s: read %s at %d: %w", who, stream, next, err)
		}
		w.h.observeRead(who, stream, next, res.Records, res.Tail.Seq, hasTail, call)
		if len(res.Records) == 0 {
			return out, nil
		}
		out = append(out, res.Records...)
		next = res.Next
	}
}

func (w *world) finalLeaderReads(ctx context.Context, pr *process) map[string][]loglet.SequencedRecord {
	final := map[string][]loglet.SequencedRecord{}
	for _, stream := range w.streamsAll() {
		recs, err := w.readAll(ctx, "final-leader", stream, func(ctx context.Context, from uint64) (loglet.ReadResult, error) {
			return pr.star.Read(ctx, stream, loglet.ReadQuery{Start: loglet.AtSeq(from), MaxRecords: 100})
		}, true)
		if err != nil {
			w.h.violation("final leader read: %v", err)
		}
		call := w.h.tick()
		if t, err := pr.star.CheckTail(ctx, stream); err == nil {
			w.h.observeTail("final-leader", stream, t.Seq, true, call)
		}
		final[stream] = recs
	}
	return final
}

// trimmer trims plan.trimmed of the shared and exclusive streams at random
// points until ctx ends: each Trim at a seq at or below what the history
// knows is acked on the stream, through the current leader, holding
// w.lifeLock so that no takeover opens a successor meanwhile (a trim
// through another process reaches a leader's cache within 5 s, a documented
// lag the checker would otherwise have to allow for).
func (w *world) trimmer(ctx context.Context) {
	if w.p.trimmed == 0 {
		return
	}
	rng := rand.New(rand.NewPCG(w.o.Seed, 0x7219))
	all := append(append([]string(nil), w.streams[0]...), w.streams[1]...)
	for i := 0; i < w.p.producers; i++ {
		if s, ok := w.exclusive[i]; ok {
			all = append(all, s)
		}
	}
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	streams := all[:min(w.p.trimmed, len(all))]
	point := map[string]uint64{} // the trim point each stream is known to have
	for sleepCtx(ctx, nsUpTo(rng, 2*w.p.trimEvery)) {
		stream := streams[rng.IntN(len(streams))]
		acked := uint64(0)
		w.h.mu.Lock()
		for _, op := range w.h.appends {
			if op.stream == stream && op.out == outAcked {
				acked = max(acked, op.ack.End)
			}
		}
		w.h.mu.Unlock()
		if acked <= point[stream] {
			continue
		}
		seq := point[stream] + 1 + uint64(rng.Int64N(int64(acked-point[stream])))
		w.lifeLock <- struct{}{}
		pr := w.currentLeader()
		i := w.h.trimStart(stream, seq)
		// The trim point before the call: the Trim reads the record, so
		// its process's reads are held to at least this once it returns.
		before, berr := w.trimSeqOf(context.Background(), stream)
		if berr != nil {
			w.h.violation("trim %s to %d: read the stream record first: %v", stream, seq, berr)
		}
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := pr.star.Trim(tctx, stream, seq)
		cancel()
		if hk := w.o.hooks; err == nil && hk != nil && hk.afterTrim != nil {
			hk.afterTrim(w, pr, stream, seq)
		}
		actual, left := uint64(0), uint64(0)
		if err == nil {
			var rerr error
			if actual, rerr = w.trimSeqOf(context.Background(), stream); rerr != nil {
				w.h.violation("trim %s to %d: read the stream record back: %v", stream, seq, rerr)
			}
			// What the Trim left: seq, unless the record says it was
			// clamped to the tail (below seq), and never less than the
			// point it found. Not actual itself: a retention pass may
			// have raised the record between the Trim's return and this
			// read-back (seed 140), and the leader's reads are held to a
			// pass's point only once the pass has updated its cache. (A
			// clamped Trim whose record a pass raised meanwhile would
			// hold reads a little too high; the trimmer asks at or below
			// what is acked, which the leader's durable tail covers, so
			// its Trims are not clamped.)
			left = max(min(seq, actual), before)
			point[stream] = actual
			w.smu.Lock()
			w.res.Trims++
			w.smu.Unlock()
		}
		w.h.trimEnd(i, err, left, actual)
		if hk := w.o.hooks; err == nil && hk != nil && hk.trimDone != nil {
			hk.trimDone(w, pr, stream, seq)
		}
		<-w.lifeLock
	}
}

// trimSeqOf reads a stream's trim point from its record (the bare
// metastore).
func (w *world) trimSeqOf(ctx context.Context, stream string) (uint64, error) {
	rec, err := w.streamRecord(ctx, stream)
	return rec.TrimSeq, err
}

// simStreamRecord is the part of loglet's stream record the checker reads.
type simStreamRecord struct {
	Name        string `json:"name"`
	Incarnation string `json:"incarnation,omitempty"`
	TrimSeq     uint64 `json:"trim_seq,omitempty"`
}

func (r simStreamRecord) id() string { return chain.StreamID(r.Name, r.Incarnation) }

// streamRecord reads a stream's record from the bare metastore.
func (w *world) streamRecord(ctx context.Context, stream string) (simStreamRecord, error) {
	var rec simStreamRecord
	it, err := w.meta.Get(ctx, chain.StreamRecordKey(stream))
	if err != nil {
		return rec, err
	}
	err = json.Unmarshal(it.Value, &rec)
	return rec, err
}
