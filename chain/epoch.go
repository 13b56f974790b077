package chain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/flightlog/flightlog/metastore"
)

// EpochRecord is the value at EpochKey: who leads the chain now, and the
// shape of its writes. It is minted by compare-and-swap; an epoch is never
// resumed, so each leader incarnation writes under a number of its own.
type EpochRecord struct {
	Epoch   uint64   `json:"epoch"`
	Owner   string   `json:"owner"`   // the leader's identity
	Window  int      `json:"window"`  // pipeline window: bounds fence and garbage probe
	K       int      `json:"k"`       // bucket set size
	W       int      `json:"w"`       // copy quorum
	Buckets []string `json:"buckets"` // bucket names, in set order
	Counter uint64   `json:"counter"` // bumps on every write, so a writer recognises its own
}

// ErrEpochTaken is returned by MintFirst when the chain already has an
// epoch: opening it needs a takeover (fence, walk), not a fresh mint.
var ErrEpochTaken = errors.New("chain: chain already has an epoch")

// ReadEpoch returns the chain's epoch record and its version, or an error
// wrapping metastore.ErrNotFound for a chain never opened.
func ReadEpoch(ctx context.Context, ms metastore.Store, star string, c Class) (EpochRecord, metastore.Version, error) {
	it, err := ms.Get(ctx, EpochKey(star, c))
	if err != nil {
		return EpochRecord{}, "", fmt.Errorf("chain: read epoch of %s/%s: %w", star, c, err)
	}
	var rec EpochRecord
	if err := json.Unmarshal(it.Value, &rec); err != nil {
		return EpochRecord{}, "", fmt.Errorf("chain: epoch record of %s/%s is corrupt: %v", star, c, err)
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
