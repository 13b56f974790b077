package chaincore

import (
	"fmt"
	"slices"
	"testing"
	"time"

	absorb "github.com/flightlog/flightlog/absorb/absorbval"
	settle "github.com/flightlog/flightlog/settle/settleval"
)

// settledRef is a settled ref of stream id over [start, end) holding raw
// bytes.
func settledRef(id string, start, end uint64, raw int) settle.KnownRef {
	return settle.KnownRef{Key: fmt.Sprintf("refs/%s/%d", id, end), Ref: absorb.SpanRef{Stream: id, Start: start, End: end,
		Extents: []absorb.Extent{{Key: fmt.Sprintf("settled/%s/%d-%d", id, start, end), RawLength: uint32(raw)}}}}
}

func streamsOf(ks []settle.KnownRef) []string {
	var out []string
	for _, k := range ks {
		out = append(out, k.Ref.Stream)
	}
	return out
}

// TestIdleTable: a stream is named once it has had nothing settled for
// the idle period and its tail is two small objects or more (or one with
// what lies before it unknown); a big last object, a stream settled again,
// or one a pass looked at is not named; a failed look is named again.
func TestIdleTable(t *testing.T) {
	const after = time.Minute
	small, big := 1<<10, settle.DefaultTargetBytes/2
	t0 := time.Unix(1_700_000_000, 0)
	var tb idleTable
	tb.noteSettled(settle.Result{Settled: []settle.KnownRef{
		settledRef("a", 0, 10, small), // a: small from its start: one only
		settledRef("b", 0, 10, big), settledRef("c", 0, 10, small), settledRef("d", 5, 10, small),
	}}, t0)
	tb.noteSettled(settle.Result{Settled: []settle.KnownRef{
		settledRef("b", 10, 12, small), settledRef("c", 10, 12, small), // c: two small ones
		settledRef("e", 0, 10, big), // e: big at its tail
	}}, t0.Add(10*time.Second))
	if got := tb.take(t0.Add(after-time.Second), after); len(got) != 0 {
		t.Fatalf("named %v before any stream was idle", streamsOf(got))
	}
	if d := tb.due(after); !d.Equal(t0.Add(after)) {
		t.Fatalf("due %v, want %v (d, unknown before its small object)", d.Sub(t0), after)
	}
	got := streamsOf(tb.take(t0.Add(after), after))
	if want := []string{"d"}; !slices.Equal(got, want) {
		t.Fatalf("at the first idle period named %v, want %v", got, want)
	}
	tb.passed(settle.Result{IdleLooked: got}, t0.Add(after), after)
	// c settles again: its note at +10s is stale; b's small one follows
	// a big one: not worth a look.
	tb.noteSettled(settle.Result{Settled: []settle.KnownRef{settledRef("c", 12, 13, small)}}, t0.Add(20*time.Second))
	got = streamsOf(tb.take(t0.Add(after+10*time.Second), after))
	if len(got) != 0 {
		t.Fatalf("named %v at +%v, want none (c settled again at +20s)", got, after+10*time.Second)
	}
	got = streamsOf(tb.take(t0.Add(after+20*time.Second), after))
	if want := []string{"c"}; !slices.Equal(got, want) {
		t.Fatalf("named %v, want %v", got, want)
	}
	// The pass failed to look at c: named again at once; then it looks.
	tb.passed(settle.Result{}, t0.Add(after+21*time.Second), after)
	got = streamsOf(tb.take(t0.Add(after+21*time.Second), after))
	if want := []string{"c"}; !slices.Equal(got, want) {
		t.Fatalf("after a failed look named %v, want %v", got, want)
	}
	merged := settledRef("c", 0, 13, 3*small) // the merge: the pass's settled ref
	r := settle.Result{Settled: []settle.KnownRef{merged}, IdleLooked: []string{"c"}}
	tb.noteSettled(r, t0.Add(after+22*time.Second))
	tb.passed(r, t0.Add(after+22*time.Second), after)
	if got := tb.take(t0.Add(10*after), after); len(got) != 0 {
		t.Fatalf("named %v after every tail was looked at", streamsOf(got))
	}
	if d := tb.due(after); !d.IsZero() {
		t.Fatalf("due %v with nothing to merge", d)
	}
}

// TestIdleTableBounded: the table forgets the least recently settled
// streams past maxIdleStreams, and its queue stays bounded.
func TestIdleTableBounded(t *testing.T) {
	var tb idleTable
	t0 := time.Unix(1_700_000_000, 0)
	for i := range maxIdleStreams + 100 {
		tb.noteSettled(settle.Result{Settled: []settle.KnownRef{settledRef(fmt.Sprint(i), 0, 1, 1)}}, t0.Add(time.Duration(i)*time.Millisecond))
	}
	for i := range 3 * maxIdleStreams {
		tb.noteSettled(settle.Result{Settled: []settle.KnownRef{settledRef("hot", uint64(i), uint64(i+1), 1)}}, t0.Add(time.Hour+time.Duration(i)))
	}
	if len(tb.m) > maxIdleStreams {
		t.Fatalf("table holds %d streams, bound %d", len(tb.m), maxIdleStreams)
	}
	if len(tb.q) > 2*len(tb.m)+64 {
		t.Fatalf("queue holds %d notes for %d streams", len(tb.q), len(tb.m))
	}
	if _, ok := tb.m["0"]; ok {
		t.Fatalf("the least recently settled stream is still known")
	}
}
