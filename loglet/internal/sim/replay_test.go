package sim

import (
	"fmt"
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
	text       string // the whole trace, if kept: a failed replay shows where the runs part
}

// traceDiff returns where two trace texts part: the first differing line
// with a few lines of context from each, or "" if they are equal.
func traceDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < max(len(al), len(bl)); i++ {
		if i < len(al) && i < len(bl) && al[i] == bl[i] {
			continue
		}
		lo := max(0, i-4)
		part := func(l []string) string {
			return "    " + strings.Join(l[min(lo, len(l)):min(i+3, len(l))], "\n    ")
		}
		return fmt.Sprintf("the traces part at line %d:\n  first run:\n%s\n  second run:\n%s", i+1, part(al), part(bl))
	}
	return ""
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
			if d := traceDiff(a.text, b.text); d != "" {
				t.Log(d)
			}
		}
		if len(a.violations) > 0 {
			failed++
			t.Errorf("seed %d: %d violations:\n  %s\nplan: %s\nreplay: %s", s, len(a.violations), strings.Join(a.violations, "\n  "), a.plan, replay(s))
		}
		each(r)
	}
	return failed, replayed
}
