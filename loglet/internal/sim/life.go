package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/fault"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// A stream's whole life, in the workload (issue 13): lifers delete and
// re-create their names mid-run (on this star and the neighbour), and the
// crowd creates thousands of streams and appends once to each, some named
// at the key limit, some with batches of many tiny records.
//
// The crowd's appends are ordinary history: every check of the final state
// covers them. A lifer checks its own name as it goes, since the history's
// checks hold a name to one stream: every incarnation starts empty at seq
// 0; it never shows a record of an earlier one (every body carries its
// incarnation); its acked records are read back at their acks from the
// process that leads it; and once deleted it is not found. After Close, a
// fresh Reader checks the last incarnation the same way.

// lifer is one name lived through incarnations.
type lifer struct {
	w    *world
	id   int
	rng  *rand.Rand
	name string
	rd   *loglet.Reader // a non-leader, over the stores as they behave

	gen   int  // the current incarnation, as the lifer counts them (1, 2, ...)
	live  bool // it exists now: created, not deleted
	onNb  bool // on the neighbour star
	acked map[uint64][]byte
}

// longestName is prefix padded with 'n' to the longest name whose keys fit
// every backend (chain.ValidateStreamKeys).
func longestName(prefix string) string {
	lo, hi := len(prefix), chain.MaxStreamNameLen
	for lo < hi { // the longest valid length in [lo, hi]
		mid := (lo + hi + 1) / 2
		if chain.ValidateStreamKeys(prefix+strings.Repeat("n", mid-len(prefix))) == nil {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return prefix + strings.Repeat("n", lo-len(prefix))
}

// startLife starts the lifers and the crowd. stopLifers ends the lifers
// (each finishes the step it is in); crowdDone is closed when the crowd has
// created and appended to every one of its streams.
func (w *world) startLife(ctx context.Context) (stopLifers func(), crowdDone <-chan struct{}) {
	lctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := 0; i < w.p.lifers; i++ {
		name := fmt.Sprintf("life%d", i)
		if i%2 == 1 {
			name = longestName(name + "-")
		}
		l := &lifer{w: w, id: i, rng: rand.New(rand.NewPCG(w.o.Seed, uint64(i)+0x11fe)), name: name}
		rd, err := loglet.NewReader(loglet.ReaderConfig{Meta: w.metaBkt, Standard: w.buckets[0], Express: w.buckets[1]})
		if err != nil {
			w.h.violation("lifer NewReader: %v", err)
			break
		}
		l.rd = rd
		w.lifers = append(w.lifers, l)
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.run(lctx)
		}()
	}
	done := make(chan struct{})
	var cwg sync.WaitGroup
	const crowdWorkers = 8
	for wk := 0; wk < crowdWorkers && w.p.crowd > 0; wk++ {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			rng := rand.New(rand.NewPCG(w.o.Seed, uint64(wk)+0xc20d))
			for i := wk; i < w.p.crowd; i += crowdWorkers {
				w.crowdOne(ctx, rng, 10000+wk, i)
			}
		}()
	}
	go func() { cwg.Wait(); close(done) }()
	return func() { cancel(); wg.Wait() }, done
}

// crowdOne creates crowd stream i and appends one batch to it.
func (w *world) crowdOne(ctx context.Context, rng *rand.Rand, who, i int) {
	c := chain.Classes()[i%2]
	name := fmt.Sprintf("%s-c%d", c, i)
	if i%50 == 7 {
		name = longestName(name + "-")
	}
	failed := false
	var last error
	waited := 0 // 50 ms waits for a crashed leader's successor
	for attempt := 0; ; attempt++ {
		if attempt == 40 {
			w.h.violation("crowd: create %s failed 40 times, the last: %v", trunc([]byte(name)), last)
			return
		}
		pr := w.currentLeader()
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := pr.star.CreateStream(cctx, name, loglet.StreamOptions{Class: c, Star: starName})
		cancel()
		if err == nil || (failed && errors.Is(err, loglet.ErrStreamExists)) {
			break
		}
		if errors.Is(err, loglet.ErrStreamExists) {
			w.h.violation("crowd: create %s: exists before anyone created it", trunc([]byte(name)))
			return
		}
		failed, last = true, err
		if w.crashedNow(pr) {
			// Its stores are down for good: no attempt of the
			// budget's, wait for its successor to be the leader
			// (seed 6776: a successor's Open outlasted the 40
			// attempts' 16 s, all against the crashed process), for
			// 10 virtual minutes at most.
			if waited++; waited > 12000 {
				w.h.violation("crowd: create %s: the leader stayed crashed for 10 minutes, the last error: %v", trunc([]byte(name)), last)
				return
			}
			attempt--
			if !sleepCtx(ctx, 50*time.Millisecond) {
				return
			}
			continue
		}
		if !sleepCtx(ctx, time.Duration(20*(attempt+1))*time.Millisecond) {
			return
		}
	}
	w.smu.Lock()
	w.crowd = append(w.crowd, name)
	w.res.CrowdStreams++
	w.smu.Unlock()
	recs := []loglet.Record{{Body: []byte("crowd")}}
	if rng.IntN(20) == 0 {
		recs = tinyRecords(rng)
	}
	pr := w.currentLeader()
	op := w.h.newAppend(who, pr.n, name, recs, nil)
	actx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	ack, err := pr.star.Append(actx, name, loglet.Batch{Records: op.recs})
	cancel()
	w.h.finish(op, ack, err)
}

// tinyRecords is a batch of 50-999 empty bodies (the history's 16-byte
// prefix is all each holds).
func tinyRecords(rng *rand.Rand) []loglet.Record {
	return make([]loglet.Record, 50+rng.IntN(950))
}

// serving is the process that leads the lifer's current incarnation.
func (l *lifer) serving() *loglet.Star {
	if l.onNb {
		return l.w.nb
	}
	return l.w.currentLeader().star
}

func (l *lifer) bad(format string, args ...any) {
	l.w.h.violation("lifer %d (%s, incarnation %d): %s", l.id, trunc([]byte(l.name)), l.gen, fmt.Sprintf(format, args...))
}

// run lives the name through incarnations until ctx ends, finishing the
// step it is in: the last incarnation is left as it stands (live or
// deleted) for the final check.
func (l *lifer) run(ctx context.Context) {
	for gens := 3 + l.rng.IntN(4); ctx.Err() == nil && l.gen < gens; {
		if l.w.p.deleteRaces && l.w.nb != nil && l.rng.IntN(3) == 0 {
			if !l.raceDelete(ctx) {
				return
			}
			continue
		}
		l.gen++
		l.onNb = l.w.nb != nil && l.rng.IntN(3) == 0
		if !l.create() {
			return
		}
		l.w.smu.Lock()
		l.w.res.Incarnations++
		l.w.smu.Unlock()
		l.checkFresh()
		for k, n := 0, 1+l.rng.IntN(8); k < n && ctx.Err() == nil; k++ {
			l.append(k)
			sleepCtx(ctx, nsUpTo(l.rng, 40*time.Millisecond))
		}
		l.verify("leader", l.serving().Read, true)
		l.verify("reader", l.rd.Read, false)
		if (ctx.Err() != nil || l.gen == gens) && l.rng.IntN(2) == 0 {
			return // leave it live
		}
		if !l.delete() {
			return
		}
		l.checkGone()
		sleepCtx(ctx, nsUpTo(l.rng, 400*time.Millisecond))
	}
}

// retry runs op until it reports done, backing off, for at most 20 virtual
// minutes (a wedge is a violation).
func (l *lifer) retry(what string, op func(ctx context.Context, attempt int) (done bool, err error)) bool {
	start := time.Now()
	var last error
	for attempt := 0; time.Since(start) < 20*time.Minute; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		done, err := op(ctx, attempt)
		cancel()
		if done {
			return err == nil
		}
		last = err
		time.Sleep(time.Duration(min(20*(attempt+1), 1000)) * time.Millisecond)
	}
	l.bad("%s did not succeed in 20 virtual minutes: %v", what, last)
	return false
}

func (l *lifer) create() bool {
	star := starName
	if l.onNb {
		star = neighbourName
	}
	return l.createThrough(l.serving, star)
}

// createThrough creates the lifer's next incarnation on star through the
// process via returns at each attempt.
func (l *lifer) createThrough(via func() *loglet.Star, star string) bool {
	c := chain.Classes()[l.rng.IntN(2)]
	failed := false
	ok := l.retry("create", func(ctx context.Context, _ int) (bool, error) {
		_, err := via().CreateStream(ctx, l.name, loglet.StreamOptions{Class: c, Star: star})
		switch {
		case err == nil, failed && errors.Is(err, loglet.ErrStreamExists):
			return true, nil // (exists: an earlier attempt applied)
		case errors.Is(err, loglet.ErrStreamExists):
			l.bad("create: the name exists, though its deletion was confirmed")
			return true, err
		}
		failed = true
		return false, err
	})
	l.live, l.acked = ok, map[uint64][]byte{}
	return ok
}

func (l *lifer) delete() bool {
	failed := false
	ok := l.retry("delete", func(ctx context.Context, _ int) (bool, error) {
		// Only ever from the incarnation's leader: a delete through
		// another process leaves the leader's cached stream stale (a gap
		// recorded in the issue note), and w.lifeLock keeps a takeover
		// from opening a successor while a delete runs.
		l.w.lifeLock <- struct{}{}
		err := l.serving().DeleteStream(ctx, l.name)
		<-l.w.lifeLock
		switch {
		case err == nil, failed && errors.Is(err, loglet.ErrStreamNotFound):
			return true, nil
		case errors.Is(err, loglet.ErrStreamNotFound):
			l.bad("delete: not found, though it was created")
			return true, err
		}
		failed = true
		return false, err
	})
	if ok {
		l.live = false
		l.w.smu.Lock()
		l.w.res.Deletes++
		l.w.smu.Unlock()
	}
	return ok
}

// raceDelete lives one incarnation only to delete it under racing appends
// (plan.deleteRaces): the neighbour creates it on the main star, so the
// leader has never looked it up, and while racers append to it through the
// leader (their first appends are cache misses, each a stream-record read),
// the lifer deletes it through the leader. An append begun after
// DeleteStream returned must never be acked: nothing can ever read it
// (the incarnation is gone), so an ack would be a lie. The racers stop
// before the lifer goes on, so no later incarnation meets them.
func (l *lifer) raceDelete(ctx context.Context) bool {
	l.gen++
	l.onNb = false
	if !l.createThrough(func() *loglet.Star { return l.w.nb }, starName) {
		return false
	}
	l.w.smu.Lock()
	l.w.res.Incarnations++
	l.w.smu.Unlock()
	var deleted atomic.Bool
	var wg sync.WaitGroup
	racers := 2 + l.rng.IntN(5)
	// Spread the racers' first lookups over the delete's own metastore
	// calls (a Get and a Commit), so some are in flight as it returns.
	spread := 4*l.w.p.metaLat + 2*time.Millisecond
	for r := 0; r < racers; r++ {
		rng := rand.New(rand.NewPCG(l.w.o.Seed, uint64(l.id*1000+l.gen*10+r)+0x7ace))
		wg.Add(1)
		go func() {
			defer wg.Done()
			after := 0 // appends begun after the delete returned
			sleepCtx(ctx, nsUpTo(rng, spread))
			for k := 0; after < 2 && k < 50 && ctx.Err() == nil; k++ {
				late := deleted.Load()
				if late {
					after++
				}
				body := fmt.Appendf(nil, "life%d.g%d.race%d.r%d|", l.id, l.gen, r, k)
				actx, cancel := context.WithTimeout(ctx, time.Minute)
				ack, err := l.w.currentLeader().star.Append(actx, l.name, loglet.Batch{Records: []loglet.Record{{Body: body}}})
				cancel()
				l.w.smu.Lock()
				l.w.res.RaceAppends++
				l.w.smu.Unlock()
				if err == nil && late {
					l.bad("racer %d: an append begun after DeleteStream returned was acked into the deleted incarnation at [%d, %d)", r, ack.Start, ack.End)
				}
				sleepCtx(ctx, nsUpTo(rng, 3*time.Millisecond))
			}
		}()
	}
	sleepCtx(ctx, nsUpTo(l.rng, spread/2))
	ok := l.delete()
	if ok {
		deleted.Store(true)
		l.w.smu.Lock()
		l.w.res.DeleteRaces++
		l.w.smu.Unlock()
	}
	wg.Wait()
	if ok {
		l.checkGone()
	}
	return ok
}

// body is record k of batch b of the current incarnation.
func (l *lifer) body(b, k int, tiny bool) []byte {
	tag := fmt.Sprintf("life%d.g%d.b%d.r%d|", l.id, l.gen, b, k)
	if tiny {
		return []byte(tag)
	}
	return append([]byte(tag), bytes.Repeat([]byte{'a' + byte(l.rng.IntN(26))}, l.rng.IntN(200))...)
}

// genOf reads the incarnation a lifer body carries.
func genOf(body []byte, id int) (int, bool) {
	rest, ok := bytes.CutPrefix(body, []byte(fmt.Sprintf("life%d.g", id)))
	if !ok {
		return 0, false
	}
	g, _, ok := bytes.Cut(rest, []byte("."))
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(string(g))
	return n, err == nil
}

func (l *lifer) append(b int) {
	n, tiny := 1+l.rng.IntN(4), false
	if l.w.p.tinyBatch > 0 && l.rng.Float64() < l.w.p.tinyBatch {
		n, tiny = 50+l.rng.IntN(950), true
	}
	recs := make([]loglet.Record, n)
	for k := range recs {
		recs[k].Body = l.body(b, k, tiny)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	ack, err := l.serving().Append(ctx, l.name, loglet.Batch{Records: recs})
	cancel()
	if err != nil {
		return // not committed, or unknown: either way it may not be read back
	}
	if ack.End-ack.Start != uint64(n) {
		l.bad("append of %d records acked as [%d, %d)", n, ack.Start, ack.End)
		return
	}
	for k, r := range recs {
		l.acked[ack.Start+uint64(k)] = r.Body
	}
}

// checkFresh: a new incarnation is empty, from its leader and a Reader.
func (l *lifer) checkFresh() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if t, err := l.serving().CheckTail(ctx, l.name); err == nil && t.Seq != 0 {
		l.bad("a fresh incarnation's leader reports tail %d", t.Seq)
	}
	if res, err := l.rd.Read(ctx, l.name, loglet.ReadQuery{Start: loglet.AtSeq(0)}); err == nil && len(res.Records) > 0 {
		l.bad("a Reader reads %d records from a fresh incarnation, the first %q", len(res.Records), trunc(res.Records[0].Body))
	}
}

// checkGone: a deleted incarnation is not found, by its leader or a Reader.
func (l *lifer) checkGone() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, read := range []func(context.Context, string, loglet.ReadQuery) (loglet.ReadResult, error){l.serving().Read, l.rd.Read} {
		who := []string{"leader", "reader"}[i]
		res, err := read(ctx, l.name, loglet.ReadQuery{Start: loglet.AtSeq(0)})
		if err == nil {
			l.bad("%s reads %d records of a deleted stream", who, len(res.Records))
		} else if !errors.Is(err, loglet.ErrStreamNotFound) && !errors.Is(err, loglet.ErrNotLeader) && !transient(err) {
			l.bad("%s read of a deleted stream: %v (not ErrStreamNotFound)", who, err)
		}
	}
}

// transient: an error the injected faults explain.
func transient(err error) bool {
	for _, e := range []error{context.DeadlineExceeded, objstore.ErrUnavailable, objstore.ErrInjected, objstore.ErrInjectedAmbiguous,
		metastore.ErrUnavailable, metastore.ErrInjected, metastore.ErrInjectedAmbiguous, metastore.ErrConflict, loglet.ErrClosed} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// verify reads the incarnation from 0 to its end with read: contiguous
// seqs, every record of this incarnation, and (if acks) every acked
// record at its ack.
func (l *lifer) verify(who string, read func(context.Context, string, loglet.ReadQuery) (loglet.ReadResult, error), acks bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	next := uint64(0)
	for pass := 0; pass < 10000; pass++ {
		res, err := read(ctx, l.name, loglet.ReadQuery{Start: loglet.AtSeq(next), MaxRecords: 500})
		if err != nil {
			return // a fault; another pass will come
		}
		for _, r := range res.Records {
			if r.Seq != next {
				l.bad("%s read from %d: seq %d where %d was next", who, res.Records[0].Seq, r.Seq, next)
				return
			}
			if g, ok := genOf(r.Body, l.id); !ok || g != l.gen {
				l.bad("%s reads seq %d of another incarnation (%d): %q", who, r.Seq, g, trunc(r.Body))
				return
			}
			if want, ok := l.acked[r.Seq]; ok && !bytes.Equal(want, r.Body) {
				l.bad("%s reads seq %d as %q, acked as %q", who, r.Seq, trunc(r.Body), trunc(want))
				return
			}
			next++
		}
		if len(res.Records) == 0 {
			break
		}
	}
	if acks {
		for seq := range l.acked {
			if seq >= next {
				l.bad("%s read ends at %d, below acked seq %d", who, next, seq)
				return
			}
		}
	}
}

// checkLifers is the final check, after every star is closed: a fresh
// Reader over the bare stores finds each lifer's last incarnation as it was
// left, every acked record at its ack.
func (w *world) checkLifers(ctx context.Context) {
	rd, err := loglet.NewReader(loglet.ReaderConfig{Meta: w.meta, Standard: w.memSet(loglet.Standard).Stores, Express: w.memSet(loglet.Express).Stores})
	if err != nil {
		w.h.violation("lifers: NewReader: %v", err)
		return
	}
	for _, l := range w.lifers {
		l.rd = rd
		if l.live {
			l.verify("fresh reader", rd.Read, true)
		} else {
			l.checkGoneReader(ctx)
		}
	}
}

func (l *lifer) checkGoneReader(ctx context.Context) {
	res, err := l.rd.Read(ctx, l.name, loglet.ReadQuery{Start: loglet.AtSeq(0)})
	if err == nil {
		l.bad("a fresh Reader reads %d records of the deleted stream", len(res.Records))
	} else if !errors.Is(err, loglet.ErrStreamNotFound) {
		l.bad("a fresh Reader's read of the deleted stream: %v (not ErrStreamNotFound)", err)
	}
}

// openNeighbour opens the neighbour star's process: fault-free, over the
// same buckets and metastore (its keys are its own star's).
func (w *world) openNeighbour(ctx context.Context) error {
	var fs [2][]*objstore.FaultStore
	for c := range w.buckets {
		for i, b := range w.buckets[c] {
			f := objstore.WithFaults(b, w.o.Seed*1000+uint64(900+c*10+i))
			f.SetLatency(w.p.putLat, fault.Put)
			f.SetLatency(w.p.getLat, fault.Get)
			fs[c] = append(fs[c], f)
		}
	}
	s, err := loglet.Open(ctx, w.starConfig(neighbourName, "neighbour", w.metaBkt, fs))
	if err != nil {
		return err
	}
	w.nb = s
	return nil
}
