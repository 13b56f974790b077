package settle

// Settlement's values, marker format, bounds and sentinel errors live in
// settle/settleval, which does no I/O; this file re-exports every one of
// them under its name here, so that settle's callers see no change (the
// types are aliases, the errors the same values, so errors.Is matches
// either name). Their documentation is in settleval.

import (
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/settle/settleval"
)

// Marker is settleval.Marker.
type Marker = settleval.Marker

// Named is settleval.Named.
type Named = settleval.Named

// Pass is settleval.Pass.
type Pass = settleval.Pass

// Result is settleval.Result.
type Result = settleval.Result

// Slot is settleval.Slot.
type Slot = settleval.Slot

// Run is settleval.Run.
type Run = settleval.Run

// KnownRef is settleval.KnownRef.
type KnownRef = settleval.KnownRef

// SlotsPass is settleval.SlotsPass.
type SlotsPass = settleval.SlotsPass

// SlotsResult is settleval.SlotsResult.
type SlotsResult = settleval.SlotsResult

const (
	// DefaultFrameBytes is settleval.DefaultFrameBytes.
	DefaultFrameBytes = settleval.DefaultFrameBytes
	// DefaultCodec is settleval.DefaultCodec.
	DefaultCodec = settleval.DefaultCodec
	// DefaultMaxSlots is settleval.DefaultMaxSlots.
	DefaultMaxSlots = settleval.DefaultMaxSlots
	// DefaultTargetBytes is settleval.DefaultTargetBytes.
	DefaultTargetBytes = settleval.DefaultTargetBytes
	// GuardRetries is settleval.GuardRetries.
	GuardRetries = settleval.GuardRetries
	// MaxPassBytes is settleval.MaxPassBytes.
	MaxPassBytes = settleval.MaxPassBytes
	// MaxIdlePerPass is settleval.MaxIdlePerPass.
	MaxIdlePerPass = settleval.MaxIdlePerPass
)

var (
	// ErrCutUnknown is settleval.ErrCutUnknown.
	ErrCutUnknown = settleval.ErrCutUnknown
	// ErrDeposed is settleval.ErrDeposed.
	ErrDeposed = settleval.ErrDeposed
)

// DecodeMarker is settleval.DecodeMarker.
func DecodeMarker(b []byte) (Marker, error) {
	return settleval.DecodeMarker(b)
}

// MarkerKey is settleval.MarkerKey.
func MarkerKey(star string, c chain.Class, objKey string) string {
	return settleval.MarkerKey(star, c, objKey)
}

// ChunkMarkerKey is settleval.ChunkMarkerKey.
func ChunkMarkerKey(star string, c chain.Class, objKeys []string) string {
	return settleval.ChunkMarkerKey(star, c, objKeys)
}

// MarkerPrefix is settleval.MarkerPrefix.
func MarkerPrefix(star string, c chain.Class) string {
	return settleval.MarkerPrefix(star, c)
}

// Segments is settleval.Segments.
func Segments(cuts map[uint64]uint64, a, b chain.Position) ([][3]uint64, error) {
	return settleval.Segments(cuts, a, b)
}

// Render is settleval.Render.
func Render(id string, start, end uint64, runs []Run, codec envelope.Codec, frameBytes int) ([]byte, []envelope.FrameInfo, error) {
	return settleval.Render(id, start, end, runs, codec, frameBytes)
}

// SmallObject is settleval.SmallObject.
func SmallObject(raw, target int) bool {
	return settleval.SmallObject(raw, target)
}
