// Package absorb turns released flights into span refs in the metastore and
// advances the chain's checkpoint: the write path's step 6, off the ack path.
//
// It owns four things:
//
//   - The formats of what the absorb writes: SpanRef (one per stream per
//     round, at refs/<stream-key>/<incarnation>/<end-seq>), the Checkpoint
//     (everything before (Epoch, Next) is absorbed; who sealed it; the pending round; a
//     pointer to the tails snapshot and to its base; the snapshots no
//     longer needed and not yet deleted, so a successor deletes what its
//     predecessor could not), and the tails snapshot object, keyed by the
//     checkpoint its round advances from (TailsRoundKey), so a successor
//     finds one whose round never committed (UncommittedSnapshots).
//   - The round: Plan is a pure function from the released slots of a
//     deterministic range [a, b) to the refs of that range; a Committer
//     writes them and advances the checkpoint in one atomic metastore
//     Commit (CommitAtomic), or, for a round the backend's limits cannot
//     take in one, in one-Commit steps: MarkPending records the range as
//     pending (so a successor replays exactly it), CommitRefs writes each
//     chunk of refs with a check of the seal, Advance moves the checkpoint
//     on. What fits and where the chunks end is pure (absorbval's
//     RoundFits and PlanChunks); a chain's core sequences the steps, and
//     CommitDooming sequences them in one call for other callers.
//   - The seal: SealCheckpoint is a takeover's first step; a Committer holds
//     the seal and writes rounds under it; its MintNext and SealEpoch write
//     the epoch record in the same Commit that checks the seal is still its
//     own (the seal is binding: nobody mints, or seals an epoch cleanly,
//     over another owner's seal). A seal found foreign is a *SealedError
//     (ErrDeposed). What a committer holds is a value (Held: the
//     checkpoint and its version): a caller that
//     owns it, as a chain's core does, builds a committer over it for one
//     call (Resume) and takes the next value back (Committer.Held).
//   - The backlog's accounting (Backlog, pure bookkeeping):
//     claimed-but-unabsorbed flights and bytes are bounded; at the bound the
//     chain's core holds its claims back, and each stall is counted with its
//     diagnosed cause.
//
// Invariants it keeps: refs are created only if absent, so a replay is
// idempotent and never overwrites a ref that settle has repointed; the
// checkpoint only moves forward, by compare-and-swap, and only while its seal
// names this owner, so a deposed leader's absorb stops at its first CAS; the
// number of metastore requests per round does not grow with ingest, and
// rounds are paced, so requests per second per star stay in the tens.
//
// The absorb's values and pure functions (Round, Checkpoint, SpanRef,
// Tails and their encodings and keys, Plan, Backlog, Held, the sentinel
// errors) are declared in absorb/absorbval, which does no I/O, and
// re-exported here under the same names: code that only decides imports
// absorbval, code that commits imports absorb, and both see the same types
// and errors.
package absorb
