package chain

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/objstore"
)

// BucketSet is a class's bucket set as the successor-side primitives (Fence,
// Walk, GarbageProbe, Trim) see it: K = len(Stores) buckets addressed with
// the same keys, and the copy quorum W.
type BucketSet struct {
	// Stores are the buckets, in set order (the order of EpochRecord.Buckets).
	Stores []objstore.Store
	// Names name the buckets in errors; optional (then "bucket <i>").
	Names []string
	// W is the copy quorum: 1 <= W <= K.
	W int
	// Retry paces the retries of Walk, GarbageProbe and Trim (and of Fence
	// unless FenceOptions.Retry is set). The zero value is RetryPolicy's
	// defaults.
	Retry RetryPolicy
	// ReadAhead, if positive, bounds how many slots a Fence, a Walk or a
	// GarbageProbe works on at once, and so the requests they have in
	// flight: a fence at most ReadAhead·K, a walk ReadAhead GETs (it
	// reads a slot's copies one after another), a probe ReadAhead per
	// bucket.
	// 0: their defaults (DefaultFenceReadAhead slots for a fence, 256 for a
	// walk of small flights, 16 keys per bucket for a probe), which
	// overlap the round trips of a takeover's backlog. Lower it for a store
	// with a per-prefix request rate or a small connection pool: a
	// takeover then takes about backlog/ReadAhead round trips.
	ReadAhead int
}

// capAhead returns n, or the set's ReadAhead if that is positive and
// smaller.
func (s BucketSet) capAhead(n int) int {
	if s.ReadAhead > 0 && s.ReadAhead < n {
		return s.ReadAhead
	}
	return n
}

// K returns the set's size.
func (s BucketSet) K() int { return len(s.Stores) }

// Validate rejects an empty set, a quorum outside [1, K], a nil store, or
// Names of the wrong length.
func (s BucketSet) Validate() error {
	k := len(s.Stores)
	if k == 0 {
		return fmt.Errorf("chain: bucket set is empty")
	}
	if s.W < 1 || s.W > k {
		return fmt.Errorf("chain: bucket set: W=%d outside [1, K=%d]", s.W, k)
	}
	if len(s.Names) != 0 && len(s.Names) != k {
		return fmt.Errorf("chain: bucket set: %d names for %d buckets", len(s.Names), k)
	}
	for i, b := range s.Stores {
		if b == nil {
			return fmt.Errorf("chain: bucket set: bucket %d is nil", i)
		}
	}
	return nil
}

// name returns bucket i's name for messages.
func (s BucketSet) name(i int) string {
	if i < len(s.Names) && s.Names[i] != "" {
		return s.Names[i]
	}
	return "bucket " + strconv.Itoa(i)
}

// backoff is one retry loop's pacing: jittered, doubling up to the cap.
type backoff struct {
	p    RetryPolicy
	next time.Duration
}

func newBackoff(p RetryPolicy) *backoff {
	p = retryDefaults(p)
	return &backoff{p: p, next: p.MinBackoff}
}

// wait sleeps the next backoff or until ctx ends, and reports whether ctx
// is still live.
func (b *backoff) wait(ctx context.Context) bool {
	d := retryWait(b.p, b.next)
	b.next = min(2*b.next, b.p.MaxBackoff)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// checkCopy reports whether obj is a good flight copy of (epoch, slot): its
// whole bundle parses, it is a flight of that epoch and slot, and every frame
// decodes with its checksum. The error says why not; it wraps
// envelope.ErrCorrupt for a damaged copy.
func checkCopy(obj []byte, epoch, slot uint64) (envelope.Envelope, []envelope.FrameInfo, error) {
	env, frames, _, err := envelope.ParseBundleProducers(obj) // a copy whose producer marks do not parse is no good copy
	if err != nil {
		if head, herr := envelope.ParseEnvelope(obj); herr == nil && head.Kind == envelope.KindPoison {
			return head, nil, fmt.Errorf("poison (nonce %s)", head.Nonce)
		}
		return env, nil, err
	}
	if env.Epoch != epoch || env.Slot != slot {
		return env, nil, fmt.Errorf("a flight of epoch %d slot %d, not of epoch %d slot %d", env.Epoch, env.Slot, epoch, slot)
	}
	for i, f := range frames {
		if _, err := envelope.DecodeFrame(f, obj[f.Offset:f.End()]); err != nil {
			return env, nil, fmt.Errorf("frame %d (stream %q): %w", i, f.Stream, err)
		}
	}
	return env, frames, nil
}
