package chain

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/flightlog/flightlog/envelope"
)

// ErrNoGoodCopy is wrapped by Walk's error when a slot below the cut has no
// good copy in any bucket before ctx ends. The slot was decided committed,
// so W copies existed: this is data loss, or the set is down.
var ErrNoGoodCopy = errors.New("chain: walk: no good copy of a committed slot")

// WalkStats counts what a walk read.
type WalkStats struct {
	Slots   uint64 // slots handed to fn
	Bytes   int64  // bytes of the copies handed to fn
	Skipped int    // copies passed over: missing, poisoned, short, corrupt or unreachable
}

// Walk reads every committed slot of epoch in [from, cut) in slot order and
// calls fn with the slot, its whole object and its frames. cut must be the
// epoch's recorded cut (or the live epoch's release point), so every slot in
// the range is committed.
//
// Each slot is read by point lookups: the whole object is fetched from the
// first bucket, in set order, whose copy parses (ParseBundle), is a flight of
// (epoch, slot) and whose every frame passes DecodeFrame's checks. A
// missing, poisoned, short or corrupt copy is skipped for the next bucket. A
// slot with no good copy is retried with backoff until ctx ends, and the
// error then wraps ErrNoGoodCopy and names the slot and each bucket's fault.
// An error from fn stops the walk and is returned wrapped. fn may retain obj
// and frames.
func Walk(ctx context.Context, set BucketSet, star string, class Class, epoch, from, cut uint64, fn func(slot uint64, obj []byte, frames []envelope.FrameInfo) error) error {
	_, err := WalkWithStats(ctx, set, star, class, epoch, from, cut, fn)
	return err
}

// WalkWithStats is Walk, also returning what it read and skipped.
func WalkWithStats(ctx context.Context, set BucketSet, star string, class Class, epoch, from, cut uint64, fn func(slot uint64, obj []byte, frames []envelope.FrameInfo) error) (WalkStats, error) {
	var st WalkStats
	if err := set.Validate(); err != nil {
		return st, err
	}
	// Read ahead: up to walkReadAhead slots are fetched whole at once, each
	// by its own goroutine, and handed to fn in slot order. While the
	// copies are small (the last walkReadAhead handed to fn were each under
	// walkHeadBytes), slots further on, up to walkDeepReadAhead in all, are
	// read too, but
	// only their first walkHeadBytes: a small copy is then read whole, and
	// a larger one waits (its whole channel) until it is among the
	// walkReadAhead nearest and is read whole then. So the walk never holds
	// more than walkReadAhead whole copies plus walkDeepReadAhead heads,
	// however the flights' sizes change along the chain.
	type got struct {
		obj    []byte
		frames []envelope.FrameInfo
		st     WalkStats
		err    error
	}
	type read struct {
		slot  uint64
		out   chan got
		whole chan struct{} // nil once closed, or for a slot read whole at once
	}
	lctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	var inflight []read
	next := from
	whole, deep := uint64(set.capAhead(walkReadAhead)), uint64(set.capAhead(walkDeepReadAhead))
	smallRun := 0 // copies under walkHeadBytes handed to fn in a row
	for slot := from; slot < cut; slot++ {
		depth := whole
		if smallRun >= walkReadAhead {
			depth = deep
		}
		for next < cut && next-slot < depth {
			r := read{slot: next, out: make(chan got, 1)}
			if next-slot >= whole {
				r.whole = make(chan struct{})
			}
			inflight = append(inflight, r)
			s := next
			next++
			wg.Add(1)
			go func() {
				defer wg.Done()
				var g got
				if r.whole != nil {
					var ok bool
					if g.obj, g.frames, g.st.Skipped, ok = readSmall(lctx, set, star, class, epoch, s); ok {
						r.out <- g
						return
					}
					select {
					case <-r.whole:
					case <-lctx.Done(): // readSlot below fails at once
					}
				}
				g.obj, g.frames, g.err = readSlot(lctx, set, star, class, epoch, s, &g.st)
				r.out <- g
			}()
		}
		for i := range inflight {
			if inflight[i].slot-slot >= whole {
				break
			}
			if inflight[i].whole != nil {
				close(inflight[i].whole)
				inflight[i].whole = nil
			}
		}
		g := <-inflight[0].out
		inflight = inflight[1:]
		st.Skipped += g.st.Skipped
		if g.err != nil {
			return st, g.err
		}
		st.Slots++
		st.Bytes += int64(len(g.obj))
		if smallRun++; len(g.obj) >= walkHeadBytes {
			smallRun = 0
		}
		if err := fn(slot, g.obj, g.frames); err != nil {
			return st, fmt.Errorf("chain: walk %s/%s epoch %d slot %d: %w", star, class, epoch, slot, err)
		}
	}
	return st, nil
}

// walkReadAhead is how many slots a walk fetches whole at once: it overlaps
// round trips (a takeover walks the whole unabsorbed backlog) while holding
// at most that many flight objects.
const walkReadAhead = 8

// walkDeepReadAhead is how many slots in all a walk reads ahead while the
// copies are small, and walkHeadBytes how much of a copy it reads of those
// past walkReadAhead. 256 is a takeover's walk batch (one absorb round,
// AbsorbMaxSlots): at 20 ms per GET a batch of small flights is read in
// about two round trips rather than 32, holding at most 16 MiB of heads.
const (
	walkDeepReadAhead = 256
	walkHeadBytes     = 64 << 10
)

// readSmall is the read-ahead of a slot past the walkReadAhead nearest: it
// reads the first walkHeadBytes of each copy, in set order, until one is a
// whole good copy (a bad copy is skipped, and counted, as readSlot does).
// ok is false when a copy is larger, or none is good: the slot is then
// read whole by readSlot, which counts its skips afresh.
func readSmall(ctx context.Context, set BucketSet, star string, class Class, epoch, slot uint64) (obj []byte, frames []envelope.FrameInfo, skipped int, ok bool) {
	key := SlotKey(star, class, epoch, slot)
	for _, b := range set.Stores {
		head, err := b.Get(ctx, key, 0, walkHeadBytes)
		if err == nil {
			if _, frames, err = checkCopy(head, epoch, slot); err == nil {
				return head, frames, skipped, true
			}
			if len(head) >= walkHeadBytes {
				return nil, nil, 0, false // larger than a head: read it whole in its turn
			}
		}
		skipped++
	}
	return nil, nil, 0, false
}

// readSlot returns the first good copy of a committed slot, retrying until
// ctx ends.
func readSlot(ctx context.Context, set BucketSet, star string, class Class, epoch, slot uint64, st *WalkStats) ([]byte, []envelope.FrameInfo, error) {
	key := SlotKey(star, class, epoch, slot)
	bo := newBackoff(set.Retry)
	faults := make([]error, set.K())
	for {
		for i, b := range set.Stores {
			obj, err := b.Get(ctx, key, 0, -1)
			if err == nil {
				var frames []envelope.FrameInfo
				if _, frames, err = checkCopy(obj, epoch, slot); err == nil {
					return obj, frames, nil
				}
			}
			faults[i] = err
			st.Skipped++
		}
		if !bo.wait(ctx) {
			var b strings.Builder
			for i, f := range faults {
				fmt.Fprintf(&b, " %s: %v;", set.name(i), f)
			}
			return nil, nil, fmt.Errorf("%w: %s/%s epoch %d slot %d:%s gave up: %w", ErrNoGoodCopy, star, class, epoch, slot, b.String(), ctx.Err())
		}
	}
}
