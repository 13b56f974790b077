// Package absorbval holds the absorb's values and pure functions: what a
// round, a checkpoint and a tails snapshot are and how they are encoded
// (Round, Checkpoint, SpanRef, Extent, StreamTail, Tails, EncodeTails,
// DecodeTails and the snapshot keys), how a round is planned from the
// released slots (Plan) and how its commit fits the metastore's limits
// (RoundFits, PlanChunks, AdvancedCheckpoint, PendingCheckpoint), the backlog a leader stalls on (Backlog), what a
// committer holds as a value (Held), and the sentinel errors its callers
// compare against (ErrDeposed, ErrSealRaced, ErrEpochMoved, ErrCorrupt,
// ...).
//
// It does no I/O and imports no store package: the loglet's pure cores,
// which decide but never call a store, import it rather than absorb. The
// absorb package re-exports every name here unchanged (absorb.Checkpoint
// is absorbval.Checkpoint; absorb.ErrDeposed is absorbval.ErrDeposed, so
// errors.Is matches either) and holds the I/O: committing rounds, sealing
// checkpoints, writing and reading tails snapshots, rebuilding tails.
package absorbval
