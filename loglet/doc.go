// Package loglet is flightlog's public facade: named streams a Go service
// appends to and reads from, with acknowledgements that mean "durable in
// object storage".
//
// A Star is the composition root for one star this process leads. For each
// configured class it runs one chain: producers' batches are sequenced and
// admitted to the class's pool; one loop cuts the pool into flights and
// claims their chain slots in order; each flight is rendered once as a
// transit bundle and written with PutIfAbsent to the K buckets of the class;
// a slot is durable at W copies, and acks release strictly in slot order.
// The metastore is not on this path.
//
// Every append ends in exactly one of three ways, and the error says which:
// acked (nil); definitely not committed (errors.Is(err, ErrNotCommitted):
// safe to retry); or outcome unknown (errors.Is(err, ErrOutcomeUnknown):
// retry with Batch.MatchSeqNum to make the retry idempotent).
//
// # A chain's runtime: a pure core and a thin shell
//
// Every decision of a chain is made by its core (loglet/internal/chaincore, after
// etcd-raft's RawNode): admission and sequencing, the cut, the claim and
// window, release in slot order, each batch's outcome in order, halts, the
// succession protocol, absorb pacing, the backlog and its stall diagnosis,
// and the clean close. The core does no I/O, starts no goroutine and reads
// no clock. The shell (lane.go) is the loop that drives it:
//
//  1. One mutex guards the core; producers call Admit under it, after
//     reserving the batch's bytes in the pool budget (where admission
//     blocks at the budget).
//  2. One goroutine takes the core's Ready (and Advances it) under the lock,
//     then executes it outside: one worker per request
//     (loglet/internal/work: one I/O call, one event back; a request
//     carries the values its worker needs, the checkpoint the core holds
//     among them, and its event brings the new values back: a worker holds
//     no state and makes no decision), cancellations,
//     pool budget returned, outcomes delivered in the order decided, read
//     sessions woken, logs emitted.
//  3. It waits for the next event or the core's wake-up time and steps it
//     into the core; the core decides what follows.
//
// Each chain runs under an epoch minted by compare-and-swap. Open mints the
// first epoch of a new chain, continues after a clean Close from the
// recorded seal, or takes the chain over (seal the checkpoint, fence the old
// epoch by point lookups, mint with the seal, garbage-probe, walk and absorb
// every committed slot below the cut). A halt (a foreign occupant, a missed
// commit deadline, a lost seal) is recovered in place by the same
// succession sub-machine: fence the own epoch, ack below the cut, mint the
// next epoch (only while this process holds the checkpoint's seal: the seal
// is binding), republish the rest. A process that finds itself sealed by a
// successor stops leading the chain: its reads go on from history, its
// appends fail with a *NotLeaderError.
//
// Close(ctx) is a cooperative handoff (flush, acks, absorb, clean seal) that
// ends within ctx in every state and returns what failed.
//
// The absorb, off the ack path, turns released flights into span refs in
// the metastore (one Commit per paced round) so any process can read
// history (Reader); until a flight is absorbed the leader serves it from its
// flight index.
//
// Not built yet: settle (rewriting transit data into per-stream settled
// objects) and the trim of chain slots it enables.
package loglet
