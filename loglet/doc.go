// Package loglet is flightlog's public facade: named streams a Go service
// appends to and reads from, with acknowledgements that mean "durable in
// object storage".
//
// A Star is the composition root for one star this process leads. For each
// configured class it runs one chain (a lane): producers' batches are
// sequenced and admitted to the class's pool; one flusher loop cuts the pool
// into flights and claims their chain slots in order; each flight is rendered
// once as a transit bundle and written with PutIfAbsent to the K buckets of
// the class; a slot is durable at W copies, and acks release strictly in slot
// order. The metastore is not on this path.
//
// Every append ends in exactly one of three ways, and the error says which:
// acked (nil); definitely not committed (errors.Is(err, ErrNotCommitted):
// safe to retry); or outcome unknown (errors.Is(err, ErrOutcomeUnknown):
// retry with Batch.MatchSeqNum to make the retry idempotent).
//
// Each chain runs under an epoch minted by compare-and-swap. Open mints the
// first epoch of a new chain, continues after a clean Close from the
// recorded seal, or takes the chain over (seal the checkpoint, fence the old
// epoch by point lookups, mint, reseal, garbage-probe, walk and absorb every
// committed slot below the cut). A halt (a foreign occupant, a missed commit
// deadline, a lost seal) is recovered in place: fence the own epoch, ack
// below the cut, mint the next epoch, republish the rest.
//
// The absorb, off the ack path, turns released flights into span refs in
// the metastore (one Commit per paced round) so any process can read
// history (Reader); until a flight is absorbed the leader serves it from its
// flight index.
//
// Not built yet: settle (rewriting transit data into per-stream settled
// objects) and the trim of chain slots it enables.
package loglet
