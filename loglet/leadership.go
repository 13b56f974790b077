package loglet

import (
	"context"
	"errors"
	"fmt"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/loglet/internal/chaincore"
	"github.com/flightlog/flightlog/metastore"
)

// Leadership: which chains this star holds. Open mints or takes over one
// chain per enabled class, retakes a chain lost while opening, and checks
// that this process still holds a chain before it serves from it.

// openChains opens the star's chains one after the other, Standard first.
// The first chain is the star's lock: a candidate that loses its takeover
// stops there. A later chain lost to a rival is taken again while this
// process still holds the first (the rival, deposed from it, gives up when
// it checks), and the opening fails if a rival took the first meanwhile.
// So two processes opening one star at once end with one of them holding
// every chain, not with each holding one.
func (s *Star) openChains(ctx context.Context) ([2]chaincore.Opened, error) {
	var opened [2]chaincore.Opened
	var first Class
	haveFirst, chains := false, 0
	for _, c := range chain.Classes {
		cc := s.classConfig(c)
		if len(cc.Buckets) == 0 {
			continue
		}
		chains++
		for attempt := 1; ; attempt++ {
			l := newLane(s, c, *cc)
			s.lanes[c] = l
			o, err := l.awaitOpen(ctx)
			opened[c] = o
			if err == nil {
				break
			}
			if !haveFirst || !errors.Is(err, chaincore.ErrTakeoverLost) || attempt >= maxChainRetakes {
				return opened, s.openError(c, err)
			}
			held, herr := s.holds(ctx, first, opened[first].Epoch)
			if herr != nil || !held {
				return opened, errors.Join(s.openError(c, err), herr)
			}
			l.crash()
			s.lanes[c] = nil
			s.log.Info("lost a chain's takeover to a rival while holding the star's first chain; taking it again",
				"star", s.cfg.Star, "class", c.String(), "first", first.String(), "attempt", attempt, "err", err)
		}
		if o := opened[c]; o.TakeOver {
			s.lanes[c].log.Info("took over", "from_epoch", o.PrevEpoch, "from_owner", o.PrevOwner, "epoch", o.Epoch, "cut", o.FencedCut, "clean", o.Clean, "walked_slots", o.Walked, "took", o.Took)
		}
		if !haveFirst {
			first, haveFirst = c, true
		}
	}
	if chains > 1 {
		held, err := s.holds(ctx, first, opened[first].Epoch)
		if err != nil {
			return opened, fmt.Errorf("loglet: check the %s chain is still ours: %w", first, err)
		}
		if !held {
			return opened, fmt.Errorf("%w: %s: a rival took the chain over while this process opened the others", ErrTakeoverLost, first)
		}
	}
	return opened, nil
}

// maxChainRetakes bounds the takeovers of one later chain in an opening.
const maxChainRetakes = 4

// holds reports whether this process still leads chain c at epoch: the
// epoch record is its, and the checkpoint carries no candidate's seal.
func (s *Star) holds(ctx context.Context, c Class, epoch uint64) (bool, error) {
	rec, _, err := chain.ReadEpoch(ctx, s.cfg.Meta, s.cfg.Star, c)
	if err != nil {
		return false, err
	}
	if rec.Epoch != epoch || rec.Owner != s.cfg.Owner {
		return false, nil
	}
	cp, _, err := absorb.ReadCheckpoint(ctx, s.cfg.Meta, s.cfg.Star, c)
	if err != nil {
		return false, err
	}
	return cp.Owner == s.cfg.Owner && cp.OwnerEpoch == epoch, nil
}

// openError turns a chain's opening failure into the loglet's error.
func (s *Star) openError(c Class, err error) error {
	switch {
	case errors.Is(err, chaincore.ErrTakeoverLost):
		return fmt.Errorf("%w: %s: %v", ErrTakeoverLost, c, err)
	case errors.Is(err, chaincore.ErrLiveOwner):
		return fmt.Errorf("%w: %s: %v", ErrLiveOwner, c, err)
	}
	return err
}

// checkLiveOwner fails with ErrLiveOwner if chain c's current epoch has a
// live owner other than this process (see Config.RefuseLiveOwner).
func (s *Star) checkLiveOwner(ctx context.Context, c Class) error {
	rec, _, err := chain.ReadEpoch(ctx, s.cfg.Meta, s.cfg.Star, c)
	if errors.Is(err, metastore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if chaincore.LiveOwner(rec, s.cfg.Owner) {
		return fmt.Errorf("%w: %s/%s is at epoch %d, owned by %q and not sealed cleanly (it is running, or it crashed without a clean Close)", ErrLiveOwner, s.cfg.Star, c, rec.Epoch, rec.Owner)
	}
	return nil
}
