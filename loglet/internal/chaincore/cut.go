package chaincore

import (
	"log/slog"
	"time"

	absorb "github.com/flightlog/flightlog/absorb/absorbval"
	"github.com/flightlog/flightlog/envelope"
)

// flight is a cut, claimed slot, kept until its release or failure. A halt
// recovery may move it to a slot of the next epoch (republish).
type flight struct {
	epoch, slot uint64 // where it is written now (changes on republish)
	pos         uint64 // claim position: its backlog token
	batches     []*Batch
	charge      int64 // pool bytes it held (the backlog counts these)
	payload     int64 // record bytes
	up          *upload
	// As rendered for (epoch, slot): what the absorb records.
	key       string
	frames    []envelope.FrameInfo
	renderErr error // the flight cannot be rendered: it can never be written
	released  bool  // acked (only out of order under a planted bug)
	trace     *FlightTrace
	objBytes  int64 // the rendered object's size (one copy)
}

// rediagnose is how often a stall's cause is re-examined while it lasts.
const rediagnose = 100 * time.Millisecond

// slowCommit is the commit duration past which a stall is blamed on the
// metastore rather than on the absorb's pace.
const slowCommit = time.Second

// claimNeed is the backlog bytes one more flight may need.
func (c *Core) claimNeed() int64 { return max(c.cfg.FlightBytes, c.cfg.MaxBatchBytes) }

// cutAndClaim is the one loop that cuts flights and claims their slots, so
// cut order is slot order (invariant 3). A flight is cut once FlightBytes
// are pooled, once the oldest pooled byte has waited FlushDeadline, or at
// once while closing; it is claimed only with window space and backlog
// room (at the backlog's bound, the wait is a stall with a cause). While a
// halt is recovered from nothing is claimed: batches wait in the pool and
// go out in the next epoch.
func (c *Core) cutAndClaim() {
	for c.phase == phaseServing {
		bytes, n := c.pool.Queued()
		if n == 0 {
			c.backlog.EndStall(c.now)
			return
		}
		due := c.closing || bytes >= c.cfg.FlightBytes
		if !due {
			oldest, _ := c.pool.Oldest()
			due = !c.now.Before(oldest.Add(c.cfg.FlushDeadline))
		}
		if !due || !c.window.CanClaim() {
			return
		}
		// Closing lifts the backlog's bound: admission is over, so the
		// backlog grows by at most what is pooled, and what was admitted
		// is flushed and acked even while the metastore is down.
		if !c.closing && !c.backlog.Fits(c.claimNeed()) {
			if c.backlog.Stall(c.diagnose(), c.now) {
				flights, bytes := c.backlog.Len()
				c.logf(slog.LevelWarn, "backlog full: publishes blocked", attrS("cause", c.diagnose().String()), attrI("flights", flights), slog.Int64("bytes", bytes))
			}
			return
		}
		c.backlog.EndStall(c.now)
		c.claim()
	}
}

// claim claims the next slot for a flight cut from the pool and starts its
// upload.
func (c *Core) claim() {
	slot, err := c.window.Claim()
	if err != nil {
		panic("leader: claim without window space: " + err.Error())
	}
	shape := newBundleShape(c.cfg.Frames)
	oldest, _ := c.pool.Oldest()
	bytes, _ := c.pool.Queued()
	items, charge := c.pool.Cut(c.cfg.FlightBytes, 0, shape.add)
	c.rd.PoolFreed += charge
	c.claims++
	f := &flight{epoch: c.rec.Epoch, slot: slot, pos: c.claims, batches: items, charge: charge}
	f.trace = &FlightTrace{Epoch: f.epoch, Slot: slot, Oldest: oldest, BySize: bytes >= c.cfg.FlightBytes, Claimed: c.now}
	for _, b := range items {
		f.payload += int64(len(b.Payload))
		b.Flight = f.trace
	}
	c.flights = append(c.flights, f)
	c.backlog.Add(f.pos, f.charge, c.now)
	c.startUpload(f)
}

// diagnose names the cause of a backlog stall.
func (c *Core) diagnose() absorb.StallCause {
	if c.phase == phaseRecovering || c.phase == phaseOpening {
		return absorb.CauseEpochSettling
	}
	if c.ab.lastFailed || (c.ab.busy && c.now.Sub(c.ab.commitStart) > slowCommit) {
		return absorb.CauseMetastoreSlow
	}
	return absorb.CauseAbsorbLagging
}
