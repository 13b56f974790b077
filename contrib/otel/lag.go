package flightotel

import (
	"context"
	"errors"
	"time"

	"github.com/flightlog/flightlog/loglet/groups"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// LagTarget names a stream whose consumer groups' lag to report, and
// which groups (groups.LagTarget).
type LagTarget = groups.LagTarget

// ConsumerLag configures the consumer-lag figures: lag per (stream,
// group), records (and optionally bytes) behind the stream's durable
// tail, read from loglet/groups at every collection.
//
// What one collection costs, per target: a target naming its groups takes
// two stream-record reads and an offset read per group, and a target of
// every group two stream-record reads and one Scan per 1,000 offsets in
// the metastore (every group's, on every stream: offsets are not indexed
// by stream); with Bytes, one more Scan per 256 of the stream's refs
// behind the group furthest behind. Each lag also reads the stream's tail
// (groups.TailLog.CheckTail: on a star, the leader's own figure for the
// streams it leads; on a Reader, two metastore reads and a GET). MaxReads
// bounds the metastore reads the offsets and records take, MaxSeries the
// (stream, group) series, and Timeout the whole reading: past a bound the
// rest is not read and says so (the figures up and series_dropped).
type ConsumerLag struct {
	// Log is where the offsets and tails are read: a *loglet.Star or a
	// *loglet.Reader (nil: the star the exporter was made with).
	Log groups.TailLog
	// Targets are read in order, each stream's groups sorted by name.
	Targets []LagTarget
	// Bytes also reports the bytes behind (groups.LagOptions.Bytes).
	Bytes bool
	// MaxSeries bounds the (stream, group) lags reported per collection
	// (0: 1,000). The lags past it are not reported and are counted in
	// series_dropped; once it is reached, the remaining targets are not
	// read (up 0).
	MaxSeries int
	// MaxReads bounds the metastore reads (Gets and Scans) of the offsets
	// and stream records per collection (0: 1,000). A target the budget
	// runs out in is reported as not read (up 0), with ErrLagBudget.
	MaxReads int
	// Timeout bounds one collection's lag reading (0: 5s).
	Timeout time.Duration
	// OnError, if set, is told why a target was not read (the stream,
	// and an error: loglet.ErrStreamNotFound, ErrLagBudget, a metastore
	// error, ...). The figures only say that it was not.
	OnError func(stream string, err error)
}

// ErrLagBudget: a collection's lag reading ran out of ConsumerLag.MaxReads
// or MaxSeries before it read this target (groups.ErrLagBudget).
var ErrLagBudget = groups.ErrLagBudget

// lagReading is one collection's lags.
type lagReading struct {
	lags    []groups.Lag // in target order, each target's by group
	up      []bool       // per target: its lags were read
	dropped int          // lags read (or named) but not reported
}

// readLags reads the lags cl names from log within its bounds
// (groups.ReadLags), telling cl.OnError why a target was not read.
func readLags(ctx context.Context, cl ConsumerLag, log groups.TailLog) lagReading {
	if log == nil {
		for _, t := range cl.Targets {
			if cl.OnError != nil {
				cl.OnError(t.Stream, errors.New("consumer lag: no log to read (ConsumerLag.Log is nil and the exporter has no star)"))
			}
		}
		return lagReading{up: make([]bool, len(cl.Targets))}
	}
	r := groups.ReadLags(ctx, log, cl.Targets,
		groups.LagBounds{MaxSeries: cl.MaxSeries, MaxReads: cl.MaxReads, Timeout: cl.Timeout},
		groups.LagOptions{Bytes: cl.Bytes})
	for i, err := range r.Errs {
		if err != nil && cl.OnError != nil {
			cl.OnError(cl.Targets[i].Stream, err)
		}
	}
	return lagReading{lags: r.Lags, up: r.Up, dropped: r.Dropped}
}

// lagInstrs are the consumer-lag gauges.
type lagInstrs struct {
	records, bytes, up, dropped metric.Int64Observable
}

func newLagInstrs(m metric.Meter, withBytes bool) (*lagInstrs, error) {
	var l lagInstrs
	var err error
	if l.records, err = m.Int64ObservableGauge("flightlog.consumer.lag.records", metric.WithUnit("{record}"),
		metric.WithDescription("Records a consumer group has not processed: the stream's durable tail less its offset (or the trim point, if further on).")); err != nil {
		return nil, err
	}
	if withBytes {
		if l.bytes, err = m.Int64ObservableGauge("flightlog.consumer.lag.bytes", metric.WithUnit("By"),
			metric.WithDescription("Decoded bytes of the absorbed records a consumer group has not processed (whole frame runs: a little more than exact).")); err != nil {
			return nil, err
		}
	}
	if l.up, err = m.Int64ObservableGauge("flightlog.consumer.lag.up", metric.WithUnit("1"),
		metric.WithDescription("1 if this collection read the stream's consumer lag, 0 if not (an error, or a bound of the collection reached).")); err != nil {
		return nil, err
	}
	if l.dropped, err = m.Int64ObservableGauge("flightlog.consumer.lag.series_dropped", metric.WithUnit("{series}"),
		metric.WithDescription("Consumer lags not reported this collection: over the series bound, or named on a stream not read.")); err != nil {
		return nil, err
	}
	return &l, nil
}

func (l *lagInstrs) all() []metric.Observable {
	out := []metric.Observable{l.records, l.up, l.dropped}
	if l.bytes != nil {
		out = append(out, l.bytes)
	}
	return out
}

func (l *lagInstrs) observe(obs metric.Observer, cl ConsumerLag, r lagReading) {
	for _, lag := range r.lags {
		attrs := metric.WithAttributes(attribute.String("flightlog.stream", lag.Offset.Stream), attribute.String("flightlog.group", lag.Offset.Group))
		obs.ObserveInt64(l.records, int64(lag.Records), attrs)
		if l.bytes != nil {
			obs.ObserveInt64(l.bytes, lag.Bytes, attrs)
		}
	}
	up := map[string]int64{}
	for i, t := range cl.Targets {
		if r.up[i] {
			up[t.Stream] = 1
		} else if _, ok := up[t.Stream]; !ok {
			up[t.Stream] = 0
		}
	}
	for stream, v := range up {
		obs.ObserveInt64(l.up, v, metric.WithAttributes(attribute.String("flightlog.stream", stream)))
	}
	obs.ObserveInt64(l.dropped, int64(r.dropped))
}
