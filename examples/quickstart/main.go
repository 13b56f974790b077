// Command quickstart runs flightlog embedded, with no servers: a star whose
// buckets are local directories and whose metastore is a bbolt file, all in
// one data directory. It creates two streams, one Standard (one bucket) and
// one Express (three local-directory "zones", acked at two copies), appends
// a few records to each, reads them back and prints both.
//
//	go run ./examples/quickstart                  # data in ./quickstart-data
//	go run ./examples/quickstart --dir /tmp/qs
//
// Run it again and it continues both streams where the last run left them:
// a cleanly closed star is reopened by the next process, and a run that was
// killed is taken over (fenced, walked) with every acked record kept.
//
// The layout is the one `flightlog` uses by default, so the CLI can look at
// what this wrote: `go run ./cmd/flightlog walk --dir quickstart-data`.
// bbolt allows one process at a time: run the CLI after this program exits.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/loglet/open"
)

func main() {
	dir := flag.String("dir", "./quickstart-data", "data directory (created if absent)")
	flag.Parse()
	if err := run(context.Background(), *dir, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// run opens (or reopens) the star in dir, appends to both streams, reads
// back what it appended, and closes the star cleanly.
func run(ctx context.Context, dir string, out io.Writer) error {
	// The embedded default: dir/meta.db (the bbolt metastore, one process
	// at a time), dir/standard (Standard's bucket) and dir/express-a, -b,
	// -c (Express's three "zones", on one disk here: this shows the
	// protocol, not the fault tolerance). DefaultConfig settles: about a
	// second after they are absorbed, records move from the transit slots
	// into per-stream settled objects in dir/standard, and the slots are
	// deleted (cfg.SettleInterval = -1 would keep them).
	cfg := loglet.DefaultConfig()
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	star, err := open.Dir(ctx, dir, cfg)
	if err != nil {
		return err
	}
	defer star.Close(context.Background())

	streams := []struct {
		name  string
		class loglet.Class
		items []string
	}{
		{"orders", loglet.Standard, []string{"2 x espresso beans", "1 x grinder", "3 x filter papers"}},
		{"clicks", loglet.Express, []string{"/home", "/cart", "/checkout"}},
	}
	for _, s := range streams {
		_, err := star.CreateStream(ctx, s.name, loglet.StreamOptions{Class: s.class})
		if err != nil && !errors.Is(err, loglet.ErrStreamExists) {
			return err
		}
		batch := loglet.Batch{}
		for _, it := range s.items {
			batch.Records = append(batch.Records, loglet.Record{Body: []byte(it)})
		}
		// Append returns once the batch is durable: W copies in object
		// storage, and every earlier flight of its chain too.
		ack, err := star.Append(ctx, s.name, batch)
		if err != nil {
			return fmt.Errorf("append to %s: %w", s.name, err)
		}
		fmt.Fprintf(out, "%s (%s): appended %d records at seq [%d, %d)\n", s.name, s.class, len(s.items), ack.Start, ack.End)
		res, err := star.Read(ctx, s.name, loglet.ReadQuery{Start: loglet.AtSeq(ack.Start)})
		if err != nil {
			return fmt.Errorf("read %s: %w", s.name, err)
		}
		for _, r := range res.Records {
			fmt.Fprintf(out, "  read %d: %s\n", r.Seq, r.Body)
		}
		fmt.Fprintf(out, "  %s now holds %d records\n", s.name, res.Tail.Seq)
	}
	// A clean Close flushes, absorbs everything into refs and seals the
	// chains, so the next run (or `flightlog read`) finds it all.
	return star.Close(context.Background())
}
