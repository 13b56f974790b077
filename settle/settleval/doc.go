// Package settleval holds settlement's values and pure functions: what a
// pass is asked and what it did (Pass, Result, SlotsPass, SlotsResult,
// Slot), the committed slot ranges between two positions (Segments), the
// rendering of a settled object from its records (Render, SettledNonce), the
// doomed-marker format and keys (Marker, Named, MarkerKey, ChunkMarkerKey, MarkerPrefix), the
// bounds of a pass (DefaultMaxSlots, MaxPassBytes, GuardRetries) and the
// sentinel errors a pass's caller compares against (ErrDeposed,
// ErrCutUnknown).
//
// It does no I/O and imports no store package: the loglet's settlement
// core, which decides a pass but never calls a store, imports it rather
// than settle. The settle package re-exports every name here unchanged
// (settle.Result is settleval.Result; settle.ErrDeposed is
// settleval.ErrDeposed, so errors.Is matches either) and holds a chain's
// settle configuration and the scan of the markers (MarkedObjects).
package settleval
