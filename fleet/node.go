package fleet

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore"
)

// Node is this process as a member of the fleet: its session, its Router,
// and the controller that opens the stars placed on it and closes the ones
// placed elsewhere. All methods are safe for concurrent use.
type Node struct {
	cfg    Config
	self   Member
	cli    *clientv3.Client
	router *Router
	log    *slog.Logger

	// The session, and what belongs to it: set by Join and by each rejoin
	// (under mu, while no open or close runs), read by the controller and
	// the actions it starts.
	sess    *concurrency.Session // nil while a lost session is being replaced
	owner   string               // loglet.Config.Owner of its stars, published in its member record: one per session
	sctx    context.Context      // ended when the session is lost (or the node stops)
	scancel context.CancelFunc

	ctx    context.Context // ended by Close (or a crash, in tests)
	cancel context.CancelFunc
	done   chan struct{}  // closed when the controller has stopped
	kick   chan struct{}  // wakes the controller (an open or close ended)
	ops    sync.WaitGroup // the opens and closes the controller started

	mu        sync.Mutex
	stars     map[string]*held
	err       error // why the node stopped
	ctl       *controller
	closeOnce sync.Once
	closeErr  error
	rejoins   int // sessions lost and replaced
}

// held is a star in this member.
type held struct {
	state localState
	star  *loglet.Star
	epoch uint64 // the epoch its lead publishes
	// publishing: the lead is being published again at a later epoch
	// (the star minted one in a recovery); no close starts meanwhile.
	publishing bool
	// standby: the config a standby prepared (claimed while another
	// member still led the star), for the open that follows; nil
	// otherwise.
	standby *prepared
}

// prepared is a star's config read ahead of its open, and the owner of
// the epoch record read with it ("": none, or a deposing open's), whose
// liveness is judged again when the open starts.
type prepared struct {
	cfg     loglet.Config
	epOwner string
}

// Join makes this process a member: it puts m under a new session lease
// (concurrency.NewSession, TTL cfg.TTL) at <Prefix>fleet/members/<name>,
// starts a Router, and runs the controller until Close or until the
// session is lost. A member whose name is already live is refused.
func Join(ctx context.Context, cli *clientv3.Client, m Member, cfg Config) (*Node, error) {
	if ctx == nil {
		return nil, errors.New("fleet: nil context")
	}
	if cli == nil {
		return nil, errors.New("fleet: nil etcd client")
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.OpenStar == nil {
		return nil, errors.New("fleet: config: OpenStar is required to join")
	}
	cfg.applyDefaults()
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(int(cfg.TTL/time.Second)), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, fmt.Errorf("fleet: member %q: open a session: %w", m.Name, err)
	}
	owner := newOwner(m.Name)
	if err := register(ctx, cli, cfg, m, owner, sess.Lease()); err != nil {
		sess.Close()
		return nil, err
	}
	router, err := NewRouter(ctx, cli, cfg)
	if err != nil {
		sess.Close()
		return nil, err
	}
	n := &Node{
		cfg: cfg, self: m, cli: cli, sess: sess, router: router,
		log:   cfg.Logger.With("member", m.Name),
		owner: owner,
		done:  make(chan struct{}), kick: make(chan struct{}, 1),
		stars: map[string]*held{},
		ctl:   newController(cfg.HandoffWait),
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.sctx, n.scancel = context.WithCancel(n.ctx)
	go n.run()
	n.log.Info("fleet: joined", "addr", m.Addr, "weight", m.weight(), "lease", int64(sess.Lease()))
	return n, nil
}

// newOwner is a new loglet.Config.Owner for member's stars: one per
// session, so the epochs a lost session left are a dead owner's, taken
// over at once, even by this member after it rejoined.
func newOwner(member string) string {
	var rnd [4]byte
	crand.Read(rnd[:])
	return member + "/" + hex.EncodeToString(rnd[:])
}

// errNameLive: register found the member's key held by another lease.
var errNameLive = errors.New("is already live")

// register puts m's member record (with owner) under lease, unless the
// member's key exists (errNameLive).
func register(ctx context.Context, cli *clientv3.Client, cfg Config, m Member, owner string, lease clientv3.LeaseID) error {
	val, _ := json.Marshal(memberRecord{Member: m, Owner: owner})
	key := cfg.memberKey(m.Name)
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(val), clientv3.WithLease(lease))).
		Commit()
	if err != nil {
		return fmt.Errorf("fleet: member %q: publish: %w", m.Name, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("fleet: member %q %w (its key %s exists)", m.Name, errNameLive, key)
	}
	return nil
}

// Member is this node's member record.
func (n *Node) Member() Member { return n.self }

// Router is the node's routing table. The node closes it when it stops,
// unless Config.KeepRouter leaves it to the host.
func (n *Node) Router() *Router { return n.router }

// Star returns the star this member leads now, and false while it does not
// (not placed here, or still opening, or closing).
func (n *Node) Star(name string) (*loglet.Star, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	h := n.stars[name]
	if h == nil || h.star == nil || h.state == starClosing {
		return nil, false
	}
	return h.star, true
}

// Leading lists the stars this member leads now, with their epochs.
func (n *Node) Leading() map[string]uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[string]uint64{}
	for s, h := range n.stars {
		if h.state == starOpen {
			out[s] = h.epoch
		}
	}
	return out
}

// Done is closed when the node has stopped: after Close, or, with
// Config.NoRejoin, after its session was lost (Err says which). By default
// a lost session is replaced (see Rejoins) and Done stays open.
func (n *Node) Done() <-chan struct{} { return n.done }

// Err is nil while the node runs and after a Close, and wraps
// ErrSessionLost after its session ended without one under
// Config.NoRejoin.
func (n *Node) Err() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.err
}

// Rejoins counts the sessions this node lost and replaced by itself (its
// lease expired or was revoked, or etcd was unreachable for longer than
// the TTL).
func (n *Node) Rejoins() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.rejoins
}

// session is the live session, nil while a lost one is being replaced.
func (n *Node) session() *concurrency.Session {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.sess
}

// Close leaves the fleet cleanly (a drain): it stops the controller,
// deletes its member key (so the others place its stars elsewhere at
// once, and wait for their leads), closes every star it holds (flush,
// absorb, seal, then withdraw the lead: each one's new owner opens it
// without a fence), withdraws the claims of the stars it stands by for,
// and revokes the session's lease. Its Router stops
// following etcd then, unless Config.KeepRouter leaves it to the host.
// It returns errors.Join of the stars' Close errors and the revoke's;
// later calls return the first call's result.
func (n *Node) Close(ctx context.Context) error {
	n.closeOnce.Do(func() { n.closeErr = n.close(ctx) })
	return n.closeErr
}

func (n *Node) close(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	n.cancel()
	<-n.done
	n.ops.Wait()
	var errs []error
	sess := n.session()
	if n.Err() == nil && sess != nil {
		// Withdraw the member first, so the stars' new owners are placed
		// now and wait for each lead to go as its star closes (a drain),
		// not for the lease's revocation after the last one.
		if _, err := n.cli.Delete(ctx, n.cfg.memberKey(n.self.Name)); err != nil {
			n.log.Warn("fleet: could not withdraw the member key; its stars move when the lease is revoked", "err", err)
		}
	}
	errs = append(errs, n.closeAll(ctx, true))
	n.closeRouter()
	if sess == nil {
		// Closed while rejoining: the lost session's lease is gone, and
		// no new one was granted.
		return errors.Join(errs...)
	}
	if err := sess.Close(); err != nil && n.Err() == nil {
		errs = append(errs, fmt.Errorf("fleet: member %q: revoke the lease: %w", n.self.Name, err))
	}
	return errors.Join(errs...)
}

// closeAll closes every star still held, at once (withdraw: see
// closeStar), and drops the stars it stands by for (withdraw: withdrawing
// their claims).
func (n *Node) closeAll(ctx context.Context, withdraw bool) error {
	n.mu.Lock()
	var stars, standby []string
	for s, h := range n.stars {
		switch h.state {
		case starOpen:
			h.state = starClosing
			stars = append(stars, s)
		case starStandby:
			h.state, h.standby = starClosing, nil
			standby = append(standby, s)
		}
	}
	n.mu.Unlock()
	errs := make([]error, len(stars))
	var wg sync.WaitGroup
	for i, s := range stars {
		wg.Go(func() { errs[i] = n.closeStar(ctx, s, withdraw) })
	}
	for _, s := range standby {
		// A claim of a star it stands by for: the lease takes it (a lost
		// session), or it goes now, so the star's next owner need not
		// wait for the lease's revocation.
		wg.Go(func() {
			if withdraw {
				n.unclaim(s)
			}
			n.mu.Lock()
			delete(n.stars, s)
			n.mu.Unlock()
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// run serves one session after another: the controller's loop until the
// node closes or the session is lost; then, its stars closed, a new
// session (unless Config.NoRejoin).
func (n *Node) run() {
	defer close(n.done)
	for {
		if !n.serve() {
			return
		}
		n.stopLeading()
		if n.cfg.NoRejoin {
			n.mu.Lock()
			n.err = fmt.Errorf("fleet: member %q: %w", n.self.Name, ErrSessionLost)
			n.mu.Unlock()
			n.cancel()
			n.closeRouter()
			return
		}
		if !n.rejoin() {
			return
		}
	}
}

// serve is the controller's loop: decide, start the actions, wait for a
// change (the router's table, an action's end, the next deadline, the
// deposed check). It returns true when the session is lost, false when
// the node's context ends.
func (n *Node) serve() (lost bool) {
	sess := n.session()
	tick := time.NewTicker(n.cfg.CheckInterval)
	defer tick.Stop()
	var timer *time.Timer
	for {
		changed := n.router.Changed()
		wake := n.decide()
		var timerC <-chan time.Time
		if !wake.IsZero() {
			if timer != nil {
				timer.Stop()
			}
			timer = time.NewTimer(time.Until(wake))
			timerC = timer.C
		}
		select {
		case <-n.ctx.Done():
			return false
		case <-sess.Done():
			return n.ctx.Err() == nil
		case <-changed:
		case <-n.kick:
		case <-tick.C:
		case <-timerC:
		}
	}
}

// stopLeading handles a session that ended without Close: the lease is
// gone, so the other members are opening this member's stars (fencing
// them). Before anything else the node stops serving them (Star returns
// none), ends its opens and publications, and closes what it holds: each
// Close ends quickly once a successor has sealed the chain, and one whose
// successor fenced it acks nothing past the cut (the epoch protocol's
// guarantee, not the lease's).
func (n *Node) stopLeading() {
	n.log.Warn("fleet: session lost; closing every star", "lease", int64(n.session().Lease()))
	n.scancel()
	// The leads need no withdrawing: they are under the lost lease, which
	// etcd has dropped or rejoin revokes (and etcd may be unreachable).
	n.closeAll(context.Background(), false)
	n.ops.Wait()
	n.closeAll(context.Background(), false) // any an open in flight left
	n.mu.Lock()
	n.stars = map[string]*held{}
	n.mu.Unlock()
}

// rejoin replaces the lost session: it revokes the old lease (etcd
// extends the leases it holds when it restarts, so after an outage the
// old member key and leads may still be there), grants a new one,
// publishes the member record under it with a new Owner, and resets the
// controller; placement then gives the member stars again. While etcd is
// unreachable it retries with a jittered backoff (100 ms doubling to 5 s).
// It returns false if the node closed first.
func (n *Node) rejoin() bool {
	old := n.session()
	old.Orphan()
	n.mu.Lock()
	n.sess = nil
	n.mu.Unlock()
	// The leases to revoke before a member record is put again: the lost
	// one, and any an attempt granted but could not confirm (its put may
	// have landed though the answer timed out: its key would refuse the
	// next attempt's until the lease expired).
	stale := []clientv3.LeaseID{old.Lease()}
	var backoff time.Duration
	for attempt := 1; ; attempt++ {
		err := n.tryRejoin(&stale)
		if err == nil {
			n.log.Info("fleet: rejoined", "attempts", attempt, "lease", int64(n.session().Lease()))
			return true
		}
		if n.ctx.Err() != nil {
			return false
		}
		if n.cli.Ctx().Err() != nil {
			// The host closed the etcd client: no session can come back.
			n.mu.Lock()
			n.err = fmt.Errorf("fleet: member %q: %w (the etcd client is closed)", n.self.Name, ErrSessionLost)
			n.mu.Unlock()
			n.cancel()
			n.closeRouter()
			return false
		}
		backoff = min(max(2*backoff, minRetry), maxRetry)
		d := backoff/2 + rand.N(backoff/2+1)
		n.log.Warn("fleet: rejoin failed; will retry", "attempt", attempt, "in", d, "err", err)
		t := time.NewTimer(d)
		select {
		case <-n.ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

// tryRejoin is one attempt of rejoin, each step bounded by the TTL. It
// revokes the stale leases first (dropping each one revoked), and adds
// the lease it grants to them if it fails after the grant.
func (n *Node) tryRejoin(stale *[]clientv3.LeaseID) error {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.TTL)
	defer cancel()
	for len(*stale) > 0 {
		id := (*stale)[0]
		if _, err := n.cli.Revoke(ctx, id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fmt.Errorf("fleet: member %q: revoke a lost lease: %w", n.self.Name, err)
		}
		*stale = (*stale)[1:]
	}
	ttl := int(n.cfg.TTL / time.Second)
	lease, err := n.cli.Grant(ctx, int64(ttl))
	if err != nil {
		return fmt.Errorf("fleet: member %q: grant a lease: %w", n.self.Name, err)
	}
	sess, err := concurrency.NewSession(n.cli, concurrency.WithLease(lease.ID), concurrency.WithTTL(ttl), concurrency.WithContext(context.Background()))
	if err != nil {
		*stale = append(*stale, lease.ID)
		return fmt.Errorf("fleet: member %q: open a session: %w", n.self.Name, err)
	}
	owner := newOwner(n.self.Name)
	if err := register(ctx, n.cli, n.cfg, n.self, owner, lease.ID); err != nil {
		sess.Orphan()
		*stale = append(*stale, lease.ID)
		return err
	}
	n.mu.Lock()
	n.sess, n.owner = sess, owner
	n.rejoins++
	n.ctl = newController(n.cfg.HandoffWait)
	n.mu.Unlock()
	n.sctx, n.scancel = context.WithCancel(n.ctx)
	return nil
}

// decide builds the view, steps the controller and starts its actions.
func (n *Node) decide() time.Time {
	// Only the stars placed here, held here, or in the controller's
	// memory (a wait, a backoff) matter to its step: the view holds those
	// alone, so a decision costs this member's stars, not the fleet's.
	n.mu.Lock()
	also := make([]string, 0, len(n.stars)+len(n.ctl.waiting)+len(n.ctl.retry))
	for s := range n.stars {
		also = append(also, s)
	}
	for s := range n.ctl.waiting {
		also = append(also, s)
	}
	for s := range n.ctl.retry {
		also = append(also, s)
	}
	n.mu.Unlock()
	owners, leads, claims := n.router.viewOf(n.self.Name, also)
	n.mu.Lock()
	v := view{self: n.self.Name, owners: owners, leads: leads, claims: claims, local: map[string]local{}}
	for s, h := range n.stars {
		l := local{state: h.state}
		if h.state == starOpen && h.publishing {
			l.state = starOpening
		} else if h.state == starOpen {
			st := h.star.Stats()
			l.deposed = deposed(st, h.epoch, leads[s], n.self.Name)
			if ep := statsEpoch(st); !l.deposed && ep > h.epoch {
				// A recovery minted a new epoch here: publish it, so
				// routes carry the epoch the star's record has.
				h.publishing, l.state = true, starOpening
				n.ops.Go(func() { n.republish(s, h, ep) })
			}
		}
		v.local[s] = l
	}
	acts, wake := n.ctl.step(time.Now(), v)
	for _, a := range acts {
		h := n.stars[a.star]
		if h == nil {
			h = &held{}
			n.stars[a.star] = h
		}
		switch a.kind {
		case actOpen:
			h.state = starOpening
			n.log.Info("fleet: opening star", "star", a.star, "may_depose", a.fence)
			n.ops.Go(func() { n.openStar(a.star, a.fence) })
		case actStandby:
			h.state = starOpening // until the claim is in
			n.ops.Go(func() { n.standBy(a.star) })
		case actUnclaim:
			h.state, h.standby = starClosing, nil // until the claim is gone
			n.ops.Go(func() {
				defer n.poke()
				n.unclaim(a.star)
				n.mu.Lock()
				delete(n.stars, a.star)
				n.mu.Unlock()
			})
		case actClose:
			h.state = starClosing
			n.ops.Go(func() {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				n.closeStar(ctx, a.star, true)
				n.poke()
			})
		}
	}
	n.mu.Unlock()
	return wake
}

// deposed: a chain of the star says a successor sealed or took it, or
// another member publishes a lead of it at a higher epoch.
func deposed(st loglet.Stats, epoch uint64, ls map[string]Lead, self string) bool {
	for _, c := range []*loglet.ClassStats{st.Standard, st.Express} {
		if c != nil && c.Deposed {
			return true
		}
	}
	for name, l := range ls {
		if name != self && l.Epoch > epoch {
			return true
		}
	}
	return false
}

// closeRouter closes the node's router as it stops, unless
// Config.KeepRouter leaves that to the host.
func (n *Node) closeRouter() {
	if !n.cfg.KeepRouter {
		n.router.Close()
	}
}

func (n *Node) poke() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// openStar opens star and publishes its lead under the session's lease.
// Without depose, an epoch record owned by a live member (one still
// opening or closing the star) is refused (loglet.ErrLiveOwner), and the
// controller tries again after a backoff.
//
// Before the open it claims the star (claimKey, under the lease), so a
// member the star is placed on meanwhile (members that join together, a
// placement that moves while the open runs) waits for it as for a lead
// instead of fencing an open in flight. The lead replaces the claim; a
// failed open withdraws it.
func (n *Node) openStar(star string, depose bool) {
	defer n.poke()
	began := time.Now()
	s, claimed, took, err := n.open(star, depose)
	if err != nil && claimed {
		n.unclaim(star)
	}
	n.mu.Lock()
	h := n.stars[star]
	n.ctl.opened(time.Now(), star, err == nil)
	if err != nil {
		h.state = starIdle
		n.mu.Unlock()
		switch {
		case n.sctx.Err() != nil:
		case errors.Is(err, loglet.ErrLiveOwner):
			n.log.Info("fleet: star still held by a live member; will retry", "star", star)
		case errors.Is(err, errClaimed):
			n.log.Info("fleet: another member is opening or leading the star; will retry", "star", star)
		case errors.Is(err, loglet.ErrTakeoverLost):
			// Another member opened it at the same time (a placement
			// that was moving): its lead, or the next change, decides.
			n.log.Info("fleet: another member opened the star first; will retry", "star", star)
		default:
			n.log.Warn("fleet: open failed; will retry", "star", star, "err", err)
		}
		return
	}
	// Serving first (Star returns it), then routable: a request routed
	// by the lead finds the star open. The state stays opening until the
	// lead is out, so no close races the publication.
	epoch := epochOf(s)
	h.star, h.epoch = s, epoch
	n.mu.Unlock()
	published := time.Now()
	err = n.publish(star, epoch)
	took.publish = time.Since(published)
	n.mu.Lock()
	h.state = starOpen
	n.mu.Unlock()
	if err != nil {
		// Unpublished, the star would be led but unroutable: give it back.
		n.log.Warn("fleet: could not publish a lead; closing the star", "star", star, "err", err)
		n.mu.Lock()
		h.state = starClosing
		n.mu.Unlock()
		n.closeStar(context.Background(), star, true)
		return
	}
	n.log.Info("fleet: leading star", "star", star, "epoch", epoch, "deposing", depose,
		"took", time.Since(began).Round(100*time.Microsecond), "claim", took.claim.Round(100*time.Microsecond),
		"prepare", took.prepare.Round(100*time.Microsecond), "open", took.open.Round(100*time.Microsecond),
		"publish", took.publish.Round(100*time.Microsecond))
}

// openTook is where an open's time went (the "leading star" log): the
// claim's and the config's preparation (they run at once), loglet.Open,
// the lead's publication.
type openTook struct {
	claim, prepare, open, publish time.Duration
}

// open claims star and, meanwhile (each is an etcd round trip on the
// path of every handoff), prepares its config; then, the claim won, opens
// it. claimed says whether the claim was put (to withdraw on a failure).
func (n *Node) open(star string, depose bool) (s *loglet.Star, claimed bool, took openTook, err error) {
	n.mu.Lock()
	ready := n.stars[star].standby
	n.stars[star].standby = nil
	n.mu.Unlock()
	var cfg loglet.Config
	if ready != nil && !depose {
		// Claimed and prepared in standby: whether the epoch's owner is
		// live is judged now (a crash meanwhile made it a dead one).
		cfg = ready.cfg
		cfg.RefuseLiveOwner = ready.epOwner != "" && ready.epOwner != n.owner && n.router.liveOwner(ready.epOwner)
	} else {
		var p prepared
		p, took, claimed, err = n.claimAndPrepare(star, modeOf(depose))
		if err != nil {
			return nil, claimed, took, err
		}
		cfg = p.cfg
	}
	opening := time.Now()
	s, err = loglet.Open(n.sctx, cfg)
	took.open = time.Since(opening)
	return s, true, took, err
}

// claimAndPrepare claims star (by mode) and, meanwhile (each is an etcd
// round trip), prepares its config. The error is the claim's first
// (errClaimed: not claimed), then the preparation's; claimed says whether
// the claim was put (to withdraw on a failure).
func (n *Node) claimAndPrepare(star string, mode claimMode) (p prepared, took openTook, claimed bool, err error) {
	began := time.Now()
	claimErr := make(chan error, 1)
	go func() {
		err := n.claim(star, mode)
		took.claim = time.Since(began)
		claimErr <- err
	}()
	p, err = n.prepare(star, mode == claimDepose)
	took.prepare = time.Since(began)
	if cerr := <-claimErr; cerr != nil {
		return p, took, false, cerr
	}
	return p, took, true, err
}

// standBy claims star while another member still leads it (closing it),
// and prepares its config, so that the open which follows the lead's
// withdrawal starts loglet.Open at once. The claim is put only if no other
// member claims the star; the lead it waits for is the one being
// withdrawn. Its failure backs off like an open's.
func (n *Node) standBy(star string) {
	defer n.poke()
	p, took, claimed, err := n.claimAndPrepare(star, claimStandby)
	if err != nil && claimed {
		n.unclaim(star)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	h := n.stars[star]
	if err != nil {
		h.state = starIdle
		n.ctl.opened(time.Now(), star, false)
		if n.sctx.Err() == nil {
			n.log.Info("fleet: could not stand by for the star; will retry", "star", star, "err", err)
		}
		return
	}
	h.state, h.standby = starStandby, &p
	n.log.Info("fleet: standing by for star", "star", star, "claim", took.claim.Round(100*time.Microsecond), "prepare", took.prepare.Round(100*time.Microsecond))
}

// prepare is the loglet.Config to open star with: the host's (OpenStar),
// with the fleet's Star, Stars, Owner and RefuseLiveOwner; and the owner of
// the epoch record it read (without depose).
func (n *Node) prepare(star string, depose bool) (prepared, error) {
	cfg, err := n.cfg.OpenStar(n.sctx, star)
	if err != nil {
		return prepared{cfg: cfg}, fmt.Errorf("fleet: config of star %q: %w", star, err)
	}
	if cfg.Star != "" && cfg.Star != star {
		return prepared{cfg: cfg}, fmt.Errorf("fleet: OpenStar(%q) returned the config of star %q", star, cfg.Star)
	}
	cfg.Star = star
	if len(cfg.Stars) == 0 {
		cfg.Stars = n.cfg.Stars
	}
	cfg.Owner = n.owner
	cfg.RefuseLiveOwner = false
	// The claim (put only if no other member claims or leads the star)
	// keeps every other member from opening it meanwhile, so its chains
	// are taken over at once, a crashed member's too. A deposing open's
	// claim is put whatever the others hold: its chains go one after the
	// other, the first the star's lock.
	cfg.ExclusiveOpen = !depose
	if !depose {
		// Refuse the star while its epoch is a live member's: it is still
		// opening or closing it, and a clean close is on its way. An epoch
		// a crashed member left is taken over at once.
		c := loglet.Standard
		if len(cfg.Standard.Stores) == 0 {
			c = loglet.Express
		}
		ep, _, err := chain.ReadEpoch(n.sctx, cfg.Meta, star, c)
		switch {
		case err == nil:
			cfg.RefuseLiveOwner = ep.Owner != n.owner && n.router.liveOwner(ep.Owner)
			return prepared{cfg: cfg, epOwner: ep.Owner}, nil
		case !errors.Is(err, metastore.ErrNotFound):
			return prepared{cfg: cfg}, fmt.Errorf("fleet: read the epoch of star %q: %w", star, err)
		}
	}
	return prepared{cfg: cfg}, nil
}

// errClaimed: a claim without depose found another member's claim or lead
// of the star (one the router had not shown yet): the open waits for it.
var errClaimed = errors.New("fleet: another member claims or leads the star")

// claimMode says what a claim checks first.
type claimMode uint8

const (
	claimOpen    claimMode = iota // no other member claims or leads the star
	claimDepose                   // nothing: put whatever the others hold
	claimStandby                  // no other member claims it (its lead is being withdrawn)
)

func modeOf(depose bool) claimMode {
	if depose {
		return claimDepose
	}
	return claimOpen
}

// claim puts this member's claim of star (it is opening it) under the
// session's lease. Unless deposing, only if no other member claims the
// star, nor leads it unless standing by (errClaimed): two members never
// open a star against each other because the router showed one of them a
// placement before the other's claim; a member standing by opens only once
// the lead it waits for is withdrawn.
func (n *Node) claim(star string, mode claimMode) error {
	key := n.cfg.claimKey(star, n.self.Name)
	put := clientv3.OpPut(key, "", clientv3.WithLease(n.sess.Lease()))
	var cmps []clientv3.Cmp
	if mode != claimDepose {
		prefixes := []string{n.cfg.claimsPrefix() + star + "/", n.cfg.leadsPrefix() + star + "/"}
		if mode == claimStandby {
			prefixes = prefixes[:1]
		}
		for _, prefix := range prefixes {
			own := prefix + n.self.Name
			// Every key of the prefix but this member's own: [prefix, own)
			// and (own, end of prefix).
			cmps = append(cmps,
				clientv3.Compare(clientv3.CreateRevision(prefix), "=", 0).WithRange(own),
				clientv3.Compare(clientv3.CreateRevision(own+"\x00"), "=", 0).WithRange(clientv3.GetPrefixRangeEnd(prefix)))
		}
	}
	resp, err := n.cli.Txn(n.sctx).If(cmps...).Then(put).Commit()
	if err != nil {
		return fmt.Errorf("fleet: claim star %q: %w", star, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("fleet: claim star %q: %w", star, errClaimed)
	}
	return nil
}

// unclaim withdraws the claim of a failed open, so a member the star is
// placed on opens it now rather than after HandoffWait; also when the
// node is closing (its opens end), as its lease outlives the closes of
// its stars. A lost session needs nothing: the lease took the claim.
func (n *Node) unclaim(star string) {
	if n.sctx.Err() != nil && n.ctx.Err() == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(n.sctx), n.cfg.TTL)
	defer cancel()
	if _, err := n.cli.Delete(ctx, n.cfg.claimKey(star, n.self.Name)); err != nil {
		n.log.Warn("fleet: could not withdraw a claim; a new owner waits HandoffWait at most", "star", star, "err", err)
	}
}

// publish puts this member's lead of star at epoch, under the session's
// lease, and deletes its claim (if any) in the same transaction.
func (n *Node) publish(star string, epoch uint64) error {
	val, _ := json.Marshal(Lead{Member: n.self, Epoch: epoch})
	_, err := n.cli.Txn(n.sctx).Then(
		clientv3.OpPut(n.cfg.leadKey(star, n.self.Name), string(val), clientv3.WithLease(n.sess.Lease())),
		clientv3.OpDelete(n.cfg.claimKey(star, n.self.Name)),
	).Commit()
	return err
}

// republish publishes the lead of a held star again at a later epoch.
func (n *Node) republish(star string, h *held, epoch uint64) {
	defer n.poke()
	err := n.publish(star, epoch)
	n.mu.Lock()
	h.publishing = false
	if err == nil {
		h.epoch = epoch
	}
	n.mu.Unlock()
	if err != nil && n.sctx.Err() == nil {
		n.log.Warn("fleet: could not publish a new epoch's lead; will retry", "star", star, "epoch", epoch, "err", err)
	}
}

// closeStar closes a star this member holds (state closing), then, with
// withdraw, deletes its lead, so a new owner waiting for it opens at once.
func (n *Node) closeStar(ctx context.Context, star string, withdraw bool) error {
	n.mu.Lock()
	h := n.stars[star]
	s := h.star
	n.mu.Unlock()
	if n.cfg.CloseTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.cfg.CloseTimeout)
		defer cancel()
	}
	began := time.Now()
	n.log.Info("fleet: closing star", "star", star, "withdraw", withdraw)
	err := s.Close(ctx)
	took := time.Since(began)
	if err != nil {
		n.log.Warn("fleet: star closed with errors", "star", star, "err", err)
	} else {
		n.log.Info("fleet: star closed", "star", star, "took", took.Round(100*time.Microsecond))
	}
	if withdraw {
		withdrawing := time.Now()
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.cfg.TTL)
		// The claim too: one a failed publication left.
		_, derr := n.cli.Txn(dctx).Then(
			clientv3.OpDelete(n.cfg.leadKey(star, n.self.Name)),
			clientv3.OpDelete(n.cfg.claimKey(star, n.self.Name)),
		).Commit()
		cancel()
		if derr != nil {
			// The lease takes it when it expires; the new owner waits at
			// most HandoffWait for it.
			n.log.Warn("fleet: could not withdraw a lead", "star", star, "err", derr)
		} else {
			n.log.Info("fleet: lead withdrawn", "star", star, "took", time.Since(withdrawing).Round(100*time.Microsecond))
		}
	}
	n.mu.Lock()
	delete(n.stars, star)
	n.mu.Unlock()
	return err
}

// epochOf is the epoch of the star's first chain: Standard's, or
// Express's when Standard is disabled.
func epochOf(s *loglet.Star) uint64 { return statsEpoch(s.Stats()) }

func statsEpoch(st loglet.Stats) uint64 {
	if st.Standard != nil {
		return st.Standard.Epoch
	}
	if st.Express != nil {
		return st.Express.Epoch
	}
	return 0
}

func afterBackoff() <-chan time.Time { return time.After(500 * time.Millisecond) }
