package envelope

import (
	"encoding/binary"
	"math"
	"testing"
)

// TestVarintLen holds uvarintLen and varintLen to the encoder's own
// lengths at every 7-bit boundary and the extremes.
func TestVarintLen(t *testing.T) {
	us := []uint64{0, 1, math.MaxUint64}
	for s := 1; s < 64; s++ {
		us = append(us, 1<<s-1, 1<<s, 1<<s+1)
	}
	for _, u := range us {
		if got, want := uvarintLen(u), len(binary.AppendUvarint(nil, u)); got != want {
			t.Errorf("uvarintLen(%d) = %d, want %d", u, got, want)
		}
		for _, v := range []int64{int64(u), -int64(u), int64(u >> 1), -int64(u >> 1)} {
			if got, want := varintLen(v), len(binary.AppendVarint(nil, v)); got != want {
				t.Errorf("varintLen(%d) = %d, want %d", v, got, want)
			}
		}
	}
	if got, want := varintLen(math.MinInt64), len(binary.AppendVarint(nil, math.MinInt64)); got != want {
		t.Errorf("varintLen(MinInt64) = %d, want %d", got, want)
	}
}
