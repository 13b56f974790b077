package loglet

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/sequencer"
)

// ErrNotLeader: this process does not (or no longer) lead the chain (a
// successor minted a later epoch). Appends fail with a *NotLeaderError,
// which matches it and ErrNotCommitted and names the leader, so the host can
// route them.
var ErrNotLeader = errors.New("loglet: not the leader")

// recover runs DESIGN.md's "Halt and recovery on the incumbent" after the
// current epoch e halted. It waits for its own uploads (cancelling them),
// fences e from its first unreleased slot, acks every flight below the cut
// whatever happens next, then mints e+1. Winning, it reseals the
// checkpoint, garbage-probes e past the cut and republishes the flights at
// or past the cut, same sequence numbers, same order, into e+1's first
// slots: producers see latency, not errors. Losing, those flights are
// definitely not committed; it fails them and the lane is dead.
func (l *lane) recover() {
	defer l.wg.Done()
	ctx := l.ctx
	// 1. Stop our own uploads of unreleased flights, and wait for them:
	// the fence must see every copy we will ever write in e.
	l.mu.Lock()
	var waits []chan struct{}
	for _, f := range l.flights {
		f.cancel()
		waits = append(waits, f.done)
	}
	l.mu.Unlock()
	for _, w := range waits {
		<-w
	}
	l.mu.Lock()
	e, from := l.epoch, l.window.Released()
	rec, ver := l.rec, l.recVer
	cause := l.haltErr
	now := time.Now()
	recent := l.haltTimes[:0]
	for _, t := range l.haltTimes {
		if now.Sub(t) < time.Minute {
			recent = append(recent, t)
		}
	}
	l.haltTimes = append(recent, now)
	repeats := len(l.haltTimes) - 1
	l.mu.Unlock()

	// Back off before minting again after repeated halts.
	if repeats > 0 {
		wait := min(100*time.Millisecond<<min(repeats-1, 6), 5*time.Second)
		l.log.Warn("repeated halts; backing off before recovering", "halts_last_minute", repeats+1, "wait", wait)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}

	// 2. Fence our own epoch.
	set := l.star.bucketSet(&l.cfg)
	nonce := envelope.NewNonce()
	res, err := chain.Fence(ctx, set, l.star.cfg.Star, l.class, e, from, nonce, chain.FenceOptions{Retry: l.cfg.Retry, Parallel: fenceParallel(rec.Window)})
	if err != nil {
		l.die(outcomeUnknown(fmt.Errorf("%w: halted at epoch %d (%v) and the fence failed: %v", ErrChainHalted, e, cause, err)))
		return
	}
	cut := res.Cut

	// 3. Every flight below the cut is committed: ack it now, in order.
	l.mu.Lock()
	var released []*flight
	for s := from; s < cut; s++ {
		if l.flights[s] == nil {
			break // cannot happen: every slot below next was claimed by us
		}
		released = append(released, l.releaseLocked(s))
	}
	drain := l.decideLocked(released, nil)
	l.mu.Unlock()
	l.finishReleased(released, drain)
	l.log.Info("fenced own epoch", "epoch", e, "from", from, "cut", cut, "acked_late", len(released))

	// 4. Mint e+1. The CAS doubles as the deposed-check.
	next := chain.EpochRecord{Owner: l.star.cfg.Owner, Window: l.cfg.ParallelUploads, K: len(l.cfg.Buckets), W: l.cfg.W, Buckets: l.cfg.BucketNames,
		Cuts: append(l.absorber.neededCuts(rec.Cuts), chain.Cut{Epoch: e, Slot: cut})}
	nrec, nver, err := chain.MintNext(ctx, l.star.cfg.Meta, l.star.cfg.Star, l.class, rec, ver, next)
	if errors.Is(err, chain.ErrMintLost) {
		l.die(&NotLeaderError{Star: l.star.cfg.Star, Leader: nrec.Owner, Epoch: nrec.Epoch})
		return
	}
	if err != nil {
		l.die(outcomeUnknown(fmt.Errorf("%w: could not mint epoch %d: %v", ErrChainHalted, e+1, err)))
		return
	}
	// 5. Our seal may have been taken by a successor that lost the mint to
	// us: take it back (it can no longer seal: the epoch moved).
	// A transient metastore failure is retried; only a moved epoch record
	// (a successor minted past us) ends our leadership.
	err = l.absorber.reseal(ctx, nrec.Epoch, nver)
	for backoff := 10 * time.Millisecond; err != nil && !errors.Is(err, absorb.ErrDeposed) && ctx.Err() == nil; backoff = min(2*backoff, time.Second) {
		l.log.Warn("reseal failed; retrying", "epoch", nrec.Epoch, "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		err = l.absorber.reseal(ctx, nrec.Epoch, nver)
	}
	if err != nil {
		// The epoch record moved past our mint: a successor exists.
		nl := &NotLeaderError{Star: l.star.cfg.Star}
		if cur, _, rerr := chain.ReadEpoch(ctx, l.star.cfg.Meta, l.star.cfg.Star, l.class); rerr == nil {
			nl.Leader, nl.Epoch = cur.Owner, cur.Epoch
		}
		l.log.Warn("minted but lost the checkpoint", "epoch", nrec.Epoch, "err", err)
		l.die(nl)
		return
	}
	// 6. Poison e's window past the cut (and reclaim our copies there).
	if pr, err := chain.GarbageProbe(ctx, set, l.star.cfg.Star, l.class, e, cut, rec.Window, nonce); err != nil {
		l.log.Warn("garbage probe incomplete (safety rests on the cut)", "err", err)
	} else {
		l.log.Info("garbage probe", "epoch", e, "cut", cut, "poisoned", pr.Poisoned, "deleted", pr.DeletedFlights)
	}

	// 7. Republish the flights at or past the cut into e+1, in order.
	l.mu.Lock()
	var kept []*flight
	for _, f := range l.flights {
		kept = append(kept, f)
	}
	sort.Slice(kept, func(i, j int) bool { return kept[i].slot < kept[j].slot })
	l.epoch, l.rec, l.recVer = nrec.Epoch, nrec, nver
	l.window = sequencer.NewWindow(0, l.cfg.ParallelUploads)
	l.flights = map[uint64]*flight{}
	for _, f := range kept {
		slot, _ := l.window.Claim()
		f.epoch, f.slot = nrec.Epoch, slot
		l.flights[slot] = f
		l.startUpload(f)
	}
	l.recovering, l.haltErr = false, nil
	close(l.recovered)
	l.space.Broadcast()
	l.mu.Unlock()
	l.log.Info("recovered from halt", "from_epoch", e, "epoch", nrec.Epoch, "cut", cut, "republished", len(kept))
}

// die ends the lane's leadership: every unreleased flight and every pooled
// batch fails with err (wrapping ErrNotCommitted when a successor is known
// to exist, ErrOutcomeUnknown when we could not find out).
func (l *lane) die(err error) {
	l.mu.Lock()
	if l.dead != nil {
		l.mu.Unlock()
		return
	}
	l.dead = err
	// Fail what is in flight in slot order, after any ack already decided.
	slots := slices.Sorted(maps.Keys(l.flights))
	for _, s := range slots {
		f := l.flights[s]
		f.failed = true
		f.cancel()
		l.decideBatchesLocked(f.batches, err)
		delete(l.flights, s)
	}
	drain := l.startDeliveryLocked()
	if l.recovering {
		l.recovering = false
		close(l.recovered)
	}
	l.space.Broadcast()
	l.mu.Unlock()
	l.log.Error("lost leadership of the chain", "err", err)
	if drain {
		l.deliver()
	}
	l.backlog.Close()
	l.absorber.kick()
}
