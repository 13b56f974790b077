package chaincore

import (
	"fmt"
	"maps"
	"math/rand/v2"
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
