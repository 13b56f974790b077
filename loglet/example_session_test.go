package loglet_test

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// openMemStar opens a star over in-memory buckets with one Standard stream.
func openMemStar(ctx context.Context, stream string) *loglet.Star {
	star, err := loglet.Open(ctx, loglet.Config{
		Star:     "demo",
		Meta:     metastore.NewMem(),
		Standard: loglet.ClassConfig{Stores: []objstore.Store{objstore.NewMem()}},
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	if _, err := star.CreateStream(ctx, stream, loglet.StreamOptions{Class: loglet.Standard}); err != nil {
		panic(err)
	}
	return star
}

// An append session pipelines: Submit returns once a batch is admitted, so
// several batches share flights, and their acks complete in submit order.
// Close waits for every outcome.
func ExampleStar_OpenAppendSession() {
	ctx := context.Background()
	star := openMemStar(ctx, "events")
	defer star.Close(ctx)

	sess, err := star.OpenAppendSession(ctx, "events")
	if err != nil {
		panic(err)
	}
	var futures []*loglet.AckFuture
	for i := range 3 {
		f, err := sess.Submit(ctx, loglet.Batch{Records: []loglet.Record{
			{Body: fmt.Appendf(nil, "event %da", i)}, {Body: fmt.Appendf(nil, "event %db", i)},
		}})
		if err != nil { // not admitted, not committed; the session has failed
			panic(err)
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		ack, err := f.Wait(ctx)
		if err != nil {
			panic(err)
		}
		fmt.Printf("acked [%d, %d)\n", ack.Start, ack.End)
	}
	if err := sess.Close(ctx); err != nil {
		panic(err)
	}
	// Output:
	// acked [0, 2)
	// acked [2, 4)
	// acked [4, 6)
}

// A read session catches up from its start and then follows the tail: Recv
// blocks until a record is readable (on the leader it is woken by the ack,
// not by polling) and returns each record once, in order.
func ExampleStar_OpenReadSession() {
	ctx := context.Background()
	star := openMemStar(ctx, "events")
	defer star.Close(ctx)

	appendBody := func(body string) {
		if _, err := star.Append(ctx, "events", loglet.Batch{Records: []loglet.Record{{Body: []byte(body)}}}); err != nil {
			panic(err)
		}
	}
	appendBody("first")
	appendBody("second")

	sess, err := star.OpenReadSession(ctx, "events", loglet.ReadQuery{Start: loglet.AtSeq(0)})
	if err != nil {
		panic(err)
	}
	recs, err := sess.Recv(ctx) // catch-up: both records are durable
	if err != nil {
		panic(err)
	}
	for _, r := range recs {
		fmt.Println(r.Seq, string(r.Body))
	}

	go appendBody("third")
	recs, err = sess.Recv(ctx) // follows: returns once "third" is acked
	if err != nil {
		panic(err)
	}
	for _, r := range recs {
		fmt.Println(r.Seq, string(r.Body))
	}
	fmt.Println("next:", sess.Next())
	// Output:
	// 0 first
	// 1 second
	// 2 third
	// next: 3
}
