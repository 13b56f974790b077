package groups_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/loglet/groups"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// A consumer group reads from its committed offset and commits as it
// acknowledges. Delivery is at least once: a record processed but not yet
// acknowledged when the consumer stops is delivered again to the group's
// next session.
func ExampleOpen() {
	ctx := context.Background()
	star, err := loglet.Open(ctx, loglet.Config{
		Star:     "orders",
		Meta:     metastore.NewMem(),
		Standard: loglet.ClassConfig{Stores: []objstore.Store{objstore.NewMem()}},
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	defer star.Close(context.Background())
	if _, err := star.CreateStream(ctx, "eu", loglet.StreamOptions{Class: loglet.Standard}); err != nil {
		panic(err)
	}
	if _, err := star.Append(ctx, "eu", loglet.Batch{Records: []loglet.Record{
		{Body: []byte("order 1")}, {Body: []byte("order 2")}, {Body: []byte("order 3")},
	}}); err != nil {
		panic(err)
	}

	// The billing consumer processes two orders and acknowledges them,
	// then processes the third and stops before acknowledging it.
	g, err := groups.Open(ctx, star, "billing", "eu", groups.Options{})
	if err != nil {
		panic(err)
	}
	recs, err := g.Recv(ctx)
	if err != nil {
		panic(err)
	}
	for _, r := range recs {
		fmt.Println("billing:", r.Seq, string(r.Body))
	}
	if err := g.Ack(ctx, recs[1].Seq); err != nil { // orders 1 and 2 are done
		panic(err)
	}

	// Its next session (after a restart, or in another process) resumes
	// after the last acknowledged record: order 3 comes again.
	g, err = groups.Open(ctx, star, "billing", "eu", groups.Options{})
	if err != nil {
		panic(err)
	}
	recs, _ = g.Recv(ctx)
	fmt.Println("billing again:", recs[0].Seq, string(recs[0].Body))
	if err := g.Ack(ctx, recs[0].Seq); err != nil {
		panic(err)
	}

	// The offsets underneath: compare-and-swap on the metastore version.
	offsets := groups.OffsetsOf(star)
	off, _ := offsets.Get(ctx, "billing", "eu")
	fmt.Println("billing committed:", off.Next)
	stale := off
	if off, err = offsets.Commit(ctx, off, 3); err != nil { // a no-op move: same position, new version
		panic(err)
	}
	_, err = offsets.Commit(ctx, stale, 3) // raced: someone committed since stale was read
	fmt.Println("stale commit:", errors.Is(err, groups.ErrConflict))
	_, err = offsets.Commit(ctx, off, 1)
	fmt.Println("backwards commit:", errors.Is(err, groups.ErrBackwards))
	// Output:
	// billing: 0 order 1
	// billing: 1 order 2
	// billing: 2 order 3
	// billing again: 2 order 3
	// billing committed: 3
	// stale commit: true
	// backwards commit: true
}

// An operator's view of a stream's groups: how many records each is
// behind, and a reset that makes one replay.
func ExampleLags() {
	ctx := context.Background()
	star, err := loglet.Open(ctx, loglet.Config{
		Star:     "orders",
		Meta:     metastore.NewMem(),
		Standard: loglet.ClassConfig{Stores: []objstore.Store{objstore.NewMem()}},
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	defer star.Close(context.Background())
	if _, err := star.CreateStream(ctx, "eu", loglet.StreamOptions{Class: loglet.Standard}); err != nil {
		panic(err)
	}
	recs := make([]loglet.Record, 5)
	for i := range recs {
		recs[i].Body = fmt.Appendf(nil, "order %d", i+1)
	}
	if _, err := star.Append(ctx, "eu", loglet.Batch{Records: recs}); err != nil {
		panic(err)
	}
	offsets := groups.OffsetsOf(star)
	for group, next := range map[string]uint64{"billing": 5, "shipping": 2} {
		off, err := offsets.Get(ctx, group, "eu")
		if err != nil {
			panic(err)
		}
		if _, err := offsets.Commit(ctx, off, next); err != nil {
			panic(err)
		}
	}

	lags, err := groups.Lags(ctx, star, "eu", groups.LagOptions{})
	if err != nil {
		panic(err)
	}
	for _, l := range lags {
		fmt.Printf("%s: at %d of %d, %d behind\n", l.Offset.Group, l.Offset.Next, l.Tail, l.Records)
	}
	// billing replays from the start.
	billing, err := offsets.Get(ctx, "billing", "eu")
	if err != nil {
		panic(err)
	}
	if _, err := offsets.Reset(ctx, billing, 0); err != nil {
		panic(err)
	}
	l, err := groups.LagOf(ctx, star, "billing", "eu", groups.LagOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Printf("billing after the reset: %d behind\n", l.Records)
	// Output:
	// billing: at 5 of 5, 0 behind
	// shipping: at 2 of 5, 3 behind
	// billing after the reset: 5 behind
}
