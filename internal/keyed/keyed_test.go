package keyed

import "testing"

// The n-th call on a key draws the same whatever calls on other keys came
// in between; successive calls on one key draw differently; seeds differ.
func TestDrawsDependOnKeyAndCountOnly(t *testing.T) {
	a, b := New(1), New(1)
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
	if New(2).Rand("put", "k").Uint64() == x[0] {
		t.Fatal("seeds 1 and 2 drew the same")
	}
	if New(1).Rand("pu", "tk").Uint64() == x[0] {
		t.Fatal("parts are not delimited: put/k and pu/tk drew the same")
	}
}
