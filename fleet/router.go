package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/metastore"
)

// Errors of the fleet.
var (
	// ErrUnled: no member publishes a lead for the star (it is moving, or
	// its member crashed and the lease has not expired yet): retry after
	// Router.Changed.
	ErrUnled = errors.New("fleet: star is not led by any member")
	// ErrClosed: the router or node was closed.
	ErrClosed = errors.New("fleet: closed")
	// ErrSessionLost: the member's etcd session ended (its lease expired
	// or was revoked) without Close, and the node did not rejoin
	// (Config.NoRejoin, or its etcd client was closed); it has closed its
	// stars and stopped. Join again to come back.
	ErrSessionLost = errors.New("fleet: session lost")
)

// Router is the fleet's routing table, cached in memory and kept current by
// an etcd watch on the fleet's keys: the members, the placement of the
// stars, and the leads the members publish. It reads the metastore only
// for StarOf's stream records (cached). All methods are safe for concurrent
// use.
type Router struct {
	cfg    Config
	cli    *clientv3.Client
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	members  map[string]memberRecord
	leads    map[string]map[string]Lead // star -> member -> lead
	claims   map[string]map[string]bool // star -> member opening it (claimKey)
	owners   map[string]string          // placement
	place    placement                  // what owners is computed from, kept across changes
	placedOn map[string][]string        // member -> the stars placed on it
	isStar   map[string]bool            // Config.Stars
	changed  chan struct{}              // closed and replaced on every change
	err      error                      // why the watch stopped
	streams  map[string]string          // stream -> star, from stream records
	ops      opsState                   // drains and moves (ops.go)
	stats    RouterStats
	placed   int // how many times placeLocked ran (tests)
}

// streamCacheMax bounds the stream-to-star cache (it is dropped whole
// when full).
const streamCacheMax = 1 << 16

// NewRouter reads the fleet's keys and watches them until Close. It joins
// nothing (see Join for a member, whose Node has a Router of its own).
// cfg.OpenStar is not needed.
func NewRouter(ctx context.Context, cli *clientv3.Client, cfg Config) (*Router, error) {
	if ctx == nil {
		return nil, errors.New("fleet: nil context")
	}
	if cli == nil {
		return nil, errors.New("fleet: nil etcd client")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.applyDefaults()
	r := &Router{
		cfg: cfg, cli: cli, done: make(chan struct{}),
		changed: make(chan struct{}),
		streams: map[string]string{},
		isStar:  make(map[string]bool, len(cfg.Stars)),
	}
	for _, s := range cfg.Stars {
		r.isStar[s] = true
	}
	rev, err := r.load(ctx)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go r.watch(wctx, rev)
	return r, nil
}

// load reads every fleet key and replaces the table; it returns the
// revision read at.
func (r *Router) load(ctx context.Context) (int64, error) {
	resp, err := r.cli.Get(ctx, r.cfg.Prefix+"fleet/", clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("fleet: read the fleet's keys: %w", err)
	}
	members := map[string]memberRecord{}
	leads := map[string]map[string]Lead{}
	claims := map[string]map[string]bool{}
	ops := newOpsState()
	for _, kv := range resp.Kvs {
		r.apply(members, leads, claims, ops, string(kv.Key), kv.Value, false)
	}
	r.mu.Lock()
	r.members, r.leads, r.claims, r.ops = members, leads, claims, ops
	r.countUnledLocked()
	r.replaceLocked(true)
	r.mu.Unlock()
	return resp.Header.Revision, nil
}

// apply applies one key's put (or delete) to the maps. Unknown or corrupt
// keys are logged and skipped: one bad record must not blind the router.
// It reports whether the key is one of placement's inputs (a member, a
// drain, a move): a lead is not, and does not cost a new placement.
func (r *Router) apply(members map[string]memberRecord, leads map[string]map[string]Lead, claims map[string]map[string]bool, ops opsState, key string, val []byte, del bool) (placement bool) {
	switch {
	case r.applyOps(ops, key, val, del):
		return true
	case strings.HasPrefix(key, r.cfg.claimsPrefix()):
		star, name, ok := strings.Cut(strings.TrimPrefix(key, r.cfg.claimsPrefix()), "/")
		if !ok {
			r.cfg.Logger.Warn("fleet: skipping a bad claim key", "key", key)
			return false
		}
		if del {
			delete(claims[star], name)
			if len(claims[star]) == 0 {
				delete(claims, star)
			}
			return false
		}
		if claims[star] == nil {
			claims[star] = map[string]bool{}
		}
		claims[star][name] = true
	case strings.HasPrefix(key, r.cfg.membersPrefix()):
		name := strings.TrimPrefix(key, r.cfg.membersPrefix())
		if del {
			delete(members, name)
			return true
		}
		m, err := decodeMember(val)
		if err != nil || m.Name != name {
			r.cfg.Logger.Warn("fleet: skipping a bad member record", "key", key, "err", err)
			return false
		}
		members[name] = m
		return true
	case strings.HasPrefix(key, r.cfg.leadsPrefix()):
		star, name, ok := strings.Cut(strings.TrimPrefix(key, r.cfg.leadsPrefix()), "/")
		if !ok {
			r.cfg.Logger.Warn("fleet: skipping a bad lead key", "key", key)
			return false
		}
		if del {
			delete(leads[star], name)
			if len(leads[star]) == 0 {
				delete(leads, star)
			}
			return false
		}
		l, err := decodeLead(val)
		if err != nil || l.Member.Name != name {
			r.cfg.Logger.Warn("fleet: skipping a bad lead record", "key", key, "err", err)
			return false
		}
		if leads[star] == nil {
			leads[star] = map[string]Lead{}
		}
		leads[star][name] = l
	}
	return false
}

// replaceLocked recomputes the placement (with the drains and moves:
// placeLocked) when one of its inputs changed (place), and wakes Changed's
// waiters. A watch response that carries only leads, as every handoff's
// do, costs no placement; a join or leave costs a score per star, not per
// star and member (placement.update).
func (r *Router) replaceLocked(place bool) {
	if place || r.owners == nil {
		r.placeLocked()
	}
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *Router) memberListLocked() []Member {
	out := make([]Member, 0, len(r.members))
	for _, m := range r.members {
		out = append(out, m.Member)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// watch follows the fleet's keys from rev+1; on a compaction or a broken
// watch it reloads and watches again, until ctx ends.
func (r *Router) watch(ctx context.Context, rev int64) {
	defer close(r.done)
	for ctx.Err() == nil {
		wch := r.cli.Watch(clientv3.WithRequireLeader(ctx), r.cfg.Prefix+"fleet/", clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		for wr := range wch {
			if err := wr.Err(); err != nil {
				r.cfg.Logger.Warn("fleet: watch broke; reloading", "err", err)
				break
			}
			r.mu.Lock()
			place := false
			for _, ev := range wr.Events {
				if r.applyLocked(string(ev.Kv.Key), ev.Kv.Value, ev.Type == clientv3.EventTypeDelete) {
					place = true
				}
			}
			r.replaceLocked(place)
			r.mu.Unlock()
			rev = wr.Header.Revision
		}
		if ctx.Err() != nil {
			return
		}
		// Reload whole (a compaction may have dropped the events between).
		lctx, cancel := context.WithTimeout(ctx, r.cfg.TTL)
		nrev, err := r.load(lctx)
		cancel()
		if err == nil {
			rev = nrev
		} else {
			r.cfg.Logger.Warn("fleet: reload failed", "err", err)
			select {
			case <-ctx.Done():
			case <-r.cli.Ctx().Done():
				r.mu.Lock()
				r.err = fmt.Errorf("fleet: etcd client closed: %w", ErrClosed)
				r.mu.Unlock()
				return
			case <-afterBackoff():
			}
		}
	}
}

// applyLocked applies one watched put or delete to the table (apply) and
// keeps the count of unled stars, which costs the star's leads, not a walk
// of every star.
func (r *Router) applyLocked(key string, val []byte, del bool) (placement bool) {
	star := r.leadStar(key)
	wasLed := len(r.leads[star]) > 0
	placement = r.apply(r.members, r.leads, r.claims, r.ops, key, val, del)
	if led := len(r.leads[star]) > 0; led != wasLed && r.isStar[star] {
		if led {
			r.stats.Unled--
		} else {
			r.stats.Unled++
		}
	}
	return placement
}

// leadStar is the star of a lead key, "" for any other key.
func (r *Router) leadStar(key string) string {
	rest, ok := strings.CutPrefix(key, r.cfg.leadsPrefix())
	if !ok {
		return ""
	}
	star, _, _ := strings.Cut(rest, "/")
	return star
}

// viewOf is what member's controller decides from: the placed member and
// a copy of the leads and claims of the stars placed on member and of the
// stars of also (those it holds or waits for), and no other; the cost is
// that of member's stars, not of the deployment's. A claim counts only
// while its member is live: one whose session is gone opens nothing.
func (r *Router) viewOf(member string, also []string) (owners map[string]string, leads map[string]map[string]Lead, claims map[string][]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	mine := r.placedOn[member]
	owners = make(map[string]string, len(mine)+len(also))
	leads = make(map[string]map[string]Lead, len(mine)+len(also))
	claims = map[string][]string{}
	add := func(s string) {
		if _, done := leads[s]; done {
			return
		}
		if m, ok := r.owners[s]; ok {
			owners[s] = m
		}
		ls := make(map[string]Lead, len(r.leads[s]))
		for m, l := range r.leads[s] {
			ls[m] = l
		}
		leads[s] = ls
		for m := range r.claims[s] {
			if _, live := r.members[m]; live {
				claims[s] = append(claims[s], m)
			}
		}
	}
	for _, s := range mine {
		add(s)
	}
	for _, s := range also {
		add(s)
	}
	return owners, leads, claims
}

// Close stops the watch. The table stays readable, frozen.
func (r *Router) Close() error {
	r.cancel()
	<-r.done
	return nil
}

// Changed returns a channel closed at the table's next change (a member
// joined or left, a lead published or withdrawn): wait on it instead of
// polling.
func (r *Router) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// Members lists the live members, by name.
func (r *Router) Members() []Member {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.memberListLocked()
}

// Placement maps every star to the member placement gives it (Place over
// the live members, drained members last and moved stars to the member
// they were moved to, see Drain and Move; empty with no member).
func (r *Router) Placement() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]string, len(r.owners))
	for s, m := range r.owners {
		out[s] = m
	}
	return out
}

// HasStar reports whether star is one of the deployment's (Config.Stars).
func (r *Router) HasStar(star string) bool { return r.isStar[star] }

// Owner is the member placement gives star to: the one that should lead
// it. It may not lead it yet (Leader says who does).
func (r *Router) Owner(star string) (Member, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.members[r.owners[star]]
	return m.Member, ok
}

// liveOwner reports whether owner (an epoch record's Owner) is the Owner
// of a live member's stars.
func (r *Router) liveOwner(owner string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.members {
		if m.Owner != "" && m.Owner == owner {
			return true
		}
	}
	return false
}

// Leader is the member that publishes a lead of star, with the epoch it
// published, and false when none does. Two members publish one only while
// a deposed leader has not noticed yet; the higher epoch wins (the
// protocol's successor). Only the epoch protocol decides who leads: a host
// that gets a *loglet.NotLeaderError with a higher epoch from this member
// has a stale route and should wait for Changed.
func (r *Router) Leader(star string) (Member, uint64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l, ok := bestLead(r.leads[star])
	return l.Member, l.Epoch, ok
}

// Leads returns every published lead of star (usually one), highest epoch
// first.
func (r *Router) Leads(star string) []Lead {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Lead, 0, len(r.leads[star]))
	for _, l := range r.leads[star] {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Epoch != out[j].Epoch {
			return out[i].Epoch > out[j].Epoch
		}
		return out[i].Member.Name < out[j].Member.Name
	})
	return out
}

func bestLead(ls map[string]Lead) (Lead, bool) {
	var best Lead
	ok := false
	for _, l := range ls {
		if !ok || l.Epoch > best.Epoch || l.Epoch == best.Epoch && l.Member.Name < best.Member.Name {
			best, ok = l, true
		}
	}
	return best, ok
}

// Err says why the router stopped following etcd (nil while it does).
func (r *Router) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// StarOf returns the star of stream: the one its stream record names (read
// from Config.Meta once, then cached), or, for a stream that does not exist
// yet, chain.PlaceStream over Config.Stars, where loglet's CreateOnAppend
// and CreateStream (without StreamOptions.Star) create it.
func (r *Router) StarOf(ctx context.Context, stream string) (string, error) {
	r.mu.Lock()
	star, ok := r.streams[stream]
	r.mu.Unlock()
	if ok {
		return star, nil
	}
	it, err := r.cfg.Meta.Get(ctx, chain.StreamRecordKey(stream))
	if errors.Is(err, metastore.ErrNotFound) {
		return chain.PlaceStream(stream, r.cfg.Stars), nil
	}
	if err != nil {
		return "", fmt.Errorf("fleet: star of stream %q: %w", stream, err)
	}
	var rec struct {
		Star string `json:"star"`
	}
	if err := json.Unmarshal(it.Value, &rec); err != nil || rec.Star == "" {
		return "", fmt.Errorf("fleet: star of stream %q: its record is corrupt (%v)", stream, err)
	}
	r.mu.Lock()
	if len(r.streams) >= streamCacheMax {
		r.streams = map[string]string{}
	}
	r.streams[stream] = rec.Star
	r.mu.Unlock()
	return rec.Star, nil
}

// Forget drops stream from StarOf's cache (after a DeleteStream, whose
// next incarnation may be placed elsewhere).
func (r *Router) Forget(stream string) {
	r.mu.Lock()
	delete(r.streams, stream)
	r.mu.Unlock()
}

// Route is the member leading stream's star, with the star and the lead's
// epoch, or ErrUnled.
func (r *Router) Route(ctx context.Context, stream string) (star string, leader Member, epoch uint64, err error) {
	star, err = r.StarOf(ctx, stream)
	if err != nil {
		return "", Member{}, 0, err
	}
	m, ep, ok := r.Leader(star)
	if !ok {
		return star, Member{}, 0, fmt.Errorf("%w: %q (stream %q)", ErrUnled, star, stream)
	}
	return star, m, ep, nil
}
