package fleet

import (
	"math"
	"runtime"
	"sort"
	"sync"

	"github.com/cespare/xxhash/v2"
)

// Place assigns every star to one of members by weighted rendezvous
// (highest-random-weight) hashing: each (star, member) pair gets a score
// -Weight/ln(u), u a uniform draw in (0,1) hashed from the star's and the
// member's names, and the star goes to the highest score (ties to the
// smaller name). It is a pure function of its arguments, whatever their
// order:
//
//   - a member's share of the stars tends to its Weight over the sum of
//     the weights (Weight 0 counts as 1; a negative Weight, which Join
//     refuses, wins a star only when no other member can);
//   - when a member joins, the only stars that move are those it now
//     wins; when one leaves, only the stars it held move. No other star
//     changes owner.
//
// The result maps each star to its member's Name; it is empty when members
// is (no member: no owner). Duplicate member names count once (the first).
func Place(stars []string, members []Member) map[string]string {
	out := make(map[string]string, len(stars))
	if len(members) == 0 {
		return out
	}
	ms := uniqueMembers(members)
	for i, b := range placeAll(stars, ms) {
		out[stars[i]] = b.member
	}
	return out
}

// Owner is the member Place gives star to, and false when members is empty.
func Owner(star string, members []Member) (Member, bool) {
	if len(members) == 0 {
		return Member{}, false
	}
	ms := uniqueMembers(members)
	name := placeOne(star, ms)
	for _, m := range ms {
		if m.Name == name {
			return m, true
		}
	}
	return Member{}, false
}

func uniqueMembers(members []Member) []Member {
	seen := make(map[string]bool, len(members))
	ms := make([]Member, 0, len(members))
	for _, m := range members {
		if !seen[m.Name] {
			seen[m.Name] = true
			ms = append(ms, m)
		}
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Name < ms[j].Name })
	return ms
}

func placeOne(star string, ms []Member) string {
	return placeScored(star, ms).member
}

// score is the rendezvous score of star on m: -w/ln(u), u in (0,1) from
// the hash of both names. Higher wins. A weight <= 0 scores -Inf.
func score(star string, m Member) float64 {
	return scoreFrom(starDigest(star), m)
}

// sep separates the star's name from the member's in the hash.
var sep = []byte{0}

// starDigest is the hash state after the star's name and sep: each
// member's draw continues a copy of it, so the star is hashed once per
// placement, not once per member.
func starDigest(star string) xxhash.Digest {
	d := xxhash.New()
	d.WriteString(star)
	d.Write(sep)
	return *d
}

// scoreFrom is score with the star's hash state given (a copy: d is a value).
func scoreFrom(d xxhash.Digest, m Member) float64 {
	w := m.weight()
	if w <= 0 {
		return math.Inf(-1)
	}
	d.WriteString(m.Name)
	// The top 53 bits, centred in their interval: u is never 0 or 1.
	u := (float64(d.Sum64()>>11) + 0.5) / (1 << 53)
	return -w / math.Log(u)
}

// scored is a star's winner under rendezvous hashing: the member's name and
// its score.
type scored struct {
	member string
	score  float64
}

// beats is Place's order: the higher score, then the smaller name.
func (a scored) beats(b scored) bool {
	return a.score > b.score || a.score == b.score && a.member < b.member
}

// placement is Place kept up to date across membership changes: a join
// costs one score per star (the newcomer's against the winner's), a leave
// the leaver's stars scored again over the others, instead of a score per
// star and member (10^8 for 10^5 stars on 1,000 members) for each change.
// Its result is Place's, exactly.
type placement struct {
	members map[string]Member // what best was computed over, with the weights
	best    map[string]scored
}

// update places stars over members (unique names, each with the weight it
// is to be placed with) and returns the winner of each star; the map is
// the placement's own, valid until the next update.
func (p *placement) update(stars []string, members []Member) map[string]scored {
	next := make(map[string]Member, len(members))
	var added []Member
	removed := map[string]bool{}
	full := p.best == nil
	for _, m := range members {
		next[m.Name] = m
		old, ok := p.members[m.Name]
		switch {
		case !ok:
			added = append(added, m)
		case old.weight() != m.weight():
			full = true
		}
	}
	for name := range p.members {
		if _, ok := next[name]; !ok {
			removed[name] = true
		}
	}
	p.members = next
	if len(added)+len(removed) >= len(members) {
		full = true // as costly as starting over
	}
	ms := uniqueMembers(members)
	if full {
		p.best = make(map[string]scored, len(stars))
		if len(ms) == 0 {
			return p.best
		}
		for i, b := range placeAll(stars, ms) {
			p.best[stars[i]] = b
		}
		return p.best
	}
	for _, s := range stars {
		b := p.best[s]
		if removed[b.member] {
			p.best[s] = placeScored(s, ms)
			continue
		}
		for _, m := range added {
			if sc := (scored{m.Name, score(s, m)}); sc.beats(b) {
				b = sc
			}
		}
		p.best[s] = b
	}
	return p.best
}

// placeScored is the star's winner over ms with its score; ms is not
// empty, in name order.
func placeScored(star string, ms []Member) scored {
	d := starDigest(star)
	b := scored{ms[0].Name, scoreFrom(d, ms[0])}
	for _, m := range ms[1:] {
		if sc := (scored{m.Name, scoreFrom(d, m)}); sc.beats(b) {
			b = sc
		}
	}
	return b
}

// parallelScores is the work (stars × members) above which placeAll
// spreads the stars over the CPUs.
const parallelScores = 1 << 20

// placeAll is placeScored of every star, spread over the CPUs when there
// are many scores to compute (10^8 at 10^5 stars and 1,000 members: a
// router's first placement); out[i] is stars[i]'s winner.
func placeAll(stars []string, ms []Member) []scored {
	out := make([]scored, len(stars))
	workers := runtime.GOMAXPROCS(0)
	if len(stars)*len(ms) < parallelScores || workers < 2 {
		for i, s := range stars {
			out[i] = placeScored(s, ms)
		}
		return out
	}
	var wg sync.WaitGroup
	chunk := (len(stars) + workers - 1) / workers
	for lo := 0; lo < len(stars); lo += chunk {
		hi := min(lo+chunk, len(stars))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := lo; i < hi; i++ {
				out[i] = placeScored(stars[i], ms)
			}
		}()
	}
	wg.Wait()
	return out
}
