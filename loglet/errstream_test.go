package loglet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
)

// TestErrorsNameTheStream: a *SeqNumMismatchError and a *NotLeaderError
// carry the stream's name, as the caller gave it, not the internal stream
// ID (the name, a separator byte and the incarnation).
func TestErrorsNameTheStream(t *testing.T) {
	t.Run("SeqNumMismatchError", func(t *testing.T) {
		r := newRig(t, Standard, 1, 7, nil)
		ctx := context.Background()
		if _, err := r.star.Append(ctx, "orders", Batch{Records: []Record{{Body: []byte("x")}}}); err != nil {
			t.Fatal(err)
		}
		five := uint64(5)
		_, err := r.star.Append(ctx, "orders", Batch{Records: []Record{{Body: []byte("y")}}, MatchSeqNum: &five})
		var me *SeqNumMismatchError
		if !errors.As(err, &me) {
			t.Fatalf("Append with a wrong MatchSeqNum = %v; want a *SeqNumMismatchError", err)
		}
		if me.Stream != "orders" || strings.Contains(err.Error(), "\\x1f") {
			t.Fatalf("SeqNumMismatchError.Stream = %q (%v); want %q", me.Stream, err, "orders")
		}
	})
	t.Run("NotLeaderError", func(t *testing.T) {
		w := newWorld(t)
		ctx := context.Background()
		p1, err := w.open("p1", func(c *Config) { c.Express = ClassConfig{} })
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p1.star.Append(ctx, "orders", Batch{Records: []Record{{Body: []byte("x")}}}); err != nil {
			t.Fatal(err)
		}
		rec, ver, err := chain.ReadEpoch(ctx, w.meta, "s1", Standard)
		if err != nil {
			t.Fatal(err)
		}
		// A candidate seals the chain for a takeover: the incumbent, at its
		// next absorb round, stops leading it, and every append after that
		// fails with a *NotLeaderError (each append below waits for its
		// outcome: the loop follows the chain, not a clock).
		if _, _, err := absorb.SealCheckpoint(ctx, w.meta, "s1", Standard, "candidate", rec.Epoch+1, ver); err != nil {
			t.Fatal(err)
		}
		var nl *NotLeaderError
		for i := 0; !errors.As(err, &nl); i++ {
			if i == 10000 {
				t.Fatalf("the incumbent never reported a *NotLeaderError; last: %v", err)
			}
			_, err = p1.star.Append(ctx, "orders", Batch{Records: []Record{{Body: []byte(fmt.Sprint(i))}}})
		}
		if nl.Stream != "orders" || strings.Contains(err.Error(), "\\x1f") {
			t.Fatalf("NotLeaderError.Stream = %q (%v); want %q", nl.Stream, err, "orders")
		}
	})
}
