package flightprom

import (
	"github.com/flightlog/flightlog/fleet"
	"github.com/prometheus/client_golang/prometheus"
)

// FleetStats is what a FleetCollector reads: a *fleet.Router (a member's
// is fleet.Node.Router).
type FleetStats interface {
	Stats() fleet.RouterStats
}

// FleetCollector exports a fleet router's figures, read once per scrape:
//
//	flightlog_fleet_placement_changes_total  stars whose placed member changed (joins, leaves, drains, moves)
//	flightlog_fleet_unled_stars              stars no member leads now (moving, or their member crashed)
//	flightlog_fleet_members                  live members
//	flightlog_fleet_stars                    the deployment's stars
//	flightlog_fleet_drained_members          members drained (fleet.Drain)
//	flightlog_fleet_moved_stars              stars pinned by fleet.Move
//
// WithNamespace and WithConstLabels apply; the other options do not.
type FleetCollector struct {
	r                              FleetStats
	changes, unled, members, stars *prometheus.Desc
	drained, moved                 *prometheus.Desc
}

// NewFleet returns a FleetCollector over r.
func NewFleet(r FleetStats, opts ...Option) *FleetCollector {
	cfg := config{namespace: "flightlog"}
	for _, o := range opts {
		o(&cfg)
	}
	d := func(n, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(cfg.namespace, "fleet", n), help, nil, cfg.constLabels)
	}
	return &FleetCollector{
		r:       r,
		changes: d("placement_changes_total", "Stars whose placed member changed, as this router saw it (joins, leaves, drains, moves)."),
		unled:   d("unled_stars", "Stars no member publishes a lead of now (a move under way, or a crashed member's lease not expired)."),
		members: d("members", "Live members."),
		stars:   d("stars", "The deployment's stars (fleet.Config.Stars)."),
		drained: d("drained_members", "Members drained by an operator (fleet.Drain)."),
		moved:   d("moved_stars", "Stars pinned on a member by an operator (fleet.Move)."),
	}
}

// Describe implements prometheus.Collector.
func (c *FleetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.changes, c.unled, c.members, c.stars, c.drained, c.moved} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *FleetCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.r.Stats()
	ch <- prometheus.MustNewConstMetric(c.changes, prometheus.CounterValue, float64(st.PlacementChanges))
	ch <- prometheus.MustNewConstMetric(c.unled, prometheus.GaugeValue, float64(st.Unled))
	ch <- prometheus.MustNewConstMetric(c.members, prometheus.GaugeValue, float64(st.Members))
	ch <- prometheus.MustNewConstMetric(c.stars, prometheus.GaugeValue, float64(st.Stars))
	ch <- prometheus.MustNewConstMetric(c.drained, prometheus.GaugeValue, float64(len(st.Drained)))
	ch <- prometheus.MustNewConstMetric(c.moved, prometheus.GaugeValue, float64(len(st.Moves)))
}
