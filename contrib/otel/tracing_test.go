package flightotel_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	flightotel "github.com/flightlog/flightlog/contrib/otel"
	"github.com/flightlog/flightlog/loglet"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func tracerOf(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp, exp
}

func attrOf(attrs []attribute.KeyValue, key string) (attribute.Value, bool) {
	for _, kv := range attrs {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// TestAppendSpanHasTheStagesInOrder: each traced append is one span, a
// child of the caller's, whose events are the write path's stages in
// order, at non-decreasing times within the span, with the acked range.
func TestAppendSpanHasTheStagesInOrder(t *testing.T) {
	star, _ := openStar(t, 0)
	tp, exp := tracerOf(t)
	tr := flightotel.NewTracer(star, tp)
	ctx, parent := tp.Tracer("test").Start(context.Background(), "caller")
	var acks []loglet.Ack
	for i := range 3 {
		ack, err := tr.Append(ctx, "s", loglet.Batch{Records: []loglet.Record{{Body: []byte{byte(i)}}, {Body: []byte("x")}}})
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, ack)
	}
	parent.End()
	var spans tracetest.SpanStubs
	for _, s := range exp.GetSpans() {
		if s.Name == flightotel.AppendSpanName {
			spans = append(spans, s)
		}
	}
	if len(spans) != 3 {
		t.Fatalf("%d append spans, want 3: %+v", len(exp.GetSpans()), exp.GetSpans())
	}
	want := []string{flightotel.EventSubmitted, flightotel.EventClaimed, flightotel.EventPutStart, flightotel.EventDurable, flightotel.EventReleased}
	for i, s := range spans {
		if s.Parent.SpanID() != parent.SpanContext().SpanID() || s.SpanKind != trace.SpanKindProducer {
			t.Errorf("span %d: parent %v kind %v, want %v producer", i, s.Parent.SpanID(), s.SpanKind, parent.SpanContext().SpanID())
		}
		var got []string
		for j, ev := range s.Events {
			got = append(got, ev.Name)
			if ev.Time.Before(s.StartTime) || ev.Time.After(s.EndTime) || (j > 0 && ev.Time.Before(s.Events[j-1].Time)) {
				t.Errorf("span %d: event %s at %v, outside the span [%v, %v] or before the one ahead of it", i, ev.Name, ev.Time, s.StartTime, s.EndTime)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("span %d: events %v, want %v", i, got, want)
		}
		for key, v := range map[string]int64{"flightlog.start": int64(acks[i].Start), "flightlog.end": int64(acks[i].End), "flightlog.records": 2} {
			if a, ok := attrOf(s.Attributes, key); !ok || a.AsInt64() != v {
				t.Errorf("span %d: %s = %v (set %v), want %d", i, key, a.Emit(), ok, v)
			}
		}
		if s.Status.Code == codes.Error {
			t.Errorf("span %d: status %v", i, s.Status)
		}
	}
}

// TestAppendSpanOfAFailedAppend: an append that fails returns the star's
// error, and its span says so (status Error, an exception event) with no
// stage it never reached.
func TestAppendSpanOfAFailedAppend(t *testing.T) {
	star, _ := openStar(t, 0)
	tp, exp := tracerOf(t)
	_, err := flightotel.NewTracer(star, tp).Append(context.Background(), "no-such-stream", loglet.Batch{Records: []loglet.Record{{Body: []byte("x")}}})
	if !errors.Is(err, loglet.ErrStreamNotFound) {
		t.Fatalf("err = %v, want ErrStreamNotFound", err)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Status.Code != codes.Error {
		t.Fatalf("spans %+v, want one with status Error", spans)
	}
	for _, ev := range spans[0].Events {
		if ev.Name != "exception" {
			t.Errorf("event %s on a batch never admitted", ev.Name)
		}
	}
	if _, err := flightotel.NewTracer(star, tp).Append(nil, "s", loglet.Batch{}); !errors.Is(err, loglet.ErrNilContext) { //nolint:staticcheck // a nil context is the case tested
		t.Errorf("nil ctx: err = %v", err)
	}
}

// TestAppendSpanOfAProducerBatch: a batch with a producer identity goes
// through Star.Append (which answers its retries) and its span, which has
// no stages to show, still has its range; a retry is marked duplicate.
func TestAppendSpanOfAProducerBatch(t *testing.T) {
	star, _ := openStar(t, 0)
	tp, exp := tracerOf(t)
	tr := flightotel.NewTracer(star, tp)
	id := star.NewProducer("s", "p1").Next()
	b := loglet.Batch{Records: []loglet.Record{{Body: []byte("x")}}, Producer: id}
	first, err := tr.Append(context.Background(), "s", b)
	if err != nil {
		t.Fatal(err)
	}
	again, err := tr.Append(context.Background(), "s", b)
	if err != nil || !again.Duplicate || again.Start != first.Start {
		t.Fatalf("retry: %+v, %v; want a duplicate of %+v", again, err, first)
	}
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	if v, ok := attrOf(spans[1].Attributes, "flightlog.duplicate"); !ok || !v.AsBool() {
		t.Errorf("retry's span: flightlog.duplicate not set: %v", spans[1].Attributes)
	}
	for _, s := range spans {
		if len(s.Events) != 0 {
			t.Errorf("producer batch's span has events %v", s.Events)
		}
	}
}
