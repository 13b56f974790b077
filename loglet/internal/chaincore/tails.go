package chaincore

import (
	"maps"
	"slices"
	"strings"

	absorb "github.com/flightlog/flightlog/absorb/absorbval"
)

// tailMap is the core's tails (absorb.StreamTail by stream ID) as a
// persistent map: freeze returns an immutable view of it in O(1), and the
// core goes on writing. It is a fixed two-level trie of small maps (the
// stream ID's hash picks a mid node, then a shard); every node carries the
// generation that made it, freeze moves the generation on, and a write
// copies each node on its path that an older generation made (the root and
// a mid node: tailFan pointers; a shard: its few tails). So a full tails
// snapshot of a million streams costs the loop nothing to hand over (the
// executor encodes the view), and a round after it copies only the shards
// it changes.
type tailMap struct {
	gen  uint64
	root *tailRoot
	n    int
	hint int // the size new shards are made for (TailsBuilder.Expect)
}

// tailFan is the fan-out of both levels: tailFan² shards (16,384: about
// 60 tails each at a million streams).
const tailFan = 128

type tailRoot struct {
	gen  uint64
	mids [tailFan]*tailMid
}

type tailMid struct {
	gen    uint64
	shards [tailFan]*tailShard
}

type tailShard struct {
	gen uint64
	m   map[string]absorb.StreamTail
}

// tailSlot is id's place: the mid node and the shard within it (FNV-1a).
func tailSlot(id string) (int, int) {
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h = (h ^ uint32(id[i])) * 16777619
	}
	return int(h % tailFan), int(h / tailFan % tailFan)
}

// lookupTail finds id's tail under root.
func lookupTail(root *tailRoot, id string) (absorb.StreamTail, bool) {
	if root == nil {
		return absorb.StreamTail{}, false
	}
	i, j := tailSlot(id)
	mid := root.mids[i]
	if mid == nil || mid.shards[j] == nil {
		return absorb.StreamTail{}, false
	}
	t, ok := mid.shards[j].m[id]
	return t, ok
}

func (t *tailMap) get(id string) (absorb.StreamTail, bool) { return lookupTail(t.root, id) }

// len is the number of streams with a tail.
func (t *tailMap) len() int { return t.n }

// set records id's tail.
func (t *tailMap) set(id string, v absorb.StreamTail) {
	sh := t.shard(id)
	if _, ok := sh.m[id]; !ok {
		t.n++
	}
	sh.m[id] = v
}

// del forgets id's tail.
func (t *tailMap) del(id string) {
	if _, ok := t.get(id); !ok {
		return
	}
	delete(t.shard(id).m, id)
	t.n--
}

// shard returns id's shard, writable: every node on its path made by this
// generation (copied from a frozen one, or new).
func (t *tailMap) shard(id string) *tailShard {
	if t.root == nil {
		t.root = &tailRoot{gen: t.gen}
	} else if t.root.gen != t.gen {
		r := *t.root
		r.gen = t.gen
		t.root = &r
	}
	i, j := tailSlot(id)
	mid := t.root.mids[i]
	switch {
	case mid == nil:
		mid = &tailMid{gen: t.gen}
		t.root.mids[i] = mid
	case mid.gen != t.gen:
		m := *mid
		m.gen = t.gen
		mid = &m
		t.root.mids[i] = mid
	}
	sh := mid.shards[j]
	switch {
	case sh == nil:
		sh = &tailShard{gen: t.gen, m: make(map[string]absorb.StreamTail, t.hint)}
		mid.shards[j] = sh
	case sh.gen != t.gen:
		sh = &tailShard{gen: t.gen, m: maps.Clone(sh.m)}
		mid.shards[j] = sh
	}
	return sh
}

// freeze returns the tails as they are now, never to change: no node
// reachable from the view is written again (the next write copies it).
func (t *tailMap) freeze() TailsView {
	v := TailsView{root: t.root, n: t.n, gen: t.gen}
	t.gen++
	return v
}

// adopt lays a frozen view over the map (an executor built it off the
// loop: TailsBuilder). Into an empty map the view is taken whole, in
// O(1), and stays frozen: the map's generation moves past every node in
// it, so the next write copies what it changes.
func (t *tailMap) adopt(v TailsView) {
	if v.flat != nil || t.n > 0 {
		v.each(t.set)
		return
	}
	t.root, t.n = v.root, v.n
	t.gen = max(t.gen, v.gen) + 1
}

// TailsView is a frozen copy of a chain's tails (absorb.StreamTail by
// stream ID): immutable, and cheap to make (the core's tails are a
// persistent map; a delta's few tails are a list). A request or an event
// carries it as a value.
type TailsView struct {
	root *tailRoot
	flat []tailEntry // a delta's tails, in no order (root nil)
	n    int
	gen  uint64 // no node under root is of a later generation
}

type tailEntry struct {
	id   string
	tail absorb.StreamTail
}

// Len is the number of streams in the view.
func (v TailsView) Len() int { return v.n }

// Get returns id's tail.
func (v TailsView) Get(id string) (absorb.StreamTail, bool) {
	if v.flat != nil {
		for _, e := range v.flat {
			if e.id == id {
				return e.tail, true
			}
		}
		return absorb.StreamTail{}, false
	}
	return lookupTail(v.root, id)
}

// each calls fn with every tail of the view in an order that depends only
// on the view's content (the trie's, each shard's streams by ID; a list's
// by ID), so two encodings of the same tails are the same bytes.
func (v TailsView) each(fn func(id string, t absorb.StreamTail)) {
	if v.flat != nil {
		idx := make([]int, len(v.flat))
		for i := range idx {
			idx[i] = i
		}
		slices.SortFunc(idx, func(a, b int) int { return strings.Compare(v.flat[a].id, v.flat[b].id) })
		for _, i := range idx {
			fn(v.flat[i].id, v.flat[i].tail)
		}
		return
	}
	if v.root == nil {
		return
	}
	var ids []string
	for _, mid := range v.root.mids {
		if mid == nil {
			continue
		}
		for _, sh := range mid.shards {
			if sh == nil || len(sh.m) == 0 {
				continue
			}
			ids = ids[:0]
			for id := range sh.m {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			for _, id := range ids {
				fn(id, sh.m[id])
			}
		}
	}
}

// Map returns the view as a new map (the caller's to keep).
func (v TailsView) Map() map[string]absorb.StreamTail {
	out := make(map[string]absorb.StreamTail, v.n)
	v.each(func(id string, t absorb.StreamTail) { out[id] = t })
	return out
}

// Encode renders the view as a tails snapshot object as of (epoch, next)
// over base ("" for a full snapshot): absorb's binary format, streams in
// the view's order (each).
func (v TailsView) Encode(epoch, next uint64, base string) ([]byte, error) {
	e := absorb.NewTailsEncoder(absorb.TailsHeader{Epoch: epoch, Next: next, Base: base, Streams: v.n}, 0)
	v.each(e.Add)
	return e.Finish()
}

// TailsViewOf returns a view of m's tails (a copy: m stays the caller's).
func TailsViewOf(m map[string]absorb.StreamTail) TailsView {
	var b TailsBuilder
	for id, t := range m {
		b.Set(id, t)
	}
	return b.View()
}

// TailsBuilder builds a TailsView, for an executor decoding a tails
// snapshot off the core's loop (absorb.DecodeTailsFunc): the core adopts
// the view whole instead of inserting every stream itself. Not safe for
// concurrent use; the zero value is an empty builder.
type TailsBuilder struct {
	m tailMap
}

// Set records id's tail (a later Set of the same id replaces it: a delta
// laid over its base).
func (b *TailsBuilder) Set(id string, t absorb.StreamTail) { b.m.set(id, t) }

// Len is the number of streams set.
func (b *TailsBuilder) Len() int { return b.m.len() }

// Expect sizes the builder for n streams (a snapshot's header says how
// many), so its shards are not grown one insert at a time.
func (b *TailsBuilder) Expect(n int) { b.m.hint = n / (tailFan * tailFan) }

// View freezes what was set; later Sets do not change the view.
func (b *TailsBuilder) View() TailsView { return b.m.freeze() }
