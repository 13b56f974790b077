package fleet

import (
	"encoding/json"
	"fmt"
	"math"
)

// Member is one process of the fleet, as it joins and as the others see it.
type Member struct {
	// Name identifies the member: 1-64 of [a-z0-9._-], unique in the
	// fleet while it is a member. It names the member's keys in etcd.
	Name string `json:"name"`
	// Addr is where the member's host takes traffic (a URL or host:port:
	// the fleet only passes it on, for routing).
	Addr string `json:"addr"`
	// Weight is the member's capacity for placement: its share of the
	// stars tends to Weight over the sum of the members' weights. 0 means
	// 1; negative is refused.
	Weight float64 `json:"weight,omitempty"`
}

func (m Member) weight() float64 {
	if m.Weight == 0 {
		return 1
	}
	return m.Weight
}

// validate reports a member Join cannot publish.
func (m Member) validate() error {
	if err := checkName("member name", m.Name); err != nil {
		return err
	}
	if m.Weight < 0 || math.IsNaN(m.Weight) || math.IsInf(m.Weight, 0) {
		return fmt.Errorf("fleet: member %q: weight %v must be a finite number >= 0", m.Name, m.Weight)
	}
	return nil
}

// checkName accepts 1-64 of [a-z0-9._-], the alphabet of star names, so a
// name is one key segment.
func checkName(what, s string) error {
	if len(s) == 0 || len(s) > 64 {
		return fmt.Errorf("fleet: %s %q: want 1-64 of [a-z0-9._-]", what, s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("fleet: %s %q: byte %q is outside [a-z0-9._-]", what, s, c)
		}
	}
	return nil
}

// Lead is what a member publishes for each star it leads: who, and at which
// epoch of the star's first chain (Standard, or Express when Standard is
// disabled: the chain whose epoch is the star's lock). A route whose epoch
// is below the one in the star's epoch record is stale.
type Lead struct {
	Member Member `json:"member"`
	Epoch  uint64 `json:"epoch"`
}

// memberRecord is a member's key's value: the Member, and the Owner its
// stars' epoch records name (loglet.Config.Owner), so another member can
// tell an epoch owned by a live member from one a crashed member left.
type memberRecord struct {
	Member
	Owner string `json:"owner,omitempty"`
}

func decodeMember(b []byte) (memberRecord, error) {
	var m memberRecord
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("fleet: member record is corrupt: %v", err)
	}
	return m, nil
}

func decodeLead(b []byte) (Lead, error) {
	var l Lead
	if err := json.Unmarshal(b, &l); err != nil {
		return l, fmt.Errorf("fleet: lead record is corrupt: %v", err)
	}
	return l, nil
}
