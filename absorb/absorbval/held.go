package absorbval

import "github.com/flightlog/flightlog/metastore/metaval"

// Progress is how far a committer got with a split round: the refs before
// Written are there, and no chunk at or past Tried was sent. A retry of the
// same round resumes at Written and checks only the refs it may have sent,
// rather than every ref of the round: a round of thousands of refs under a
// flaky metastore would otherwise fail its checks at every retry and never
// finish. The zero Progress is no progress.
type Progress struct {
	Round          Round
	N              int    // refs in the round
	Last           string // the key of its last ref (the same refs)
	Written, Tried int
}

// Held is what a committer holds, as a value: the checkpoint as its owner
// last wrote it (carrying its seal), its version, and the progress of a
// split round.
type Held struct {
	Checkpoint Checkpoint
	Version    metaval.Version
	Progress   Progress
}
