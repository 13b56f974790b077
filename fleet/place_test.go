package fleet

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
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
