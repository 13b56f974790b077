package absorbval

import "slices"

// A round is committed in one metastore Commit (its refs and the
// checkpoint) when the backend takes that many ops and bytes; otherwise it
// is split: the checkpoint records the round as pending (so a successor
// replays exactly it), the refs go in chunks that each fit with a check of
// the seal, and the checkpoint then advances. What fits, and where the
// chunks end, is decided here from the sizes of the ops, which the caller
// counts the way its backend does (metastore.OpBytes); absorb's committer
// writes one Commit at a time (CommitAtomic, MarkPending, CommitRefs,
// Advance), and a caller that sequences them itself, as a chain's core
// does, needs nothing else.

// CommitFits reports whether a Commit of n ops and size bytes is within
// the limits maxOps and maxBytes (0: no limit).
func CommitFits(maxOps, maxBytes, n, size int) bool {
	return (maxOps == 0 || n <= maxOps) && (maxBytes == 0 || size <= maxBytes)
}

// RoundFits reports whether a round whose refs' ops take refBytes (one
// each) commits in one Commit with the checkpoint's op, of checkpointBytes.
func RoundFits(maxOps, maxBytes int, refBytes []int, checkpointBytes int) bool {
	size := checkpointBytes
	for _, b := range refBytes {
		size += b
	}
	return CommitFits(maxOps, maxBytes, len(refBytes)+1, size)
}

// PlanChunks splits the refs of a round too large for one Commit, whose
// ops take refBytes, into consecutive chunks that each fit the limits with
// the seal check every chunk carries (checkBytes), greedily in order, and
// returns each chunk's end index. If one ref cannot fit any chunk it
// returns that ref's index as tooLarge (else -1) and no chunks: the round
// must be planned over fewer slots. A backend of fewer than two ops a
// Commit cannot take a chunk at all: the caller refuses it first.
func PlanChunks(maxOps, maxBytes int, refBytes []int, checkBytes int) (ends []int, tooLarge int) {
	n, size := 0, checkBytes // the chunk under way
	for i, b := range refBytes {
		if !CommitFits(maxOps, maxBytes, 2, b+checkBytes) {
			return nil, i
		}
		if n > 0 && !CommitFits(maxOps, maxBytes, n+2, size+b) {
			ends = append(ends, i)
			n, size = 0, checkBytes
		}
		n, size = n+1, size+b
	}
	if n > 0 {
		ends = append(ends, len(refBytes))
	}
	return ends, -1
}

// AdvancedCheckpoint returns the checkpoint a round's commit writes over
// cp: advanced to (round.Epoch, round.To), no round pending, naming the
// snapshot tailsKey and its base tailsBase, recording doomed, its counter
// bumped.
func AdvancedCheckpoint(cp Checkpoint, round Round, tailsKey, tailsBase string, doomed []string) Checkpoint {
	next := cp
	next.Epoch, next.Next, next.Pending, next.Tails, next.TailsBase = round.Epoch, round.To, nil, tailsKey, tailsBase
	next.Doomed = slices.Clone(doomed)
	next.Counter = cp.Counter + 1
	return next
}

// PendingCheckpoint returns cp recording round as pending, its counter
// bumped: a split round's first write.
func PendingCheckpoint(cp Checkpoint, round Round) Checkpoint {
	pend := cp
	pend.Pending = &round
	pend.Counter = cp.Counter + 1
	return pend
}
