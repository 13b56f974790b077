package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore"
)

// Defaults of Config.
const (
	// DefaultTTL is the session lease's TTL: how long after a member stops
	// renewing it (a crash, a partition) its stars are handed to others.
	DefaultTTL = 10 * time.Second
	// DefaultHandoffWait bounds how long a new owner waits for the old
	// owner's clean close before it opens the star anyway (fencing it).
	DefaultHandoffWait = 5 * time.Second
	// DefaultCheckInterval is how often the controller reads its stars'
	// Stats to find one a successor has deposed.
	DefaultCheckInterval = time.Second
)

// Config configures a member (Join) or a router (NewRouter).
type Config struct {
	// Prefix is prepended to every key the fleet writes in etcd (members
	// under <Prefix>fleet/members/, leads under <Prefix>fleet/leads/), as
	// metastore/etcd's Config.Prefix is to the metastore's: use the same
	// one, so a deployment's keys share a prefix.
	Prefix string
	// Stars lists every star of the deployment: what Place distributes and
	// what chain.PlaceStream places new streams on. Required; every member
	// must be given the same list.
	Stars []string
	// Meta is the deployment's metastore: the router reads stream records
	// from it (Router.StarOf). Required.
	Meta metastore.Store
	// OpenStar returns the loglet.Config to open star with (buckets,
	// metastore, classes: the host keeps control of them). The fleet sets
	// Star (it must be star or empty), Stars (when empty: Config.Stars),
	// Owner (always: "<member name>/<random>", one per session, published in
	// the member record so other members can tell a live owner's epoch from
	// a crashed one's), RefuseLiveOwner (the handoff rule decides it) and
	// ExclusiveOpen (set unless the open deposes: the member's claim keeps
	// the others out). Required by Join.
	OpenStar func(ctx context.Context, star string) (loglet.Config, error)
	// TTL is the session lease's TTL, in whole seconds (default
	// DefaultTTL; etcd may raise a TTL below its minimum, about 2s).
	TTL time.Duration
	// HandoffWait bounds how long a member that has just been given a star
	// waits for the lead the old owner published to go (its clean Close)
	// before opening the star anyway (default DefaultHandoffWait; negative:
	// no wait). See the package doc, "Handoffs".
	HandoffWait time.Duration
	// CloseTimeout bounds a planned Close of one star (default: the star's
	// own loglet.Config.CloseTimeout).
	CloseTimeout time.Duration
	// CheckInterval is how often the controller looks for a star it holds
	// that a successor has deposed (default DefaultCheckInterval).
	CheckInterval time.Duration
	// NoRejoin keeps a node whose session is lost stopped: its stars
	// closed, Node.Done closed and Node.Err wrapping ErrSessionLost, for
	// the host to Join again. By default (false) the node rejoins by
	// itself: it closes its stars, opens a new session (retrying with a
	// jittered backoff while etcd is unreachable), publishes its member
	// record again under a new Owner, and placement gives it stars again.
	NoRejoin bool
	// KeepRouter leaves the node's Router following etcd after the node
	// stops (Close, or a session lost under NoRejoin): a host that serves
	// requests through its leave (contrib/fleethttp forwards them to the
	// stars' new leaders) keeps routing them on a live table until it
	// closes the router itself (Node.Router().Close(), after its server
	// has stopped). By default (false) the node closes its router when it
	// stops.
	KeepRouter bool
	// Logger receives the fleet's events. Default: slog.Default().
	Logger *slog.Logger
}

func (c *Config) applyDefaults() {
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.HandoffWait == 0 {
		c.HandoffWait = DefaultHandoffWait
	}
	if c.HandoffWait < 0 {
		c.HandoffWait = 0
	}
	if c.CheckInterval == 0 {
		c.CheckInterval = DefaultCheckInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports a Config that cannot work (for Join: also OpenStar).
func (c Config) Validate() error {
	if len(c.Stars) == 0 {
		return errors.New("fleet: config: Stars is required")
	}
	seen := map[string]bool{}
	for _, s := range c.Stars {
		if err := checkName("star", s); err != nil {
			return fmt.Errorf("fleet: config: Stars: %w", err)
		}
		if seen[s] {
			return fmt.Errorf("fleet: config: Stars lists %q twice", s)
		}
		seen[s] = true
	}
	switch {
	case c.Meta == nil:
		return errors.New("fleet: config: Meta is required")
	case c.TTL < 0:
		return fmt.Errorf("fleet: config: TTL %v is negative", c.TTL)
	case c.TTL != 0 && c.TTL%time.Second != 0:
		return fmt.Errorf("fleet: config: TTL %v is not whole seconds (etcd leases are)", c.TTL)
	case c.CloseTimeout < 0:
		return fmt.Errorf("fleet: config: CloseTimeout %v is negative", c.CloseTimeout)
	case c.CheckInterval < 0:
		return fmt.Errorf("fleet: config: CheckInterval %v is negative", c.CheckInterval)
	}
	return nil
}

func (c Config) membersPrefix() string        { return c.Prefix + "fleet/members/" }
func (c Config) memberKey(name string) string { return c.membersPrefix() + name }
func (c Config) leadsPrefix() string          { return c.Prefix + "fleet/leads/" }

// leadKey is <Prefix>fleet/leads/<star>/<member>: one per member that
// leads the star (two while a deposed one has not noticed).
func (c Config) leadKey(star, member string) string { return c.leadsPrefix() + star + "/" + member }

func (c Config) claimsPrefix() string { return c.Prefix + "fleet/claims/" }

// claimKey is <Prefix>fleet/claims/<star>/<member>: the member is opening
// the star (put before its loglet.Open, replaced by its lead or deleted
// when the open fails), so a member the star is placed on meanwhile waits
// for it as for a lead.
func (c Config) claimKey(star, member string) string { return c.claimsPrefix() + star + "/" + member }
