//go:build !race

package sim

// ciSeeds is the default seed budget without the race detector: `go test
// ./internal/sim` runs seeds 1-500 in about 30 s on two cores. CI runs this
// budget after the race run (scripts/test.sh).
const ciSeeds = 500

// coreSeeds is TestCoreSim's budget without the race detector: seeds 1-256,
// each run twice and compared trace for trace, in about 6 s.
const coreSeeds = 256
