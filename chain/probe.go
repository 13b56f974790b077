package chain

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/objstore"
)

// probeAttempts bounds the tries of one key before its bucket is given up.
const probeAttempts = 4

// probeParallel is how many keys of one bucket a garbage probe settles at
// once.
const probeParallel = 16

// GarbageProbe sweeps the slots [cut, cut+window) of epoch, past its
// recorded cut, in every bucket: it poisons each free key (PutIfAbsent with
// nonce), so that a zombie incumbent's delayed PUT finds poison and halts;
// and it deletes every flight copy of (epoch, slot) it finds there, to
// reclaim storage, then poisons the key again. Poison stays; corrupt or
// foreign occupants are left alone. Point lookups only.
//
// Safety never rests on the probe: the recorded cut governs, and nothing at
// or past it ever counts. So a bucket that is down or keeps failing is
// skipped and counted in Unreachable, not an error; the error is only for
// invalid arguments or an ended ctx. cut must be the recorded cut of epoch
// and window the epoch's window (EpochRecord.Window).
func GarbageProbe(ctx context.Context, set BucketSet, star string, class Class, epoch, cut uint64, window int, nonce envelope.Nonce) (ProbeResult, error) {
	var res ProbeResult
	if err := set.Validate(); err != nil {
		return res, err
	}
	if window <= 0 {
		return res, nil
	}
	if err := objstore.ValidateKey(SlotKey(star, class, epoch, cut)); err != nil {
		return res, fmt.Errorf("chain: garbage probe %s/%s epoch %d: %w", star, class, epoch, err)
	}
	// Every key is probed by its own goroutine, at most probeParallel at a
	// time per bucket. A bucket whose attempts fail probeAttempts times in
	// all (down, or failing) is given up: its unsettled keys are skipped.
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, b := range set.Stores {
		var fails atomic.Int32
		sem := make(chan struct{}, set.capAhead(probeParallel))
		for s := cut; s < cut+uint64(window); s++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				var r ProbeResult
				if !probeKey(ctx, b, SlotKey(star, class, epoch, s), epoch, s, nonce, set.Retry, &fails, &r) {
					r.Unreachable++
				}
				mu.Lock()
				res.Poisoned += r.Poisoned
				res.DeletedFlights += r.DeletedFlights
				res.Unreachable += r.Unreachable
				res.Left += r.Left
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("chain: garbage probe %s/%s epoch %d [%d, %d): %w", star, class, epoch, cut, cut+uint64(window), err)
	}
	return res, nil
}

// probeKey settles one key of one bucket and reports whether it did.
// fails counts the bucket's failed attempts across its keys: once it
// reaches probeAttempts, every key of the bucket gives up.
func probeKey(ctx context.Context, b objstore.Store, key string, epoch, slot uint64, nonce envelope.Nonce, retry RetryPolicy, fails *atomic.Int32, r *ProbeResult) bool {
	poison := envelope.Poison(epoch, slot, nonce)
	bo := newBackoff(retry)
	ambiguous := false // a poison PUT of ours failed ambiguously
	for {
		if fails.Load() >= probeAttempts {
			return false
		}
		err := b.PutIfAbsent(ctx, key, poison)
		switch {
		case err == nil:
			r.Poisoned++
			return true
		case errors.Is(err, objstore.ErrInvalidKey):
			return false
		case !errors.Is(err, objstore.ErrExists):
			ambiguous = true
		}
		env, perr := ProbeEnvelope(ctx, b, key)
		switch {
		case perr == nil && env.Kind == envelope.KindPoison && env.Epoch == epoch && env.Slot == slot:
			if ambiguous && env.Nonce == nonce {
				r.Poisoned++ // our ambiguous PUT landed
			}
			return true
		case perr == nil && env.Kind == envelope.KindFlight && env.Epoch == epoch && env.Slot == slot:
			if b.Delete(ctx, key) == nil {
				r.DeletedFlights++
				ambiguous = false
				continue // poison the key again at once, before a zombie's PUT
			}
		case perr == nil, envelope.IsCorruption(perr):
			r.Left++
			return true
		}
		// Not found after ErrExists or an ambiguous PUT, or a failed read
		// or delete: try again, until the bucket has failed a few times.
		if fails.Add(1) >= probeAttempts || !bo.wait(ctx) {
			return false
		}
	}
}
