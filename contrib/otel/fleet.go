package flightotel

import (
	"context"

	"github.com/flightlog/flightlog/fleet"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
)

// FleetStats is what RegisterFleet reads: a *fleet.Router (a member's is
// fleet.Node.Router).
type FleetStats interface {
	Stats() fleet.RouterStats
}

type fleetInstr struct {
	name, unit, desc string
	kind             kind
	get              func(fleet.RouterStats) int64
}

var fleetInstrs = []fleetInstr{
	{"flightlog.fleet.placement_changes", "{star}", "Stars whose placed member changed, as this router saw it (joins, leaves, drains, moves).", counter, func(s fleet.RouterStats) int64 { return u(s.PlacementChanges) }},
	{"flightlog.fleet.unled_stars", "{star}", "Stars no member publishes a lead of now (a move under way, or a crashed member's lease not expired).", gauge, func(s fleet.RouterStats) int64 { return int64(s.Unled) }},
	{"flightlog.fleet.members", "{member}", "Live members.", gauge, func(s fleet.RouterStats) int64 { return int64(s.Members) }},
	{"flightlog.fleet.stars", "{star}", "The deployment's stars (fleet.Config.Stars).", gauge, func(s fleet.RouterStats) int64 { return int64(s.Stars) }},
	{"flightlog.fleet.drained_members", "{member}", "Members drained by an operator (fleet.Drain).", gauge, func(s fleet.RouterStats) int64 { return int64(len(s.Drained)) }},
	{"flightlog.fleet.moved_stars", "{star}", "Stars pinned on a member by an operator (fleet.Move).", gauge, func(s fleet.RouterStats) int64 { return int64(len(s.Moves)) }},
}

// RegisterFleet creates the fleet's counters and gauges on mp's meter
// (nil: the global MeterProvider) and one callback that fills them from
// one r.Stats per collection. Unregister the returned Registration to stop.
func RegisterFleet(r FleetStats, mp metric.MeterProvider) (metric.Registration, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(ScopeName)
	instrs := make([]metric.Int64Observable, len(fleetInstrs))
	all := make([]metric.Observable, len(fleetInstrs))
	for i, in := range fleetInstrs {
		o, err := int64Instr(m, in.name, in.unit, in.desc, in.kind)
		if err != nil {
			return nil, err
		}
		instrs[i], all[i] = o, o
	}
	return m.RegisterCallback(func(ctx context.Context, obs metric.Observer) error {
		st := r.Stats()
		for i, in := range fleetInstrs {
			obs.ObserveInt64(instrs[i], in.get(st))
		}
		return nil
	}, all...)
}
