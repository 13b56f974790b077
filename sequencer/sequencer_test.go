package sequencer

import (
	"errors"
	"math/rand/v2"
	"testing"
)

func TestStreamAssignContiguousAndMatch(t *testing.T) {
	var s Stream
	if st, _ := s.Assign(3, nil); st != 0 {
		t.Fatalf("first start %d", st)
	}
	m := uint64(3)
	if st, err := s.Assign(2, &m); err != nil || st != 3 {
		t.Fatalf("matched assign: %d %v", st, err)
	}
	bad := uint64(3)
	_, err := s.Assign(4, &bad)
	var me *MismatchError
	if !errors.As(err, &me) || me.Tail != 5 || me.Expected != 3 {
		t.Fatalf("mismatch: %v", err)
	}
	if s.Next != 5 {
		t.Fatalf("a rejected batch moved the tail to %d", s.Next)
	}
}

func TestStampNeverGoesBackwards(t *testing.T) {
	var s Stream
	cases := []struct{ ts, arrival, want int64 }{
		{0, 100, 100}, // no timestamp: arrival
		{150, 100, 150},
		{120, 160, 150}, // backwards: clamped
		{0, 90, 150},    // arrival clock behind: clamped
		{200, 0, 200},
	}
	for i, c := range cases {
		if got := s.Stamp(c.ts, c.arrival); got != c.want {
			t.Fatalf("case %d: Stamp(%d,%d) = %d want %d", i, c.ts, c.arrival, got, c.want)
		}
	}
}

// TestWindowReleasesInSlotOrder drives a window with durable marks in random
// order and checks that releases are exactly the contiguous durable prefix.
func TestWindowReleasesInSlotOrder(t *testing.T) {
	for seed := uint64(0); seed < 200; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		size := 1 + r.IntN(8)
		w := NewWindow(10, size)
		durable := map[uint64]bool{}
		var claimed []uint64
		nextRelease := uint64(10)
		for step := 0; step < 300; step++ {
			if w.CanClaim() && r.IntN(2) == 0 {
				s, err := w.Claim()
				if err != nil {
					t.Fatalf("seed %d: claim: %v", seed, err)
				}
				claimed = append(claimed, s)
				continue
			}
			if len(claimed) == 0 {
				continue
			}
			i := r.IntN(len(claimed))
			s := claimed[i]
			claimed = append(claimed[:i], claimed[i+1:]...)
			if !w.MarkDurable(s) {
				t.Fatalf("seed %d: MarkDurable(%d) refused", seed, s)
			}
			durable[s] = true
			from, to := w.Release()
			if from != nextRelease {
				t.Fatalf("seed %d: release from %d, want %d", seed, from, nextRelease)
			}
			for x := from; x < to; x++ {
				if !durable[x] {
					t.Fatalf("seed %d: released %d before it was durable", seed, x)
				}
			}
			if durable[to] && to < w.Next() {
				t.Fatalf("seed %d: stopped at durable slot %d", seed, to)
			}
			nextRelease = to
			if w.InFlight() > size {
				t.Fatalf("seed %d: %d in flight > window %d", seed, w.InFlight(), size)
			}
		}
	}
}

func TestWindowFullAndHalt(t *testing.T) {
	w := NewWindow(0, 2)
	a, _ := w.Claim()
	b, _ := w.Claim()
	if _, err := w.Claim(); !errors.Is(err, ErrWindowFull) {
		t.Fatalf("third claim: %v", err)
	}
	w.MarkDurable(b)
	if f, to := w.Release(); f != to {
		t.Fatal("released slot 1 while slot 0 was not durable")
	}
	w.Halt(b)
	w.MarkDurable(a)
	if f, to := w.Release(); f != 0 || to != 1 {
		t.Fatalf("release after halt at 1: [%d,%d), want [0,1)", f, to)
	}
	if f, to := w.Release(); f != to {
		t.Fatal("released the halted slot")
	}
	if _, err := w.Claim(); !errors.Is(err, ErrHalted) {
		t.Fatalf("claim after halt: %v", err)
	}
	w.Halt(5) // a higher halt never raises the bound
	if h, _ := w.Halted(); h != 1 {
		t.Fatalf("halt bound %d want 1", h)
	}
	if w.MarkDurable(0) {
		t.Fatal("MarkDurable accepted an already released slot")
	}
}
