package sequencer

import (
	"errors"
	"fmt"
)

// Errors returned by Window.Claim.
var (
	ErrWindowFull = errors.New("sequencer: pipeline window full")
	ErrHalted     = errors.New("sequencer: chain halted")
)

// Window is the pipeline window of one chain epoch: slots claimed in order,
// made durable in any order, released strictly in order.
type Window struct {
	size     int
	next     uint64 // next slot to claim
	released uint64 // first slot not yet released (the release point)
	durable  []bool // ring indexed by slot % size, for slots in [released, next)
	halted   bool
	haltAt   uint64
}

// NewWindow returns a window whose first slot is start and which holds at
// most size claimed, unreleased slots. size must be at least 1.
func NewWindow(start uint64, size int) *Window {
	if size < 1 {
		panic(fmt.Sprintf("sequencer: window size %d < 1", size))
	}
	return &Window{size: size, next: start, released: start, durable: make([]bool, size)}
}

// Size is the window's capacity.
func (w *Window) Size() int { return w.size }

// InFlight is the number of claimed, unreleased slots.
func (w *Window) InFlight() int { return int(w.next - w.released) }

// Next is the slot the next Claim returns.
func (w *Window) Next() uint64 { return w.next }

// Released is the release point: every slot below it has been released, and
// none at or above it has.
func (w *Window) Released() uint64 { return w.released }

// CanClaim reports whether Claim would succeed.
func (w *Window) CanClaim() bool { return !w.halted && w.InFlight() < w.size }

// Claim returns the next slot, or ErrWindowFull or ErrHalted.
func (w *Window) Claim() (uint64, error) {
	if w.halted {
		return 0, ErrHalted
	}
	if w.InFlight() >= w.size {
		return 0, ErrWindowFull
	}
	s := w.next
	w.durable[s%uint64(w.size)] = false
	w.next++
	return s, nil
}

// MarkDurable records that slot reached its copy quorum. It reports false
// (and records nothing) for a slot that was never claimed or is already
// released. A durable slot at or past a halt is recorded but never released.
func (w *Window) MarkDurable(slot uint64) bool {
	if slot < w.released || slot >= w.next {
		return false
	}
	w.durable[slot%uint64(w.size)] = true
	return true
}

// Release advances the release point over every durable slot that directly
// follows it (and lies below the halt, if any) and returns the released
// range [from, to); from == to when nothing was released.
func (w *Window) Release() (from, to uint64) {
	from = w.released
	for w.released < w.next && w.durable[w.released%uint64(w.size)] {
		if w.halted && w.released >= w.haltAt {
			break
		}
		w.durable[w.released%uint64(w.size)] = false
		w.released++
	}
	return from, w.released
}

// Halt stops every release at or past slot and every further claim. A later
// Halt at a lower slot lowers the bound; the bound never rises. Halting
// below the release point is a caller bug and is ignored (a released ack is
// never disowned).
func (w *Window) Halt(slot uint64) {
	if slot < w.released {
		slot = w.released
	}
	if !w.halted || slot < w.haltAt {
		w.haltAt = slot
	}
	w.halted = true
}

// Halted returns the halt slot and whether the window is halted.
func (w *Window) Halted() (uint64, bool) { return w.haltAt, w.halted }
