package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/loglet/internal/chaincore"
	"github.com/flightlog/flightlog/settle"
)

// The soak (CoreOptions.Soak): the core-level simulation run over a long
// stretch of virtual time, a day by default, instead of a few hundred
// admits. Each stream alternates active periods (an append every few
// seconds, for minutes) and idle ones (minutes to hours); every few hours
// the chain is taken over (the old leader a zombie for a moment), a
// stream is trimmed (its liveness says below which seq its records are
// gone: settlement reclaims its refs there) or deleted (its incarnation
// dead: settlement reclaims its refs) and later re-created as a new
// incarnation (a new stream ID). All of it drawn from the seed, which
// replays. The quiet period then lets the live leader settle everything
// and merge the idle streams' tails, and the checker asserts, besides the
// usual (no doomed or pending marker, nothing under-replicated, no orphan
// settled object, every acked record of a live stream above its trim
// point reads back), that every idle stream the leader settled has at
// most soakSmallBound small settled objects above its trim point, and
// every other at most soakCounterBound (the binary counter's: a stream
// idle since before the last takeover is not known to the leader).

// DefaultSoak is the virtual time TestCoreSoak runs a seed for.
const DefaultSoak = 24 * time.Hour

// Bounds on an idle stream's small settled objects once the quiet period
// is over: one the leader settled (its tail merged), and one idle since
// before the last takeover.
const (
	soakSmallBound   = 3
	soakCounterBound = 40
)

// soakMergeOps is the fewest ops a Commit must take for the bounds to
// hold: an idle merge of 2*8 objects (two ops each, the new object's
// pending marker, the guard).
const soakMergeOps = 2*2*8 + 2

// coreSoak is the soak's workload and catalogue model.
type coreSoak struct {
	rng     *rand.Rand
	streams map[string]*soakStream
	ids     []string // in creation order
	pick    string   // the stream the next admit goes to

	nextTakeover, nextTrim, nextDelete time.Time
	recreates                          []soakRecreate
}

type soakStream struct {
	id        string
	base      string
	gen       int
	dead      bool
	trimSeq   uint64
	active    bool
	switchAt  time.Time
	nextAdmit time.Time
	gap       time.Duration
}

type soakRecreate struct {
	at   time.Time
	base string
	gen  int
}

// soakLive is the soak's liveness: a deleted incarnation is dead; a
// trimmed one's records below its trim point are gone.
func (cw *coreWorld) soakLive(_ context.Context, id string) (bool, uint64, error) {
	s := cw.soak.streams[id]
	if s == nil {
		return true, 0, nil
	}
	return !s.dead, s.trimSeq, nil
}

// soakDead reports whether stream id was deleted in the soak.
func (cw *coreWorld) soakDead(id string) bool {
	if cw.soak == nil {
		return false
	}
	s := cw.soak.streams[id]
	return s != nil && s.dead
}

// soakTrim is stream id's trim point in the soak (0: none).
func (cw *coreWorld) soakTrim(id string) uint64 {
	if cw.soak == nil || cw.soak.streams[id] == nil {
		return 0
	}
	return cw.soak.streams[id].trimSeq
}

func (k *coreSoak) add(id, base string, gen int, now time.Time) {
	s := &soakStream{id: id, base: base, gen: gen, gap: time.Duration(2+k.rng.IntN(8)) * time.Second}
	k.streams[id] = s
	k.ids = append(k.ids, id)
	k.toggle(s, now, k.rng.IntN(2) == 0)
}

// toggle makes s active or idle from now, until a drawn time.
func (k *coreSoak) toggle(s *soakStream, now time.Time, active bool) {
	s.active = active
	if active {
		s.switchAt = now.Add(time.Duration(2+k.rng.IntN(18)) * time.Minute)
		s.nextAdmit = now
		return
	}
	s.switchAt = now.Add(time.Duration(10+k.rng.IntN(230)) * time.Minute)
}

func (k *coreSoak) live() []*soakStream {
	var out []*soakStream
	for _, id := range k.ids {
		if s := k.streams[id]; !s.dead {
			out = append(out, s)
		}
	}
	return out
}

// soakLoop is the soak's workload: until cw.o.Soak has passed, the
// streams' appends, their active and idle periods, takeovers, trims,
// deletes and re-creates; then what producers retry.
func (cw *coreWorld) soakLoop() {
	k := cw.soak
	end := cw.now.Add(cw.o.Soak)
	k.nextTakeover = cw.now.Add(time.Duration(2*60+k.rng.IntN(4*60)) * time.Minute)
	k.nextTrim = cw.now.Add(time.Duration(30+k.rng.IntN(90)) * time.Minute)
	k.nextDelete = cw.now.Add(time.Duration(3*60+k.rng.IntN(5*60)) * time.Minute)
	for cw.now.Before(end) || cw.successor != nil || cw.nextRetry() != nil {
		next, what := time.Time{}, ""
		var who *soakStream
		consider := func(t time.Time, w string, s *soakStream) {
			if next.IsZero() || t.Before(next) {
				next, what, who = t, w, s
			}
		}
		if cw.now.Before(end) {
			for _, id := range k.ids {
				s := k.streams[id]
				if s.dead {
					continue
				}
				consider(s.switchAt, "switch", s)
				if s.active {
					consider(s.nextAdmit, "admit", s)
				}
			}
			consider(k.nextTakeover, "takeover", nil)
			consider(k.nextTrim, "trim", nil)
			consider(k.nextDelete, "delete", nil)
			for _, r := range k.recreates {
				consider(r.at, "recreate", nil)
			}
			if next.After(end) {
				next, what = end, "end"
			}
		}
		lg := cw.nextRetry()
		if lg != nil {
			consider(lg.retryAt, "retry", nil)
		}
		if next.IsZero() {
			if cw.now.Sub(cw.start) > cw.o.Soak+time.Hour {
				cw.violation("a successor did not open within a virtual hour of the soak's end")
				return
			}
			consider(cw.now.Add(100*time.Millisecond), "wait", nil)
		}
		if !cw.stepCoresUntil(next) {
			return
		}
		cw.watchSuccessor()
		switch what {
		case "admit":
			k.pick = who.id
			cw.admit()
			k.pick = ""
			who.nextAdmit = cw.now.Add(time.Duration(k.rng.ExpFloat64() * float64(who.gap)))
		case "switch":
			k.toggle(who, cw.now, !who.active)
		case "takeover":
			k.nextTakeover = cw.now.Add(time.Duration(2*60+k.rng.IntN(4*60)) * time.Minute)
			if cw.successor == nil {
				cw.scenarioEvent()
			}
		case "trim":
			k.nextTrim = cw.now.Add(time.Duration(30+k.rng.IntN(90)) * time.Minute)
			cw.soakTrimOne()
		case "delete":
			k.nextDelete = cw.now.Add(time.Duration(3*60+k.rng.IntN(5*60)) * time.Minute)
			cw.soakDeleteOne()
		case "recreate":
			r := k.recreates[0]
			for i, x := range k.recreates {
				if x.at.Before(r.at) {
					r = k.recreates[i]
				}
			}
			k.recreates = slices.DeleteFunc(k.recreates, func(x soakRecreate) bool { return x == r })
			id := fmt.Sprintf("%s.g%d", r.base, r.gen)
			k.add(id, r.base, r.gen, cw.now)
			cw.streams = append(cw.streams, id)
			cw.res.SoakRecreates++
			cw.tracef("soak: re-create %s as %s", r.base, id)
		case "retry":
			cw.retry(lg, cw.leader, false)
		}
	}
}

// soakTrimOne trims a live stream with records somewhere up to what the
// leader has assigned it.
func (cw *coreWorld) soakTrimOne() {
	k := cw.soak
	live := k.live()
	if len(live) == 0 || cw.leader == nil || !cw.leader.opened {
		return
	}
	s := live[k.rng.IntN(len(live))]
	st := cw.leader.streams[s.id]
	if st == nil {
		return
	}
	if to := st.Assigned().Seq; to > s.trimSeq {
		s.trimSeq += 1 + uint64(k.rng.IntN(int(to-s.trimSeq)))
		cw.res.SoakTrims++
		cw.tracef("soak: trim %s below %d", s.id, s.trimSeq)
	}
}

// soakDeleteOne deletes a live stream (never the last) and schedules its
// re-creation as a new incarnation.
func (cw *coreWorld) soakDeleteOne() {
	k := cw.soak
	live := k.live()
	if len(live) < 2 {
		return
	}
	s := live[k.rng.IntN(len(live))]
	s.dead, s.active = true, false
	cw.res.SoakDeletes++
	cw.tracef("soak: delete %s", s.id)
	k.recreates = append(k.recreates, soakRecreate{at: cw.now.Add(time.Duration(10+k.rng.IntN(110)) * time.Minute), base: s.base, gen: s.gen + 1})
}

// soakQuiet runs once the quiet period's settlement has caught up: the
// idle streams' tails are merged after IdleMergeAfter intervals, and
// their doomed objects deleted after their grace; then it checks the
// idle streams' small settled objects.
func (cw *coreWorld) soakQuiet(ctx context.Context, pr *coreProc) {
	if cw.soak == nil {
		return
	}
	wait := chaincore.IdleMergeAfter*cw.sp.interval + max(cw.sp.grace, 0) + 10*time.Second
	cw.stepCoresUntil(cw.now.Add(wait))
	if !cw.runUntil(func() bool { return pr.stopped || cw.settledUp(ctx) }, cw.o.Quiet) {
		cw.violation("soak: settlement did not catch up again after the idle streams' merges")
		return
	}
	cw.tracef("soak: idle tails merged")
	cw.checkSmallObjects(ctx, pr)
}

// checkSmallObjects asserts the bound on each live stream's small settled
// objects above its trim point.
func (cw *coreWorld) checkSmallObjects(ctx context.Context, pr *coreProc) {
	items, err := cw.meta.Scan(ctx, "refs/", "", 0)
	if err != nil {
		cw.violation("soak: scan refs: %v", err)
		return
	}
	small := map[string]int{}
	last := map[string]absorb.SpanRef{}
	for _, it := range items {
		sr, err := absorb.DecodeRef(it.Value)
		if err != nil || !sr.Settled() || sr.End <= cw.soakTrim(sr.Stream) {
			continue
		}
		raw := 0
		for _, e := range sr.Extents {
			raw += int(e.RawLength)
		}
		if settle.SmallObject(raw, 0) {
			small[sr.Stream]++
		}
		last[sr.Stream] = sr
	}
	writer := fmt.Sprintf("settle/%s/", pr.owner)
	for id, n := range small {
		if cw.soakDead(id) {
			continue
		}
		cw.res.SoakSmallMax = max(cw.res.SoakSmallMax, n)
		bound := soakCounterBound
		if l := last[id]; len(l.Writer) > len(writer) && l.Writer[:len(writer)] == writer {
			bound = soakSmallBound // the leader settled it: it knows it idle
		}
		if lim := cw.p.commitLimit; lim > 0 && lim < soakMergeOps {
			// A metastore this small takes no merge of many objects: a
			// stream keeps what its passes wrote (counted, not bounded).
			bound = -1
		}
		if bound >= 0 && n > bound {
			cw.violation("soak: idle stream %s keeps %d small settled objects above its trim point %d (bound %d; its last ref by %s)", id, n, cw.soakTrim(id), bound, last[id].Writer)
		}
	}
}

// soakTrimmed reports whether seq of stream id is below its soak trim
// point, or the stream was deleted: such records need not read back.
func (cw *coreWorld) soakGone(id string, seq uint64) bool {
	return cw.soakDead(id) || seq < cw.soakTrim(id)
}
