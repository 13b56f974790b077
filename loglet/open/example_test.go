package open_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/loglet/open"
)

// The embedded default: a data directory holding a bbolt metastore and a
// local directory per bucket, opened in one call. A second Dir of the
// same directory (a restart) continues the stream.
func ExampleDir() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "flightlog-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	cfg := loglet.DefaultConfig() // edit what differs; open.Dir sets the backends
	cfg.Logger = slog.New(slog.DiscardHandler)
	for run := 1; run <= 2; run++ {
		star, err := open.Dir(ctx, dir, cfg)
		if err != nil {
			panic(err)
		}
		if run == 1 {
			if _, err := star.CreateStream(ctx, "orders", loglet.StreamOptions{Class: loglet.Standard}); err != nil {
				panic(err)
			}
		}
		ack, err := star.Append(ctx, "orders", loglet.Batch{Records: []loglet.Record{{Body: fmt.Appendf(nil, "order from run %d", run)}}})
		if err != nil {
			panic(err)
		}
		fmt.Printf("run %d: acked [%d, %d)\n", run, ack.Start, ack.End)
		// Close seals the chains and closes the bbolt file, so the next
		// open.Dir (or `flightlog read --dir`) can have it.
		if err := star.Close(ctx); err != nil {
			panic(err)
		}
	}
	// Output:
	// run 1: acked [0, 1)
	// run 2: acked [1, 2)
}

// Backends by URL: here in memory (mem://), as tests use it; in production
// the same Spec names s3:// buckets and an etcd:// or bbolt:// metastore.
// The buckets' names (the URLs' hosts) are recorded in the chains.
func ExampleURL() {
	ctx := context.Background()
	cfg := loglet.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	star, err := open.URL(ctx, cfg, open.Spec{
		Meta:     "mem://",
		Standard: []string{"mem://orders-std"},
		Express:  []string{"mem://orders-a", "mem://orders-b", "mem://orders-c"},
	})
	if err != nil {
		panic(err)
	}
	defer star.Close(ctx)
	st := star.Stats()
	fmt.Println(st.Standard.BucketNames, st.Express.BucketNames)

	_, err = open.URL(ctx, cfg, open.Spec{Meta: "mem://", Standard: []string{"s3://?region=eu-west-1"}})
	fmt.Println(err)
	// Output:
	// [orders-std] [orders-a orders-b orders-c]
	// open: Standard[0] "s3://?region=eu-west-1": missing bucket name (the host part): want s3://bucket?region=...
}
