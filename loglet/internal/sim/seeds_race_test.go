//go:build race

package sim

import "time"

// ciSeeds is the default seed budget of a race build: `go test -race
// ./loglet/internal/sim` runs seeds 1-16 in about 20 s on two cores. (The race
// detector makes a seed ~15x slower; the non-race budget is larger.)
const ciSeeds = 16

// coreSeeds is TestCoreSim's budget in a race build (each seed runs twice).
const coreSeeds = 32

// soakFirst, soakSeeds and soakFor are TestCoreSoak's budget in a race
// build: one seed of three virtual hours (a simulated day takes minutes
// under the race detector; the non-race budget runs days), seed 2, whose
// metastore takes merges and which trims and takes over in that time.
const (
	soakFirst = 2
	soakSeeds = 1
	soakFor   = 3 * time.Hour
)
