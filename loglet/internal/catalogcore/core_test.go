package catalogcore

import (
	"strings"
	"testing"
)

// TestStepRefusesWhatDoesNotAnswer: a result that does not answer the
// pending request is an error and leaves the operation as it was; so is a
// step of an operation that is over.
func TestStepRefusesWhatDoesNotAnswer(t *testing.T) {
	ops := map[string]Op{
		"lookup": NewLookup("a", "s1", false),
		"create": NewCreate("a", "s1"),
		"delete": NewDelete("a"),
		"finish": NewFinishDelete(Record{Name: "a", Incarnation: "i1"}, "m1"),
		"trim":   NewTrim("a", "i1", 5),
		"config": NewConfigure("a", "", true),
		"offset": NewCommitOffset(Offset{Group: "g", Stream: "a", Incarnation: "i1", RecordVersion: "r1"}, 3),
	}
	for name, op := range ops {
		before := op.Next()
		if err := op.Step(Reclaimed{}); err == nil || !strings.Contains(err.Error(), "does not answer") {
			t.Errorf("%s: a result of the wrong type: %v, want an error", name, err)
		}
		if op.Next() != before {
			t.Errorf("%s: the pending request changed to %v after a refused step", name, op.Next())
		}
	}
	done := NewCommitOffset(Offset{Next: 4, RecordVersion: "r1"}, 3) // backwards: over at once
	if done.Next() != nil || done.Outcome().Status != Backwards {
		t.Fatalf("a backwards commit: %v %v, want over and backwards", done.Next(), done.Outcome())
	}
	if err := done.Step(OffsetCommitted{}); err == nil {
		t.Error("a step of an operation that is over: no error")
	}
}

// TestMintedOfAnotherNameIsRefused: the shell's mint must be of the name
// asked.
func TestMintedOfAnotherNameIsRefused(t *testing.T) {
	c := NewCreate("a", "s1")
	if err := c.Step(CacheLooked{Token: "#0"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Step(Minted{Record: Record{Name: "b", Incarnation: "i1"}}); err == nil {
		t.Fatal("a minted record of another name: no error")
	}
	if _, ok := c.Next().(MintRecord); !ok {
		t.Fatalf("after a refused mint the create asks %v, want the mint again", c.Next())
	}
}
