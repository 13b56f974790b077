// Package repair checks the copies of a chain's slots and tails snapshots
// byte for byte, and repairs the damaged or missing ones that can be
// repaired without changing any outcome. It is the library under
// `flightlog fsck` and `fsck --repair`, and under the loglet's
// (*Star).RepairUnderReplicated, which feeds it the write path's
// under-replicated list.
//
// CheckSlot reads every copy of one slot whole (envelope, footer, every
// frame) by point lookups, never a listing, and classifies each: good,
// missing, poison, corrupt (with what failed), foreign or unreachable.
// CheckSnapshots does the same for the tails snapshot a checkpoint names
// and the full snapshot it builds on.
//
// RepairSlot re-copies a slot from a good copy into the buckets whose copy
// is missing or corrupt: the same bytes, by deleting the bad copy and then
// PutIfAbsent. RepairSnapshots re-copies a snapshot the same way, or, when
// no copy is sound, rebuilds it from the span refs in the metastore (a
// full snapshot as of the same position, at the same key).
//
// # Invariant: a repair never changes an outcome
//
// A slot is committed (W flight copies) or dead (K−W+1 poisons), never
// both, and neither is revoked; a fence decides from the occupants it finds,
// counting a copy as a flight by its envelope alone. A repair may run beside
// a live leader (still writing straggler copies) and a fencer (a successor,
// or the leader's own halt recovery, poisoning every free bucket of the
// slots it fences). So:
//
//  1. Only a settled slot is repaired. Settled means its outcome is fixed
//     and known to be "committed": it lies below its epoch's recorded cut,
//     or below the checkpoint in the checkpoint's epoch (absorbed), or the
//     caller has evidence (Evidence: a span ref points into it, or the
//     caller's own leader released it), or W good copies of one flight
//     exist. An undetermined slot (fewer than W good copies in the live
//     epoch, unabsorbed, no evidence) is refused: copying it could make a
//     flight committed that its leader already reported as not committed
//     (a halt at a missed commit deadline fails the flight, and a fence
//     that then finds W copies would call it committed). A slot at or past
//     its epoch's cut is refused (nothing there ever counts), and so is one
//     behind the trim cursor (it was trimmed on purpose; a copy would only
//     resurrect garbage).
//
//  2. Copies are the same bytes as a good copy, envelope and nonce
//     included. A live leader's straggler PUT that then finds our copy
//     reads its own nonce and counts it as its own (a ghost PUT,
//     chain.WriteCopy's CopyOurs with Ghost set), never as a foreign
//     occupant: it does not halt the epoch. A straggler that lands first
//     makes our PutIfAbsent find an object, which we read back and accept
//     when it is a good copy of the same flight.
//
//  3. The delete opens a hole in one bucket. Where a fence may still run
//     over the slot (the live epoch, no cut recorded, at or past the
//     checkpoint), a fencer's poison may land in that hole. That is safe
//     only if the other buckets still hold W flight envelopes of the slot's
//     nonce: then the fence decides committed whatever lands in the hole.
//     A copy whose delete would leave fewer is refused (deleting it could
//     let K−W+1 poisons kill a slot whose flight was acked). A missing copy
//     needs no delete: filling it only ever adds a flight copy, which for a
//     settled slot cannot change the outcome. Below a cut or below the
//     checkpoint no fence ever runs again, and any hole is safe. When a
//     poison (or anything else) lands in the hole first, the repair leaves
//     it and says so: poison in up to K−W buckets of a committed slot is
//     normal.
//
//  4. Only copies classified as missing or corrupt are touched; a good,
//     poisoned, foreign or unreachable copy is never deleted, and the
//     source copy never is. Objects are write-once, so a copy read as
//     corrupt stays corrupt until someone deletes it; the repair reads it
//     again just before its delete. Two repairs of one slot at once are
//     safe (each only deletes copies it read as bad and writes the same
//     bytes) but may each delete the other's fresh copy: run one at a
//     time.
//
// Snapshots follow the same rules where they apply: a snapshot's content is
// determined by its key (its position and its writer), the leader never
// writes an existing key again and reads snapshots only at a takeover, so a
// re-copy or a rebuild at the same key is what the leader would have
// written. A rebuild is refused when a ref cannot be decoded or points
// outside the chain's slots (the tails it would write could be wrong, and a
// wrong tail keeps every takeover from continuing the stream). Readers that
// hit the hole between delete and PutIfAbsent see the snapshot gone, as
// they do when an absorb supersedes one, and retry. A snapshot the
// checkpoint no longer names (superseded meanwhile) is left alone: writing
// it back would only resurrect an orphan.
package repair
