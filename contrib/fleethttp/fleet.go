package fleethttp

import (
	"context"
	"fmt"

	"github.com/flightlog/flightlog/fleet"
	"github.com/flightlog/flightlog/loglet"
)

// Fleet is what the Handler asks of this member and its routing table.
// FromNode adapts a *fleet.Node; tests may supply a static table. All
// methods must be safe for concurrent use.
type Fleet interface {
	// Self is this member's name (fleet.Member.Name).
	Self() string
	// Route names stream's star, the member leading it and the epoch of its
	// lead, or an error wrapping fleet.ErrUnled when no member leads it.
	Route(ctx context.Context, stream string) (star string, leader fleet.Member, epoch uint64, err error)
	// RouteStar names the member leading star and the epoch of its lead,
	// an error wrapping fleet.ErrUnled when no member leads it, or one
	// wrapping loglet.ErrInvalidStreamName when the deployment has no
	// such star (a create that places its stream explicitly).
	RouteStar(star string) (leader fleet.Member, epoch uint64, err error)
	// Star returns the star this member leads, with its epoch, and false
	// when it does not lead it (not placed here, opening or closing).
	Star(name string) (*loglet.Star, uint64, bool)
	// Changed returns a channel closed at the routing table's next change.
	Changed() <-chan struct{}
}

// FromNode is the Fleet of a member that joined with fleet.Join.
func FromNode(n *fleet.Node) Fleet { return nodeFleet{n} }

type nodeFleet struct{ n *fleet.Node }

func (f nodeFleet) Self() string { return f.n.Member().Name }

func (f nodeFleet) Route(ctx context.Context, stream string) (string, fleet.Member, uint64, error) {
	return f.n.Router().Route(ctx, stream)
}

func (f nodeFleet) RouteStar(star string) (fleet.Member, uint64, error) {
	return routeStar(f.n.Router(), star)
}

// routeStar is RouteStar on a fleet.Router.
func routeStar(r *fleet.Router, star string) (fleet.Member, uint64, error) {
	if !r.HasStar(star) {
		return fleet.Member{}, 0, fmt.Errorf("fleethttp: the deployment has no star %q: %w", star, loglet.ErrInvalidStreamName)
	}
	m, epoch, ok := r.Leader(star)
	if !ok {
		return fleet.Member{}, 0, fmt.Errorf("%w: %q", fleet.ErrUnled, star)
	}
	return m, epoch, nil
}

func (f nodeFleet) Star(name string) (*loglet.Star, uint64, bool) {
	s, ok := f.n.Star(name)
	if !ok {
		return nil, 0, false
	}
	return s, epochOf(s), true
}

func (f nodeFleet) Changed() <-chan struct{} { return f.n.Router().Changed() }

// epochOf is the epoch of the star's first chain (Standard's, or Express's
// when Standard is disabled): the epoch a fleet.Lead publishes.
func epochOf(s *loglet.Star) uint64 {
	st := s.Stats()
	if st.Standard != nil {
		return st.Standard.Epoch
	}
	if st.Express != nil {
		return st.Express.Epoch
	}
	return 0
}
