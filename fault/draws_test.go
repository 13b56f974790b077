package fault

import (
	"slices"
	"testing"
)

// The n-th call on a key draws the same whatever calls on other keys came
// in between; successive calls on one key draw differently; seeds differ;
// parts are delimited.
func TestDrawsDependOnKeyAndCountOnly(t *testing.T) {
	a, b := NewDraws(1), NewDraws(1)
	var x [3]uint64
	for i := range x {
		x[i] = a.Rand("put", "k").Uint64()
		a.Rand("get", "other").Uint64()
	}
	for i := range x {
		if got := b.Rand("put", "k").Uint64(); got != x[i] {
			t.Fatalf("call %d on put/k drew %d alone, %d interleaved", i, got, x[i])
		}
	}
	if x[0] == x[1] || x[1] == x[2] {
		t.Fatal("successive calls on one key drew the same")
	}
	if NewDraws(2).Rand("put", "k").Uint64() == x[0] {
		t.Fatal("seeds 1 and 2 drew the same")
	}
	if NewDraws(1).Rand("pu", "tk").Uint64() == x[0] {
		t.Fatal("parts are not delimited: put/k and pu/tk drew the same")
	}
}

// TestDrawsAreStable pins what a seed draws, so a seed recorded in a
// failing run's report keeps replaying it: these are the values the
// simulations' seeds have drawn since the draws were keyed (the test
// helper Draws replaced drew exactly these).
func TestDrawsAreStable(t *testing.T) {
	for _, c := range []struct {
		seed  uint64
		parts []string
		want  []uint64
	}{
		{1, []string{"put", "k"}, []uint64{0x2473e5718223cffd, 0x78913e364ee59010, 0x7e77fa09dbe11ea}},
		{0, nil, []uint64{0xdf90a49d31876558, 0xef191e2836bdb88c, 0xe54a5a6659e0bb88}},
		{42, []string{"get", "chains/3/7", "b"}, []uint64{0x557b652ee6bf9350, 0xa823bd81dbaa5803, 0x30465beff2e701c1}},
		{0xc0f1, []string{"late", "streams/x"}, []uint64{0xa2e7970c9d833e65, 0x344c1c6ae0960553, 0x54aa49a54d9184c5}},
	} {
		d := NewDraws(c.seed)
		var got []uint64
		for range c.want {
			got = append(got, d.Rand(c.parts...).Uint64())
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("seed %#x, parts %q: drew %#x, want %#x", c.seed, c.parts, got, c.want)
		}
	}
}
