package loglet_test

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// A Reader reads in a process that leads nothing, from the same metastore
// and buckets the leader uses: it sees what the leader has absorbed (here
// all of it, since the leader closed cleanly; beside a live leader, within
// about Config.AbsorbInterval of each ack).
func ExampleReader() {
	ctx := context.Background()
	meta := metastore.NewMem()
	buckets := []objstore.Store{objstore.NewMem()}

	// The leader, in its own process normally.
	star, err := loglet.Open(ctx, loglet.Config{
		Star: "demo", Meta: meta,
		Standard: loglet.ClassConfig{Stores: buckets},
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	if _, err := star.CreateStream(ctx, "audit", loglet.StreamOptions{Class: loglet.Standard}); err != nil {
		panic(err)
	}
	for _, b := range []string{"login", "export", "logout"} {
		if _, err := star.Append(ctx, "audit", loglet.Batch{Records: []loglet.Record{{Body: []byte(b)}}}); err != nil {
			panic(err)
		}
	}
	if err := star.Close(ctx); err != nil { // absorbs everything, then seals
		panic(err)
	}

	r, err := loglet.NewReader(loglet.ReaderConfig{Meta: meta, Standard: buckets})
	if err != nil {
		panic(err)
	}
	tail, err := r.CheckTail(ctx, "audit")
	if err != nil {
		panic(err)
	}
	fmt.Println("tail:", tail.Seq)
	res, err := r.Read(ctx, "audit", loglet.ReadQuery{Start: loglet.TailOffset(2)})
	if err != nil {
		panic(err)
	}
	for _, rec := range res.Records {
		fmt.Println(rec.Seq, string(rec.Body))
	}
	fmt.Println("next:", res.Next)
	// Output:
	// tail: 3
	// 1 export
	// 2 logout
	// next: 3
}
