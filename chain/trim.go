package chain

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/flightlog/flightlog/objstore"
)

// ErrTrimIncomplete is wrapped by Trim's error when some deletes still
// failed after their retries. Trim is idempotent: run it again.
var ErrTrimIncomplete = errors.New("chain: trim incomplete")

// trimAttempts bounds the tries of one delete.
const trimAttempts = 4

// Trim deletes the slot keys [from, to) of epoch from every bucket of the
// set, by point deletes, and returns how many deletes succeeded (a missing
// key counts: deleting it is not an error). Failed deletes are retried with
// backoff a few times; those that still fail are skipped, and the error,
// wrapping ErrTrimIncomplete, says how many failed in which bucket and the
// first failure. Buckets are trimmed concurrently.
//
// Every slot in [from, to) must be committed and settled: to is at most the
// epoch's cut (behind the trim cursor), so the poison at dead slots is never
// trimmed. A fence must never start below a trimmed slot: trimmed keys read
// empty.
func Trim(ctx context.Context, set BucketSet, star string, class Class, epoch, from, to uint64) (deleted int, err error) {
	if err := set.Validate(); err != nil {
		return 0, err
	}
	if to <= from {
		return 0, nil
	}
	if err := objstore.ValidateKey(SlotKey(star, class, epoch, from)); err != nil {
		return 0, fmt.Errorf("chain: trim %s/%s epoch %d: %w", star, class, epoch, err)
	}
	type bucketResult struct {
		deleted, failed int
		first           error
	}
	results := make([]bucketResult, set.K())
	// Each bucket's deletes run trimAhead at a time, the buckets at once:
	// a settle pass deletes the hundreds of slots it settled, which one
	// after the other at object store latencies took seconds of the pass
	// (and 16 at a time, one bucket after the other, a second of a 4 s
	// pass at 10,000 Express streams).
	var wg sync.WaitGroup
	for i, b := range set.Stores {
		r := &results[i]
		var mu sync.Mutex
		sem := make(chan struct{}, trimAhead)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := from; s < to && ctx.Err() == nil; s++ {
				sem <- struct{}{}
				wg.Add(1)
				go func() {
					defer func() { <-sem; wg.Done() }()
					derr := deleteKey(ctx, b, SlotKey(star, class, epoch, s), set.Retry)
					mu.Lock()
					defer mu.Unlock()
					if derr != nil {
						r.failed++
						if r.first == nil {
							r.first = fmt.Errorf("slot %d: %w", s, derr)
						}
						return
					}
					r.deleted++
				}()
			}
		}()
	}
	wg.Wait()
	var errs []error
	for i, r := range results {
		deleted += r.deleted
		if r.failed > 0 {
			errs = append(errs, fmt.Errorf("%s: %d of %d deletes failed (first: %w)", set.name(i), r.failed, to-from, r.first))
		}
	}
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return deleted, fmt.Errorf("%w: %s/%s epoch %d [%d, %d): %w", ErrTrimIncomplete, star, class, epoch, from, to, errors.Join(errs...))
	}
	return deleted, nil
}

// trimAhead bounds the deletes Trim runs at once in one bucket.
const trimAhead = 128

// deleteKey deletes key, retrying failures a few times.
func deleteKey(ctx context.Context, b objstore.Store, key string, retry RetryPolicy) error {
	bo := newBackoff(retry)
	for attempt := 1; ; attempt++ {
		err := b.Delete(ctx, key)
		if err == nil || errors.Is(err, objstore.ErrInvalidKey) || attempt >= trimAttempts || !bo.wait(ctx) {
			return err
		}
	}
}
