package chaincore

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"testing"

	absorb "github.com/flightlog/flightlog/absorb/absorbval"
)

// TestTailMapFreeze: a view taken by freeze never changes, whatever the
// core writes after it (sets, new streams, deletes, further freezes), and
// the map always reads as a plain map fed the same writes. A view that
// shared a node written after the freeze fails it.
func TestTailMapFreeze(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		rng := rand.New(rand.NewPCG(seed, 26))
		var tm tailMap
		model := map[string]absorb.StreamTail{}
		type frozen struct {
			view TailsView
			want map[string]absorb.StreamTail
		}
		var views []frozen
		for step := 0; step < 20000; step++ {
			id := fmt.Sprintf("s%d", rng.IntN(3000))
			switch r := rng.IntN(100); {
			case r < 1:
				views = append(views, frozen{tm.freeze(), maps.Clone(model)})
			case r < 10:
				tm.del(id)
				delete(model, id)
			default:
				v := absorb.StreamTail{Next: uint64(step)}
				tm.set(id, v)
				model[id] = v
			}
			want, wantOK := model[id]
			if got, ok := tm.get(id); ok != wantOK || got.Next != want.Next {
				t.Fatalf("seed %d step %d: get(%s) = %+v %v, want %+v %v", seed, step, id, got, ok, want, wantOK)
			}
		}
		if tm.len() != len(model) || !maps.EqualFunc(tm.freeze().Map(), model, sameTail) {
			t.Fatalf("seed %d: the map holds %d, want %d as the model", seed, tm.len(), len(model))
		}
		if len(views) == 0 {
			t.Fatalf("seed %d: no view taken", seed)
		}
		for i, f := range views {
			if got := f.view.Map(); f.view.Len() != len(f.want) || !maps.EqualFunc(got, f.want, sameTail) {
				t.Fatalf("seed %d: view %d changed after its freeze: %d streams, want %d", seed, i, f.view.Len(), len(f.want))
			}
		}
	}
}

func sameTail(a, b absorb.StreamTail) bool { return a.Next == b.Next }

// TestTailsViewEncode: a view encodes to a snapshot that decodes to the
// same tails, whether the view is the trie (a full snapshot) or a list (a
// delta), and the same tails encode to the same bytes; a builder fed the
// decode gives back a view of the same tails.
func TestTailsViewEncode(t *testing.T) {
	model := map[string]absorb.StreamTail{}
	var tm tailMap
	for i := range 5000 {
		id := fmt.Sprintf("%04x_s-%d", i*7919%65536, i)
		v := absorb.StreamTail{Next: uint64(i), Timestamp: int64(i) - 100, FencingToken: fmt.Sprint(i % 3)}
		if i%10 == 0 {
			v.Producers = []absorb.ProducerTail{{ID: "p", Seq: uint64(i), Start: 1, End: 2, At: 3}}
		}
		model[id] = v
		tm.set(id, v)
	}
	full := tm.freeze()
	var delta []tailEntry
	for id, v := range model {
		if len(delta) < 100 {
			delta = append(delta, tailEntry{id, v})
		}
	}
	for name, c := range map[string]struct {
		view TailsView
		base string
	}{"full": {full, ""}, "delta": {TailsView{flat: delta, n: len(delta)}, "snapshots/base"}} {
		b, err := c.view.Encode(2, 9, c.base)
		if err != nil {
			t.Fatalf("%s: encode: %v", name, err)
		}
		if again, _ := c.view.Encode(2, 9, c.base); string(again) != string(b) {
			t.Fatalf("%s: two encodings of one view differ", name)
		}
		got, err := absorb.DecodeTails(b)
		if err != nil {
			t.Fatalf("%s: decode: %v", name, err)
		}
		if got.Epoch != 2 || got.Next != 9 || got.Base != c.base || !maps.EqualFunc(got.Streams, c.view.Map(), sameTailDeep) {
			t.Fatalf("%s: decoded %d streams at (%d, %d) over %q, want %d at (2, 9) over %q", name, len(got.Streams), got.Epoch, got.Next, got.Base, c.view.Len(), c.base)
		}
		var bld TailsBuilder
		if _, err := absorb.DecodeTailsFunc(b, func(absorb.TailsHeader) {}, bld.Set); err != nil {
			t.Fatalf("%s: decode into a builder: %v", name, err)
		}
		if v := bld.View(); v.Len() != c.view.Len() || !maps.EqualFunc(v.Map(), c.view.Map(), sameTailDeep) {
			t.Fatalf("%s: the builder's view differs from the encoded one", name)
		}
	}
}

// TestTailMapAdopt: a view adopted whole stays frozen (the core's writes
// after it copy), and one laid over tails already there is merged.
func TestTailMapAdopt(t *testing.T) {
	var b TailsBuilder
	b.Set("a", absorb.StreamTail{Next: 1})
	b.Set("b", absorb.StreamTail{Next: 2})
	view := b.View()
	var tm tailMap
	tm.adopt(view)
	tm.set("a", absorb.StreamTail{Next: 10})
	tm.set("c", absorb.StreamTail{Next: 3})
	if got, _ := view.Get("a"); got.Next != 1 || view.Len() != 2 {
		t.Fatalf("the adopted view changed: a at %d, %d streams", got.Next, view.Len())
	}
	if got, _ := tm.get("a"); got.Next != 10 || tm.len() != 3 {
		t.Fatalf("the map: a at %d, %d streams; want 10, 3", got.Next, tm.len())
	}
	tm.adopt(TailsViewOf(map[string]absorb.StreamTail{"d": {Next: 4}, "a": {Next: 11}}))
	if got, _ := tm.get("a"); got.Next != 11 || tm.len() != 4 {
		t.Fatalf("after a merge: a at %d, %d streams; want 11, 4", got.Next, tm.len())
	}
}

// BenchmarkTailsSnapshot times what a full tails snapshot costs its
// executor at a million streams (IDs shaped as BenchmarkManyStreams'): the encode from the core's frozen view,
// and a successor's decode into the view its core adopts (go test
// ./loglet/internal/chaincore -run '^$' -bench TailsSnapshot -benchtime 3x).
func BenchmarkTailsSnapshot(b *testing.B) {
	const n = 1_000_000
	var tm tailMap
	for i := range n {
		tm.set(fmt.Sprintf("ms-%07d\x1fi%016x", i, uint64(i)*0x9E3779B97F4A7C15), absorb.StreamTail{Next: 2, Timestamp: 1764700000000 + int64(i)})
	}
	view := tm.freeze()
	body, err := view.Encode(2, 100, "")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("encode", func(b *testing.B) {
		for b.Loop() {
			if _, err := view.Encode(2, 100, ""); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(body))/1e6, "MB")
	})
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			var bld TailsBuilder
			if _, err := absorb.DecodeTailsFunc(body, func(h absorb.TailsHeader) { bld.Expect(h.Streams) }, bld.Set); err != nil {
				b.Fatal(err)
			}
			if bld.Len() != n {
				b.Fatalf("%d streams decoded, want %d", bld.Len(), n)
			}
		}
	})
}

func sameTailDeep(a, b absorb.StreamTail) bool { return reflect.DeepEqual(a, b) }
