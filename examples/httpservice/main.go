// Command httpservice is a small HTTP service that embeds a flightlog star:
// the log lives in the service's process, its acknowledgements mean
// "durable in object storage", and there is no broker to run.
//
//	go run ./examples/httpservice --addr 127.0.0.1:8080 --dir ./httpservice-data
//	curl -X POST --data-binary $'hello\nworld' localhost:8080/streams/greetings
//	curl 'localhost:8080/streams/greetings?from=0'
//	curl -N localhost:8080/streams/greetings/tail?from=0
//
// Streams are created on their first append (Standard class). The data
// directory holds the embedded default (local-directory bucket, bbolt
// metastore): one process at a time, so stop the service before pointing
// the flightlog CLI at it. SIGINT or SIGTERM shuts down gracefully: stop
// accepting, end tails, finish in-flight requests, then Close the star
// (flush, absorb, seal) so the next start continues every stream.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore/bbolt"
	"github.com/flightlog/flightlog/objstore"
	"github.com/flightlog/flightlog/objstore/file"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	dir := flag.String("dir", "./httpservice-data", "data directory")
	flag.Parse()
	if err := serve(*addr, *dir); err != nil {
		log.Fatal(err)
	}
}

func serve(addr, dir string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	meta, err := bbolt.Open(filepath.Join(dir, "meta.db"), nil)
	if err != nil {
		return fmt.Errorf("%w (the embedded store is for one process)", err)
	}
	defer meta.Close()
	bucket, err := file.Open(filepath.Join(dir, "standard"))
	if err != nil {
		return err
	}
	star, err := loglet.Open(ctx, loglet.Config{
		Star: "default", Meta: meta,
		Standard:       loglet.ClassConfig{Stores: []objstore.Store{bucket}, BucketNames: []string{"standard"}},
		CreateOnAppend: true, DefaultClass: loglet.Standard,
		Logger: slog.Default(),
	})
	if err != nil {
		return err
	}
	done := make(chan struct{})
	srv := &http.Server{Addr: addr, Handler: (&server{star: star, done: done}).routes(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	slog.Info("listening", "addr", addr, "dir", dir)
	select {
	case err := <-errc:
		star.Close(context.Background())
		return err
	case <-ctx.Done():
	}
	slog.Info("shutting down")
	close(done) // end tails, which would otherwise hold Shutdown up
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		slog.Error("shutdown", "err", err)
	}
	return star.Close(context.Background()) // flush, absorb, seal: the next start continues every stream
}
