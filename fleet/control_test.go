package fleet

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// fmtActs renders actions as "open a, open! b, close c" (open!: without
// waiting for a release).
func fmtActs(acts []action) string {
	var b strings.Builder
	for i, a := range acts {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(a.kind.String())
		if a.fence {
			b.WriteString("!")
		}
		b.WriteString(" " + a.star)
	}
	return b.String()
}

func leadsOf(pairs ...string) map[string]map[string]Lead {
	out := map[string]map[string]Lead{}
	for _, p := range pairs {
		star, m, _ := strings.Cut(p, "@")
		if out[star] == nil {
			out[star] = map[string]Lead{}
		}
		out[star][m] = Lead{Member: Member{Name: m}, Epoch: 1}
	}
	return out
}

// TestControllerDecisions runs the controller's rules over fake member sets,
// without etcd: each step gives the view at a time and the actions wanted.
func TestControllerDecisions(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const wait = 5 * time.Second
	type step struct {
		at     time.Duration
		owners map[string]string
		leads  map[string]map[string]Lead
		claims map[string][]string // live members opening a star
		local  map[string]local
		opened map[string]bool // outcomes reported before the step
		want   string
		wake   time.Duration // -1: none
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"fresh-fleet-opens-at-once", []step{
			{owners: map[string]string{"a": "me", "b": "other", "c": "me"}, want: "open a, open c", wake: -1},
		}},
		{"placed-elsewhere-closes", []step{
			{owners: map[string]string{"a": "other"}, leads: leadsOf("a@me"), local: map[string]local{"a": {state: starOpen}}, want: "close a", wake: -1},
		}},
		{"in-flight-waits", []step{
			{owners: map[string]string{"a": "other", "b": "me"}, local: map[string]local{"a": {state: starClosing}, "b": {state: starOpening}}, want: "", wake: -1},
		}},
		{"deposed-closes-then-reopens", []step{
			{owners: map[string]string{"a": "me"}, local: map[string]local{"a": {state: starOpen, deposed: true}}, want: "close a", wake: -1},
			{owners: map[string]string{"a": "me"}, want: "open a", wake: -1},
		}},
		{"planned-move-waits-for-release", []step{
			// Led elsewhere: stand by (claim, prepare) while the old
			// owner closes it.
			{owners: map[string]string{"a": "me"}, leads: leadsOf("a@old"), want: "standby a", wake: wait},
			{at: time.Second, owners: map[string]string{"a": "me"}, leads: leadsOf("a@old"), local: map[string]local{"a": {state: starStandby}}, want: "", wake: wait},
			// The old owner's Close deleted its lead: open, no fence.
			{at: 2 * time.Second, owners: map[string]string{"a": "me"}, local: map[string]local{"a": {state: starStandby}}, want: "open a", wake: -1},
		}},
		{"standby-placed-away-unclaims", []step{
			{owners: map[string]string{"a": "me"}, leads: leadsOf("a@old"), want: "standby a", wake: wait},
			{at: time.Second, owners: map[string]string{"a": "old"}, leads: leadsOf("a@old"), local: map[string]local{"a": {state: starStandby}}, want: "unclaim a", wake: -1},
			{at: 2 * time.Second, owners: map[string]string{"a": "old"}, leads: leadsOf("a@old"), local: map[string]local{"a": {state: starClosing}}, want: "", wake: -1},
		}},
		{"no-standby-while-another-claims", []step{
			// Another member is opening it (its claim): wait for it
			// without a claim of our own.
			{owners: map[string]string{"a": "me"}, leads: leadsOf("a@old"), claims: map[string][]string{"a": {"first"}}, want: "", wake: wait},
		}},
		{"release-late-opens-after-handoff-wait", []step{
			{owners: map[string]string{"a": "me"}, leads: leadsOf("a@old"), want: "standby a", wake: wait},
			{at: wait - time.Millisecond, owners: map[string]string{"a": "me"}, leads: leadsOf("a@old"), local: map[string]local{"a": {state: starStandby}}, want: "", wake: wait},
			{at: wait, owners: map[string]string{"a": "me"}, leads: leadsOf("a@old"), local: map[string]local{"a": {state: starStandby}}, want: "open! a", wake: -1},
		}},
		{"crash-lease-gone-opens-at-once", []step{
			{owners: map[string]string{"a": "me"}, want: "open a", wake: -1},
		}},
		{"own-stale-lead-does-not-block", []step{
			{owners: map[string]string{"a": "me"}, leads: leadsOf("a@me"), want: "open a", wake: -1},
		}},
		{"placed-away-while-waiting-forgets-the-wait", []step{
			{owners: map[string]string{"a": "me"}, leads: leadsOf("a@old"), want: "standby a", wake: wait},
			{at: time.Second, owners: map[string]string{"a": "old"}, leads: leadsOf("a@old"), local: map[string]local{"a": {state: starStandby}}, want: "unclaim a", wake: -1},
			// Back again: the wait starts over.
			{at: 2 * time.Second, owners: map[string]string{"a": "me"}, leads: leadsOf("a@old"), want: "standby a", wake: 2*time.Second + wait},
		}},
		{"failed-open-backs-off", []step{
			{owners: map[string]string{"a": "me"}, want: "open a", wake: -1},
			{at: 10 * time.Millisecond, opened: map[string]bool{"a": false}, owners: map[string]string{"a": "me"}, want: "", wake: 110 * time.Millisecond},
			{at: 110 * time.Millisecond, owners: map[string]string{"a": "me"}, want: "open a", wake: -1},
			{at: 120 * time.Millisecond, opened: map[string]bool{"a": false}, owners: map[string]string{"a": "me"}, want: "", wake: 320 * time.Millisecond},
			{at: 320 * time.Millisecond, owners: map[string]string{"a": "me"}, want: "open a", wake: -1},
			{at: 330 * time.Millisecond, opened: map[string]bool{"a": true}, owners: map[string]string{"a": "me"}, local: map[string]local{"a": {state: starOpen}}, want: "", wake: -1},
		}},
		{"refused-until-handoff-wait-then-deposes", []step{
			// The old owner is still opening (no lead yet): the open is
			// refused for its live epoch, retried, and may depose once
			// the handoff wait has run out.
			{owners: map[string]string{"a": "me"}, want: "open a", wake: -1},
			{at: 500 * time.Millisecond, owners: map[string]string{"a": "me"}, local: map[string]local{"a": {state: starOpening}}, want: "", wake: -1},
			{at: time.Second, opened: map[string]bool{"a": false}, owners: map[string]string{"a": "me"}, want: "", wake: time.Second + 100*time.Millisecond},
			{at: 1100 * time.Millisecond, owners: map[string]string{"a": "me"}, want: "open a", wake: -1},
			{at: 1500 * time.Millisecond, owners: map[string]string{"a": "me"}, local: map[string]local{"a": {state: starOpening}}, want: "", wake: -1},
			{at: 1600 * time.Millisecond, opened: map[string]bool{"a": false}, owners: map[string]string{"a": "me"}, want: "", wake: 1800 * time.Millisecond},
			{at: 2 * time.Second, owners: map[string]string{"a": "me"}, leads: leadsOf("a@old"), want: "standby a", wake: wait},
			{at: wait, owners: map[string]string{"a": "me"}, leads: leadsOf("a@old"), local: map[string]local{"a": {state: starStandby}}, want: "open! a", wake: -1},
			{at: wait + time.Second, opened: map[string]bool{"a": true}, owners: map[string]string{"a": "me"}, local: map[string]local{"a": {state: starOpen}}, want: "", wake: -1},
			// Placed away and back: a fresh wait.
			{at: wait + 2*time.Second, owners: map[string]string{"a": "old"}, local: map[string]local{"a": {state: starOpen}}, want: "close a", wake: -1},
			{at: wait + 3*time.Second, owners: map[string]string{"a": "me"}, leads: leadsOf("a@old"), want: "standby a", wake: 2*wait + 3*time.Second},
		}},
		{"cold-start-waits-for-a-claim", []step{
			// Members joined together: the star was placed on "first"
			// alone, which claimed it and is opening it; placed here now,
			// the claim is waited for like a lead, not fenced.
			{owners: map[string]string{"a": "me"}, claims: map[string][]string{"a": {"first"}}, want: "", wake: wait},
			// Its open ended: the claim became its lead; stand by.
			{at: time.Second, owners: map[string]string{"a": "me"}, leads: leadsOf("a@first"), want: "standby a", wake: wait},
			// Its clean close withdrew the lead: open, no fence.
			{at: 2 * time.Second, owners: map[string]string{"a": "me"}, local: map[string]local{"a": {state: starStandby}}, want: "open a", wake: -1},
		}},
		{"claim-gone-without-lead-opens", []step{
			// The claimer's open failed (or its session ended: the view
			// holds no claim of a member that is not live).
			{owners: map[string]string{"a": "me"}, claims: map[string][]string{"a": {"first"}}, want: "", wake: wait},
			{at: time.Second, owners: map[string]string{"a": "me"}, want: "open a", wake: -1},
		}},
		{"claim-held-past-handoff-wait-deposes", []step{
			{owners: map[string]string{"a": "me"}, claims: map[string][]string{"a": {"first"}}, want: "", wake: wait},
			{at: wait, owners: map[string]string{"a": "me"}, claims: map[string][]string{"a": {"first"}}, want: "open! a", wake: -1},
		}},
		{"own-claim-does-not-block", []step{
			{owners: map[string]string{"a": "me"}, claims: map[string][]string{"a": {"me"}}, want: "open a", wake: -1},
		}},
		{"no-members-closes-everything", []step{
			{owners: map[string]string{}, local: map[string]local{"a": {state: starOpen}, "b": {state: starOpen}}, want: "close a, close b", wake: -1},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newController(wait)
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				for star, ok := range s.opened {
					c.opened(now, star, ok)
				}
				acts, wake := c.step(now, view{self: "me", owners: s.owners, leads: s.leads, claims: s.claims, local: s.local})
				got := fmtActs(acts)
				wantWake := time.Time{}
				if s.wake >= 0 {
					wantWake = t0.Add(s.wake)
				}
				if got != s.want || !wake.Equal(wantWake) {
					t.Fatalf("step %d at %v: got [%s] wake %s, want [%s] wake %s", i, s.at, got, fmtWake(t0, wake), s.want, fmtWake(t0, wantWake))
				}
			}
		})
	}
}

func fmtWake(t0, w time.Time) string {
	if w.IsZero() {
		return "none"
	}
	return fmt.Sprint(w.Sub(t0))
}
