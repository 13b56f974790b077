package chaincore

import (
	"errors"
	"fmt"

	objstore "github.com/flightlog/flightlog/objstore/objval"
)

// refusedForGood ends a succession whose step failed because a bucket
// refuses for good (objstore.ErrPermanent: a missing bucket, wrong
// credentials, in the fence, the walk or the tails read): retrying the
// step cannot cure a misconfiguration, so an opening fails with the cause
// and a recovery stops the chain, its unacked batches outcome-unknown (the
// fence did not decide them), the cause naming the step and the bucket.
// Stopping is always safe: whoever opens the chain next fences it. It
// reports whether it ended the succession.
func (s *succession) refusedForGood(c *Core, what string, err error) bool {
	if err == nil || !errors.Is(err, objstore.ErrPermanent) {
		return false
	}
	cause := fmt.Errorf("%w: %s/%s: %s of epoch %d refused for good: %w", ErrHalted, c.cfg.Star, c.cfg.Class, what, s.prev.Epoch, err)
	if c.phase == phaseOpening {
		c.failOpen(cause)
		return true
	}
	c.stats.haltCause = cause.Error()
	c.die(Fate{Kind: OutcomeUnknown, Cause: cause})
	return true
}
