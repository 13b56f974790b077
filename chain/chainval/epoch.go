package chainval

import (
	"errors"
	"fmt"
)

// EpochRecord is the value at EpochKey: who leads the chain now, and the
// shape of its writes. It is minted by compare-and-swap; an epoch is never
// resumed, so each leader incarnation writes under a number of its own.
type EpochRecord struct {
	Epoch   uint64   `json:"epoch"`
	Owner   string   `json:"owner"`   // the leader's identity
	Window  int      `json:"window"`  // pipeline window: bounds fence and garbage probe
	K       int      `json:"k"`       // bucket set size
	W       int      `json:"w"`       // copy quorum
	Buckets []string `json:"buckets"` // bucket names, in set order
	Counter uint64   `json:"counter"` // bumps on every write, so a writer recognises its own

	// Cuts are the recorded cuts of earlier epochs that walking or reading
	// still needs, in ascending epoch order. A slot of epoch e counts if and
	// only if it is below e's cut; nothing at or past it ever counts,
	// whatever copies it holds.
	Cuts []Cut `json:"cuts,omitempty"`
	// Seal is a clean seal of this epoch, written by its owner's clean Close
	// (chain.SealEpoch): the next owner takes it as this epoch's cut and skips
	// fencing. Nil while the epoch is live or after a crash.
	Seal *Cut `json:"seal,omitempty"`
}

// Cut is the recorded end of a fenced or sealed epoch.
type Cut struct {
	// Epoch is the epoch the cut ends.
	Epoch uint64 `json:"epoch"`
	// Slot is the first dead slot: every slot below it is committed and
	// counts; nothing at or past it counts.
	Slot uint64 `json:"slot"`
	// Clean is true for a cut recorded by a clean Close (a seal), false for
	// one found by a fence.
	Clean bool `json:"clean,omitempty"`
}

// CutOf returns the recorded cut of epoch: from r.Cuts, or r.Seal when it
// seals that epoch. ok is false when r records no cut for it (for r.Epoch
// itself: the epoch is live, or its owner crashed).
func (r EpochRecord) CutOf(epoch uint64) (c Cut, ok bool) {
	if r.Seal != nil && r.Seal.Epoch == epoch {
		return *r.Seal, true
	}
	for _, c := range r.Cuts {
		if c.Epoch == epoch {
			return c, true
		}
	}
	return Cut{}, false
}

// Errors of the epoch CAS writes.
var (
	// ErrEpochTaken is returned by chain.MintFirst when the chain already has an
	// epoch: opening it needs a takeover (fence, walk), not a fresh mint.
	ErrEpochTaken = errors.New("chain: chain already has an epoch")
	// ErrMintLost is wrapped by chain.MintNext's error when the record moved on
	// from the version the caller minted from: another candidate minted a
	// successor first (or the incumbent sealed), so the caller is deposed.
	// chain.MintNext returns the record it found alongside.
	ErrMintLost = errors.New("chain: lost the epoch mint: a successor exists")
	// ErrDeposed is wrapped by chain.SealEpoch's error when the record is no
	// longer the one the caller owns: a successor has minted.
	ErrDeposed = errors.New("chain: deposed: the epoch record has moved on")
)

// Bounds an epoch record must keep (Validate): a record is read from the
// metastore, and its fields size goroutines and loops (the garbage probe
// starts work per window slot per bucket), so a hostile or corrupt one is
// refused, never used.
const (
	MaxBuckets = 16   // K
	MaxWindow  = 4096 // the pipeline window
	MaxCuts    = 1 << 16
)

// ErrBadRecord is wrapped by chain.ReadEpoch's error for a record that does not
// parse or breaks a bound.
var ErrBadRecord = errors.New("chain: epoch record is corrupt or out of bounds")

// Validate checks the record's fields against their bounds and each other.
func (r EpochRecord) Validate() error {
	switch {
	case r.Epoch == 0:
		return fmt.Errorf("%w: epoch 0", ErrBadRecord)
	case r.K < 1 || r.K > MaxBuckets:
		return fmt.Errorf("%w: K=%d outside [1, %d]", ErrBadRecord, r.K, MaxBuckets)
	case r.W < 1 || r.W > r.K:
		return fmt.Errorf("%w: W=%d outside [1, K=%d]", ErrBadRecord, r.W, r.K)
	case r.Window < 1 || r.Window > MaxWindow:
		return fmt.Errorf("%w: window %d outside [1, %d]", ErrBadRecord, r.Window, MaxWindow)
	case len(r.Buckets) != r.K:
		return fmt.Errorf("%w: %d bucket names for K=%d", ErrBadRecord, len(r.Buckets), r.K)
	case len(r.Cuts) > MaxCuts:
		return fmt.Errorf("%w: %d cuts", ErrBadRecord, len(r.Cuts))
	case r.Seal != nil && r.Seal.Epoch != r.Epoch:
		return fmt.Errorf("%w: epoch %d carries a seal of epoch %d", ErrBadRecord, r.Epoch, r.Seal.Epoch)
	}
	for _, c := range r.Cuts {
		if c.Epoch >= r.Epoch {
			return fmt.Errorf("%w: epoch %d carries a cut of epoch %d", ErrBadRecord, r.Epoch, c.Epoch)
		}
	}
	return nil
}
