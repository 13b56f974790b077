package chaincore

import (
	"fmt"

	absorb "github.com/flightlog/flightlog/absorb/absorbval"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/internal/invariants"
)

// Fencing tokens (docs/design.md, "Fencing tokens"): a stream may have a
// token, and then accepts only batches that present it. A fence batch sets
// a new one; it is an append like any other, so its order against the
// stream's other batches is the log's. At admission the stream's token is
// the one the last admitted fence batch set: a batch admitted after a fence
// batch is checked against the fence's token, whether or not the fence is
// durable yet (while the core lives, every admitted batch commits in
// admission order, or none after it does). The token travels with the
// flights' fence marks (envelope.FenceMark) and the tails
// (absorb.StreamTail.FencingToken), so a successor learns it from the tails
// snapshot and its walk.

// Fencing is a batch's fencing: Token is the token it presents, which must
// be the stream's token at admission ("" on a stream without one). A fence
// batch (Fence set) sets the stream's token to Set ("" clears it) from its
// position on.
type Fencing struct {
	Token string
	Fence bool
	Set   string
}

// FencedError: the batch's fencing token is not the stream's. Nothing was
// admitted. Fenced says whether the stream has a token at all (the token
// itself is not told: a writer fenced out must not learn its successor's).
type FencedError struct {
	Stream string
	Fenced bool
}

func (e *FencedError) Error() string {
	if !e.Fenced {
		return fmt.Sprintf("leader: stream %s has no fencing token (it was cleared, or never set), and the batch presents one", e.Stream)
	}
	return fmt.Sprintf("leader: stream %s's fencing token changed: the batch presents another", e.Stream)
}

// admitFencing refuses a batch whose token is not st's.
func (c *Core) admitFencing(st *Stream, b *Batch) error {
	if b.Fencing.Token != st.token && !invariants.FencingOff.On() {
		c.stats.fenced++
		return &FencedError{Stream: st.name, Fenced: st.token != ""}
	}
	return nil
}

// fenceAdmitted takes an admitted fence batch's token as st's.
func fenceAdmitted(st *Stream, b *Batch) {
	if b.Fencing.Fence {
		st.token = b.Fencing.Set
	}
}

// Token is the stream's fencing token as of admission ("" if it has none).
func (st *Stream) Token() string { return st.token }

// fenceMarks lists the fence marks of a flight's batches, for the absorb's
// plan (live flights; a walk reads them from the flight's footer).
func fenceMarks(batches []*Batch) []envelope.FenceMark {
	var out []envelope.FenceMark
	for _, b := range batches {
		if b.Fencing.Fence {
			out = append(out, envelope.FenceMark{Stream: b.Stream.name, Seq: b.Start, Token: b.Fencing.Set})
		}
	}
	return out
}

// foldFences takes the fence marks of a planned round's slots, in slot
// order, into the tails: each stream's token as of the round's end.
func (c *Core) foldFences(slots []absorb.Slot) {
	for _, s := range slots {
		for _, m := range s.Fences {
			t, ok := c.ab.tails.get(m.Stream)
			if !ok {
				continue // Plan put every stream of the round's frames there
			}
			t.FencingToken = m.Token
			c.ab.tails.set(m.Stream, t)
		}
	}
}
