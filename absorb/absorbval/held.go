package absorbval

import "github.com/flightlog/flightlog/metastore/metaval"

// Held is what a committer holds, as a value: the checkpoint as its owner
// last wrote it (carrying its seal) and its version. How far a split
// round got is its sequencer's to know (a chain's core keeps it).
type Held struct {
	Checkpoint Checkpoint
	Version    metaval.Version
}
