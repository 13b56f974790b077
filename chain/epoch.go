package chain

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/flightlog/flightlog/metastore"
)

// ReadEpoch returns the chain's epoch record and its version, or an error
// wrapping metastore.ErrNotFound for a chain never opened, or ErrBadRecord
// for a record that does not parse or breaks a bound (Validate).
func ReadEpoch(ctx context.Context, ms metastore.Store, star string, c Class) (EpochRecord, metastore.Version, error) {
	it, err := ms.Get(ctx, EpochKey(star, c))
	if err != nil {
		return EpochRecord{}, "", fmt.Errorf("chain: read epoch of %s/%s: %w", star, c, err)
	}
	var rec EpochRecord
	if err := json.Unmarshal(it.Value, &rec); err != nil {
		return EpochRecord{}, "", fmt.Errorf("%w: %s/%s: %v", ErrBadRecord, star, c, err)
	}
	if err := rec.Validate(); err != nil {
		return EpochRecord{}, "", fmt.Errorf("chain: %s/%s: %w", star, c, err)
	}
	return rec, it.Version, nil
}

// MintFirst creates epoch 1 of a chain that has none, by a create-if-absent
// write. If the chain already has an epoch it returns ErrEpochTaken (with the
// record found). An ambiguous failure is resolved by re-reading: a record
// carrying rec.Owner and rec.Counter is ours.
func MintFirst(ctx context.Context, ms metastore.Store, star string, c Class, rec EpochRecord) (EpochRecord, metastore.Version, error) {
	rec.Epoch = 1
	rec.Counter++
	val, err := json.Marshal(rec)
	if err != nil {
		return EpochRecord{}, "", err
	}
	key := EpochKey(star, c)
	v, err := ms.Put(ctx, key, val, metastore.NoVersion)
	if err == nil {
		return rec, v, nil
	}
	if !errors.Is(err, metastore.ErrConflict) {
		// Ambiguous: did our write apply?
		got, gv, rerr := ReadEpoch(ctx, ms, star, c)
		if rerr != nil {
			return EpochRecord{}, "", fmt.Errorf("chain: mint epoch 1 of %s/%s: %w (and re-read failed: %v)", star, c, err, rerr)
		}
		if got.Owner == rec.Owner && got.Counter == rec.Counter && got.Epoch == 1 {
			return got, gv, nil
		}
	}
	got, _, rerr := ReadEpoch(ctx, ms, star, c)
	if rerr != nil {
		return EpochRecord{}, "", fmt.Errorf("chain: mint epoch 1 of %s/%s: %w", star, c, err)
	}
	return got, "", fmt.Errorf("%w: %s/%s is at epoch %d owned by %q", ErrEpochTaken, star, c, got.Epoch, got.Owner)
}

// MintNext mints the successor of prev: it writes next, with Epoch set to
// prev.Epoch+1 and Counter to prev.Counter+1 (next carries the owner,
// window, K, W, buckets and the cuts walking still needs; its Seal is
// cleared), by compare-and-swap from prevVersion, the version prev was read
// at. The CAS doubles as the deposed-check.
//
// It returns the record written and its version. If the record is no longer
// at prevVersion and is not our write, the error wraps ErrMintLost and the
// record returned is the one found (the winner), with its version: the
// caller is deposed. An ambiguous failure (or a conflict that may be our own
// earlier attempt) is resolved by re-reading: a record equal to ours (same
// epoch, owner, counter and every other field) is ours; the record still at
// prevVersion means the write did not apply, and it is retried with backoff
// until ctx ends. Owners must be unique per process incarnation, or two
// candidates minting identical records could both believe they won.
func MintNext(ctx context.Context, ms metastore.Store, star string, c Class, prev EpochRecord, prevVersion metastore.Version, next EpochRecord) (EpochRecord, metastore.Version, error) {
	if prevVersion == metastore.NoVersion || prevVersion == metastore.AnyVersion {
		return EpochRecord{}, "", fmt.Errorf("chain: mint epoch %d of %s/%s: want the version the previous record was read at, got %q", prev.Epoch+1, star, c, prevVersion)
	}
	next, err := PrepareNext(prev, next)
	if err != nil {
		return EpochRecord{}, "", fmt.Errorf("chain: mint epoch %d of %s/%s: %w", prev.Epoch+1, star, c, err)
	}
	what := fmt.Sprintf("mint epoch %d of %s/%s", next.Epoch, star, c)
	v, found, foundV, err := casEpoch(ctx, ms, star, c, prevVersion, next, what)
	switch {
	case err == nil:
		return next, v, nil
	case errors.Is(err, errMovedOn):
		return found, foundV, fmt.Errorf("%w: %s/%s is at epoch %d owned by %q (we minted from epoch %d)", ErrMintLost, star, c, found.Epoch, found.Owner, prev.Epoch)
	}
	return EpochRecord{}, "", err
}

// PrepareNext returns the record that succeeds prev: next with Epoch
// prev.Epoch+1, Counter prev.Counter+1 and no Seal. It rejects cuts that
// are not of earlier epochs.
func PrepareNext(prev, next EpochRecord) (EpochRecord, error) {
	next.Epoch = prev.Epoch + 1
	next.Counter = prev.Counter + 1
	next.Seal = nil
	for _, cut := range next.Cuts {
		if cut.Epoch >= next.Epoch {
			return EpochRecord{}, fmt.Errorf("cut of epoch %d is not of an earlier epoch than %d", cut.Epoch, next.Epoch)
		}
	}
	return next, nil
}

// PrepareSeal returns rec with a clean seal at cut (Counter bumped), or
// done when rec is already sealed there. Sealing at another slot is an
// error.
func PrepareSeal(rec EpochRecord, cut uint64) (sealed EpochRecord, done bool, err error) {
	seal := Cut{Epoch: rec.Epoch, Slot: cut, Clean: true}
	if rec.Seal != nil {
		if *rec.Seal == seal {
			return rec, true, nil
		}
		return EpochRecord{}, false, fmt.Errorf("epoch %d is already sealed at slot %d", rec.Epoch, rec.Seal.Slot)
	}
	rec.Seal = &seal
	rec.Counter++
	return rec, false, nil
}

// SealEpoch records a clean seal of rec's epoch: it rewrites rec, read at
// version, with Seal = {rec.Epoch, cut, Clean} by compare-and-swap, and
// returns the new version. The owner's clean Close calls it after every
// flight below cut has been acknowledged and absorbed; the next owner then
// takes the seal as the cut and skips fencing.
//
// If the record has moved on (a successor minted) the error wraps
// ErrDeposed. Ambiguous failures are resolved by re-reading, as in MintNext.
// Sealing an already sealed record with the same cut returns its version.
func SealEpoch(ctx context.Context, ms metastore.Store, star string, c Class, rec EpochRecord, version metastore.Version, cut uint64) (metastore.Version, error) {
	sealed, done, err := PrepareSeal(rec, cut)
	if err != nil {
		return "", fmt.Errorf("chain: seal epoch %d of %s/%s at slot %d: %w", rec.Epoch, star, c, cut, err)
	}
	if done {
		return version, nil
	}
	rec = sealed
	what := fmt.Sprintf("seal epoch %d of %s/%s at slot %d", rec.Epoch, star, c, cut)
	v, found, _, err := casEpoch(ctx, ms, star, c, version, rec, what)
	switch {
	case err == nil:
		return v, nil
	case errors.Is(err, errMovedOn):
		return "", fmt.Errorf("%w: %s: the record is at epoch %d owned by %q", ErrDeposed, what, found.Epoch, found.Owner)
	}
	return "", err
}

// errMovedOn: casEpoch found a record that is neither at the expected
// version nor ours.
var errMovedOn = errors.New("chain: epoch record moved on")

// casEpoch writes rec at EpochKey if the key is at expect, resolving
// ambiguity by re-reading. It returns the new version; or errMovedOn with
// the record and version found; or the error that ended it (ctx, an
// unreadable record).
func casEpoch(ctx context.Context, ms metastore.Store, star string, c Class, expect metastore.Version, rec EpochRecord, what string) (metastore.Version, EpochRecord, metastore.Version, error) {
	val, err := json.Marshal(rec)
	if err != nil {
		return "", EpochRecord{}, "", err
	}
	key := EpochKey(star, c)
	p := retryDefaults(RetryPolicy{})
	backoff := p.MinBackoff
	for attempt := uint64(0); ; attempt++ {
		v, err := ms.Put(ctx, key, val, expect)
		if err == nil {
			return v, EpochRecord{}, "", nil
		}
		if errors.Is(err, metastore.ErrInvalidKey) || errors.Is(err, metastore.ErrTooLarge) {
			return "", EpochRecord{}, "", fmt.Errorf("chain: %s: %w", what, err)
		}
		// A conflict, or an ambiguous failure: read what is there. Our own
		// earlier attempt may have applied (a ghost write).
		it, rerr := ms.Get(ctx, key)
		if rerr == nil {
			if bytes.Equal(it.Value, val) {
				return it.Version, EpochRecord{}, "", nil
			}
			if it.Version != expect {
				var found EpochRecord
				if jerr := json.Unmarshal(it.Value, &found); jerr != nil {
					return "", EpochRecord{}, "", fmt.Errorf("chain: %s: the record found is corrupt: %v", what, jerr)
				}
				return "", found, it.Version, errMovedOn
			}
			// Still at expect: our write did not apply. Try again.
		} else if errors.Is(rerr, metastore.ErrNotFound) {
			return "", EpochRecord{}, "", fmt.Errorf("chain: %s: %w: the epoch record is gone", what, errMovedOn)
		}
		last := err
		if rerr != nil {
			last = fmt.Errorf("%w (and re-read failed: %v)", err, rerr)
		}
		// Jitter from the candidate's identity, not a random source: two
		// candidates still spread apart, and a simulated run replays.
		wait := backoff/2 + time.Duration(xxhash.Sum64String(fmt.Sprintf("%s/%d/%d", rec.Owner, rec.Epoch, attempt))%uint64(backoff/2+1))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", EpochRecord{}, "", fmt.Errorf("chain: %s: outcome unknown: %w (last error: %v)", what, ctx.Err(), last)
		case <-t.C:
		}
		backoff = min(2*backoff, p.MaxBackoff)
	}
}
