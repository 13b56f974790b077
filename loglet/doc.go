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
// What is not built yet (see the project's issues): the absorb that records
// span refs in the metastore (reads are served from the leader's in-memory
// flight index until then), and epochs beyond the first (fencing, halt
// recovery, takeover). A halted chain therefore stays halted, and Open
// refuses a star an earlier process led (ErrTakeoverPending).
package loglet
