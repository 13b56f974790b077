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
// metastore); --meta and --bucket put it elsewhere by URL (open.URL):
//
//	go run ./examples/httpservice --meta etcd://127.0.0.1:2379/httpservice/ --bucket 's3://orders?endpoint=http://127.0.0.1:7070&create=true'
//
// The embedded default is for one process at a time, so stop the service before pointing
// the flightlog CLI at it. SIGINT or SIGTERM shuts down gracefully: stop
// accepting, end tails, finish in-flight requests, then Close the star
// (flush, absorb, seal) so the next start continues every stream.
package main

import (
	"context"
	"errors"
	"flag"
	"log"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/loglet/open"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	dir := flag.String("dir", "./httpservice-data", "data directory (the embedded default; ignored with --meta and --bucket)")
	meta := flag.String("meta", "", "metastore URL instead of the bbolt file in --dir, e.g. etcd://127.0.0.1:2379/httpservice/")
	bucket := flag.String("bucket", "", "Standard's bucket URL instead of the directory in --dir, e.g. s3://my-bucket?region=eu-west-1")
	flag.Parse()
	spec, err := backends(*dir, *meta, *bucket)
	if err == nil {
		err = serve(*addr, spec)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// backends is the service's Spec: the flags' URLs, or else the embedded
// layout in dir (bbolt:///abs/dir/meta.db, file:///abs/dir/standard).
func backends(dir, meta, bucket string) (open.Spec, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return open.Spec{}, err
	}
	if meta == "" {
		meta = "bbolt://" + filepath.ToSlash(filepath.Join(abs, open.MetastoreFile))
	}
	if bucket == "" {
		bucket = "file://" + filepath.ToSlash(filepath.Join(abs, open.StandardBucket))
	}
	return open.Spec{Meta: meta, Standard: []string{bucket}}, nil
}

func serve(addr string, spec open.Spec) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := loglet.DefaultConfig()
	cfg.CreateOnAppend, cfg.DefaultClass = true, loglet.Standard
	cfg.Logger = slog.Default()
	star, err := open.URL(ctx, cfg, spec) // the Star owns the metastore: its Close closes it
	if err != nil {
		return err
	}
	done := make(chan struct{})
	srv := &http.Server{Addr: addr, Handler: (&server{star: star, done: done}).routes(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	slog.Info("listening", "addr", addr, "meta", spec.Meta, "bucket", spec.Standard[0])
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
