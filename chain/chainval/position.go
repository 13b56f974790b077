package chainval

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Position is a place in a chain: slot Next of epoch Epoch. Positions order
// by epoch, then slot; every epoch's slots start at 0.
type Position struct {
	Epoch uint64 `json:"epoch"`
	Next  uint64 `json:"next"`
}

// Less reports whether p is before q.
func (p Position) Less(q Position) bool {
	return p.Epoch < q.Epoch || (p.Epoch == q.Epoch && p.Next < q.Next)
}

// Start returns the first position of a chain (its first epoch is 1). A
// function, not a variable, so no importer can move every chain's start.
func Start() Position { return Position{Epoch: 1} }

// TrimCursor is the value at TrimKey: how far settlement got through a
// chain (docs/design.md, "Settlement").
//
// Every committed slot before At is settled: every ref that pointed into it
// now points at a settled object, or was reclaimed with its stream, so no
// read needs it and trim may delete it. Deleted is how far trim's deletes
// have completed; [Deleted, At) may still hold copies, and the next settle
// deletes them first. Cuts holds the cut of every epoch from Deleted's on
// that settlement has passed, which the epoch record may no longer carry,
// and any cut a settle pass re-derived (by a fence of the epoch from At)
// because no record carried it.
//
// At never moves back, and never passes the checkpoint: a fence, a walk or
// a garbage probe starts at the checkpoint or later, so never below it.
type TrimCursor struct {
	At      Position `json:"at"`
	Deleted Position `json:"deleted"`
	Cuts    []Cut    `json:"cuts,omitempty"`
	// Owner is the process that wrote it, for operators.
	Owner string `json:"owner,omitempty"`
}

// CutOf returns the cut of epoch e as the cursor records it.
func (t TrimCursor) CutOf(e uint64) (uint64, bool) {
	for _, c := range t.Cuts {
		if c.Epoch == e {
			return c.Slot, true
		}
	}
	return 0, false
}

// ErrCorruptTrimCursor is wrapped by DecodeTrimCursor's errors.
var ErrCorruptTrimCursor = errors.New("chain: corrupt trim cursor")

// DecodeTrimCursor parses and checks a trim cursor value.
func DecodeTrimCursor(b []byte) (TrimCursor, error) {
	var t TrimCursor
	if err := json.Unmarshal(b, &t); err != nil {
		return TrimCursor{}, fmt.Errorf("%w: %v", ErrCorruptTrimCursor, err)
	}
	if t.At.Epoch == 0 || t.Deleted.Epoch == 0 || t.At.Less(t.Deleted) {
		return TrimCursor{}, fmt.Errorf("%w: at %+v, deleted %+v", ErrCorruptTrimCursor, t.At, t.Deleted)
	}
	return t, nil
}

// Encode returns the cursor's value.
func (t TrimCursor) Encode() []byte {
	b, _ := json.Marshal(t)
	return b
}
