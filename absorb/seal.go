package absorb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/metastore"
)

// ErrEpochMoved: the chain's epoch record changed while sealing (another
// candidate, or the incumbent recovering, minted): start the takeover over
// from the new record.
var ErrEpochMoved = errors.New("absorb: the epoch record moved while sealing")

// SealCheckpoint is a takeover's first step: it writes owner's seal (owner,
// ownerEpoch: the epoch the candidate is about to mint) into the chain's
// checkpoint, in one Commit that also checks the epoch record is still at
// epochVersion. From then on the incumbent's absorb cannot advance the
// checkpoint (its CAS fails and it learns it is deposed), so its claims are
// bounded and the fence is too. A chain with an epoch but no checkpoint (its
// first owner died between minting and creating it) gets one at (1, 0).
//
// It returns a committer holding the seal and the checkpoint's position as
// found (the walk starts there).
func SealCheckpoint(ctx context.Context, ms metastore.Store, star string, c chain.Class, owner string, ownerEpoch uint64, epochVersion metastore.Version) (*Committer, Checkpoint, error) {
	cpKey, epKey := chain.CheckpointKey(star, c), chain.EpochKey(star, c)
	for attempt := 0; attempt < 20; attempt++ {
		cp, ver, err := ReadCheckpoint(ctx, ms, star, c)
		if errors.Is(err, metastore.ErrNotFound) {
			cp, ver = Checkpoint{Epoch: 1}, metastore.NoVersion
		} else if err != nil {
			return nil, Checkpoint{}, err
		}
		next := cp
		next.Owner, next.OwnerEpoch, next.Counter = owner, ownerEpoch, cp.Counter+1
		val, _ := json.Marshal(next)
		vs, err := ms.Commit(ctx, []metastore.Op{
			{Kind: metastore.OpCheck, Key: epKey, Expect: epochVersion},
			{Kind: metastore.OpPut, Key: cpKey, Value: val, Expect: ver},
		})
		if err == nil {
			return &Committer{meta: ms, star: star, class: c, owner: owner, epoch: ownerEpoch, cp: next, ver: vs[1], Requests: uint64(attempt + 2)}, cp, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, Checkpoint{}, err
		}
		// Conflict or ambiguous: did the epoch move, or did our seal apply?
		it, gerr := ms.Get(ctx, epKey)
		if gerr != nil {
			continue
		}
		if it.Version != epochVersion {
			return nil, Checkpoint{}, ErrEpochMoved
		}
		got, gv, gerr := ReadCheckpoint(ctx, ms, star, c)
		if gerr == nil && got.Owner == owner && got.OwnerEpoch == ownerEpoch && got.Counter == next.Counter {
			return &Committer{meta: ms, star: star, class: c, owner: owner, epoch: ownerEpoch, cp: got, ver: gv}, cp, nil
		}
		// The incumbent advanced the checkpoint meanwhile: seal again.
	}
	return nil, Checkpoint{}, fmt.Errorf("absorb: could not seal the checkpoint of %s/%s", star, c)
}

// Reseal writes this committer's seal for ownerEpoch after the owner has
// minted it (the epoch record is at epochVersion, ours): a losing candidate
// may have overwritten the seal between our seal and our mint, and it can
// no longer do so now (its seal checks the old epoch version). A conflict
// because the epoch record moved again means a successor exists:
// ErrDeposed.
func (c *Committer) Reseal(ctx context.Context, ownerEpoch uint64, epochVersion metastore.Version) error {
	cpKey, epKey := chain.CheckpointKey(c.star, c.class), chain.EpochKey(c.star, c.class)
	for attempt := 0; attempt < 20; attempt++ {
		cp, ver, err := ReadCheckpoint(ctx, c.meta, c.star, c.class)
		c.Requests++
		if err != nil {
			return err
		}
		next := cp
		next.Owner, next.OwnerEpoch, next.Counter = c.owner, ownerEpoch, cp.Counter+1
		val, _ := json.Marshal(next)
		vs, err := c.meta.Commit(ctx, []metastore.Op{
			{Kind: metastore.OpCheck, Key: epKey, Expect: epochVersion},
			{Kind: metastore.OpPut, Key: cpKey, Value: val, Expect: ver},
		})
		c.Requests++
		if err == nil {
			c.cp, c.ver, c.epoch = next, vs[1], ownerEpoch
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		it, gerr := c.meta.Get(ctx, epKey)
		c.Requests++
		if gerr == nil && it.Version != epochVersion {
			return fmt.Errorf("%w: the epoch record moved past our mint", ErrDeposed)
		}
		got, gv, gerr := ReadCheckpoint(ctx, c.meta, c.star, c.class)
		c.Requests++
		if gerr == nil && got.Owner == c.owner && got.OwnerEpoch == ownerEpoch && got.Counter == next.Counter {
			c.cp, c.ver, c.epoch = got, gv, ownerEpoch
			return nil
		}
	}
	return fmt.Errorf("absorb: could not reseal the checkpoint of %s/%s", c.star, c.class)
}
