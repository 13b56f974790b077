package absorb

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/objstore"
)

// countingGets counts the Gets that reach a store.
type countingGets struct {
	objstore.Store
	gets atomic.Int64
}

func (c *countingGets) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	c.gets.Add(1)
	return c.Store.Get(ctx, key, off, n)
}

// TestTailsCacheAgreesWithReadTails: every stream's tail looked up in a
// delta (or past it, in its base) is what ReadTails merges, each snapshot
// object is fetched once however many streams are looked up, a delta over
// a delta is refused as corrupt, and a deleted snapshot reads as gone.
func TestTailsCacheAgreesWithReadTails(t *testing.T) {
	ctx := context.Background()
	store := &countingGets{Store: objstore.NewMem()}
	stores := []objstore.Store{store}
	full := Tails{Epoch: 1, Next: 10, Streams: map[string]StreamTail{}}
	for i := 0; i < 500; i++ {
		full.Streams[fmt.Sprintf("s%03d", i)] = StreamTail{Next: uint64(i + 1), Timestamp: int64(i)}
	}
	baseKey := TailsKey("s", chain.Standard, 1, 10, 1)
	deltaKey := TailsKey("s", chain.Standard, 1, 11, 1)
	delta := Tails{Epoch: 1, Next: 11, Base: baseKey, Streams: map[string]StreamTail{"s007": {Next: 99, Timestamp: 5}, "new": {Next: 1}}}
	for key, tl := range map[string]Tails{baseKey: full, deltaKey: delta} {
		if err := PutSnapshot(ctx, stores, 1, key, EncodeTails(tl)); err != nil {
			t.Fatal(err)
		}
	}
	merged, err := ReadTails(ctx, stores, deltaKey)
	if err != nil {
		t.Fatal(err)
	}
	store.gets.Store(0)
	c := NewTailsCache(4)
	for _, name := range append([]string{"missing"}, keys(merged.Streams)...) {
		got, ok, err := c.Lookup(ctx, stores, deltaKey, name)
		want, wok := merged.Streams[name]
		if err != nil || ok != wok || !reflect.DeepEqual(got, want) {
			t.Fatalf("Lookup(%s) = %+v %v %v; ReadTails has %+v %v", name, got, ok, err, want, wok)
		}
	}
	if n := store.gets.Load(); n != 2 {
		t.Fatalf("%d lookups fetched %d objects; want 2 (the delta and its base, once each)", len(merged.Streams)+1, n)
	}

	// A delta over a delta is corrupt.
	bad := TailsKey("s", chain.Standard, 1, 12, 1)
	if err := PutSnapshot(ctx, stores, 1, bad, EncodeTails(Tails{Epoch: 1, Next: 12, Base: deltaKey, Streams: map[string]StreamTail{}})); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Lookup(ctx, stores, bad, "s001"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("lookup through a delta over a delta: %v", err)
	}
	// A snapshot deleted before it was cached reads as gone.
	gone := TailsKey("s", chain.Standard, 2, 1, 2)
	if _, _, err := NewTailsCache(2).Lookup(ctx, stores, gone, "s001"); !IsSnapshotGone(err) {
		t.Fatalf("lookup in a missing snapshot: %v", err)
	}
}

func keys(m map[string]StreamTail) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
