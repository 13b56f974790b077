package absorb

// The absorb's values, encodings, planner, backlog and sentinel errors live
// in absorb/absorbval, which does no I/O; this file re-exports every one of
// them under its name here, so that absorb's callers see no change (the
// types are aliases, the errors the same values, so errors.Is matches
// either name). Their documentation is in absorbval.

import (
	"github.com/flightlog/flightlog/absorb/absorbval"
	"github.com/flightlog/flightlog/chain"
)

// Backlog is absorbval.Backlog.
type Backlog = absorbval.Backlog

// BacklogStats is absorbval.BacklogStats.
type BacklogStats = absorbval.BacklogStats

// Checkpoint is absorbval.Checkpoint.
type Checkpoint = absorbval.Checkpoint

// Extent is absorbval.Extent.
type Extent = absorbval.Extent

// Held is absorbval.Held.
type Held = absorbval.Held

// Round is absorbval.Round.
type Round = absorbval.Round

// SealedError is absorbval.SealedError.
type SealedError = absorbval.SealedError

// Slot is absorbval.Slot.
type Slot = absorbval.Slot

// SpanRef is absorbval.SpanRef.
type SpanRef = absorbval.SpanRef

// StallCause is absorbval.StallCause.
type StallCause = absorbval.StallCause

// StreamTail is absorbval.StreamTail.
type StreamTail = absorbval.StreamTail

// ProducerTail is absorbval.ProducerTail.
type ProducerTail = absorbval.ProducerTail

// Tails is absorbval.Tails.
type Tails = absorbval.Tails

// TailsHeader is absorbval.TailsHeader.
type TailsHeader = absorbval.TailsHeader

const (
	// CauseAbsorbLagging is absorbval.CauseAbsorbLagging.
	CauseAbsorbLagging = absorbval.CauseAbsorbLagging
	// CauseEpochSettling is absorbval.CauseEpochSettling.
	CauseEpochSettling = absorbval.CauseEpochSettling
	// CauseMetastoreSlow is absorbval.CauseMetastoreSlow.
	CauseMetastoreSlow = absorbval.CauseMetastoreSlow
	// MaxDoomedSnapshots is absorbval.MaxDoomedSnapshots.
	MaxDoomedSnapshots = absorbval.MaxDoomedSnapshots
)

var (
	// ErrCheckpointExists is absorbval.ErrCheckpointExists.
	ErrCheckpointExists = absorbval.ErrCheckpointExists
	// ErrCorrupt is absorbval.ErrCorrupt.
	ErrCorrupt = absorbval.ErrCorrupt
	// ErrDeposed is absorbval.ErrDeposed.
	ErrDeposed = absorbval.ErrDeposed
	// ErrEpochMoved is absorbval.ErrEpochMoved.
	ErrEpochMoved = absorbval.ErrEpochMoved
	// ErrSealRaced is absorbval.ErrSealRaced.
	ErrSealRaced = absorbval.ErrSealRaced
	// ErrSnapshotTaken is absorbval.ErrSnapshotTaken.
	ErrSnapshotTaken = absorbval.ErrSnapshotTaken
)

// DecodeCheckpoint is absorbval.DecodeCheckpoint.
func DecodeCheckpoint(b []byte) (Checkpoint, error) {
	return absorbval.DecodeCheckpoint(b)
}

// DecodeRef is absorbval.DecodeRef.
func DecodeRef(b []byte) (SpanRef, error) {
	return absorbval.DecodeRef(b)
}

// DecodeTails is absorbval.DecodeTails.
func DecodeTails(b []byte) (Tails, error) {
	return absorbval.DecodeTails(b)
}

// EncodeTails is absorbval.EncodeTails.
func EncodeTails(t Tails) []byte {
	return absorbval.EncodeTails(t)
}

// IsSnapshotDamaged is absorbval.IsSnapshotDamaged.
func IsSnapshotDamaged(err error) bool {
	return absorbval.IsSnapshotDamaged(err)
}

// IsSnapshotGone is absorbval.IsSnapshotGone.
func IsSnapshotGone(err error) bool {
	return absorbval.IsSnapshotGone(err)
}

// NewBacklog is absorbval.NewBacklog.
func NewBacklog(maxFlights int, maxBytes int64) *Backlog {
	return absorbval.NewBacklog(maxFlights, maxBytes)
}

// Plan is absorbval.Plan.
func Plan(class string, writer string, slots []Slot, tails map[string]StreamTail) ([]SpanRef, error) {
	return absorbval.Plan(class, writer, slots, tails)
}

// TailsKey is absorbval.TailsKey.
func TailsKey(star string, c chain.Class, epoch, next, writer uint64) string {
	return absorbval.TailsKey(star, c, epoch, next, writer)
}

// TailsPlanKey is absorbval.TailsPlanKey.
func TailsPlanKey(star string, c chain.Class, epoch, next, writer, plan uint64) string {
	return absorbval.TailsPlanKey(star, c, epoch, next, writer, plan)
}

// TailsRoundKey is absorbval.TailsRoundKey.
func TailsRoundKey(star string, c chain.Class, fromEpoch, fromNext, writer, plan uint64) string {
	return absorbval.TailsRoundKey(star, c, fromEpoch, fromNext, writer, plan)
}
