package loglet

import (
	"encoding/binary"
	"math"
	"testing"
)

// TestVarintLen holds varintLen (the admission's charge for a re-stamped
// timestamp) to the encoder's own lengths at every 7-bit boundary.
func TestVarintLen(t *testing.T) {
	vs := []int64{0, 1, -1, math.MaxInt64, math.MinInt64}
	for s := 1; s < 63; s++ {
		for _, v := range []int64{1<<s - 1, 1 << s, 1<<s + 1} {
			vs = append(vs, v, -v)
		}
	}
	for _, v := range vs {
		if got, want := varintLen(v), len(binary.AppendVarint(nil, v)); got != want {
			t.Errorf("varintLen(%d) = %d, want %d", v, got, want)
		}
	}
}
