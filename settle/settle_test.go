package settle_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/settle"
)

// TestMarkerFormat: a marker round-trips, lives under its chain's prefix,
// and one that does not name a settled object is refused (fsck and the
// pass both read them).
func TestMarkerFormat(t *testing.T) {
	obj := chain.SettledKey("a", 0, 4)
	m := settle.Marker{Key: obj, At: 1234, Ref: chain.RefKey("a", 4), Deleting: true}
	got, err := settle.DecodeMarker(m.Encode())
	if err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("DecodeMarker(Encode(%+v)) = %+v, %v", m, got, err)
	}
	// A chunk marker names many objects, pending (with a ref) or doomed;
	// its key is its objects', never a one-object marker's.
	objs := []string{obj, chain.SettledKey("b", 0, 2)}
	c := settle.Marker{At: 1234, Objects: []settle.Named{{Key: objs[0], Ref: chain.RefKey("a", 4)}, {Key: objs[1], Ref: chain.RefKey("b", 2)}}}
	if got, err := settle.DecodeMarker(c.Encode()); err != nil || !reflect.DeepEqual(got, c) || !reflect.DeepEqual(got.Names(), c.Objects) {
		t.Fatalf("DecodeMarker(Encode(%+v)) = %+v, %v", c, got, err)
	}
	if ck := settle.ChunkMarkerKey("s1", chain.Express, objs); !strings.HasPrefix(ck, settle.MarkerPrefix("s1", chain.Express)) ||
		ck == settle.MarkerKey("s1", chain.Express, obj) || ck == settle.ChunkMarkerKey("s1", chain.Express, objs[:1]) || ck != settle.ChunkMarkerKey("s1", chain.Express, objs) {
		t.Fatalf("ChunkMarkerKey %q: not under its prefix, not distinct, or not stable", ck)
	}
	key := settle.MarkerKey("s1", chain.Express, obj)
	if !strings.HasPrefix(key, settle.MarkerPrefix("s1", chain.Express)) || key == settle.MarkerKey("s1", chain.Express, chain.SettledKey("a", 4, 8)) {
		t.Fatalf("MarkerKey %q: not under its prefix, or not distinct", key)
	}
	for _, bad := range []string{`{"key":"chains/s1/express/1/2","at_ms":1}`, `not json`, `{}`,
		`{"at_ms":1,"objects":[{"key":"settled/a/1-2"},{"key":"chains/s1/express/1/2"}]}`, `{"key":"settled/a/1-2","objects":[{"key":"settled/a/1-2"}]}`} {
		if _, err := settle.DecodeMarker([]byte(bad)); err == nil {
			t.Errorf("DecodeMarker(%q) accepted", bad)
		}
	}
}

// TestSegments: the committed ranges between two positions, epoch by
// epoch up to each cut; an unknown cut stops them with ErrCutUnknown.
func TestSegments(t *testing.T) {
	cuts := map[uint64]uint64{1: 3, 2: 0, 3: 6}
	got, err := settle.Segments(cuts, chain.Position{Epoch: 1, Next: 1}, chain.Position{Epoch: 4, Next: 2})
	want := [][3]uint64{{1, 1, 3}, {3, 0, 6}, {4, 0, 2}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Segments = %v, %v; want %v", got, err, want)
	}
	got, err = settle.Segments(map[uint64]uint64{1: 3}, chain.Position{Epoch: 1, Next: 0}, chain.Position{Epoch: 3, Next: 1})
	if !errors.Is(err, settle.ErrCutUnknown) || !reflect.DeepEqual(got, [][3]uint64{{1, 0, 3}}) {
		t.Fatalf("Segments past an unknown cut = %v, %v; want [[1 0 3]] and ErrCutUnknown", got, err)
	}
}

// TestMarkedObjects: every object a marker of any chain names (one-object,
// chunk, or a reclaim's Deleting claim: fsck --repair leaves them to the
// passes), and nothing else under stars/.
func TestMarkedObjects(t *testing.T) {
	ctx := context.Background()
	ms := metastore.NewMem()
	a, b := chain.SettledKey("a", 0, 4), chain.SettledKey("b", 0, 2)
	for _, m := range []struct {
		c   chain.Class
		obj string
	}{{chain.Express, a}, {chain.Standard, b}} {
		if _, err := ms.Put(ctx, settle.MarkerKey("s1", m.c, m.obj), settle.Marker{Key: m.obj}.Encode(), metastore.NoVersion); err != nil {
			t.Fatal(err)
		}
	}
	c := chain.SettledKey("c", 0, 1)
	chunk := settle.Marker{Objects: []settle.Named{{Key: c, Ref: chain.RefKey("c", 1)}}}
	if _, err := ms.Put(ctx, settle.ChunkMarkerKey("s1", chain.Standard, []string{c}), chunk.Encode(), metastore.NoVersion); err != nil {
		t.Fatal(err)
	}
	// A reclaim's claim: a Deleting marker at the object's own key.
	d := chain.SettledKey("d", 0, 3)
	if _, err := ms.Put(ctx, settle.MarkerKey("s1", chain.Standard, d), settle.Marker{Key: d, Deleting: true}.Encode(), metastore.NoVersion); err != nil {
		t.Fatal(err)
	}
	if _, err := ms.Put(ctx, chain.TrimKey("s1", chain.Express), []byte(`{}`), metastore.NoVersion); err != nil {
		t.Fatal(err)
	}
	got, err := settle.MarkedObjects(ctx, ms)
	if err != nil || !reflect.DeepEqual(got, map[string]bool{a: true, b: true, c: true, d: true}) {
		t.Fatalf("MarkedObjects = %v, %v", got, err)
	}
}
