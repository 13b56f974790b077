package loglet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/internal/histogram"
	"github.com/flightlog/flightlog/metastore"
)

// absorber is a lane's absorb loop: woken by releases, paced by
// Config.AbsorbInterval, it turns the released flights of a deterministic
// slot range into one round (refs + checkpoint, one metastore Commit), then
// drops them from the flight index and frees their backlog tokens.
type absorber struct {
	l *lane
	// cmLock guards the committer (the absorb loop's rounds, a recovery's
	// reseal). A channel, not a mutex, so a waiter counts as durably
	// blocked under testing/synctest and the simulation's clock runs on.
	cmLock chan struct{}
	cm     *absorb.Committer
	wake   chan struct{}

	planned *plannedRound // planned, not yet committed (absorb loop only)
	cpEpoch atomic.Uint64 // the checkpoint's epoch: cuts of earlier epochs are no longer needed

	tails        map[string]absorb.StreamTail // as of the checkpoint; absorb loop only
	prevSnapshot string

	drainReq  chan struct{} // closed by drain: absorb everything, then stop
	drainOnce sync.Once
	done      chan struct{}

	commitStart atomic.Int64 // unix nanos of the commit in flight, 0 if none
	lastFailed  atomic.Bool  // the last commit attempt failed
	settling    atomic.Bool  // paused while an epoch settles

	rounds, refs, failures atomic.Uint64
	metaRequests           atomic.Uint64 // metastore requests of the committer
	checkpointNext         atomic.Uint64
	roundLatency           histogram.H
}

// slowCommit is the commit duration past which a stall is blamed on the
// metastore rather than on the absorb's pace.
const slowCommit = time.Second

func newAbsorber(l *lane, cm *absorb.Committer, tails map[string]absorb.StreamTail) *absorber {
	own := make(map[string]absorb.StreamTail, len(tails))
	for k, v := range tails {
		own[k] = v
	}
	return &absorber{l: l, cm: cm, cmLock: make(chan struct{}, 1), wake: make(chan struct{}, 1), tails: own,
		drainReq: make(chan struct{}), done: make(chan struct{})}
}

func (a *absorber) kick() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// diagnose names the cause of a backlog stall as it begins.
func (a *absorber) diagnose() absorb.StallCause {
	if a.settling.Load() {
		return absorb.CauseEpochSettling
	}
	if start := a.commitStart.Load(); a.lastFailed.Load() || (start != 0 && time.Since(time.Unix(0, start)) > slowCommit) {
		return absorb.CauseMetastoreSlow
	}
	return absorb.CauseAbsorbLagging
}

// drain asks the loop to absorb everything released and stop, and waits
// (bounded: a metastore that stays down must not hang Close forever; what
// is left is durable in the chain and a successor's walk absorbs it).
func (a *absorber) drain() {
	a.drainOnce.Do(func() { close(a.drainReq) })
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		a.l.log.Error("absorb did not drain within 30s; the rest is left to the next owner's walk")
	}
}

func (a *absorber) run() {
	defer a.l.wg.Done()
	defer close(a.done)
	var last time.Time
	draining := false
	for {
		if a.l.ctx.Err() != nil {
			return // the lane stopped (or crashed): nothing more can commit
		}
		a.l.mu.Lock()
		dead := a.l.dead != nil
		a.l.mu.Unlock()
		if dead {
			return // deposed for good: a successor walks what is left
		}
		a.l.mu.Lock()
		n := len(a.l.absorbQ)
		a.l.mu.Unlock()
		if n == 0 {
			if draining {
				return
			}
			select {
			case <-a.wake:
			case <-a.drainReq:
				draining = true
			case <-a.l.ctx.Done():
			}
			continue
		}
		if wait := a.l.star.cfg.AbsorbInterval - time.Since(last); wait > 0 && !draining {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-a.drainReq:
				draining = true
				t.Stop()
			case <-a.l.ctx.Done():
				t.Stop()
				return
			}
		}
		last = time.Now()
		if err := a.round(draining); err != nil {
			if errors.Is(err, absorb.ErrDeposed) {
				// A successor sealed the checkpoint. Halt: the recovery's
				// mint finds out whether it has minted (then we are dead)
				// or not (then we reseal and go on).
				a.l.log.Warn("checkpoint sealed by another owner; halting", "err", err)
				a.l.mu.Lock()
				at := a.l.window.Released()
				a.l.mu.Unlock()
				a.l.halt(at, err)
				a.l.mu.Lock()
				wait, dead := a.l.recovered, a.l.dead != nil
				a.l.mu.Unlock()
				if dead {
					return
				}
				if wait != nil {
					select {
					case <-wait:
					case <-a.l.ctx.Done():
						return
					}
				}
				continue
			}
			if draining && time.Since(last) > 30*time.Second {
				return
			}
		}
	}
}

// plannedRound is a round planned (refs built, tails advanced) and not yet
// committed: a retry commits exactly it, never a re-plan.
type plannedRound struct {
	flights []*flight
	round   absorb.Round
	refs    []absorb.SpanRef
}

// round absorbs up to AbsorbMaxSlots released flights of one epoch,
// retrying the commit until it lands (or the absorb is deposed or,
// draining, gives up).
func (a *absorber) round(draining bool) error {
	l := a.l
	if a.planned == nil {
		l.mu.Lock()
		n := min(len(l.absorbQ), l.star.cfg.AbsorbMaxSlots)
		e := l.absorbQ[0].epoch
		for i := 1; i < n; i++ {
			if l.absorbQ[i].epoch != e { // a round covers one epoch
				n = i
				break
			}
		}
		flights := append([]*flight(nil), l.absorbQ[:n]...)
		l.mu.Unlock()
		slots := make([]absorb.Slot, n)
		for i, f := range flights {
			slots[i] = absorb.Slot{Epoch: e, Slot: f.slot, Key: f.key, Frames: f.frames}
		}
		round := absorb.Round{Epoch: e, From: flights[0].slot, To: flights[n-1].slot + 1}
		writer := fmt.Sprintf("%s/%d/%d", l.star.cfg.Owner, e, round.From)
		refs, err := absorb.Plan(l.class.String(), writer, slots, a.tails)
		if err != nil {
			// A bug upstream: stop the chain rather than record a gap.
			l.die(outcomeUnknown(fmt.Errorf("%w: absorb: %v", ErrChainHalted, err)))
			return err
		}
		a.planned = &plannedRound{flights: flights, round: round, refs: refs}
	}
	flights, round, refs := a.planned.flights, a.planned.round, a.planned.refs
	n := len(flights)
	var err error
	backoff := 10 * time.Millisecond
	start := time.Now()
	for attempt := 0; ; attempt++ {
		a.commitStart.Store(time.Now().UnixNano())
		a.cmLock <- struct{}{}
		err = commitRound(l.ctx, a.cm, l.buckets, l.cfg.W, l.star.cfg.Star, l.class, round, refs, a.tails, &a.prevSnapshot)
		<-a.cmLock
		a.commitStart.Store(0)
		if err == nil {
			a.lastFailed.Store(false)
			break
		}
		a.lastFailed.Store(true)
		a.failures.Add(1)
		if errors.Is(err, absorb.ErrDeposed) || l.ctx.Err() != nil {
			return err
		}
		if attempt == 0 {
			l.log.Warn("absorb round failed; retrying", "from", round.From, "to", round.To, "err", err)
		}
		if draining && time.Since(start) > 30*time.Second {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-l.ctx.Done():
			t.Stop()
			return l.ctx.Err()
		}
		backoff = min(2*backoff, 2*time.Second)
	}
	a.planned = nil
	a.cmLock <- struct{}{}
	a.metaRequests.Store(a.cm.Requests)
	<-a.cmLock
	a.checkpointNext.Store(round.To)
	a.cpEpoch.Store(round.Epoch)
	a.roundLatency.RecordDuration(time.Since(start))
	a.rounds.Add(1)
	a.refs.Add(uint64(len(refs)))
	// The round is in the metastore: drop its flights from the index and
	// free their backlog tokens.
	l.mu.Lock()
	for _, f := range flights {
		for _, p := range f.batches {
			l.index.drop(p)
		}
	}
	l.absorbQ = l.absorbQ[n:]
	l.mu.Unlock()
	l.backlog.Release(flights[n-1].pos + 1)
	return nil
}

// reseal restores this owner's seal on the checkpoint for its new epoch
// (after a recovery minted it).
func (a *absorber) reseal(ctx context.Context, epoch uint64, ver metastore.Version) error {
	select {
	case a.cmLock <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-a.cmLock }()
	return a.cm.Reseal(ctx, epoch, ver)
}

// neededCuts keeps the cuts a walk from the checkpoint still needs: those
// of epochs at or past the checkpoint's.
func (a *absorber) neededCuts(cuts []chain.Cut) []chain.Cut {
	cp := a.cpEpoch.Load()
	var out []chain.Cut
	for _, k := range cuts {
		if k.Epoch >= cp {
			out = append(out, k)
		}
	}
	return out
}
