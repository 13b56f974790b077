package absorbval

import (
	"slices"
	"testing"
)

// TestPlanChunks checks the split of a round's refs: greedy chunks within
// both limits, each with the seal check, and a ref that fits no chunk
// named before any chunk is planned.
func TestPlanChunks(t *testing.T) {
	for _, c := range []struct {
		name             string
		maxOps, maxBytes int
		sizes            []int
		check            int
		ends             []int
		tooLarge         int
	}{
		{"ops", 3, 0, []int{10, 10, 10, 10, 10}, 5, []int{2, 4, 5}, -1},
		{"bytes", 0, 30, []int{10, 10, 10, 20, 5}, 5, []int{2, 3, 5}, -1},
		{"both", 3, 100, []int{40, 40, 10, 10}, 5, []int{2, 4}, -1},
		{"one ref too large", 0, 30, []int{10, 26, 10}, 5, nil, 1},
		{"none", 2, 0, nil, 5, nil, -1},
	} {
		ends, big := PlanChunks(c.maxOps, c.maxBytes, c.sizes, c.check)
		if !slices.Equal(ends, c.ends) || big != c.tooLarge {
			t.Errorf("%s: chunks %v, too large %d; want %v, %d", c.name, ends, big, c.ends, c.tooLarge)
		}
	}
	if !RoundFits(3, 0, []int{1, 1}, 1) || RoundFits(2, 0, []int{1, 1}, 1) || RoundFits(0, 10, []int{5, 5}, 1) || !RoundFits(0, 0, []int{1 << 30}, 1) {
		t.Error("RoundFits disagrees with the limits")
	}
}
