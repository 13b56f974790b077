package fleet

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"
)

func starNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("star-%d", i)
	}
	return out
}

func members(ws ...float64) []Member {
	out := make([]Member, len(ws))
	for i, w := range ws {
		out[i] = Member{Name: fmt.Sprintf("m%d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 9000+i), Weight: w}
	}
	return out
}

func TestPlaceDeterministic(t *testing.T) {
	stars := starNames(200)
	ms := members(1, 2, 3, 1)
	a := Place(stars, ms)
	rev := slices.Clone(ms)
	slices.Reverse(rev)
	shuffled := slices.Clone(stars)
	slices.Reverse(shuffled)
	b := Place(shuffled, rev)
	if !maps.Equal(a, b) {
		t.Fatalf("placement depends on the order of its arguments")
	}
	for _, s := range stars {
		m, ok := Owner(s, ms)
		if !ok || m.Name != a[s] {
			t.Fatalf("Owner(%s) = %v %v, Place says %s", s, m, ok, a[s])
		}
	}
	if got := Place(stars, nil); len(got) != 0 {
		t.Fatalf("no members: got %d owners, want none", len(got))
	}
	if _, ok := Owner("star-0", nil); ok {
		t.Fatalf("Owner with no members: ok")
	}
	// Duplicate names count once.
	dup := append(slices.Clone(ms), Member{Name: "m0", Weight: 1000})
	if !maps.Equal(a, Place(stars, dup)) {
		t.Fatalf("a duplicate member name changed the placement")
	}
}

// TestPlaceWeights: over many stars, each member's share is near its weight
// over the total (within 4 standard deviations of a binomial draw, so a
// correct placement fails about once in 30,000 seeds: the names are fixed,
// so it never flakes).
func TestPlaceWeights(t *testing.T) {
	cases := []struct {
		name string
		ws   []float64
	}{
		{"equal", []float64{1, 1, 1, 1}},
		{"1-2-3", []float64{1, 2, 3}},
		{"zero-is-one", []float64{0, 1}},
		{"heavy", []float64{10, 1, 1}},
	}
	const n = 20000
	stars := starNames(n)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ms := members(tc.ws...)
			count := map[string]int{}
			for _, m := range Place(stars, ms) {
				count[m]++
			}
			total := 0.0
			for _, m := range ms {
				total += m.weight()
			}
			for _, m := range ms {
				p := m.weight() / total
				want := p * n
				sd := math.Sqrt(n * p * (1 - p))
				if got := float64(count[m.Name]); math.Abs(got-want) > 4*sd {
					t.Errorf("member %s (weight %v): %d stars, want %.0f ± %.0f", m.Name, m.Weight, count[m.Name], want, 4*sd)
				}
			}
		})
	}
}

// TestPlaceMinimalMovement: when a member joins, only the stars it wins
// move (to it); when one leaves, only the stars it held move.
func TestPlaceMinimalMovement(t *testing.T) {
	stars := starNames(2000)
	for _, tc := range []struct {
		name   string
		before []float64
	}{
		{"3-equal", []float64{1, 1, 1}},
		{"5-weighted", []float64{1, 2, 3, 1, 0.5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms := members(tc.before...)
			before := Place(stars, ms)
			joiner := Member{Name: "new", Weight: 2}
			after := Place(stars, append(slices.Clone(ms), joiner))
			moved := 0
			for _, s := range stars {
				if before[s] != after[s] {
					moved++
					if after[s] != joiner.Name {
						t.Fatalf("join: star %s moved %s -> %s, not to the joiner", s, before[s], after[s])
					}
				}
			}
			if moved == 0 {
				t.Fatalf("join: the new member won no star of %d", len(stars))
			}
			for i := range ms {
				rest := slices.Delete(slices.Clone(ms), i, i+1)
				left := ms[i].Name
				after := Place(stars, rest)
				for _, s := range stars {
					switch {
					case before[s] == left && after[s] == left:
						t.Fatalf("leave %s: star %s still placed on it", left, s)
					case before[s] != left && after[s] != before[s]:
						t.Fatalf("leave %s: star %s moved %s -> %s though its owner stayed", left, s, before[s], after[s])
					}
				}
			}
		})
	}
}

func TestMemberValidate(t *testing.T) {
	for _, tc := range []struct {
		m  Member
		ok bool
	}{
		{Member{Name: "a-1.b_c"}, true},
		{Member{Name: ""}, false},
		{Member{Name: "Upper"}, false},
		{Member{Name: "has/slash"}, false},
		{Member{Name: "a", Weight: -1}, false},
		{Member{Name: "a", Weight: math.NaN()}, false},
		{Member{Name: "a", Weight: math.Inf(1)}, false},
	} {
		if err := tc.m.validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: validate = %v, want ok=%v", tc.m, err, tc.ok)
		}
	}
}

// placement.update, which scores only what a join or leave can change,
// gives Place's result after every change of a random sequence of joins,
// leaves, weight changes and drains (weight -1).
func TestPlacementIncremental(t *testing.T) {
	stars := starNames(500)
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0))
		var p placement
		live := map[string]Member{}
		for step := range 60 {
			name := fmt.Sprintf("m%d", rng.IntN(12))
			switch _, ok := live[name]; {
			case !ok:
				live[name] = Member{Name: name, Weight: float64(1 + rng.IntN(3))}
			case rng.IntN(4) == 0:
				live[name] = Member{Name: name, Weight: []float64{-1, 0, 2}[rng.IntN(3)]}
			default:
				delete(live, name)
			}
			ms := slices.Collect(maps.Values(live))
			got := p.update(stars, ms)
			want := Place(stars, ms)
			if len(got) != len(want) {
				t.Fatalf("seed %d step %d: %d stars placed, want %d", seed, step, len(got), len(want))
			}
			for s, w := range want {
				if got[s].member != w {
					t.Fatalf("seed %d step %d: star %s on %q, Place says %q (members %v)", seed, step, s, got[s].member, w, ms)
				}
			}
		}
	}
}

// refScore is the score's definition, hashed from scratch for every pair
// (as Place computed it before it hashed each star once): placement must
// not change across versions, or members of a fleet in a rolling upgrade
// would disagree on who should lead a star.
func refScore(star string, m Member) float64 {
	w := m.weight()
	if w <= 0 {
		return math.Inf(-1)
	}
	h := xxhash.New()
	h.WriteString(star)
	h.Write([]byte{0})
	h.WriteString(m.Name)
	u := (float64(h.Sum64()>>11) + 0.5) / (1 << 53)
	return -w / math.Log(u)
}

func refPlace(stars []string, members []Member) map[string]string {
	out := map[string]string{}
	if len(members) == 0 {
		return out
	}
	ms := uniqueMembers(members)
	for _, s := range stars {
		best, bestScore := "", math.Inf(-1)
		for _, m := range ms {
			if sc := refScore(s, m); sc > bestScore || best == "" {
				best, bestScore = m.Name, sc
			}
		}
		out[s] = best
	}
	return out
}

// TestPlaceMatchesItsDefinition: Place (serial and spread over the CPUs)
// gives every star the owner the definition gives it, for random weights
// (0, negative and equal ones included), and a pinned placement stays the
// same from version to version.
func TestPlaceMatchesItsDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, tc := range []struct{ stars, members int }{{300, 7}, {2100, 600}} { // the second is over parallelScores
		stars := starNames(tc.stars)
		ms := make([]Member, tc.members)
		for i := range ms {
			ms[i] = Member{Name: fmt.Sprintf("member-%d", rng.IntN(10*tc.members)), Weight: []float64{1, 1, 0, 2, 0.5, -1}[rng.IntN(6)]}
		}
		if tc.stars*len(uniqueMembers(ms)) < parallelScores && tc.members > 100 {
			t.Fatalf("case %+v does not take the parallel path", tc)
		}
		want := refPlace(stars, ms)
		got := Place(stars, ms)
		for _, s := range stars {
			if got[s] != want[s] {
				t.Fatalf("%d stars on %d members: star %s on %q, the definition says %q", tc.stars, tc.members, s, got[s], want[s])
			}
		}
	}
	pinned := Place(starNames(16), members(1, 2, 3, 1, 1))
	want := map[string]string{}
	for i, m := range []string{"m2", "m2", "m2", "m2", "m2", "m2", "m2", "m2", "m1", "m4", "m1", "m0", "m1", "m3", "m2", "m1"} {
		want[fmt.Sprintf("star-%d", i)] = m
	}
	if !maps.Equal(pinned, want) {
		t.Fatalf("the pinned placement changed: %v, was %v", pinned, want)
	}
}

func BenchmarkPlace(b *testing.B) {
	stars := starNames(10_000)
	ms := make([]Member, 1000)
	for i := range ms {
		ms[i] = Member{Name: fmt.Sprintf("member-%04d", i)}
	}
	b.ReportMetric(float64(len(stars)*len(ms)), "scores/op")
	for b.Loop() {
		Place(stars, ms)
	}
}
