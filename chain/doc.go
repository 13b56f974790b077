// Package chain owns the durable artifact of the write path: chain slots in
// a class's bucket set, and the epoch records that name who may write them.
//
// A chain is one (star, class): per epoch, a contiguous sequence of slots at
// chains/<star>/<class>/<epoch>/<slot> in every bucket of the set.
//
// # Invariant
//
// A slot is committed (W buckets hold flight copies of it) or dead (K−W+1
// buckets hold poison), never both, and neither state is ever revoked: W
// flight copies and K−W+1 poisons cannot fit in K buckets, and every object
// is created by a conditional PUT (PutIfAbsent), so a slot key holds at most
// one object per bucket, ever, and nothing replaces it. Only slots below a
// recorded cut (or below the live epoch's release point) count.
//
// # The incumbent
//
// WriteCopy writes one bucket's copy of a flight and resolves it. The
// loglet's chain core claims slots in order, has each flight rendered once,
// and asks for one WriteCopy per bucket, each on a worker of its own
// (loglet/internal/work); it counts the copies against W, and ordering
// never depends on which returns first. WriteFlight does the same for every
// bucket at once; only tests call it. A slot is committed when W buckets
// hold this writer's copy (kind flight, same epoch, slot and nonce); a
// writer that finds any other occupant (a poison, another writer's flight,
// an unreadable object) reports it as foreign, which halts the epoch.
//
// Ambiguous PUT failures (timeouts, 5xx, lost responses) are retried; a
// retry that finds the key occupied probes the 60-byte envelope, and our own
// nonce there means an earlier attempt landed (a ghost PUT): the copy counts.
//
// # Epochs
//
// The epoch record (EpochRecord, at EpochKey) is written only by
// compare-and-swap: MintFirst creates epoch 1, MintNext mints epoch+1 from
// the version the caller read (losing it, ErrMintLost, means a successor
// exists: the caller is deposed), and SealEpoch records a clean Close's cut
// so the next owner skips fencing. The record carries the cuts of earlier
// epochs that walking and reading still need (CutOf). A leader mints and
// seals through absorb.Committer's MintNext and SealEpoch instead, which
// make the same writes in one Commit with a check of the checkpoint's seal
// (the seal is binding); PrepareNext and PrepareSeal build the records for
// both.
//
// # Successors (and the halted incumbent)
//
// Everything below uses point lookups of derivable keys, never a listing:
//
//  1. Fence(epoch, from) finds the cut. For each slot it makes every
//     reachable bucket hold something (a poison with the fencer's nonce, or
//     whatever was there) and decides from the final occupants with Decide:
//     committed, go on; dead, that is the cut. Deciding from occupants, not
//     from what this fencer placed, makes fencing idempotent: a rerun or a
//     racing second fencer reaches the same cut. An undecidable slot blocks
//     with *UndecidedError until ctx ends.
//  2. The caller records the cut (a mint with it in Cuts).
//  3. Walk(from, cut) hands over every committed slot below the cut, from the
//     first good copy in set order (poisoned, short, corrupt and missing
//     copies are skipped).
//  4. GarbageProbe(cut, window) poisons [cut, cut+window) in every bucket so
//     a zombie's delayed PUT finds poison and halts, deleting flight copies
//     found there. Safety never rests on it: the recorded cut governs.
//  5. Trim(from, to) deletes settled slots below the cut from every bucket.
//     Poison at dead slots (at or past a cut) is never trimmed, and no fence
//     may start below a trimmed slot.
//
// The chain's values, keys and sentinel errors (EpochRecord, Cut,
// TrimCursor, Position, SlotKey and the other keys, CopyResult, Tally,
// FenceOptions, FenceResult, ErrDeposed, ...) are declared in chain/chainval,
// which does no I/O, and re-exported here under the same names: code that
// only decides imports chainval, code that writes imports chain, and both
// see the same types and errors.
package chain
