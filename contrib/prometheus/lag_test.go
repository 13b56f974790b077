package flightprom_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	flightprom "github.com/flightlog/flightlog/contrib/prometheus"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/loglet/groups"
	"github.com/prometheus/client_golang/prometheus"
)

// commitOffsets commits each group's offset on stream "s" of star.
func commitOffsets(t *testing.T, star *loglet.Star, next map[string]uint64) {
	t.Helper()
	ctx := context.Background()
	o := groups.OffsetsOf(star)
	for g, n := range next {
		off, err := o.Get(ctx, g, "s")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := o.Commit(ctx, off, n); err != nil {
			t.Fatal(err)
		}
	}
}

// lagFigures gathers c through a pedantic registry (which rejects
// duplicate or inconsistent series) and returns the consumer-lag figures
// by name and labels ("records s/g1", "up s", "dropped").
func lagFigures(t *testing.T, c *flightprom.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			v := m.GetGauge().GetValue()
			switch f.GetName() {
			case "flightlog_consumer_lag_records":
				out["records "+l["stream"]+"/"+l["group"]] = v
			case "flightlog_consumer_lag_bytes":
				out["bytes "+l["stream"]+"/"+l["group"]] = v
			case "flightlog_consumer_lag_up":
				out["up "+l["stream"]] = v
			case "flightlog_consumer_lag_series_dropped":
				out["dropped"] = v
			}
		}
	}
	return out
}

// TestConsumerLag: every group of a stream, a named group with no offset
// (counted from the trim point), a stream named twice (one series each)
// and a stream that does not exist (up 0, and OnError says why).
func TestConsumerLag(t *testing.T) {
	star, _ := openStar(t, 10) // tail 30
	commitOffsets(t, star, map[string]uint64{"g1": 10, "g2": 25})
	var failed []error
	c := flightprom.New(star, flightprom.WithConsumerLag(flightprom.ConsumerLag{
		Targets: []flightprom.LagTarget{{Stream: "s"}, {Stream: "s", Groups: []string{"g3", "g1"}}, {Stream: "nope", Groups: []string{"g1"}}},
		Bytes:   true,
		OnError: func(stream string, err error) { failed = append(failed, fmt.Errorf("%s: %w", stream, err)) },
	}))
	got := lagFigures(t, c)
	for k, want := range map[string]float64{"records s/g1": 20, "records s/g2": 5, "records s/g3": 30, "up s": 1, "up nope": 0, "dropped": 1} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v; all: %v", k, v, ok, want, got)
		}
	}
	if got["bytes s/g1"] < got["bytes s/g2"] || got["bytes s/g3"] < got["bytes s/g1"] {
		t.Errorf("bytes behind not ordered as the records are: %v", got)
	}
	if len(failed) != 1 || !errors.Is(failed[0], loglet.ErrStreamNotFound) {
		t.Errorf("OnError told %v, want one ErrStreamNotFound", failed)
	}
}

// TestConsumerLagBounds: the series bound reports the first lags and
// counts the rest (the targets after it are not read); the read bound
// leaves a target unread, with ErrLagBudget.
func TestConsumerLagBounds(t *testing.T) {
	star, _ := openStar(t, 2)
	commitOffsets(t, star, map[string]uint64{"g1": 1, "g2": 2, "g3": 3})
	var failed []error
	onError := func(stream string, err error) { failed = append(failed, err) }
	got := lagFigures(t, flightprom.New(star, flightprom.WithConsumerLag(flightprom.ConsumerLag{
		Targets:   []flightprom.LagTarget{{Stream: "s"}, {Stream: "t", Groups: []string{"a", "b"}}},
		MaxSeries: 2, OnError: onError,
	})))
	want := map[string]float64{"records s/g1": 5, "records s/g2": 4, "up s": 1, "up t": 0, "dropped": 3}
	if len(got) != len(want) {
		t.Errorf("figures %v, want %v", got, want)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s = %v, want %v", k, got[k], w)
		}
	}
	if len(failed) != 1 || !errors.Is(failed[0], flightprom.ErrLagBudget) {
		t.Errorf("series bound: OnError told %v, want one ErrLagBudget", failed)
	}

	failed = nil
	got = lagFigures(t, flightprom.New(star, flightprom.WithConsumerLag(flightprom.ConsumerLag{
		Targets: []flightprom.LagTarget{{Stream: "s"}}, MaxReads: 1, OnError: onError,
	})))
	if got["up s"] != 0 || len(failed) != 1 || !errors.Is(failed[0], flightprom.ErrLagBudget) {
		t.Errorf("read bound: figures %v, OnError told %v; want s not read, with ErrLagBudget", got, failed)
	}
}

// TestConsumerLagReadsAsDocumented pins ConsumerLag's cost: a target
// naming its groups takes three metastore reads per group, a target of
// every group (few offsets) two record reads and one Scan. One read fewer
// leaves the target unread.
func TestConsumerLagReadsAsDocumented(t *testing.T) {
	star, _ := openStar(t, 2)
	commitOffsets(t, star, map[string]uint64{"g1": 1, "g2": 2})
	for _, tc := range []struct {
		target flightprom.LagTarget
		reads  int
	}{
		{flightprom.LagTarget{Stream: "s", Groups: []string{"g1", "g2"}}, 6},
		{flightprom.LagTarget{Stream: "s"}, 3},
	} {
		for _, reads := range []int{tc.reads, tc.reads - 1} {
			got := lagFigures(t, flightprom.New(star, flightprom.WithConsumerLag(flightprom.ConsumerLag{
				Targets: []flightprom.LagTarget{tc.target}, MaxReads: reads,
			})))
			if want := reads == tc.reads; (got["up s"] == 1) != want {
				t.Errorf("%+v with %d reads: up %v, want read %v", tc.target, reads, got["up s"], want)
			}
		}
	}
}

// TestConsumerLagOfABadStreamName: a stream name that is not UTF-8 (no
// stream has one) is not read and not sent as a label, and the scrape
// goes on.
func TestConsumerLagOfABadStreamName(t *testing.T) {
	star, _ := openStar(t, 1)
	var failed []string
	got := lagFigures(t, flightprom.New(star, flightprom.WithConsumerLag(flightprom.ConsumerLag{
		Targets: []flightprom.LagTarget{{Stream: "\xff"}, {Stream: "s"}},
		OnError: func(stream string, err error) { failed = append(failed, err.Error()) },
	})))
	if got["up s"] != 1 || len(failed) != 2 {
		t.Errorf("figures %v, OnError told %q; want s read and two errors for the bad name (its read, its label)", got, failed)
	}
}
