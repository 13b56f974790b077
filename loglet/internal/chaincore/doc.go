// Package chaincore is the pure core of one chain's runtime, its lane's
// decision maker (docs/design.md, "The lane: a pure core and a thin shell"),
// after etcd-raft's raft.RawNode: every decision of one chain (star, class)
// is made here, and nothing else happens here. It owns admission
// (sequencing, MatchSeqNum, the producer window: producers.go), the cut (flush deadline, flight size), the
// claim and the window, durable → release in strict slot order, the outcome
// of every batch in order and in one place, halts, the succession protocol
// (fence, ack below the cut, binding mint, probe, then republish or walk:
// one sub-machine for halt recovery and takeover), absorb pacing, the
// backlog's accounting and its stall diagnosis, and a clean close. It does
// no I/O, starts no goroutine and reads no clock: time and I/O results
// arrive as events.
//
// It imports no store package. What it decides with (records, keys,
// results, sentinel errors) comes from the pure halves chain/chainval,
// absorb/absorbval, settle/settleval, metastore/metaval and
// objstore/objval, imported under the names of the packages that re-export
// them, so chain.EpochRecord here is the very type chain's callers use;
// internal/depcheck fails if a core gains an I/O dependency.
//
// The shell's loop (loglet's lane, or loglet/internal/sim's goroutine-free driver):
//
//  1. Hold one lock around every call into the Core.
//  2. Producers call Admit (having reserved the batch's bytes in the pool
//     budget); an error means nothing was admitted.
//  3. The loop takes rd := Ready() and calls Advance(rd) under the lock,
//     then, outside it: starts one worker per rd.Requests entry (each steps
//     back exactly one Event; each makes the one I/O call its request
//     names, but for Settle, whose pass still has one coarse step:
//     docs/design.md, "The lane"), cancels the workers of rd.Cancels, returns rd.PoolFreed to
//     the pool budget, delivers rd.Outcomes in order (then wakes readers of
//     rd.Released), emits rd.Logs (and rd.Slots, the released slots, at
//     debug level), and reports rd.Opened to Open.
//  4. It waits for the next event, or for rd.WakeAt (then steps Tick), and
//     steps it in; Step(now, ev) applies it and decides whatever follows.
//  5. Close starts a clean close; when it cannot finish in time, Abort
//     ends it. Once rd.Stopped, the shell cancels every worker and stops.
//
// A worker holds no state and makes no decision. A request carries every
// value its worker needs, and nothing the worker could change under the
// core (no pointer, map or func: a Render carries its batches as values,
// RenderStream and RenderPart, built by the core): the checkpoint this process holds and its version are the core's
// (absorb.Held), a request that writes the checkpoint (Mint, CommitRound,
// MarkRoundPending, CommitRefs, AdvanceRound, SealEpoch) carries a copy, and its event brings the next value back. What
// takes several I/O calls is several requests, issued one at a time, each
// result a step of the core's state machine: the fence (ReadTrimCursor,
// ReadEpoch, Fence, then ReadTrimCursor and ReadEpoch again: a cut recorded
// by a successor wins, the fence starts at the trim cursor, settlement that
// overtakes it makes it run again, a bounded number of times), an absorb
// round (PutSnapshot, CommitRound, DropSnapshots; a round too large for one
// metastore Commit is MarkRoundPending, CommitRefs per chunk and
// AdvanceRound in place of CommitRound), and the first opening
// (MintFirst, CreateCheckpoint). So every decision between two I/O calls is
// in a trace script (testdata), and the core simulator interleaves them.
//
// Invariants kept here: an ack is released only when its slot is durable
// at W and every earlier slot has acked (invariant 1); per stream, sequence
// numbers are contiguous and assigned once (2); one loop cuts and claims,
// so cut order is slot order (3); the pool and the backlog are bounded (5);
// every batch ends in exactly one outcome, decided once (7). With -tags
// invariants, "cannot happen" conditions are asserted and the planted bugs
// of internal/invariants can be switched on.
package chaincore
