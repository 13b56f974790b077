package chain

import (
	"errors"
	"fmt"

	"github.com/flightlog/flightlog/objstore"
)

// refusedForGood reports why an undecided slot can never be decided, or
// nil if it still may be: its unknown occupants include buckets that refuse
// for good (objstore.ErrPermanent: a missing bucket, wrong credentials), and
// even if every other unknown or corrupt occupant turned out a flight of the
// best-placed nonce, or a poison, neither W flight copies nor K−W+1 poisons
// could be reached. Retrying such a slot would block the fence for ever on
// a misconfiguration; the fence gives up at once instead, naming it. With
// the readable-flight override on and a flight copy present, the slot may
// yet be decided by it, and nil is returned.
func refusedForGood(k, w int, occupants []Occupant, accept bool) error {
	var (
		refused, changeable, poisons, best int
		cause                              error
	)
	for i, o := range occupants {
		switch o.Kind {
		case OccupantUnknown:
			if o.Err != nil && errors.Is(o.Err, objstore.ErrPermanent) {
				refused++
				if cause == nil {
					cause = o.Err
				}
				continue
			}
			changeable++
		case OccupantCorrupt:
			changeable++ // read again each round
		case OccupantPoison:
			poisons++
		case OccupantFlight:
			if accept {
				return nil
			}
			same := 0
			for _, p := range occupants[i:] {
				if p.Kind == OccupantFlight && p.Nonce == o.Nonce {
					same++
				}
			}
			best = max(best, same)
		}
	}
	if refused == 0 || best+changeable >= w || poisons+changeable >= k-w+1 {
		return nil
	}
	return fmt.Errorf("%d of %d buckets refuse for good, so neither %d flight copies nor %d poisons can be found: %w", refused, k, w, k-w+1, cause)
}
