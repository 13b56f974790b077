package absorb

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/internal/invariants"
	"github.com/flightlog/flightlog/metastore"
)

// errUnresolved marks a seal whose Commit failed and whose outcome the
// re-reads could not tell.
var errUnresolved = errors.New("absorb: the seal's outcome is unknown")

// SealCheckpoint is a takeover's first step: it writes owner's seal (owner,
// ownerEpoch: the epoch the candidate is about to mint) into the chain's
// checkpoint, in one Commit that also checks the epoch record is still at
// epochVersion. From then on the incumbent's absorb cannot advance the
// checkpoint (its CAS fails and it learns it is deposed), so its claims are
// bounded and the fence is too. A chain with an epoch but no checkpoint (its
// first owner died between minting and creating it) gets one at (1, 0).
//
// It returns a committer holding the seal and the checkpoint's position as
// found (the walk starts there). It seals again while the incumbent's
// absorb moves the checkpoint under it, up to 20 attempts: SealCheckpointOnce
// is one attempt, for a caller that decides when to try again.
func SealCheckpoint(ctx context.Context, ms metastore.Store, star string, c chain.Class, owner string, ownerEpoch uint64, epochVersion metastore.Version) (*Committer, Checkpoint, error) {
	var requests uint64
	for attempt := 0; attempt < 20; attempt++ {
		cm, cp, err := SealCheckpointOnce(ctx, ms, star, c, owner, ownerEpoch, epochVersion)
		if err == nil {
			cm.Requests += requests
			return cm, cp, nil
		}
		if !errors.Is(err, ErrSealRaced) && !errors.Is(err, errUnresolved) {
			return nil, Checkpoint{}, err
		}
		requests += 2
	}
	return nil, Checkpoint{}, fmt.Errorf("absorb: could not seal the checkpoint of %s/%s", star, c)
}

// SealCheckpointOnce is one attempt of SealCheckpoint: it reads the
// checkpoint and seals it, and resolves a failed Commit by re-reading. The
// error wraps ErrEpochMoved if the epoch record moved (start the takeover
// over), ErrSealRaced if the checkpoint moved under it (seal again).
func SealCheckpointOnce(ctx context.Context, ms metastore.Store, star string, c chain.Class, owner string, ownerEpoch uint64, epochVersion metastore.Version) (*Committer, Checkpoint, error) {
	cpKey, epKey := chain.CheckpointKey(star, c), chain.EpochKey(star, c)
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
		return &Committer{meta: ms, star: star, class: c, owner: owner, epoch: ownerEpoch, cp: next, ver: vs[1], Requests: 2}, cp, nil
	}
	if cerr := ctx.Err(); cerr != nil {
		return nil, Checkpoint{}, cerr
	}
	// Conflict or ambiguous: did the epoch move, or did our seal apply?
	it, gerr := ms.Get(ctx, epKey)
	if gerr != nil {
		return nil, Checkpoint{}, fmt.Errorf("absorb: seal the checkpoint of %s/%s: %w: %w (and the epoch record's re-read failed: %v)", star, c, errUnresolved, err, gerr)
	}
	if it.Version != epochVersion {
		return nil, Checkpoint{}, ErrEpochMoved
	}
	got, gv, gerr := ReadCheckpoint(ctx, ms, star, c)
	if gerr == nil && got.Owner == owner && got.OwnerEpoch == ownerEpoch && got.Counter == next.Counter {
		return &Committer{meta: ms, star: star, class: c, owner: owner, epoch: ownerEpoch, cp: got, ver: gv, Requests: 4}, cp, nil
	}
	// The incumbent advanced the checkpoint meanwhile: seal again.
	return nil, Checkpoint{}, fmt.Errorf("absorb: seal the checkpoint of %s/%s: %w: %w", star, c, ErrSealRaced, err)
}

// MintNext is the binding mint (docs/design.md, invariant 8): it
// mints the successor of prev (read at prevVersion) as next, in one Commit
// that puts the epoch record at prevVersion and checks the checkpoint is
// still at the version this committer last wrote, so still carries its
// seal; the seal moves to the new epoch in the same Commit (or is only
// checked when it already names it, as a candidate's does). So an epoch is
// minted only by the process whose seal the checkpoint carries, and the
// checkpoint is never written over another owner's seal.
//
// It returns the record written and its version. If the epoch record moved
// on, the error wraps chain.ErrMintLost and the record returned is the one
// found (the winner's). If the checkpoint carries another seal, the error
// is a *SealedError (it matches ErrDeposed) and nothing is minted. An
// ambiguous failure is resolved by re-reading (a record equal to ours is
// ours); any other failure is returned: the caller tries again (with what
// the committer holds then: Held), when it decides to.
func (c *Committer) MintNext(ctx context.Context, prev chain.EpochRecord, prevVersion metastore.Version, next chain.EpochRecord) (chain.EpochRecord, metastore.Version, error) {
	rec, err := chain.PrepareNext(prev, next)
	if err != nil {
		return chain.EpochRecord{}, "", fmt.Errorf("absorb: mint epoch %d of %s/%s: %w", prev.Epoch+1, c.star, c.class, err)
	}
	val, err := json.Marshal(rec)
	if err != nil {
		return chain.EpochRecord{}, "", err
	}
	what := fmt.Sprintf("mint epoch %d of %s/%s", rec.Epoch, c.star, c.class)
	var ver metastore.Version
	err = c.bindingCommit(ctx, what, rec, prevVersion, val, func(v metastore.Version) { ver = v })
	var moved *movedError
	if errors.As(err, &moved) {
		return moved.found, moved.version, fmt.Errorf("%w: %s/%s is at epoch %d owned by %q (we minted from epoch %d)", chain.ErrMintLost, c.star, c.class, moved.found.Epoch, moved.found.Owner, prev.Epoch)
	}
	if err != nil {
		return chain.EpochRecord{}, "", err
	}
	return rec, ver, nil
}

// SealEpoch records a clean seal of rec's epoch (read at version) at cut,
// in one Commit that checks the checkpoint still carries this committer's
// seal: the next owner then takes the cut and skips fencing. A clean Close
// calls it after every flight below cut has been acknowledged. It returns
// the record's new version; an error wrapping chain.ErrDeposed if the
// record moved on, a *SealedError if the checkpoint carries another seal;
// any other error if the seal is not recorded (the caller tries again).
func (c *Committer) SealEpoch(ctx context.Context, rec chain.EpochRecord, version metastore.Version, cut uint64) (metastore.Version, error) {
	sealed, done, err := chain.PrepareSeal(rec, cut)
	what := fmt.Sprintf("seal epoch %d of %s/%s at slot %d", rec.Epoch, c.star, c.class, cut)
	if err != nil {
		return "", fmt.Errorf("absorb: %s: %w", what, err)
	}
	if done {
		return version, nil
	}
	val, err := json.Marshal(sealed)
	if err != nil {
		return "", err
	}
	var ver metastore.Version
	err = c.bindingCommit(ctx, what, sealed, version, val, func(v metastore.Version) { ver = v })
	var moved *movedError
	if errors.As(err, &moved) {
		return "", fmt.Errorf("%w: %s: the record is at epoch %d owned by %q", chain.ErrDeposed, what, moved.found.Epoch, moved.found.Owner)
	}
	return ver, err
}

// movedError: the epoch record is neither at the expected version nor ours.
type movedError struct {
	found   chain.EpochRecord
	version metastore.Version
}

func (e *movedError) Error() string { return "absorb: the epoch record moved on" }

// bindingCommit writes the epoch record rec (encoded as val) at expect
// together with the checkpoint's seal check, in one Commit, and resolves a
// failure by re-reading: our record found means it applied (done is told
// its version); another record, a *movedError; the checkpoint under
// another seal, a *SealedError. Any other failure is returned, for the
// caller to decide whether and when to try again (a chain's core backs
// off); what the re-reads learnt (our own seal at a version an ambiguous
// write of ours left) is kept, so the retry carries it.
func (c *Committer) bindingCommit(ctx context.Context, what string, rec chain.EpochRecord, expect metastore.Version, val []byte, done func(metastore.Version)) error {
	epKey, cpKey := chain.EpochKey(c.star, c.class), chain.CheckpointKey(c.star, c.class)
	cpNext := c.cp
	cpOp := metastore.Op{Kind: metastore.OpCheck, Key: cpKey, Expect: c.ver}
	moveSeal := rec.Seal == nil && c.epoch != rec.Epoch // a mint moves the seal to its epoch
	if moveSeal {
		cpNext.Owner, cpNext.OwnerEpoch, cpNext.Counter = c.owner, rec.Epoch, c.cp.Counter+1
		cv, _ := json.Marshal(cpNext)
		cpOp = metastore.Op{Kind: metastore.OpPut, Key: cpKey, Value: cv, Expect: c.ver}
		if invariants.MintIgnoresSeal.On() {
			cpOp.Expect = metastore.AnyVersion // a planted bug, for the simulation's seal checker
		}
	}
	vs, err := c.meta.Commit(ctx, []metastore.Op{{Kind: metastore.OpPut, Key: epKey, Value: val, Expect: expect}, cpOp})
	c.Requests++
	if err == nil {
		if moveSeal {
			c.cp, c.ver, c.epoch = cpNext, vs[1], rec.Epoch
		}
		done(vs[0])
		return nil
	}
	if errors.Is(err, metastore.ErrInvalidKey) || errors.Is(err, metastore.ErrTooLarge) {
		return fmt.Errorf("absorb: %s: %w", what, err)
	}
	// A conflict, or an ambiguous failure: read what is there.
	it, gerr := c.meta.Get(ctx, epKey)
	c.Requests++
	if gerr == nil {
		if bytes.Equal(it.Value, val) {
			// Ours applied (the Commit is atomic: the seal moved too).
			if rerr := c.refresh(ctx, rec, moveSeal); rerr == nil {
				done(it.Version)
				return nil
			}
		} else if it.Version != expect {
			var found chain.EpochRecord
			if jerr := json.Unmarshal(it.Value, &found); jerr != nil {
				return fmt.Errorf("absorb: %s: the epoch record found is corrupt: %v", what, jerr)
			}
			return &movedError{found: found, version: it.Version}
		} else if cp, cv, cerr := ReadCheckpoint(ctx, c.meta, c.star, c.class); cerr == nil {
			c.Requests++
			if cp.Owner != c.owner || cp.OwnerEpoch != c.epoch {
				return &SealedError{Owner: cp.Owner, OwnerEpoch: cp.OwnerEpoch}
			}
			c.cp, c.ver = cp, cv // our own seal, at a version an ambiguous write of ours left
		}
	}
	return fmt.Errorf("absorb: %s: not written (try again): %w", what, err)
}

// refresh re-reads the checkpoint after our epoch write applied
// ambiguously, to learn the version the seal now has.
func (c *Committer) refresh(ctx context.Context, rec chain.EpochRecord, moved bool) error {
	cp, cv, err := ReadCheckpoint(ctx, c.meta, c.star, c.class)
	c.Requests++
	if err != nil {
		return err
	}
	if moved && (cp.Owner != c.owner || cp.OwnerEpoch != rec.Epoch) {
		return fmt.Errorf("absorb: checkpoint sealed by %q for %d after our mint of %d", cp.Owner, cp.OwnerEpoch, rec.Epoch)
	}
	c.cp, c.ver = cp, cv
	if moved {
		c.epoch = rec.Epoch
	}
	return nil
}

// SealMint is a clean takeover's seal and mint in one Commit: when prev
// (read at prevVersion) carries a clean seal of its own epoch, the cut is
// known and nothing needs fencing, so nothing has to happen between the
// seal and the mint. The Commit puts the next epoch record at prevVersion
// and the checkpoint, found as cp at cpVersion (metastore.NoVersion: there
// is none, and one is created at (1, 0)), with owner's seal of the new
// epoch at cpVersion: exactly the writes SealCheckpoint and MintNext make,
// applied at once, so any interleaving the two-step takeover allows is
// refused here by one of the two compare-and-swaps. A rival that sealed
// the checkpoint since cp was read, or whose mint moved the epoch record,
// makes it fail; it never writes over a seal it did not read.
//
// It returns a committer holding the seal at the new epoch, and the record
// written and its version. The error wraps ErrEpochMoved if the epoch
// record moved (start the takeover over: a rival minted), ErrSealRaced if
// only the checkpoint moved (read both again and retry); any other error
// leaves the outcome to a retry with the same arguments, which finds its
// own write if it applied.
func SealMint(ctx context.Context, ms metastore.Store, star string, c chain.Class, owner string, prev chain.EpochRecord, prevVersion metastore.Version,
	next chain.EpochRecord, cp Checkpoint, cpVersion metastore.Version) (*Committer, chain.EpochRecord, metastore.Version, error) {
	what := fmt.Sprintf("seal and mint epoch %d of %s/%s", prev.Epoch+1, star, c)
	if prev.Seal == nil || prev.Seal.Epoch != prev.Epoch {
		return nil, chain.EpochRecord{}, "", fmt.Errorf("absorb: %s: epoch %d carries no clean seal of its own: its cut must be fenced first", what, prev.Epoch)
	}
	rec, err := chain.PrepareNext(prev, next)
	if err != nil {
		return nil, chain.EpochRecord{}, "", fmt.Errorf("absorb: %s: %w", what, err)
	}
	val, err := json.Marshal(rec)
	if err != nil {
		return nil, chain.EpochRecord{}, "", err
	}
	sealed := cp
	sealed.Owner, sealed.OwnerEpoch, sealed.Counter = owner, rec.Epoch, cp.Counter+1
	cv, err := json.Marshal(sealed)
	if err != nil {
		return nil, chain.EpochRecord{}, "", err
	}
	epKey := chain.EpochKey(star, c)
	cm := &Committer{meta: ms, star: star, class: c, owner: owner, epoch: rec.Epoch}
	vs, err := ms.Commit(ctx, []metastore.Op{
		{Kind: metastore.OpPut, Key: epKey, Value: val, Expect: prevVersion},
		{Kind: metastore.OpPut, Key: chain.CheckpointKey(star, c), Value: cv, Expect: cpVersion},
	})
	cm.Requests++
	if err == nil {
		cm.cp, cm.ver = sealed, vs[1]
		return cm, rec, vs[0], nil
	}
	if cerr := ctx.Err(); cerr != nil {
		return nil, chain.EpochRecord{}, "", cerr
	}
	if errors.Is(err, metastore.ErrInvalidKey) || errors.Is(err, metastore.ErrTooLarge) {
		return nil, chain.EpochRecord{}, "", fmt.Errorf("absorb: %s: %w", what, err)
	}
	// A conflict, or an ambiguous failure: the Commit is atomic, so the
	// epoch record tells whether it applied.
	it, gerr := ms.Get(ctx, epKey)
	cm.Requests++
	switch {
	case gerr != nil:
		return nil, chain.EpochRecord{}, "", fmt.Errorf("absorb: %s: %w: %w (and the epoch record's re-read failed: %v)", what, errUnresolved, err, gerr)
	case bytes.Equal(it.Value, val):
		got, gv, rerr := ReadCheckpoint(ctx, ms, star, c)
		cm.Requests++
		if rerr != nil {
			return nil, chain.EpochRecord{}, "", fmt.Errorf("absorb: %s: applied, but the checkpoint's re-read failed: %w", what, rerr)
		}
		if got.Owner != owner || got.OwnerEpoch != rec.Epoch {
			return nil, chain.EpochRecord{}, "", fmt.Errorf("absorb: %s: %w: the checkpoint is sealed by %q for %d after our mint", what, ErrDeposed, got.Owner, got.OwnerEpoch)
		}
		cm.cp, cm.ver = got, gv
		return cm, rec, it.Version, nil
	case it.Version != prevVersion:
		return nil, chain.EpochRecord{}, "", fmt.Errorf("absorb: %s: %w: %w", what, ErrEpochMoved, err)
	}
	return nil, chain.EpochRecord{}, "", fmt.Errorf("absorb: %s: %w: %w", what, ErrSealRaced, err)
}
