package loglet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/loglet/internal/chaincore"
	"github.com/flightlog/flightlog/loglet/internal/starcore"
	"github.com/flightlog/flightlog/loglet/internal/work"
	"github.com/flightlog/flightlog/metastore"
)

// Leadership: which chains this star holds. The decisions (the live-owner
// check, which chain to open next, retaking a chain lost while opening,
// whether this process still holds the first chain, what a failed opening
// abandons, taking back a chain lost while serving, what Close releases and
// in which order) are the leadership core's (loglet/internal/starcore);
// this file is its shell: it executes each request the core asks for with
// one call and steps the result back.

// maxChainRetakes bounds the takeovers of one later chain in an opening,
// or in a retake of a chain lost while serving.
const maxChainRetakes = 4

// newLeadership makes the star's leadership core: one chain per enabled
// class, Standard first (the first chain is the star's lock).
func (s *Star) newLeadership() (*starcore.Core, error) {
	var classes []starcore.Class
	for _, c := range chain.Classes() {
		if len(s.classConfig(c).Stores) > 0 {
			classes = append(classes, starcore.Class(c))
		}
	}
	return starcore.New(starcore.Config{
		Star: s.cfg.Star, Owner: s.cfg.Owner, Classes: classes,
		RefuseLiveOwner: s.cfg.RefuseLiveOwner, AllAtOnce: s.cfg.ExclusiveOpen, MaxTakeovers: maxChainRetakes,
		LostErr: ErrTakeoverLost, LiveErr: ErrLiveOwner,
	})
}

// openChains runs the leadership core's opening: it returns each chain's
// opening result (by class), the time the live-owner and hold checks'
// reads took (on the path, between the chains' openings), and the star's
// result. On failure every chain it started is stopped.
func (s *Star) openChains(ctx context.Context) ([2]chaincore.Opened, time.Duration, error) {
	var opened [2]chaincore.Opened
	var checks time.Duration // the reads of the live-owner and hold checks
	if err := s.lead.Open(); err != nil {
		return opened, checks, err
	}
	for {
		rd := s.lead.Ready()
		s.leadLogs(rd)
		if rd.Opened != nil {
			return opened, checks, rd.Opened.Err
		}
		if len(rd.Requests) == 0 {
			// Cannot happen: the core always has a request out until it
			// reports. Stop what was started rather than hang.
			s.crashLanes()
			return opened, checks, fmt.Errorf("loglet: the leadership stalled while %s", s.lead.Phase())
		}
		evs, took := s.runLead(ctx, rd.Requests, &opened)
		checks += took
		for _, ev := range evs {
			if err := s.lead.Step(ev); err != nil {
				s.crashLanes()
				return opened, checks, err
			}
		}
	}
}

// runLead executes one Ready's requests and returns their events, in the
// order asked, and the time the reads took if they were all reads.
// Reads (the live check's of every chain's record, the hold check's
// record and checkpoint) run at once: one round trip on the path of every
// handoff, not one each. Anything else runs in the order asked (abandons
// go last started first). opened (if not nil) receives each chain's
// opening result.
func (s *Star) runLead(ctx context.Context, reqs []starcore.Request, opened *[2]chaincore.Opened) ([]starcore.Event, time.Duration) {
	began := time.Now()
	evs := make([]starcore.Event, len(reqs))
	switch {
	case onlyReads(reqs):
		var wg sync.WaitGroup
		for i, r := range reqs {
			wg.Go(func() { evs[i] = s.execLead(ctx, r, nil) })
		}
		wg.Wait()
		return evs, time.Since(began)
	case onlyStarts(reqs):
		// Every chain taken over at once (a clean handoff): the lanes
		// are made here, one after the other, and their openings
		// awaited together.
		lanes := make([]*lane, len(reqs))
		for i, r := range reqs {
			lanes[i] = s.startLane(r.(starcore.StartChain))
		}
		var wg sync.WaitGroup
		var results [2]chaincore.Opened
		for i, r := range reqs {
			wg.Go(func() { evs[i] = s.awaitLane(ctx, r.(starcore.StartChain), lanes[i], &results) })
		}
		wg.Wait()
		if opened != nil {
			for _, r := range reqs {
				c := r.(starcore.StartChain).Class
				opened[c] = results[c]
			}
		}
	default:
		for i, r := range reqs {
			evs[i] = s.execLead(ctx, r, opened)
		}
	}
	return evs, 0
}

// onlyStarts reports whether every request starts a chain's opening.
func onlyStarts(rs []starcore.Request) bool {
	for _, r := range rs {
		if _, ok := r.(starcore.StartChain); !ok {
			return false
		}
	}
	return true
}

// onlyReads reports whether every request is a metastore read.
func onlyReads(rs []starcore.Request) bool {
	for _, r := range rs {
		switch r.(type) {
		case starcore.ReadEpoch, starcore.ReadCheckpoint:
		default:
			return false
		}
	}
	return true
}

// closeChains runs the leadership core's close (or crash): every chain
// closes at once, then what the host opened is released. It returns the
// close's result.
func (s *Star) closeChains(ctx context.Context, crash bool) error {
	start := s.lead.Close
	if crash {
		start = s.lead.Crash
	}
	if err := start(); err != nil {
		return err
	}
	for {
		rd := s.lead.Ready()
		s.leadLogs(rd)
		if rd.Closed != nil {
			return rd.Closed.Err
		}
		if len(rd.Requests) == 0 {
			return fmt.Errorf("loglet: the leadership stalled while %s", s.lead.Phase())
		}
		// The requests of one Ready are independent: run them at once
		// (both chains close together), step their events back in order.
		evs := make([]starcore.Event, len(rd.Requests))
		var wg sync.WaitGroup
		for i, r := range rd.Requests {
			wg.Add(1)
			go func() {
				defer wg.Done()
				evs[i] = s.execLead(ctx, r, nil)
			}()
		}
		wg.Wait()
		for _, ev := range evs {
			if err := s.lead.Step(ev); err != nil {
				return err
			}
		}
	}
}

// execLead executes one of the leadership core's requests: one call, one
// event back. opened receives each chain's opening result.
func (s *Star) execLead(ctx context.Context, r starcore.Request, opened *[2]chaincore.Opened) starcore.Event {
	switch r := r.(type) {
	case starcore.ReadEpoch:
		var rec chain.EpochRecord
		var err error
		if s.lead.Phase() == "live-check" {
			// The live-owner check's read is the chain's first too: read
			// its checkpoint with it and hand both to its opening.
			found := work.ReadEpochAndCheckpoint(ctx, s.cfg.Meta, s.cfg.Star, Class(r.Class))
			s.found[r.Class] = &found
			rec, err = found.Record, found.Err
		} else {
			rec, _, err = chain.ReadEpoch(ctx, s.cfg.Meta, s.cfg.Star, Class(r.Class))
		}
		if errors.Is(err, metastore.ErrNotFound) {
			return starcore.EpochRead{Class: r.Class, Missing: true}
		}
		ev := starcore.EpochRead{Class: r.Class, Err: err,
			Record: starcore.EpochRecord{Epoch: rec.Epoch, Owner: rec.Owner}}
		if rec.Seal != nil {
			ev.Record.Sealed, ev.Record.SealEpoch = true, rec.Seal.Epoch
		}
		return ev
	case starcore.ReadCheckpoint:
		cp, _, err := absorb.ReadCheckpoint(ctx, s.cfg.Meta, s.cfg.Star, Class(r.Class))
		return starcore.CheckpointRead{Class: r.Class, Owner: cp.Owner, OwnerEpoch: cp.OwnerEpoch, Err: err}
	case starcore.StartChain:
		return s.awaitLane(ctx, r, s.startLane(r), opened)
	case starcore.Abandon:
		// A retake's lane that failed to open goes; otherwise the class's
		// lane (while serving, the lost one: it stays the class's lane,
		// refusing appends as deposed, until the retake's lane opens).
		if l := s.retaking[r.Class]; l != nil {
			s.retaking[r.Class] = nil
			l.crash()
		} else if l := s.lane(Class(r.Class)); l != nil {
			l.crash()
		}
		return starcore.Abandoned{Class: r.Class}
	case starcore.CloseChain:
		var err error
		if l := s.lane(Class(r.Class)); l != nil {
			err = l.close(ctx)
		}
		return starcore.ChainClosed{Class: r.Class, Err: err}
	case starcore.ReleaseHost:
		return starcore.HostReleased{Errs: s.releaseAll()}
	}
	return nil // a request this shell does not know: Step refuses a nil event
}

// startLane makes the lane of r's class, whose chain core starts its
// opening (refusing a live owner if the star does, unless r is a retake
// that deposes the rival), from what the live check read of it if it did.
func (s *Star) startLane(r starcore.StartChain) *lane {
	c := Class(r.Class)
	// The live check's read of this chain starts its first opening (a
	// retake reads afresh).
	found := s.found[c]
	s.found[c] = nil
	if r.Attempt > 1 {
		found = nil
	}
	l := newLane(s, c, *s.classConfig(c), s.cfg.RefuseLiveOwner && !r.Depose, found)
	if s.serving {
		// A retake while serving: the streams keep the lost lane until
		// this one opens (awaitLane swaps it in). A stream bound to it
		// before then would start from no tail.
		s.retaking[c] = l
	} else {
		s.lanes[c].Store(l)
	}
	return l
}

// awaitLane waits for l's opening and steps its result back; opened
// receives it.
func (s *Star) awaitLane(ctx context.Context, r starcore.StartChain, l *lane, opened *[2]chaincore.Opened) starcore.Event {
	o, err := l.awaitOpen(ctx)
	if opened != nil {
		opened[Class(r.Class)] = o
	}
	switch {
	case err == nil:
		if s.retaking[r.Class] == l {
			s.retaking[r.Class] = nil
			s.swapLane(Class(r.Class), l)
		}
		if o.TakeOver {
			l.log.Info("took over", "from_epoch", o.PrevEpoch, "from_owner", o.PrevOwner, "epoch", o.Epoch, "cut", o.FencedCut, "clean", o.Clean, "walked_slots", o.Walked, "took", o.Took, "steps", stepsString(o.Steps))
		}
		return starcore.ChainOpened{Class: r.Class, Outcome: starcore.OutcomeOpened, Epoch: o.Epoch}
	case errors.Is(err, chaincore.ErrTakeoverLost):
		return starcore.ChainOpened{Class: r.Class, Outcome: starcore.OutcomeLost, Err: err}
	case errors.Is(err, chaincore.ErrLiveOwner):
		return starcore.ChainOpened{Class: r.Class, Outcome: starcore.OutcomeLiveOwner, Err: err}
	}
	return starcore.ChainOpened{Class: r.Class, Outcome: starcore.OutcomeFailed, Err: err}
}

// stepsString formats where an opening's time went: "seal=2ms mint=31ms …".
func stepsString(steps []chaincore.StepTook) string {
	var b strings.Builder
	for i, st := range steps {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%v", strings.ReplaceAll(st.Step, " ", "_"), st.Took.Round(100*time.Microsecond))
	}
	return b.String()
}

// leadLogs emits the leadership core's logs.
func (s *Star) leadLogs(rd starcore.Ready) {
	for _, l := range rd.Logs {
		s.log.Info(l.Msg, l.KV...)
	}
}

// crashLanes stops every lane started, as a dying process does.
func (s *Star) crashLanes() {
	for i := range s.lanes {
		if l := s.lanes[i].Load(); l != nil {
			l.crash()
		}
	}
}

// A later chain lost while serving (issue 28). A rival that passed its
// live-owner check can take a later chain over after this process's last
// hold check; its own check then fails and it gives the chain up, but
// this process's lane of that chain is deposed. The leadership core takes
// it back while this process holds the star's first chain
// (starcore.Core.ChainLost); watchChains is that part of its shell. It
// runs from a successful Open until Close (stopLeadership), and owns the
// core meanwhile: a lane that stops serving wakes it (chainStopped), it
// reports every held chain whose lane a successor deposed, and carries
// out what the core asks until it serves again, through the same
// requests as the opening (the hold check, the lost lane abandoned, the
// chain's takeover with StartChain.Depose). The new lane is swapped in
// under the catalogue's lock once it opened (swapLane); an append that
// raced the swap is admitted to the new lane (submitFencing looks again)
// or refused by the lost one as not committed, never acked by it.

// startLeadership starts watchChains, once the opening succeeded. Not
// with Config.ExclusiveOpen: the host keeps rivals out, so a chain lost
// while serving means the host moved the star (a fleet member whose claim
// lapsed while it was cut off, whose successor takes the chains over at
// once): taking one back would have a member the host deposed lead a
// chain again, and ack on it, until its hold check fails.
func (s *Star) startLeadership() {
	s.serving = true
	if s.cfg.ExclusiveOpen {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.leadStop = cancel
	s.leadDone = make(chan struct{})
	go s.watchChains(ctx)
	s.chainStopped() // a chain may have been deposed while the opening ended
}

// stopLeadership ends watchChains (a retake under way is abandoned: its
// takeover's context ends) and waits for it: the core is then Close's.
func (s *Star) stopLeadership() {
	if s.leadStop == nil {
		return
	}
	s.leadStop()
	<-s.leadDone
}

// chainStopped wakes watchChains: a lane stopped serving. It never
// blocks (a wake-up pending covers this one: watchChains looks at every
// lane).
func (s *Star) chainStopped() {
	if s.leadKick == nil {
		return
	}
	select {
	case s.leadKick <- struct{}{}:
	default:
	}
}

// watchChains reports the chains lost while serving until ctx ends.
func (s *Star) watchChains(ctx context.Context) {
	defer close(s.leadDone)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.leadKick:
		}
		s.takeBackLost(ctx)
	}
}

// takeBackLost reports to the core each chain it holds whose lane a
// successor deposed, and runs what the core asks until it serves again.
func (s *Star) takeBackLost(ctx context.Context) {
	for lost := true; lost && ctx.Err() == nil; {
		lost = false
		for _, c := range chain.Classes() {
			l := s.lane(c)
			if l == nil {
				continue
			}
			f := l.deadFate()
			if f == nil || (f.Deposed == nil && !errors.Is(f.Cause, chaincore.ErrDeposed)) {
				continue
			}
			if _, held := s.lead.Holds(starcore.Class(c)); !held {
				continue
			}
			if err := s.lead.ChainLost(starcore.Class(c), f.Cause); err != nil {
				s.log.Warn("the leadership refused a lost chain", "star", s.cfg.Star, "class", c.String(), "err", err)
				continue
			}
			s.runUntilServing(ctx)
			lost = true
		}
	}
}

// runUntilServing executes the core's requests until it asks nothing
// more (it serves again). A retake's lane that did not open is stopped.
func (s *Star) runUntilServing(ctx context.Context) {
	for {
		rd := s.lead.Ready()
		s.leadLogs(rd)
		if len(rd.Requests) == 0 {
			break
		}
		evs, _ := s.runLead(ctx, rd.Requests, nil)
		for _, ev := range evs {
			if err := s.lead.Step(ev); err != nil {
				// A bug of the shell: the core changed nothing; the
				// lost chain stays unheld.
				s.log.Error("the leadership refused an event", "star", s.cfg.Star, "err", err)
			}
		}
	}
	for c, l := range s.retaking {
		if l != nil {
			s.retaking[c] = nil
			l.crash()
		}
	}
}

// swapLane makes l class c's lane: every cached stream of the class is
// bound to it afresh (its state in l's core, which read the tails as it
// took the chain over), and the read sessions waiting on the lost lane
// wake to follow the new binding. Under s.mu, as every cache insert: a
// lookup caches either before (and is rebound here) or after (and binds
// to l).
func (s *Star) swapLane(c Class, l *lane) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lanes[c].Store(l)
	l.mu.Lock()
	for name, st := range s.streams {
		if st.class != c {
			continue
		}
		s.streams[name] = &streamState{name: st.name, id: st.id, class: c, lane: l, core: l.core.Stream(st.id), gone: make(chan struct{})}
		st.dropped()
	}
	l.mu.Unlock()
}
