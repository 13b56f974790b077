// Package starcore is the pure core of a star's leadership: which of the
// star's chains this process holds, after etcd-raft's raft.RawNode as
// loglet/internal/chaincore is for one chain. It decides the opening (the
// live-owner check, which chain to open next, what a lost chain means:
// take it again, give up, fail the open and abandon the chains already
// started), whether this process still holds a chain, and what Close
// releases and in which order. It does no I/O, starts no goroutine, reads
// no clock and takes no lock: I/O results arrive as events.
//
// A star has one chain per enabled class, opened one after the other in
// Config.Classes order (Standard first), or all at once when the
// live-owner check (Config.RefuseLiveOwner) found every chain's record
// sealed cleanly (a planned handoff: each takeover is a seal and mint,
// nothing to fence; the openings are then decided together once all are
// in). The first chain is the star's lock: a candidate that loses its
// takeover of it stops there (a later chain it won meanwhile is closed
// cleanly, so that the winner takes it over from a clean seal). A later
// chain lost to a rival, or found with a live owner the check did not see
// (a rival minted it since), is taken again while this process still
// holds the first (the rival, deposed from the first, gives up when it
// checks), deposing that rival (StartChain.Depose), up to
// Config.MaxTakeovers takeovers of that chain; the opening fails if a
// rival took the first meanwhile. The first is checked (its epoch record
// and its checkpoint, asked at once: a rival seals the checkpoint before
// it mints, so a checkpoint still carrying this process's seal shows it
// held the chain when it was read) before each later chain is started, since a chain's opening can report
// success after a rival already took it over, and once more when every
// chain serves (not with Config.AllAtOnce: with no rival, nobody can have
// taken it since its opening returned). So two processes opening one star at once end with one of
// them holding every chain, not with each holding one. A window stays
// in the opening: a rival that passed its check, then lost the first to
// this process, can still take a later chain over from it before the
// rival's final check fails. The chain cores' fencing keeps every ack
// safe; the rival, its check failed, closes the chain cleanly (as every
// opening that finds the first lost closes the later chains it won); and
// the serving star takes the chain back: its shell reports the
// chain's core deposed (Core.ChainLost), and while this process holds the
// first the core retakes it as in the opening (the hold check, the lost
// lane abandoned, StartChain.Depose) and serves again without a second
// report. A read of a hold check that fails is asked again, with its
// pair, up to three rounds.
//
// The shell's loop (loglet's Open, watchChains and Close, or
// loglet/internal/sim's goroutine-free driver):
//
//  1. Call Open (or Close, or Crash) on a Core made by New.
//  2. Take rd := Ready(). Execute each of rd.Requests: each is one call
//     (start a chain's lane and wait for its opening, read an epoch record,
//     read a checkpoint, abandon a chain, close a chain, release what the
//     host opened for the star), and steps exactly one Event back. The
//     requests of one Ready are independent: the shell may run them at
//     once (Close closes every chain at once) but steps their events back
//     in the order they were asked for. Emit rd.Logs.
//  3. Repeat until rd.Opened or rd.Closed: the opening's or the close's
//     result.
//  4. While the star serves, a chain whose core finds itself deposed is
//     reported with ChainLost; then run steps 2 and 3 again until the
//     core asks nothing more (Phase is serving again: a Close waits
//     for that).
//
// Invariants kept here: a process serves a star only while it holds its
// first chain, checked after every chain opened; a failed opening
// abandons every chain it started, last started first, before it reports
// the failure; Close releases what the host opened for the star only
// after every chain closed.
package starcore
