package flightotel_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	flightotel "github.com/flightlog/flightlog/contrib/otel"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// BenchmarkAppend compares Star.Append with Tracer.Append (spans sampled
// and recorded by the SDK, exported nowhere) on in-memory buckets, one
// append at a time, 1 KiB records: the cost of the span and of going
// through a one-batch session.
func BenchmarkAppend(b *testing.B) {
	ctx := context.Background()
	star, err := loglet.Open(ctx, loglet.Config{
		Star: "bench", Meta: metastore.NewMem(), CreateOnAppend: true,
		Standard: loglet.ClassConfig{Stores: []objstore.Store{objstore.NewMem(), objstore.NewMem()}, W: 2, FlushDeadline: 50 * time.Microsecond},
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	defer star.Close(context.Background())
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(ctx)
	tr := flightotel.NewTracer(star, tp)
	batch := loglet.Batch{Records: []loglet.Record{{Body: make([]byte, 1024)}}}
	for _, bc := range []struct {
		name   string
		append func() error
	}{
		{"plain", func() error { _, err := star.Append(ctx, "s", batch); return err }},
		{"traced", func() error { _, err := tr.Append(ctx, "s", batch); return err }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(1024)
			for b.Loop() {
				if err := bc.append(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
