package chain

// The chain's values, keys and sentinel errors live in chain/chainval,
// which does no I/O; this file re-exports every one of them under its
// name here, so that chain's callers see no change (the types are aliases,
// the errors the same values, so errors.Is matches either name). Their
// documentation is in chainval.

import "github.com/flightlog/flightlog/chain/chainval"

// Class is chainval.Class.
type Class = chainval.Class

// CopyResult is chainval.CopyResult.
type CopyResult = chainval.CopyResult

// CopyStatus is chainval.CopyStatus.
type CopyStatus = chainval.CopyStatus

// Cut is chainval.Cut.
type Cut = chainval.Cut

// EpochRecord is chainval.EpochRecord.
type EpochRecord = chainval.EpochRecord

// FenceOptions is chainval.FenceOptions.
type FenceOptions = chainval.FenceOptions

// FenceResult is chainval.FenceResult.
type FenceResult = chainval.FenceResult

// Flight is chainval.Flight.
type Flight = chainval.Flight

// OccupantKind is chainval.OccupantKind.
type OccupantKind = chainval.OccupantKind

// Position is chainval.Position.
type Position = chainval.Position

// ProbeResult is chainval.ProbeResult.
type ProbeResult = chainval.ProbeResult

// RetryPolicy is chainval.RetryPolicy.
type RetryPolicy = chainval.RetryPolicy

// Tally is chainval.Tally.
type Tally = chainval.Tally

// TrimCursor is chainval.TrimCursor.
type TrimCursor = chainval.TrimCursor

// UndecidedError is chainval.UndecidedError.
type UndecidedError = chainval.UndecidedError

const (
	// CopyFailed is chainval.CopyFailed.
	CopyFailed = chainval.CopyFailed
	// CopyForeign is chainval.CopyForeign.
	CopyForeign = chainval.CopyForeign
	// CopyOurs is chainval.CopyOurs.
	CopyOurs = chainval.CopyOurs
	// DefaultFenceMaxSlots is chainval.DefaultFenceMaxSlots.
	DefaultFenceMaxSlots = chainval.DefaultFenceMaxSlots
	// DefaultFenceParallel is chainval.DefaultFenceParallel.
	DefaultFenceParallel = chainval.DefaultFenceParallel
	// DefaultFenceReadAhead is chainval.DefaultFenceReadAhead.
	DefaultFenceReadAhead = chainval.DefaultFenceReadAhead
	// DeletedPrefix is chainval.DeletedPrefix.
	DeletedPrefix = chainval.DeletedPrefix
	// Express is chainval.Express.
	Express = chainval.Express
	// IncarnationLen is chainval.IncarnationLen.
	IncarnationLen = chainval.IncarnationLen
	// MaxBuckets is chainval.MaxBuckets.
	MaxBuckets = chainval.MaxBuckets
	// MaxCuts is chainval.MaxCuts.
	MaxCuts = chainval.MaxCuts
	// MaxStarNameLen is chainval.MaxStarNameLen.
	MaxStarNameLen = chainval.MaxStarNameLen
	// MaxStreamNameLen is chainval.MaxStreamNameLen.
	MaxStreamNameLen = chainval.MaxStreamNameLen
	// MaxWindow is chainval.MaxWindow.
	MaxWindow = chainval.MaxWindow
	// NameIndexPrefix is chainval.NameIndexPrefix.
	NameIndexPrefix = chainval.NameIndexPrefix
	// OccupantCorrupt is chainval.OccupantCorrupt.
	OccupantCorrupt = chainval.OccupantCorrupt
	// OccupantFlight is chainval.OccupantFlight.
	OccupantFlight = chainval.OccupantFlight
	// OccupantForeign is chainval.OccupantForeign.
	OccupantForeign = chainval.OccupantForeign
	// OccupantPoison is chainval.OccupantPoison.
	OccupantPoison = chainval.OccupantPoison
	// OccupantUnknown is chainval.OccupantUnknown.
	OccupantUnknown = chainval.OccupantUnknown
	// Standard is chainval.Standard.
	Standard = chainval.Standard
)

var (
	// ErrBadRecord is chainval.ErrBadRecord.
	ErrBadRecord = chainval.ErrBadRecord
	// ErrCorruptTrimCursor is chainval.ErrCorruptTrimCursor.
	ErrCorruptTrimCursor = chainval.ErrCorruptTrimCursor
	// ErrDeposed is chainval.ErrDeposed.
	ErrDeposed = chainval.ErrDeposed
	// ErrEpochTaken is chainval.ErrEpochTaken.
	ErrEpochTaken = chainval.ErrEpochTaken
	// ErrFenceBound is chainval.ErrFenceBound.
	ErrFenceBound = chainval.ErrFenceBound
	// ErrInvalidName is chainval.ErrInvalidName.
	ErrInvalidName = chainval.ErrInvalidName
	// ErrMintLost is chainval.ErrMintLost.
	ErrMintLost = chainval.ErrMintLost
	// ErrUndecided is chainval.ErrUndecided.
	ErrUndecided = chainval.ErrUndecided
)

// Classes is chainval.Classes.
func Classes() []Class { return chainval.Classes() }

// Start is chainval.Start.
func Start() Position { return chainval.Start() }

// CheckpointKey is chainval.CheckpointKey.
func CheckpointKey(star string, c Class) string {
	return chainval.CheckpointKey(star, c)
}

// DecodeTrimCursor is chainval.DecodeTrimCursor.
func DecodeTrimCursor(b []byte) (TrimCursor, error) {
	return chainval.DecodeTrimCursor(b)
}

// DeletedKey is chainval.DeletedKey.
func DeletedKey(id string) string {
	return chainval.DeletedKey(id)
}

// DeletedNamePrefix is chainval.DeletedNamePrefix.
func DeletedNamePrefix(name string) string {
	return chainval.DeletedNamePrefix(name)
}

// EpochKey is chainval.EpochKey.
func EpochKey(star string, c Class) string {
	return chainval.EpochKey(star, c)
}

// IsRefOf is chainval.IsRefOf.
func IsRefOf(id, key string) bool {
	return chainval.IsRefOf(id, key)
}

// IsSettledKey is chainval.IsSettledKey.
func IsSettledKey(key string) bool {
	return chainval.IsSettledKey(key)
}

// ParseClass is chainval.ParseClass.
func ParseClass(s string) (Class, error) {
	return chainval.ParseClass(s)
}

// ParseSlotKey is chainval.ParseSlotKey.
func ParseSlotKey(key string) (star string, c Class, epoch, slot uint64, ok bool) {
	return chainval.ParseSlotKey(key)
}

// PlaceStream is chainval.PlaceStream.
func PlaceStream(name string, stars []string) string {
	return chainval.PlaceStream(name, stars)
}

// RefKey is chainval.RefKey.
func RefKey(id string, endSeq uint64) string {
	return chainval.RefKey(id, endSeq)
}

// RefPrefix is chainval.RefPrefix.
func RefPrefix(id string) string {
	return chainval.RefPrefix(id)
}

// SettledKey is chainval.SettledKey.
func SettledKey(id string, startSeq, endSeq uint64) string {
	return chainval.SettledKey(id, startSeq, endSeq)
}

// SettledPrefixKey is chainval.SettledPrefixKey.
func SettledPrefixKey(id string) string {
	return chainval.SettledPrefixKey(id)
}

// SlotKey is chainval.SlotKey.
func SlotKey(star string, c Class, epoch, slot uint64) string {
	return chainval.SlotKey(star, c, epoch, slot)
}

// SplitStreamID is chainval.SplitStreamID.
func SplitStreamID(id string) (name, incarnation string) {
	return chainval.SplitStreamID(id)
}

// StreamID is chainval.StreamID.
func StreamID(name, incarnation string) string {
	return chainval.StreamID(name, incarnation)
}

// StreamKey is chainval.StreamKey.
func StreamKey(name string) string {
	return chainval.StreamKey(name)
}

// StreamNameKey is chainval.StreamNameKey.
func StreamNameKey(name string) string {
	return chainval.StreamNameKey(name)
}

// CatalogGenKey is chainval.CatalogGenKey.
func CatalogGenKey(star string) string {
	return chainval.CatalogGenKey(star)
}

// StreamRecordKey is chainval.StreamRecordKey.
func StreamRecordKey(name string) string {
	return chainval.StreamRecordKey(name)
}

// TrimKey is chainval.TrimKey.
func TrimKey(star string, c Class) string {
	return chainval.TrimKey(star, c)
}

// ValidIncarnation is chainval.ValidIncarnation.
func ValidIncarnation(inc string) bool {
	return chainval.ValidIncarnation(inc)
}

// ValidateStarName is chainval.ValidateStarName.
func ValidateStarName(s string) error {
	return chainval.ValidateStarName(s)
}

// ValidateStreamName is chainval.ValidateStreamName.
func ValidateStreamName(s string) error {
	return chainval.ValidateStreamName(s)
}
