package fault

import (
	"math/rand/v2"
	"sync"

	"github.com/cespare/xxhash/v2"
)

// Draws is a deterministic source of random draws keyed by what a call is
// rather than by when it arrives: each call of Rand gets a generator
// seeded by the Draws' seed, a hash of the call's key parts, and how many
// calls with the same parts came before it. What one call draws therefore
// depends only on the seed, its parts and its rank among the calls with
// those parts, not on how concurrent calls interleave, so a seeded run
// replays however goroutines are scheduled.
//
// Every Injector draws from one; a wrapper of its own (a simulated bucket
// that loses writes, a store that answers late) uses one to stay replayable
// the same way.
//
// A Draws keeps one counter per distinct key for its whole life: memory
// grows with the number of distinct keys drawn for, which suits a test or
// a bounded run, not an unbounded production path. It is safe for
// concurrent use, but calls with the same parts that race each other get
// their ranks in the order they take its lock, so a caller that needs the
// ranks fixed issues such calls in a fixed order.
type Draws struct {
	seed  uint64
	mu    sync.Mutex
	calls map[uint64]uint64
}

// NewDraws returns a Draws for seed.
func NewDraws(seed uint64) *Draws { return &Draws{seed: seed, calls: map[uint64]uint64{}} }

// Rand returns the generator of the next call keyed by parts. The parts
// are delimited, so ("put", "k") and ("pu", "tk") are different keys. The
// generator is the caller's alone (it is not safe for concurrent use).
func (d *Draws) Rand(parts ...string) *rand.Rand {
	h := xxhash.New()
	for _, p := range parts {
		_, _ = h.WriteString(p)
		_, _ = h.Write([]byte{0})
	}
	k := h.Sum64()
	d.mu.Lock()
	n := d.calls[k]
	d.calls[k] = n + 1
	d.mu.Unlock()
	return rand.New(rand.NewPCG(d.seed^k, n^0x9e3779b97f4a7c15))
}
