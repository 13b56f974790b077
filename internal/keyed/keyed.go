// Package keyed gives each call of a fault-injecting wrapper its own random
// source, keyed by what the call is rather than by when it arrives: a
// generator seeded by the wrapper's seed, a hash of the call's key parts
// and how many calls with the same parts came before. What one call draws
// then does not depend on how concurrent calls interleave, so a seeded run
// replays however goroutines are scheduled.
//
// A Source keeps one counter per distinct key for its whole life: it is a
// test helper, not something for a production path.
package keyed

import (
	"math/rand/v2"

	"github.com/cespare/xxhash/v2"
)

// Source hands out keyed generators. It is not safe for concurrent use:
// callers hold their own lock.
type Source struct {
	seed  uint64
	calls map[uint64]uint64
}

// New returns a Source for seed.
func New(seed uint64) *Source { return &Source{seed: seed, calls: map[uint64]uint64{}} }

// Rand returns the generator of the next call keyed by parts.
func (s *Source) Rand(parts ...string) *rand.Rand {
	d := xxhash.New()
	for _, p := range parts {
		_, _ = d.WriteString(p)
		_, _ = d.Write([]byte{0})
	}
	h := d.Sum64()
	n := s.calls[h]
	s.calls[h] = n + 1
	return rand.New(rand.NewPCG(s.seed^h, n^0x9e3779b97f4a7c15))
}
