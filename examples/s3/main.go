// Command s3 is the quickstart against real servers: the Standard stream's
// chain in one S3 bucket, the Express stream's in three (one per zone,
// acked at two copies), and etcd as the metastore. Any S3-compatible server
// with conditional writes (If-None-Match: *) works; so does AWS.
//
//	go run ./examples/s3 --s3-endpoint http://127.0.0.1:7070 --etcd http://127.0.0.1:2379
//
// Flags default to the environment scripts/test.sh exports:
// FLIGHTLOG_S3_ENDPOINT, FLIGHTLOG_S3_ACCESS_KEY, FLIGHTLOG_S3_SECRET_KEY and
// FLIGHTLOG_ETCD_ENDPOINTS. Buckets are created if absent (--create-buckets).
// Unlike the embedded default, etcd lets several processes share the
// metastore: a Reader (or `flightlog tail --etcd ...`) can follow the
// streams while this runs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore/etcd"
	"github.com/flightlog/flightlog/objstore"
	"github.com/flightlog/flightlog/objstore/s3"
)

// config is where the example runs.
type config struct {
	endpoint, region     string
	accessKey, secretKey string
	standardBucket       string
	expressBuckets       []string
	createBuckets        bool
	etcdEndpoints        []string
	etcdPrefix, star     string
}

func main() {
	var c config
	var express, eps string
	flag.StringVar(&c.endpoint, "s3-endpoint", os.Getenv("FLIGHTLOG_S3_ENDPOINT"), "S3 endpoint URL (empty: AWS); default $FLIGHTLOG_S3_ENDPOINT")
	flag.StringVar(&c.region, "s3-region", "", "S3 region (default: the SDK's configuration)")
	flag.StringVar(&c.standardBucket, "s3-bucket", "flightlog-standard", "the Standard class's bucket")
	flag.StringVar(&express, "s3-express-buckets", "flightlog-express-a,flightlog-express-b,flightlog-express-c", "the Express class's three buckets")
	flag.BoolVar(&c.createBuckets, "create-buckets", true, "create the buckets if absent")
	flag.StringVar(&eps, "etcd", os.Getenv("FLIGHTLOG_ETCD_ENDPOINTS"), "comma-separated etcd endpoints; default $FLIGHTLOG_ETCD_ENDPOINTS")
	flag.StringVar(&c.etcdPrefix, "etcd-prefix", "flightlog/examples/", "prefix of every etcd key")
	flag.StringVar(&c.star, "star", "default", "star name")
	flag.Parse()
	c.accessKey, c.secretKey = os.Getenv("FLIGHTLOG_S3_ACCESS_KEY"), os.Getenv("FLIGHTLOG_S3_SECRET_KEY")
	c.expressBuckets = strings.Split(express, ",")
	if eps != "" {
		c.etcdEndpoints = strings.Split(eps, ",")
	}
	if err := run(context.Background(), c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "s3 example:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config, out io.Writer) error {
	if len(c.etcdEndpoints) == 0 {
		return errors.New("no etcd endpoints: pass --etcd or set FLIGHTLOG_ETCD_ENDPOINTS")
	}
	if len(c.expressBuckets) != 3 {
		return fmt.Errorf("want 3 Express buckets, got %d", len(c.expressBuckets))
	}
	meta, err := etcd.New(etcd.Config{Endpoints: c.etcdEndpoints, Prefix: c.etcdPrefix})
	if err != nil {
		return err
	}
	defer meta.Close()
	bucket := func(name string) (objstore.Store, error) {
		s, err := s3.New(ctx, s3.Config{
			Bucket: name, Endpoint: c.endpoint, Region: c.region,
			UsePathStyle: c.endpoint != "" && !s3.DirectoryBucket(name),
			AccessKey:    c.accessKey, SecretKey: c.secretKey,
		})
		if err != nil {
			return nil, err
		}
		if c.createBuckets {
			if err := s.CreateBucket(ctx); err != nil {
				return nil, fmt.Errorf("create bucket %s: %w", name, err)
			}
		}
		return s, nil
	}
	standard, err := bucket(c.standardBucket)
	if err != nil {
		return err
	}
	var zones []objstore.Store
	for _, name := range c.expressBuckets {
		b, err := bucket(name)
		if err != nil {
			return err
		}
		zones = append(zones, b)
	}
	star, err := loglet.Open(ctx, loglet.Config{
		Star:     c.star,
		Meta:     meta,
		Standard: loglet.ClassConfig{Stores: []objstore.Store{standard}, BucketNames: []string{c.standardBucket}},
		Express:  loglet.ClassConfig{Stores: zones, BucketNames: c.expressBuckets},
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return fmt.Errorf("open star %q: %w", c.star, err)
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
		if _, err := star.CreateStream(ctx, s.name, loglet.StreamOptions{Class: s.class}); err != nil && !errors.Is(err, loglet.ErrStreamExists) {
			return err
		}
		var batch loglet.Batch
		for _, it := range s.items {
			batch.Records = append(batch.Records, loglet.Record{Body: []byte(it)})
		}
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
	return star.Close(context.Background())
}
