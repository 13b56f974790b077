package chaincore

import (
	"fmt"
	"strings"
	"testing"
)

// TestRenderOfGroupsByStream checks a Render's values: each stream's
// batches in arrival order, streams in first-arrival order, the payloads
// the batches' own, and the scratch index left clean for the next flight.
func TestRenderOfGroupsByStream(t *testing.T) {
	a, b := &Stream{name: "a"}, &Stream{name: "b"}
	mk := func(st *Stream, start uint64, n int) *Batch {
		return &Batch{Stream: st, Start: start, Count: n, Payload: []byte(fmt.Sprintf("%s%d", st.name, start))}
	}
	batches := []*Batch{mk(a, 0, 2), mk(b, 5, 1), mk(a, 2, 3), mk(b, 6, 1), mk(a, 5, 1)}
	got := renderOf(batches)
	var parts []string
	for _, st := range got {
		for _, p := range st.Parts {
			parts = append(parts, fmt.Sprintf("%s[%d,%d)=%s", st.Name, p.Start, p.Start+uint64(p.Count), p.Payload))
		}
	}
	want := "a[0,2)=a0 a[2,5)=a2 a[5,6)=a5 b[5,6)=b5 b[6,7)=b6"
	if s := strings.Join(parts, " "); s != want || len(got) != 2 {
		t.Fatalf("renderOf: %d streams %s, want 2 streams %s", len(got), s, want)
	}
	if a.renderIdx != 0 || b.renderIdx != 0 {
		t.Fatalf("scratch index left set: a %d, b %d", a.renderIdx, b.renderIdx)
	}
	// The streams' parts share one array: appending to one must not
	// reach into the next.
	if cap(got[0].Parts) != len(got[0].Parts) {
		t.Fatalf("stream a's parts have room into stream b's: len %d cap %d", len(got[0].Parts), cap(got[0].Parts))
	}
}
