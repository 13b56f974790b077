package fleet

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Operations on placement: an operator drains a member (placement gives it
// no star while another member is live) or moves a star to a member (a
// placement override). Both are keys of their own, outside any lease, so
// they outlive the member's session and a restart:
//
//	<Prefix>fleet/drained/<member>  the member is drained
//	<Prefix>fleet/moves/<star>      the member the star is moved to
//
// The routers see them through their watch, and each member's controller
// moves the stars as for a join or a leave: a clean handoff.

// opsState is the drains and moves a router read.
type opsState struct {
	drained map[string]bool
	moves   map[string]string // star -> member
}

func newOpsState() opsState {
	return opsState{drained: map[string]bool{}, moves: map[string]string{}}
}

func drainedPrefix(prefix string) string { return prefix + "fleet/drained/" }
func movesPrefix(prefix string) string   { return prefix + "fleet/moves/" }

// Drain marks member drained, or (drained false) no longer drained. A
// drained member stays a member, but placement gives it a star only when
// no undrained member is live (or a Move names it): its stars move to the
// others by a clean handoff, after which it can be stopped with nothing to
// hand over. The mark stays until it is removed, across restarts. prefix is
// Config.Prefix; the member need not be live.
func Drain(ctx context.Context, cli *clientv3.Client, prefix, member string, drained bool) error {
	if err := checkName("member name", member); err != nil {
		return err
	}
	key := drainedPrefix(prefix) + member
	var err error
	if drained {
		_, err = cli.Put(ctx, key, time.Now().UTC().Format(time.RFC3339))
	} else {
		_, err = cli.Delete(ctx, key)
	}
	if err != nil {
		return fmt.Errorf("fleet: drain %q: %w", member, err)
	}
	return nil
}

// Move places star on member whatever the hashing says, while member is
// live (a placement override); member "" removes the override, and the
// star goes back where Place puts it. The star moves by a clean handoff.
// prefix is Config.Prefix.
func Move(ctx context.Context, cli *clientv3.Client, prefix, star, member string) error {
	if err := checkName("star", star); err != nil {
		return err
	}
	key := movesPrefix(prefix) + star
	var err error
	if member == "" {
		_, err = cli.Delete(ctx, key)
	} else {
		if err := checkName("member name", member); err != nil {
			return err
		}
		_, err = cli.Put(ctx, key, member)
	}
	if err != nil {
		return fmt.Errorf("fleet: move star %q: %w", star, err)
	}
	return nil
}

// applyOps applies a drain or move key; false for any other key.
func (r *Router) applyOps(ops opsState, key string, val []byte, del bool) bool {
	switch {
	case strings.HasPrefix(key, drainedPrefix(r.cfg.Prefix)):
		name := strings.TrimPrefix(key, drainedPrefix(r.cfg.Prefix))
		if del {
			delete(ops.drained, name)
		} else {
			ops.drained[name] = true
		}
		return true
	case strings.HasPrefix(key, movesPrefix(r.cfg.Prefix)):
		star := strings.TrimPrefix(key, movesPrefix(r.cfg.Prefix))
		if del || len(val) == 0 {
			delete(ops.moves, star)
		} else {
			ops.moves[star] = string(val)
		}
		return true
	}
	return false
}

// placeLocked computes the placement: Place over the live members, a
// drained one weighted below every other (it wins a star only when no
// undrained member is live), then each move whose member is live. It
// counts the stars whose owner changed.
func (r *Router) placeLocked() {
	r.placed++
	members := r.memberListLocked()
	weighted := make([]Member, len(members))
	for i, m := range members {
		if r.ops.drained[m.Name] {
			m.Weight = -1
		}
		weighted[i] = m
	}
	best := r.place.update(r.cfg.Stars, weighted)
	owners := make(map[string]string, len(best))
	for s, b := range best {
		owners[s] = b.member
	}
	for star, m := range r.ops.moves {
		if _, live := r.members[m]; live {
			if _, ok := owners[star]; ok {
				owners[star] = m
			}
		}
	}
	if r.owners != nil {
		for _, s := range r.cfg.Stars {
			if owners[s] != r.owners[s] {
				r.stats.PlacementChanges++
			}
		}
	}
	r.owners = owners
	r.placedOn = make(map[string][]string, len(members))
	for _, s := range r.cfg.Stars {
		if m, ok := owners[s]; ok {
			r.placedOn[m] = append(r.placedOn[m], s)
		}
	}
}

// countUnledLocked counts the stars no member leads (after a load; the
// watch keeps the count as each lead comes and goes).
func (r *Router) countUnledLocked() {
	unled := 0
	for _, s := range r.cfg.Stars {
		if len(r.leads[s]) == 0 {
			unled++
		}
	}
	r.stats.Unled = unled
}

// RouterStats are a router's counters and gauges, for metrics.
type RouterStats struct {
	// Members is how many members are live.
	Members int
	// Stars is len(Config.Stars); Unled how many of them no member
	// publishes a lead of now (moving, or their member crashed).
	Stars, Unled int
	// PlacementChanges counts the stars whose placed member changed,
	// summed over the router's life (a join, leave, drain or move).
	PlacementChanges uint64
	// Drained lists the drained members; Moves the placement overrides
	// (star -> member).
	Drained []string
	Moves   map[string]string
}

// Stats returns the router's counters and the drains and moves it sees.
func (r *Router) Stats() RouterStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.stats
	st.Members, st.Stars = len(r.members), len(r.cfg.Stars)
	for m := range r.ops.drained {
		st.Drained = append(st.Drained, m)
	}
	sort.Strings(st.Drained)
	st.Moves = make(map[string]string, len(r.ops.moves))
	for s, m := range r.ops.moves {
		st.Moves[s] = m
	}
	return st
}

// errNoStars is returned by StarsOf when etcd names no star.
var errNoStars = errors.New("fleet: no star is led or moved under this prefix")

// StarsOf lists the stars etcd names under prefix (Config.Prefix): those a
// member publishes a lead of, and those moved. It is for tools that are
// not given the deployment's Stars (flightlog fleet): a star that is
// placed but not led, and not moved, is not in etcd, and not listed.
func StarsOf(ctx context.Context, cli *clientv3.Client, prefix string) ([]string, error) {
	seen := map[string]bool{}
	for _, p := range []string{prefix + "fleet/leads/", movesPrefix(prefix)} {
		resp, err := cli.Get(ctx, p, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return nil, fmt.Errorf("fleet: list the stars: %w", err)
		}
		for _, kv := range resp.Kvs {
			star, _, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), p), "/")
			if checkName("star", star) == nil {
				seen[star] = true
			}
		}
	}
	if len(seen) == 0 {
		return nil, errNoStars
	}
	out := make([]string, 0, len(seen))
	for s := range seen {
		out = append(out, s)
	}
	sort.Strings(out)
	return out, nil
}
