package loglet_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// Open a star over in-memory buckets, append, read back, and reopen: the
// second Open continues the stream.
func Example() {
	ctx := context.Background()
	meta := metastore.NewMem()
	bucket := objstore.NewMem() // a Standard bucket set of one (K=1, W=1)
	cfg := loglet.Config{
		Star:     "orders",
		Meta:     meta,
		Standard: loglet.ClassConfig{Stores: []objstore.Store{bucket}},
		Logger:   slog.New(slog.DiscardHandler),
	}
	star, err := loglet.Open(ctx, cfg)
	if err != nil {
		panic(err)
	}
	if _, err := star.CreateStream(ctx, "eu", loglet.StreamOptions{Class: loglet.Standard}); err != nil {
		panic(err)
	}
	ack, err := star.Append(ctx, "eu", loglet.Batch{Records: []loglet.Record{
		{Body: []byte("order 1")}, {Body: []byte("order 2")},
	}})
	if err != nil {
		panic(err)
	}
	fmt.Printf("acked [%d, %d)\n", ack.Start, ack.End)

	// A conditional append: only if the stream's tail is still 0.
	zero := uint64(0)
	_, err = star.Append(ctx, "eu", loglet.Batch{Records: []loglet.Record{{Body: []byte("dup")}}, MatchSeqNum: &zero})
	var miss *loglet.SeqNumMismatchError
	fmt.Println("conditional append:", errors.As(err, &miss), errors.Is(err, loglet.ErrNotCommitted), "tail", miss.Tail.Seq)
	star.Close(context.Background())

	// Another process (or a restart) continues the stream.
	star, err = loglet.Open(ctx, cfg)
	if err != nil {
		panic(err)
	}
	defer star.Close(context.Background())
	ack, _ = star.Append(ctx, "eu", loglet.Batch{Records: []loglet.Record{{Body: []byte("order 3")}}})
	fmt.Printf("after reopen: acked [%d, %d)\n", ack.Start, ack.End)
	res, err := star.Read(ctx, "eu", loglet.ReadQuery{Start: loglet.AtSeq(0)})
	if err != nil {
		panic(err)
	}
	for _, r := range res.Records {
		fmt.Println(r.Seq, string(r.Body))
	}
	// Output:
	// acked [0, 2)
	// conditional append: true true tail 2
	// after reopen: acked [2, 3)
	// 0 order 1
	// 1 order 2
	// 2 order 3
}
