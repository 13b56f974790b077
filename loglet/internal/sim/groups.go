package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/loglet/groups"
)

// Consumer groups across trims (plan.groups): each grouper follows one
// shared stream (a retained one when there is one, so retention passes
// trim under it; the trimmer may trim the others) as a consumer group
// through the current leader, receiving and acknowledging as it goes, and
// re-opening its session after a takeover or a fault. The streams it
// follows are never deleted, so an Ack (or an open) that fails with
// ErrStreamNotFound is a violation: a trim or a retention pass rewrites
// the stream record, and a group must go on committing through it. The
// group's committed offset never moves back.
func (w *world) grouper(ctx context.Context, i int) {
	rng := rand.New(rand.NewPCG(w.o.Seed, uint64(i)+0x6e0b))
	c := chain.Classes()[rng.IntN(2)]
	streams := w.streams[c]
	stream := streams[rng.IntN(len(streams))]
	for _, s := range streams {
		if w.retainedNames[s] && rng.IntN(3) > 0 {
			stream = s
			break
		}
	}
	group := fmt.Sprintf("g%d", i)
	bad := func(format string, args ...any) {
		w.h.violation("group %s on %s: %s", group, stream, fmt.Sprintf(format, args...))
	}
	var high uint64 // the highest offset committed
	for ctx.Err() == nil {
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		gs, err := groups.Open(octx, w.currentLeader().star, group, stream, groups.Options{MaxRecords: 1 + rng.IntN(50)})
		cancel()
		if err != nil {
			if errors.Is(err, loglet.ErrStreamNotFound) {
				bad("open: %v, though the stream was never deleted", err)
				return
			}
			if !sleepCtx(ctx, nsUpTo(rng, 100*time.Millisecond)) {
				return
			}
			continue
		}
		if n := gs.Committed().Next; n < high {
			bad("a session opened at committed offset %d, below %d committed before", n, high)
		}
		for ctx.Err() == nil {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			recs, err := gs.Recv(rctx)
			cancel()
			if err != nil {
				if errors.Is(err, loglet.ErrStreamNotFound) {
					bad("Recv: %v, though the stream was never deleted", err)
					return
				}
				// A takeover, a fault, a quiet stream, a read below a trim
				// point this process learns late: back off, then open
				// again. (Without the pause, a seed with no metastore
				// latency spun here without letting virtual time move.)
				if !sleepCtx(ctx, nsUpTo(rng, 100*time.Millisecond)) {
					return
				}
				break
			}
			trimmed, _ := w.trimSeqOf(ctx, stream) // the trim point as the Ack begins
			seq := recs[rng.IntN(len(recs))].Seq
			actx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err = gs.Ack(actx, seq)
			cancel()
			switch {
			case err == nil:
				high = max(high, gs.Committed().Next)
				w.smu.Lock()
				w.res.GroupAcks++
				if trimmed > 0 {
					w.res.GroupTrimmedAcks++
				}
				w.smu.Unlock()
			case errors.Is(err, loglet.ErrStreamNotFound):
				bad("Ack of %d (trim point %d): %v, though the stream was never deleted", seq, trimmed, err)
				return
			}
			if gs.Committed().Next < high {
				bad("the committed offset went back from %d to %d", high, gs.Committed().Next)
			}
			if !sleepCtx(ctx, nsUpTo(rng, 50*time.Millisecond)) {
				return
			}
		}
	}
}
