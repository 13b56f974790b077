package flightotel

import (
	"context"
	"errors"
	"time"

	"github.com/flightlog/flightlog/loglet"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// AppendSpanName is the name of the span Tracer.Append makes.
const AppendSpanName = "flightlog.append"

// The span events of an append's write path, in the order a batch passes
// them (loglet.WriteTrace's stamps, each at its own time).
const (
	EventSubmitted = "flightlog.submitted" // admitted for encoding
	EventClaimed   = "flightlog.claimed"   // its flight cut from the pool and given a slot
	EventPutStart  = "flightlog.put_start" // the flight rendered, its copies' PUTs asked for
	EventDurable   = "flightlog.durable"   // the W-th copy confirmed
	EventReleased  = "flightlog.released"  // acked, in slot order
)

// Tracer appends to a star with a span per append: the span runs from the
// call to its return, as a child of the span in the caller's context, and
// carries the write path's stages as events from the batch's WriteTrace,
// stamped with the leader's times. The stamps are the leader's
// bookkeeping, not part of the log: a span is a diagnosis, and nothing
// about it is durable.
//
// Append goes through a one-batch loglet.AppendSession (the trace is read
// from its AckFuture), which admits and acks a batch as Star.Append does.
// A batch with a Producer identity goes through Star.Append, which
// answers retries but hands out no trace: its span has no stage events.
type Tracer struct {
	star   *loglet.Star
	tracer trace.Tracer
}

// NewTracer returns a Tracer over star whose spans come from tp (nil: the
// global TracerProvider), under the instrumentation scope ScopeName.
func NewTracer(star *loglet.Star, tp trace.TracerProvider) *Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &Tracer{star: star, tracer: tp.Tracer(ScopeName)}
}

// Append appends b to stream as Star.Append does and traces it. The span
// has the attributes flightlog.stream and flightlog.records, and once
// acked flightlog.start and flightlog.end (the range, as Ack has it); a
// failed append's span has status Error and the error as an exception
// event.
func (t *Tracer) Append(ctx context.Context, stream string, b loglet.Batch) (loglet.Ack, error) {
	if ctx == nil {
		return loglet.Ack{}, loglet.ErrNilContext
	}
	if t == nil || t.star == nil {
		return loglet.Ack{}, errors.New("flightotel: Append on a Tracer with no star (use NewTracer)")
	}
	ctx, span := t.tracer.Start(ctx, AppendSpanName, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("flightlog.stream", stream), attribute.Int("flightlog.records", len(b.Records))))
	defer span.End()
	ack, err := t.append(ctx, span, stream, b)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return ack, err
	}
	span.SetAttributes(attribute.Int64("flightlog.start", int64(ack.Start)), attribute.Int64("flightlog.end", int64(ack.End)))
	if ack.Duplicate {
		span.SetAttributes(attribute.Bool("flightlog.duplicate", true))
	}
	return ack, nil
}

func (t *Tracer) append(ctx context.Context, span trace.Span, stream string, b loglet.Batch) (loglet.Ack, error) {
	if b.Producer != (loglet.ProducerID{}) {
		return t.star.Append(ctx, stream, b)
	}
	sess, err := t.star.OpenAppendSession(ctx, stream)
	if err != nil {
		return loglet.Ack{}, err
	}
	f, err := sess.Submit(ctx, b)
	if err != nil {
		_ = sess.Close(ctx) // nothing admitted: Close has nothing to wait for
		return loglet.Ack{}, err
	}
	ack, err := f.Wait(ctx)
	if tr, ok := f.Trace(); ok {
		addStages(span, tr)
	}
	// The session holds this batch alone, whose outcome Wait returned (or
	// gave up on with ctx, which Close then gives up on too): its error
	// says nothing more.
	_ = sess.Close(ctx)
	return ack, err
}

// addStages adds tr's stamps to span as events, in stage order, each at
// its time; a stage the batch never reached (a zero stamp) is left out.
func addStages(span trace.Span, tr loglet.WriteTrace) {
	event := func(name string, at time.Time, attrs ...attribute.KeyValue) {
		if !at.IsZero() {
			span.AddEvent(name, trace.WithTimestamp(at), trace.WithAttributes(attrs...))
		}
	}
	event(EventSubmitted, tr.Submitted)
	event(EventClaimed, tr.Claimed, attribute.Int64("flightlog.epoch", int64(tr.Epoch)),
		attribute.Int64("flightlog.slot", int64(tr.Slot)), attribute.Bool("flightlog.by_size", tr.BySize))
	event(EventPutStart, tr.PutStart)
	event(EventDurable, tr.Durable, attribute.Float64("flightlog.store_w_seconds", tr.StoreW.Seconds()))
	event(EventReleased, tr.Released)
}
