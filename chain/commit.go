package chain

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/objstore"
)

// retryWait returns p's jittered wait for a backoff of b: in [b/2, b].
func retryWait(p RetryPolicy, b time.Duration) time.Duration {
	if p.Jitter != nil {
		return b/2 + min(max(p.Jitter(b/2), 0), b/2)
	}
	return b/2 + rand.N(b/2+1)
}

// retryDefaults returns p with its zero backoffs set to the defaults.
func retryDefaults(p RetryPolicy) RetryPolicy {
	if p.MinBackoff <= 0 {
		p.MinBackoff = 5 * time.Millisecond
	}
	if p.MaxBackoff < p.MinBackoff {
		p.MaxBackoff = max(500*time.Millisecond, p.MinBackoff)
	}
	return p
}

// WriteFlight writes f to every bucket concurrently and delivers one
// CopyResult per bucket on the returned channel as each copy resolves, then
// closes it. ctx bounds the whole write: when it ends, unresolved copies
// resolve as CopyFailed. The caller counts results (see Tally) and applies
// its own commit deadline; it must drain the channel.
func WriteFlight(ctx context.Context, buckets []objstore.Store, f Flight, p RetryPolicy) <-chan CopyResult {
	p = retryDefaults(p)
	out := make(chan CopyResult, len(buckets))
	start := time.Now()
	done := make(chan struct{}, len(buckets))
	for i, b := range buckets {
		go func() {
			r := WriteCopy(ctx, b, f, p)
			r.Bucket = i
			r.Latency = time.Since(start)
			out <- r
			done <- struct{}{}
		}()
	}
	go func() {
		for range buckets {
			<-done
		}
		close(out)
	}()
	return out
}

// WriteCopy writes one bucket's copy of f and resolves it: PutIfAbsent,
// and on ErrExists a probe of the occupant's envelope (our nonce: a ghost
// PUT, ours; anything else: foreign). Ambiguous failures are retried with
// backoff (p) until ctx ends (then CopyFailed); objstore.ErrInvalidKey and
// objstore.ErrPermanent fail the copy at once. Bucket and Latency are the
// caller's to fill in.
func WriteCopy(ctx context.Context, b objstore.Store, f Flight, p RetryPolicy) CopyResult {
	p = retryDefaults(p)
	backoff := p.MinBackoff
	var last error
	for attempt := 1; ; attempt++ {
		err := b.PutIfAbsent(ctx, f.Key, f.Obj)
		switch {
		case err == nil:
			return CopyResult{Status: CopyOurs, Attempts: attempt}
		case errors.Is(err, objstore.ErrExists):
			env, perr := ProbeEnvelope(ctx, b, f.Key)
			switch {
			case perr == nil && env.IsFlightOf(f.Epoch, f.Slot, f.Nonce):
				return CopyResult{Status: CopyOurs, Ghost: true, Attempts: attempt}
			case perr == nil:
				return CopyResult{Status: CopyForeign, Occupant: &env, Attempts: attempt,
					Err: fmt.Errorf("chain: slot %d of epoch %d: foreign occupant (%s of epoch %d, slot %d, nonce %s)", f.Slot, f.Epoch, env.Kind, env.Epoch, env.Slot, env.Nonce)}
			case envelope.IsCorruption(perr):
				return CopyResult{Status: CopyForeign, Attempts: attempt,
					Err: fmt.Errorf("chain: slot %d of epoch %d: unreadable occupant: %w", f.Slot, f.Epoch, perr)}
			case errors.Is(perr, objstore.ErrPermanent):
				return CopyResult{Status: CopyFailed, Attempts: attempt, Err: fmt.Errorf("chain: slot %d: probing the occupant: %w", f.Slot, perr)}
			default:
				// Not found after ErrExists (a racing delete, an S3
				// oddity) or a failed probe: try the PUT again.
				last = perr
			}
		case errors.Is(err, objstore.ErrInvalidKey), errors.Is(err, objstore.ErrPermanent):
			// Retrying cannot cure it (a missing bucket, wrong credentials):
			// fail the copy now, not at the commit deadline.
			return CopyResult{Status: CopyFailed, Attempts: attempt, Err: err}
		default:
			last = err // ambiguous: retry, and resolve by probing if it landed
		}
		if ctx.Err() != nil {
			return CopyResult{Status: CopyFailed, Attempts: attempt, Err: fmt.Errorf("chain: slot %d: %w (last error: %v)", f.Slot, ctx.Err(), last)}
		}
		wait := retryWait(p, backoff)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return CopyResult{Status: CopyFailed, Attempts: attempt, Err: fmt.Errorf("chain: slot %d: %w (last error: %v)", f.Slot, ctx.Err(), last)}
		case <-t.C:
		}
		backoff = min(2*backoff, p.MaxBackoff)
	}
}

// ProbeEnvelope reads and parses the envelope of the object at key with one
// ranged GET. A short or corrupt object returns an error wrapping
// envelope.ErrCorrupt; a missing one, objstore.ErrNotFound.
func ProbeEnvelope(ctx context.Context, b objstore.Store, key string) (envelope.Envelope, error) {
	head, err := b.Get(ctx, key, 0, envelope.EnvelopeSize)
	if err != nil {
		return envelope.Envelope{}, err
	}
	return envelope.ParseEnvelope(head)
}
