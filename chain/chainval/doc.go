// Package chainval holds the chain's values: what the chain package reads,
// writes and decides with, without the code that talks to a store. It
// holds the chain's keys and names (Class, SlotKey, EpochKey, RefKey,
// SettledKey and the stream keys), its records and their checks and
// encodings (EpochRecord and Cut, Position and TrimCursor), what a write
// and a fence report (Flight, CopyResult, Tally, FenceOptions,
// FenceResult, UndecidedError, ProbeResult) and the sentinel errors its
// callers compare against (ErrEpochTaken, ErrMintLost, ErrDeposed, ...).
//
// It does no I/O and imports no store package: the loglet's pure cores,
// which decide but never call a store, import it rather than chain. The
// chain package re-exports every name here unchanged (chain.EpochRecord is
// chainval.EpochRecord; chain.ErrDeposed is chainval.ErrDeposed, so
// errors.Is matches either), and holds the I/O: minting and sealing epoch
// records, writing flights, fencing, probing, walking and trimming.
package chainval
