//go:build !race

package sim

// ciSeeds is the default seed budget without the race detector: `go test
// ./loglet/internal/sim` runs seeds 1-300 in about 4 minutes on two cores (the
// workload walks a stream's whole life, reads and damage: a seed costs
// about 0.8 s). CI runs this budget after the race run (scripts/test.sh);
// soaks run thousands (README, Testing).
const ciSeeds = 300

// coreSeeds is TestCoreSim's budget without the race detector: seeds 1-256,
// each run twice and compared trace for trace, in about 6 s.
const coreSeeds = 256

// soakFirst, soakSeeds and soakFor are TestCoreSoak's budget without the
// race detector: three simulated days from seed 1, about 15 s of CPU each.
const (
	soakFirst = 1
	soakSeeds = 3
	soakFor   = DefaultSoak
)
