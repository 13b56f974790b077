package chaincore

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	absorb "github.com/flightlog/flightlog/absorb/absorbval"
	chain "github.com/flightlog/flightlog/chain/chainval"
	metastore "github.com/flightlog/flightlog/metastore/metaval"
	"github.com/flightlog/flightlog/sequencer"
)

func sequencerWindow(size int) *sequencer.Window { return sequencer.NewWindow(0, size) }

// Close begins a clean close, a cooperative handoff: admission stops, every
// pooled batch is cut at once (the backlog's bound lifted), every claimed
// flight is waited for, every released flight absorbed (unpaced), and a
// clean seal with the cut recorded in the epoch record, so the next owner
// skips fencing. Ready reports Stopped when it is done; a close that cannot
// finish (a bucket set or metastore down) ends when the shell calls Abort.
func (c *Core) Close(now time.Time) {
	c.advanceClock(now)
	if c.closing {
		return
	}
	c.closing = true
	c.closeAt = c.now
	c.decideAll()
}

// sealBackoff paces retries of a clean seal whose Commit failed.
const sealBackoff = 50 * time.Millisecond

// maybeFinishClose takes the close's next step once everything before it is
// done.
func (c *Core) maybeFinishClose() {
	if !c.closing {
		return
	}
	switch c.phase {
	case phaseDead:
		c.stop()
	case phaseServing:
		_, pooled := c.pool.Queued()
		if pooled == 0 && len(c.flights) == 0 && c.flushedAt.IsZero() {
			c.flushedAt = c.now
		}
		if pooled > 0 || len(c.flights) > 0 || len(c.ab.queue) > 0 || c.ab.planned != nil || c.checkpointOut() || c.now.Before(c.ab.retryAt) {
			return
		}
		c.noteSealing()
		c.sealOut = true
		c.emit(SealEpoch{Held: c.held, Record: c.rec, Version: c.ver, Cut: c.window.Released()})
	}
}

// lastRound reports whether p is a clean close's last round: serving,
// nothing pooled or in flight, p absorbs every released flight, all of the
// current epoch, in one Commit, and its commit has not failed with the
// seal. Its Commit then carries the seal (CommitRound.Seal).
func (c *Core) lastRound(p *plannedRound) bool {
	a := &c.ab
	_, pooled := c.pool.Queued()
	return c.closing && c.phase == phaseServing && c.sealed == nil && !p.sealTried && p.split == nil &&
		pooled == 0 && len(c.flights) == 0 && len(p.flights) > 0 && len(a.queue) == len(p.flights) &&
		p.round.Epoch == c.rec.Epoch && p.round.To == c.window.Released()
}

// noteSealing records when the close's seal was first sent (the "epoch
// sealed cleanly" log's steps).
func (c *Core) noteSealing() {
	if c.flushedAt.IsZero() {
		c.flushedAt = c.now
	}
	if c.sealAt.IsZero() {
		c.sealAt = c.now
	}
}

// sealedCleanly ends a clean close whose seal is recorded at version
// (withRound: in the last round's Commit).
func (c *Core) sealedCleanly(version metastore.Version, withRound bool) {
	// flush: to the last flight's ack; absorb: the rounds after it (and
	// one out before); seal: the seal's Commit (with the last round's,
	// when that round carried it).
	c.logf(slog.LevelInfo, "epoch sealed cleanly", attrU("epoch", c.rec.Epoch), attrU("cut", c.window.Released()),
		slog.Duration("flush", c.flushedAt.Sub(c.closeAt).Round(100*time.Microsecond)),
		slog.Duration("absorb", c.sealAt.Sub(c.flushedAt).Round(100*time.Microsecond)),
		slog.Duration("seal", c.now.Sub(c.sealAt).Round(100*time.Microsecond)), slog.Bool("with_round", withRound))
	c.sealedClean = true
	c.ver = version
	c.stop()
}

// onEpochSealed ends a clean close.
func (c *Core) onEpochSealed(ev EpochSealed) {
	cut := c.window.Released()
	c.ab.requests += ev.Requests
	if ev.Held.Version != "" {
		c.hold(ev.Held)
	}
	switch {
	case ev.Err == nil:
		c.sealedCleanly(ev.Version, false)
	case errors.Is(ev.Err, absorb.ErrDeposed) || errors.Is(ev.Err, chain.ErrDeposed):
		// A successor sealed or minted meanwhile: it fences, and finds the
		// same cut (nothing was written at or past it).
		c.logf(slog.LevelWarn, "clean seal not recorded: a successor is taking over; it will fence", attrU("epoch", c.rec.Epoch), attrU("cut", cut), attrE(ev.Err))
		c.stop()
	default:
		c.logf(slog.LevelWarn, "clean seal failed; retrying", attrU("epoch", c.rec.Epoch), attrU("cut", cut), attrE(ev.Err))
		c.ab.retryAt = c.now.Add(sealBackoff)
		c.ab.lastErr = ev.Err
	}
}

// Abort ends the core now, because the shell will wait no longer (Close's
// context ended, or Open's): every batch still without an outcome gets one
// (pooled batches were never written: not committed; a flight at or past a
// cut its recovery fenced: not committed; any other unreleased flight:
// outcome unknown), and Ready reports Stopped. What Close could not finish
// is returned by CloseError.
func (c *Core) Abort(now time.Time, cause error) {
	c.advanceClock(now)
	if c.phase == phaseStopped {
		return
	}
	c.aborted = true
	if cause == nil {
		cause = errors.New("aborted")
	}
	if c.phase == phaseOpening {
		s := c.succ
		if s.lastErr != nil {
			cause = fmt.Errorf("%w; the step had failed %d times for %v, last: %w", cause, s.failures, c.now.Sub(s.failingSince).Round(time.Millisecond), s.lastErr)
		}
		c.failOpen(fmt.Errorf("leader: %s/%s: opening abandoned at step %q: %w", c.cfg.Star, c.cfg.Class, s.step, cause))
		return
	}
	if c.phase != phaseDead {
		s := c.succ
		unknown, past := 0, 0
		for _, f := range c.flights {
			if f.released {
				continue // acked out of order (a planted bug): decided already
			}
			fate := Fate{Kind: OutcomeUnknown, Cause: fmt.Errorf("%w (%v): slot %d of epoch %d was not decided", ErrAborted, cause, f.slot, f.epoch)}
			if s != nil && s.fenced && f.epoch == s.prev.Epoch && f.slot >= s.cut {
				// Past a cut the fence found: definitely not committed,
				// whether or not the mint applied (f).
				fate = Fate{Kind: NotCommitted, Cause: fmt.Errorf("%w (%v): slot %d of epoch %d is at or past the fenced cut %d", ErrAborted, cause, f.slot, f.epoch, s.cut)}
				past += len(f.batches)
			} else {
				unknown += len(f.batches)
			}
			for _, b := range f.batches {
				c.decide(b, fate)
			}
		}
		c.flights = nil
		if unknown > 0 {
			c.closeEr = append(c.closeEr, fmt.Errorf("leader: %s/%s: %d batches ended outcome-unknown: %w", c.cfg.Star, c.cfg.Class, unknown, cause))
		}
		if past > 0 {
			c.closeEr = append(c.closeEr, fmt.Errorf("leader: %s/%s: %d batches past the fenced cut ended not committed: %w", c.cfg.Star, c.cfg.Class, past, cause))
		}
		if n := c.dropPool(Fate{Kind: NotCommitted, Cause: fmt.Errorf("%w: closed before the batch was cut", ErrClosed)}); n > 0 {
			c.closeEr = append(c.closeEr, fmt.Errorf("leader: %s/%s: %d batches never cut ended not committed: %w", c.cfg.Star, c.cfg.Class, n, cause))
		}
	}
	if n := len(c.ab.queue); n > 0 {
		err := fmt.Errorf("leader: %s/%s: %d released flights not absorbed (durable in the chain; the next owner's walk absorbs them): %w", c.cfg.Star, c.cfg.Class, n, cause)
		if c.ab.lastErr != nil {
			err = fmt.Errorf("%w; last metastore error: %v", err, c.ab.lastErr)
		}
		c.closeEr = append(c.closeEr, err)
	} else if c.closing && c.phase == phaseServing && !c.sealedClean {
		c.closeEr = append(c.closeEr, fmt.Errorf("leader: %s/%s: clean seal of epoch %d not recorded (the next owner fences): %w", c.cfg.Star, c.cfg.Class, c.rec.Epoch, cause))
	}
	c.stop()
}

// CloseError returns what the close could not finish (nil after a clean
// close, or after a close of a deposed chain).
func (c *Core) CloseError() error { return errors.Join(c.closeEr...) }

// dropPool gives every pooled batch fate (not committed: never cut) and
// returns how many there were.
func (c *Core) dropPool(fate Fate) int {
	items, charge := c.pool.Drain()
	c.rd.PoolFreed += charge
	for _, b := range items {
		c.decide(b, fate)
	}
	return len(items)
}

// die ends the chain's leadership for good: every unreleased flight gets
// fate, in slot order, after every ack already decided; every pooled batch
// is not committed (it was never cut); nothing more is admitted or written.
func (c *Core) die(fate Fate) {
	if c.phase == phaseDead || c.phase == phaseStopped {
		return
	}
	c.phase, c.fate, c.succ = phaseDead, fate, nil
	for _, f := range c.flights {
		if f.up != nil {
			c.cancel(f.up)
		}
		if f.released {
			continue // acked out of order (a planted bug): decided already
		}
		for _, b := range f.batches {
			c.decide(b, fate)
		}
	}
	c.flights = nil
	c.dropPool(Fate{Kind: NotCommitted, Cause: fate.Cause, Deposed: fate.Deposed})
	f := fate
	c.rd.Dead = &f
	msg := "the chain stops serving"
	if fate.Deposed != nil {
		msg = "lost leadership of the chain"
	}
	c.logf(slog.LevelError, msg, attrU("epoch", c.rec.Epoch), attrE(fate.Cause))
	if fate.Deposed == nil {
		c.closeEr = append(c.closeEr, fate.Cause)
	}
}

// stop ends the core: every worker still out is cancelled, and Ready
// reports Stopped.
func (c *Core) stop() {
	if c.phase == phaseStopped {
		return
	}
	for _, up := range c.sortedUploads() {
		if up.durable && up.puts > 0 {
			// Durable at W, its straggling copies abandoned: counted
			// under-replicated now, as their results will not be.
			c.noteUnderReplicated(up.id)
		}
		c.cancel(up)
	}
	c.phase = phaseStopped
	c.rd.Stopped = true
}
