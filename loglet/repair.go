package loglet

import (
	"context"
	"fmt"
	"slices"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/repair"
)

// RepairUnderReplicated re-copies the missing or damaged copies of the
// slots on each chain's under-replicated list (ClassStats.UnderReplSlots:
// slots whose flight reached W copies but not K, a straggler copy given up)
// from a good copy, with package repair: the same bytes, a delete of a
// corrupt copy and then PutIfAbsent. It may run while the star leads: this
// star's own straggler PUT that then finds the copy recognises its nonce (a
// ghost PUT, counted in GhostPuts, never a foreign occupant that would halt
// the epoch), and a fencer's poison landing in a hole is left in place.
//
// The list names slots, not epochs. While the chain has not halted
// (ClassStats.Halts is 0) every slot on it is of the current epoch and was
// released by this leader, which is the repair's evidence that the slot
// committed (repair.Evidence.Released), so even a slot with fewer than W
// good copies left is re-copied (a missing copy is filled; a corrupt copy
// is deleted only where no fence can kill the slot in the hole, see package
// repair). After a halt the list may hold slots of earlier epochs: each
// slot is then tried in the current epoch and in every earlier epoch whose
// recorded cut lies above it, without that evidence, so only slots the
// buckets and the chain's records show settled are repaired. A slot still
// being written, or trimmed since, is refused or found healthy, never
// forced.
//
// Slots below the chain's trim cursor are skipped: settlement moved their
// records into settled objects and deletes every copy on purpose (the core
// drops them from the list as each pass reports the cursor; a slot passed
// since the last Stats snapshot is skipped here).
//
// It returns a result for every slot it found damaged (repaired, in part,
// or refused, with why); healthy slots give none. The list is not cleared:
// a second call finds the repaired slots healthy. The error is only for an
// ended ctx or an unreadable metastore.
func (s *Star) RepairUnderReplicated(ctx context.Context) ([]repair.SlotResult, error) {
	var out []repair.SlotResult
	for _, c := range chain.Classes() {
		l := s.lane(c)
		if l == nil {
			continue
		}
		cs := l.snapshot()
		if len(cs.UnderReplSlots) == 0 {
			continue
		}
		cc := s.classConfig(c)
		rc := repair.Chain{Meta: s.cfg.Meta, Star: s.cfg.Star, Class: c,
			Set: chain.BucketSet{Stores: cc.Stores, Names: cc.BucketNames, W: cc.W, Retry: cc.Retry, ReadAhead: cc.ReadAhead}}
		slots := slices.Clone(cs.UnderReplSlots)
		slices.Sort(slots)
		slots = slices.Compact(slots)
		// Settled slots are deleted on purpose (every ref into them points
		// at a settled object): nothing below the trim cursor is repaired.
		trim, _, err := chain.ReadTrimCursor(ctx, s.cfg.Meta, s.cfg.Star, c)
		if err != nil {
			return out, fmt.Errorf("loglet: repair %s/%s: %w", s.cfg.Star, c, err)
		}
		var cuts []chain.Cut
		if cs.Halts > 0 {
			rec, _, err := chain.ReadEpoch(ctx, s.cfg.Meta, s.cfg.Star, c)
			if err != nil {
				return out, fmt.Errorf("loglet: repair %s/%s: %w", s.cfg.Star, c, err)
			}
			cuts = rec.Cuts
		}
		for _, slot := range slots {
			type attempt struct {
				epoch uint64
				ev    repair.Evidence
			}
			tries := []attempt{{cs.Epoch, repair.Evidence{Released: cs.Halts == 0}}}
			for _, cut := range cuts {
				if cut.Epoch < cs.Epoch && slot < cut.Slot {
					tries = append(tries, attempt{cut.Epoch, repair.Evidence{}})
				}
			}
			for _, a := range tries {
				if (chain.Position{Epoch: a.epoch, Next: slot}).Less(trim.At) {
					continue
				}
				res, err := rc.RepairSlot(ctx, a.epoch, slot, a.ev)
				if err != nil {
					return out, fmt.Errorf("loglet: repair %s/%s: %w", s.cfg.Star, c, err)
				}
				if !res.Report.Empty() && (res.Refused != "" || len(res.Actions) > 0) {
					out = append(out, res)
				}
			}
		}
	}
	return out, nil
}
