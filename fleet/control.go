package fleet

import (
	"sort"
	"time"
)

// The controller's core: what a member should do with its stars, decided
// from a view of the fleet and of its own stars, with time as an argument.
// It does no I/O and starts nothing; the node (node.go) builds the view,
// runs the actions and reports their outcomes.

// localState is where a star stands in this member.
type localState uint8

const (
	starIdle    localState = iota // not held
	starOpening                   // loglet.Open running
	starOpen                      // held and serving
	starClosing                   // Close running
	// starStandby: claimed (and its config prepared) while another member
	// still leads it and closes it; opened as soon as that lead goes.
	starStandby
)

// local is one of this member's stars as the controller sees it.
type local struct {
	state   localState
	deposed bool // a successor sealed or took a chain of it (Stats.Deposed)
}

// view is the input of one decision.
type view struct {
	self   string
	owners map[string]string          // placement: star -> member
	leads  map[string]map[string]Lead // published leads: star -> member -> lead
	claims map[string][]string        // live members opening a star (their claims): star -> members
	local  map[string]local           // this member's stars (absent: idle)
}

// actionKind says what to do with a star.
type actionKind uint8

const (
	actOpen  actionKind = iota + 1 // loglet.Open it, then publish the lead
	actClose                       // withdraw nothing yet: Close it, then delete the lead
	// actStandby: claim it (unless another member claims it) and prepare
	// its config while another member's lead of it is still there.
	actStandby
	actUnclaim // a star in standby placed elsewhere: withdraw the claim
)

func (k actionKind) String() string {
	switch k {
	case actOpen:
		return "open"
	case actClose:
		return "close"
	case actStandby:
		return "standby"
	case actUnclaim:
		return "unclaim"
	}
	return "?"
}

type action struct {
	kind actionKind
	star string
	// fence: an open that may depose a live owner (HandoffWait ran out).
	// Without it, the node refuses an epoch a live member owns
	// (loglet.Config.RefuseLiveOwner) and the open fails, to be retried;
	// an epoch a crashed member left is taken over either way.
	fence bool
}

// controller keeps what one decision leaves for the next: since when a
// star placed here has waited for another member's lead to go, and when a
// failed open may be tried again.
type controller struct {
	handoffWait time.Duration
	waiting     map[string]time.Time // star -> first seen led elsewhere while placed here
	retry       map[string]retry
}

type retry struct {
	at      time.Time
	backoff time.Duration
}

const (
	minRetry = 100 * time.Millisecond
	maxRetry = 5 * time.Second
)

func newController(handoffWait time.Duration) *controller {
	return &controller{handoffWait: handoffWait, waiting: map[string]time.Time{}, retry: map[string]retry{}}
}

// step decides the actions for now, in star order, and the time of the
// next decision the view alone would not trigger (zero: none).
//
// The rules, for each star:
//   - held here (open) but placed elsewhere, or deposed: close it;
//   - placed here and idle: open it, unless another member publishes a
//     lead of it or claims it (it is opening the star: placement moved
//     while it did, as when members join together), in which case wait
//     for that lead or claim to go (the old owner's clean close deletes
//     the lead, a claim turns into a lead or goes when the open fails, a
//     crashed owner's lease takes both; a claim whose member is no longer
//     live is not in the view); while only a lead is there, stand by
//     meanwhile: claim the star and prepare its config, so the open that
//     follows the lead's withdrawal is loglet.Open alone;
//   - in standby: withdraw the claim if the star is placed elsewhere now,
//     else open it by the same rule as an idle star's; a failed
//     open (one refused because a live member still owns the epoch) is
//     retried after a backoff (100ms doubling to 5s); handoffWait after the
//     star was first seen placed here, the open may depose (fence) a live
//     owner;
//   - opening or closing: nothing until it ends.
func (c *controller) step(now time.Time, v view) (acts []action, wake time.Time) {
	stars := make(map[string]bool, len(v.owners)+len(v.local))
	for s := range v.owners {
		stars[s] = true
	}
	for s := range v.local {
		stars[s] = true
	}
	names := make([]string, 0, len(stars))
	for s := range stars {
		names = append(names, s)
	}
	sort.Strings(names)
	soonest := func(t time.Time) {
		if wake.IsZero() || t.Before(wake) {
			wake = t
		}
	}
	for _, s := range names {
		mine := v.owners[s] == v.self
		l := v.local[s]
		if l.state == starStandby && !mine {
			acts = append(acts, action{kind: actUnclaim, star: s})
			delete(c.waiting, s)
			delete(c.retry, s)
			continue
		}
		if !mine || l.state == starOpen || l.state == starClosing {
			// The wait for a live owner is over, or starts afresh when the
			// star comes back (an open in flight keeps it: a refused open
			// is retried against the same deadline).
			delete(c.waiting, s)
		}
		switch l.state {
		case starOpen:
			if !mine || l.deposed {
				acts = append(acts, action{kind: actClose, star: s})
			}
			continue
		case starOpening, starClosing:
			continue
		}
		if !mine {
			delete(c.retry, s)
			continue
		}
		since, ok := c.waiting[s]
		if !ok {
			since = now
			c.waiting[s] = now
		}
		deadline := since.Add(c.handoffWait)
		if r, ok := c.retry[s]; ok && now.Before(r.at) {
			soonest(r.at)
			continue
		}
		led, claimed := ledElsewhere(v.leads[s], v.self), claimedElsewhere(v.claims[s], v.self)
		if (led || claimed) && now.Before(deadline) {
			if l.state == starIdle && led && !claimed {
				acts = append(acts, action{kind: actStandby, star: s})
			}
			soonest(deadline)
			continue
		}
		acts = append(acts, action{kind: actOpen, star: s, fence: !now.Before(deadline)})
	}
	return acts, wake
}

// opened records the outcome of an open: a failure backs off.
func (c *controller) opened(now time.Time, star string, ok bool) {
	if ok {
		delete(c.retry, star)
		delete(c.waiting, star)
		return
	}
	r := c.retry[star]
	r.backoff = min(max(2*r.backoff, minRetry), maxRetry)
	r.at = now.Add(r.backoff)
	c.retry[star] = r
}

func ledElsewhere(ls map[string]Lead, self string) bool {
	for name := range ls {
		if name != self {
			return true
		}
	}
	return false
}

func claimedElsewhere(members []string, self string) bool {
	for _, m := range members {
		if m != self {
			return true
		}
	}
	return false
}
