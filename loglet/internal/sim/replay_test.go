package sim

import (
	"strings"
	"testing"
)

// coreSeedRange is a core-level simulation's seeds: 1..coreSeeds, or the one
// seed a -sim.*.seed flag names, or as many as its -sim.*.seeds flag says.
func coreSeedRange(seed uint64, seeds int) (first uint64, n int) {
	first, n = 1, coreSeeds
	if seed != 0 {
		first, n = seed, 1
	}
	if seeds > 0 {
		n = seeds
	}
	return first, n
}

// seedRun is what replayTwice needs of one run of a seed.
type seedRun struct {
	trace      uint64
	steps      int
	violations []string
	plan       string // printed with the violations, if any
}

// replayTwice runs each seed of [first, first+n) twice, the first time
// with its trace on stderr if trace is set: a seed must find no violation
// and replay its exact trace (equal hashes and step counts). each is
// called with the first run's result (to add it to the totals). It returns
// how many seeds failed and how many replayed.
func replayTwice[R any](t *testing.T, first uint64, n int, trace bool, run func(seed uint64, trace bool) R,
	view func(R) seedRun, replay func(seed uint64) string, each func(R)) (failed, replayed int) {
	t.Helper()
	for s := first; s < first+uint64(n); s++ {
		r := run(s, trace)
		a, b := view(r), view(run(s, false))
		if a.trace == b.trace && a.steps == b.steps {
			replayed++
		} else {
			t.Errorf("seed %d did not replay: trace %x (%d steps), then %x (%d steps); replay: %s", s, a.trace, a.steps, b.trace, b.steps, replay(s))
		}
		if len(a.violations) > 0 {
			failed++
			t.Errorf("seed %d: %d violations:\n  %s\nplan: %s\nreplay: %s", s, len(a.violations), strings.Join(a.violations, "\n  "), a.plan, replay(s))
		}
		each(r)
	}
	return failed, replayed
}
