package loglet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/flightlog/flightlog/absorb"
	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// ErrTakeoverLost: another process minted the chain's next epoch first. This
// process does not lead the star; the caller may retry Open later.
var ErrTakeoverLost = errors.New("loglet: another process took over the chain first")

// chainStart is what a lane starts from: its epoch record, the committer
// holding the checkpoint's seal, and every stream's tail.
type chainStart struct {
	rec      chain.EpochRecord
	ver      metastore.Version
	cm       *absorb.Committer
	tails    map[string]absorb.StreamTail
	snapshot string // the tails snapshot the checkpoint points to
	// takeover figures, for Stats and logs
	fencedCut, walked uint64
	clean             bool
	took              time.Duration
}

func (s *Star) bucketSet(cc *ClassConfig) chain.BucketSet {
	return chain.BucketSet{Stores: cc.Buckets, Names: cc.BucketNames, W: cc.W, Retry: cc.Retry}
}

// startChain leads chain c from Open: it mints epoch 1 of a new chain, or
// takes over an existing one (after a clean Close, or not).
func (s *Star) startChain(ctx context.Context, c Class, cc *ClassConfig) (chainStart, error) {
	start := time.Now()
	for attempt := 0; attempt < 5; attempt++ {
		rec, ver, err := chain.ReadEpoch(ctx, s.cfg.Meta, s.cfg.Star, c)
		if errors.Is(err, metastore.ErrNotFound) {
			rec, ver, err = chain.MintFirst(ctx, s.cfg.Meta, s.cfg.Star, c, chain.EpochRecord{
				Owner: s.cfg.Owner, Window: cc.ParallelUploads, K: len(cc.Buckets), W: cc.W, Buckets: cc.BucketNames})
			if errors.Is(err, chain.ErrEpochTaken) {
				continue // someone minted first: take it over
			}
			if err != nil {
				return chainStart{}, err
			}
			cm, err := absorb.InitCheckpoint(ctx, s.cfg.Meta, s.cfg.Star, c, s.cfg.Owner, rec.Epoch)
			if err != nil {
				return chainStart{}, err
			}
			return chainStart{rec: rec, ver: ver, cm: cm, tails: map[string]absorb.StreamTail{}, took: time.Since(start)}, nil
		}
		if err != nil {
			return chainStart{}, err
		}
		st, err := s.takeover(ctx, c, cc, rec, ver)
		if errors.Is(err, absorb.ErrEpochMoved) {
			continue
		}
		if errors.Is(err, absorb.ErrDeposed) && !errors.Is(err, ErrTakeoverLost) {
			// Another candidate took the chain over from us mid-takeover.
			err = fmt.Errorf("%w: %v", ErrTakeoverLost, err)
		}
		st.took = time.Since(start)
		return st, err
	}
	return chainStart{}, fmt.Errorf("loglet: %s/%s: the epoch kept moving during takeover", s.cfg.Star, c)
}

// takeover runs DESIGN.md's takeover on the chain whose current epoch is
// rec (read at ver): seal the checkpoint, fence rec's epoch (skipped after a
// clean seal), mint the next epoch, re-seal, run the garbage probe, and
// walk and absorb every committed slot below the cut.
func (s *Star) takeover(ctx context.Context, c Class, cc *ClassConfig, rec chain.EpochRecord, ver metastore.Version) (chainStart, error) {
	log := s.log.With("star", s.cfg.Star, "class", c.String())
	if rec.K != len(cc.Buckets) || rec.W != cc.W || !slices.Equal(rec.Buckets, cc.BucketNames) {
		return chainStart{}, fmt.Errorf("loglet: %s/%s: epoch %d was written to buckets %v (K=%d, W=%d); this process is configured with %v (K=%d, W=%d): changing a chain's bucket set is not supported",
			s.cfg.Star, c, rec.Epoch, rec.Buckets, rec.K, rec.W, cc.BucketNames, len(cc.Buckets), cc.W)
	}
	e := rec.Epoch
	cm, cp, err := absorb.SealCheckpoint(ctx, s.cfg.Meta, s.cfg.Star, c, s.cfg.Owner, e+1, ver)
	if err != nil {
		return chainStart{}, err
	}
	if cp.Epoch > e {
		return chainStart{}, fmt.Errorf("loglet: %s/%s: checkpoint at epoch %d is past the epoch record's %d", s.cfg.Star, c, cp.Epoch, e)
	}
	set := s.bucketSet(cc)
	nonce := envelope.NewNonce()
	var cut uint64
	clean := rec.Seal != nil && rec.Seal.Epoch == e
	if clean {
		cut = rec.Seal.Slot
	} else {
		from := uint64(0)
		if cp.Epoch == e {
			from = cp.Next
		}
		res, err := chain.Fence(ctx, set, s.cfg.Star, c, e, from, nonce, chain.FenceOptions{Retry: cc.Retry, Parallel: fenceParallel(rec.Window)})
		if err != nil {
			return chainStart{}, fmt.Errorf("loglet: %s/%s: fence epoch %d: %w", s.cfg.Star, c, e, err)
		}
		cut = res.Cut
		log.Info("fenced", "epoch", e, "from", from, "cut", cut, "poisoned", res.Poisoned, "poisoned_ahead", res.PoisonedAhead)
	}
	// Mint: keep the cuts the walk (and readers of older epochs) still need.
	var cuts []chain.Cut
	for _, k := range rec.Cuts {
		if k.Epoch >= cp.Epoch {
			cuts = append(cuts, k)
		}
	}
	cuts = append(cuts, chain.Cut{Epoch: e, Slot: cut, Clean: clean})
	nrec, nver, err := chain.MintNext(ctx, s.cfg.Meta, s.cfg.Star, c, rec, ver, chain.EpochRecord{
		Owner: s.cfg.Owner, Window: cc.ParallelUploads, K: len(cc.Buckets), W: cc.W, Buckets: cc.BucketNames, Cuts: cuts})
	if errors.Is(err, chain.ErrMintLost) {
		return chainStart{}, fmt.Errorf("%w: %s/%s is at epoch %d owned by %q", ErrTakeoverLost, s.cfg.Star, c, nrec.Epoch, nrec.Owner)
	}
	if err != nil {
		return chainStart{}, fmt.Errorf("loglet: %s/%s: mint epoch %d: %w", s.cfg.Star, c, e+1, err)
	}
	if err := cm.Reseal(ctx, nrec.Epoch, nver); err != nil {
		return chainStart{}, fmt.Errorf("loglet: %s/%s: reseal after minting %d: %w", s.cfg.Star, c, nrec.Epoch, err)
	}
	if !clean {
		// Poison the window past the cut so a zombie's delayed PUT halts
		// it, and reclaim its copies. Safety rests on the recorded cut.
		pr, err := chain.GarbageProbe(ctx, set, s.cfg.Star, c, e, cut, rec.Window, nonce)
		if err != nil {
			log.Warn("garbage probe incomplete (safety rests on the cut)", "err", err)
		}
		log.Info("garbage probe", "epoch", e, "cut", cut, "window", rec.Window, "poisoned", pr.Poisoned, "deleted", pr.DeletedFlights, "unreachable", pr.Unreachable)
	}
	tails := map[string]absorb.StreamTail{}
	if cp.Tails != "" {
		snap, err := absorb.ReadSnapshot(ctx, set.Stores, cp.Tails)
		if err != nil {
			return chainStart{}, fmt.Errorf("loglet: %s/%s: tails snapshot: %w", s.cfg.Star, c, err)
		}
		if snap.Streams != nil {
			tails = snap.Streams
		}
	}
	walked, snapKey, err := s.walkAndAbsorb(ctx, c, cc, cm, cp, nrec, tails)
	if err != nil {
		return chainStart{}, err
	}
	log.Info("took over", "from_epoch", e, "epoch", nrec.Epoch, "cut", cut, "clean", clean, "walked_slots", walked, "streams", len(tails))
	return chainStart{rec: nrec, ver: nver, cm: cm, tails: tails, snapshot: snapKey, fencedCut: cut, walked: walked, clean: clean}, nil
}

// walkAndAbsorb absorbs every committed slot from the checkpoint up to each
// earlier epoch's cut, by point lookups: first the checkpoint's pending
// round exactly (a replay), then rounds of AbsorbMaxSlots.
func (s *Star) walkAndAbsorb(ctx context.Context, c Class, cc *ClassConfig, cm *absorb.Committer, cp absorb.Checkpoint, rec chain.EpochRecord, tails map[string]absorb.StreamTail) (walked uint64, snapshot string, err error) {
	set := s.bucketSet(cc)
	prevSnap := cp.Tails
	writer := func(e, from uint64) string { return fmt.Sprintf("%s/%d/%d", s.cfg.Owner, e, from) }
	absorbRange := func(e, from, to uint64, exact bool) error {
		var batch []absorb.Slot
		flush := func() error {
			if len(batch) == 0 {
				return nil
			}
			round := absorb.Round{Epoch: e, From: batch[0].Slot, To: batch[len(batch)-1].Slot + 1}
			refs, err := absorb.Plan(c.String(), writer(e, round.From), batch, tails)
			if err != nil {
				return fmt.Errorf("loglet: walk %s/%s epoch %d: %w", s.cfg.Star, c, e, err)
			}
			if err := commitRound(ctx, cm, set.Stores, cc.W, s.cfg.Star, c, round, refs, tails, &prevSnap); err != nil {
				return err
			}
			walked += uint64(len(batch))
			batch = batch[:0]
			return nil
		}
		err := chain.Walk(ctx, set, s.cfg.Star, c, e, from, to, func(slot uint64, _ []byte, frames []envelope.FrameInfo) error {
			batch = append(batch, absorb.Slot{Epoch: e, Slot: slot, Key: chain.SlotKey(s.cfg.Star, c, e, slot), Frames: frames})
			if !exact && len(batch) >= s.cfg.AbsorbMaxSlots {
				return flush()
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("loglet: walk %s/%s epoch %d [%d, %d): %w", s.cfg.Star, c, e, from, to, err)
		}
		return flush()
	}
	pos := cp
	if p := cp.Pending; p != nil {
		if err := absorbRange(p.Epoch, p.From, p.To, true); err != nil {
			return walked, prevSnap, err
		}
		pos.Epoch, pos.Next = p.Epoch, p.To
	}
	for e := pos.Epoch; e < rec.Epoch; e++ {
		k, ok := rec.CutOf(e)
		if !ok {
			continue // an epoch that never wrote (e.g. a lost takeover)
		}
		from := uint64(0)
		if e == pos.Epoch {
			from = pos.Next
		}
		if from < k.Slot {
			if err := absorbRange(e, from, k.Slot, false); err != nil {
				return walked, prevSnap, err
			}
		}
	}
	return walked, prevSnap, nil
}

// commitRound writes a round's tails snapshot, then its refs and the
// checkpoint (one metastore Commit where the backend allows), then deletes
// the snapshot the checkpoint pointed to before (*prev), best effort: an
// orphaned snapshot costs only storage.
func commitRound(ctx context.Context, cm *absorb.Committer, stores []objstore.Store, w int, star string, c Class, round absorb.Round, refs []absorb.SpanRef, tails map[string]absorb.StreamTail, prev *string) error {
	key := absorb.TailsKey(star, c, round.Epoch, round.To)
	snap := absorb.EncodeTails(absorb.Tails{Epoch: round.Epoch, Next: round.To, Streams: tails})
	if err := absorb.PutSnapshot(ctx, stores, w, key, snap); err != nil {
		return err
	}
	if err := cm.Commit(ctx, round, refs, key); err != nil {
		return err
	}
	if *prev != "" && *prev != key {
		for _, b := range stores {
			_ = b.Delete(ctx, *prev)
		}
	}
	*prev = key
	return nil
}

// fenceParallel is how many slots a fence of an epoch with this window
// looks at once: the chain default, but never past the window, so that
// look-ahead poisons past the cut stay inside the range the garbage probe
// poisons anyway.
func fenceParallel(window int) int {
	return max(1, min(chain.DefaultFenceParallel, window))
}
