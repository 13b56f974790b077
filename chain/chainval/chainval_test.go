package chainval

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/flightlog/flightlog/objstore"
)

func TestTally(t *testing.T) {
	tl := Tally{K: 3, W: 2}
	if tl.Add(CopyResult{Status: CopyFailed}) || !tl.Reachable() {
		t.Fatal("one failure of three must leave W=2 reachable")
	}
	if tl.Add(CopyResult{Status: CopyForeign}) || tl.Reachable() {
		t.Fatal("a failure and a foreign copy leave W=2 unreachable")
	}
	tl = Tally{K: 3, W: 2}
	tl.Add(CopyResult{Status: CopyOurs})
	if !tl.Add(CopyResult{Status: CopyOurs}) {
		t.Fatal("the second copy of ours must report durable")
	}
	if tl.Add(CopyResult{Status: CopyOurs}) {
		t.Fatal("durable must be reported once")
	}
}

func TestKeysAndNames(t *testing.T) {
	if k := SlotKey("s1", Standard, 3, 17); k != "chains/s1/standard/00000000000000000003/00000000000000000017" {
		t.Fatalf("slot key %q", k)
	}
	for _, n := range []string{"a", "..", "a/b", "../../etc/passwd", "ü日本", "x y%z"} {
		k := StreamKey(n)
		if strings.ContainsAny(k, "/ ") || k == "." || k == ".." {
			t.Errorf("StreamKey(%q) = %q is unsafe in a key", n, k)
		}
		if err := objstore.ValidateKey("settled/" + k + "/0"); err != nil {
			t.Errorf("StreamKey(%q) = %q: %v", n, k, err)
		}
	}
	if StreamKey("a") == StreamKey("b") || StreamKey("a%41") == StreamKey("aA") {
		t.Fatal("stream keys collide")
	}
	for _, bad := range []string{"", "a\x00b", "a\nb", string([]byte{0xff}), strings.Repeat("x", 513)} {
		if err := ValidateStreamName(bad); !errors.Is(err, ErrInvalidName) {
			t.Errorf("ValidateStreamName(%q) = %v", bad, err)
		}
	}
	for _, bad := range []string{"", "A", "a/b", ".x", "a b"} {
		if err := ValidateStarName(bad); err == nil {
			t.Errorf("ValidateStarName(%q) accepted", bad)
		}
	}
	// Placement is stable and spreads.
	stars := []string{"a", "b", "c", "d"}
	seen := map[string]int{}
	for i := 0; i < 4000; i++ {
		n := "stream-" + string(rune('a'+i%26)) + strings.Repeat("x", i%7) + string(rune(i))
		s := PlaceStream(n, stars)
		if s != PlaceStream(n, stars) {
			t.Fatal("placement is not stable")
		}
		seen[s]++
	}
	for _, s := range stars {
		if seen[s] < 700 {
			t.Errorf("star %s got %d of 4000 streams", s, seen[s])
		}
	}
}

// TestEpochRecordCompat: a record written before Cuts and Seal existed
// still reads, and an unsealed record without cuts encodes without them.
func TestEpochRecordCompat(t *testing.T) {
	var rec EpochRecord
	if err := json.Unmarshal([]byte(`{"epoch":3,"owner":"p","window":4,"k":1,"w":1,"buckets":["b"],"counter":5}`), &rec); err != nil || rec.Epoch != 3 || rec.Cuts != nil || rec.Seal != nil {
		t.Fatalf("%+v %v", rec, err)
	}
	b, _ := json.Marshal(rec)
	if string(b) != `{"epoch":3,"owner":"p","window":4,"k":1,"w":1,"buckets":["b"],"counter":5}` {
		t.Fatalf("encoded %s", b)
	}
}
