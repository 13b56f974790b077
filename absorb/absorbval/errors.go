package absorbval

import (
	"errors"
	"fmt"

	"github.com/flightlog/flightlog/objstore/objval"
)

// ErrDeposed: the checkpoint's seal names another owner (or a later epoch of
// this one): a successor has taken the chain, and this leader must stop.
var ErrDeposed = errors.New("absorb: deposed: the checkpoint is sealed by another owner")

// ErrSnapshotTaken is what a round's absorb.Committer.Commit fails with when its tails
// snapshot's key already holds an object that does not stand for the
// snapshot (another content, or damaged): a PutIfAbsent cannot replace it,
// so the round must write its snapshot under another key. It also matches
// objstore.ErrExists.
var ErrSnapshotTaken = errors.New("absorb: the tails snapshot's key holds another object")

// ErrCheckpointExists is what absorb.InitCheckpoint fails with when the chain
// already has a checkpoint that is not the one it creates (another
// candidate sealed one for a takeover: absorb.SealCheckpoint creates one too).
var ErrCheckpointExists = errors.New("absorb: the chain has a checkpoint already")

// SealedError is the ErrDeposed a committer returns when it finds the
// checkpoint carrying a seal other than its own: who sealed it, for which
// epoch.
type SealedError struct {
	Owner      string
	OwnerEpoch uint64
}

// Error names the owner and epoch of the seal.
func (e *SealedError) Error() string {
	return fmt.Sprintf("absorb: deposed: the checkpoint is sealed by %q for epoch %d", e.Owner, e.OwnerEpoch)
}

// Is makes it match ErrDeposed.
func (e *SealedError) Is(target error) bool { return target == ErrDeposed }

// ErrEpochMoved: the chain's epoch record changed while sealing (another
// candidate, or the incumbent recovering, minted): start the takeover over
// from the new record.
var ErrEpochMoved = errors.New("absorb: the epoch record moved while sealing")

// ErrSealRaced: the checkpoint moved between a seal's read of it and the
// Commit that seals it (the incumbent's absorb advanced it): seal again.
var ErrSealRaced = errors.New("absorb: the checkpoint moved while sealing")

// IsSnapshotGone reports whether err says a snapshot (or its base) was not
// found: a reader that raced the absorb may re-read the checkpoint and try
// the newer snapshot.
func IsSnapshotGone(err error) bool {
	return errors.Is(err, objval.ErrNotFound) && !errors.Is(err, ErrCorrupt)
}

// IsSnapshotDamaged reports whether err says a snapshot (or its base) is
// corrupt in every copy that could be read.
func IsSnapshotDamaged(err error) bool { return errors.Is(err, ErrCorrupt) }
