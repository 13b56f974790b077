package loglet

import (
	"context"
	"errors"
	"testing"

	"github.com/flightlog/flightlog/chain"
)

// TestDeferredCloseNilClosesTheStar: Close(nil) closes the star as
// Close(context.Background()) does (bounded by Config.CloseTimeout), so a
// `defer star.Close(nil)` does not leak it: the chain is sealed cleanly,
// later calls see ErrClosed, and the next Open continues without a
// takeover.
func TestDeferredCloseNilClosesTheStar(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	var p1 *proc
	func() {
		var err error
		p1, err = w.open("p1", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer p1.star.Close(nil) //nolint:staticcheck // the nil is the point
		if _, err := p1.star.Append(ctx, "orders", Batch{Records: []Record{{Body: []byte("x")}}}); err != nil {
			t.Fatal(err)
		}
	}()
	if _, err := p1.star.Append(ctx, "orders", Batch{Records: []Record{{Body: []byte("y")}}}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after a deferred Close(nil) = %v; want ErrClosed", err)
	}
	if err := p1.star.Close(nil); err != nil { //nolint:staticcheck
		t.Fatalf("a second Close(nil) = %v; want the first call's result (nil)", err)
	}
	ep, _, err := chain.ReadEpoch(ctx, w.meta, "s1", Standard)
	if err != nil || ep.Seal == nil || !ep.Seal.Clean || ep.Seal.Epoch != ep.Epoch {
		t.Fatalf("epoch record after Close(nil): %+v, %v; want it sealed by a clean close", ep, err)
	}
	p2, err := w.open("p2", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := p2.star.Read(ctx, "orders", ReadQuery{})
	if err != nil || len(res.Records) != 1 || string(res.Records[0].Body) != "x" {
		t.Fatalf("the next owner reads %+v, %v; want the one record", res, err)
	}
}
