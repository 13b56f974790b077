// Command s3 is the quickstart against real servers: the Standard stream's
// chain in one S3 bucket, the Express stream's in three (one per zone,
// acked at two copies), and etcd as the metastore, opened in one call from
// URLs (open.URL):
//
//	metastore  etcd://127.0.0.1:2379/flightlog/examples/
//	Standard   s3://flightlog-standard?endpoint=http://127.0.0.1:7070&create=true
//	Express    s3://flightlog-express-a?..., s3://flightlog-express-b?..., s3://flightlog-express-c?...
//
// Any S3-compatible server with conditional writes (If-None-Match: *)
// works; so does AWS. A service would rather call open.Env, which reads the
// same settings from the flightlog CLI's FLIGHTLOG_* variables.
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
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/loglet/open"
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
	// One URL per store (loglet/open's Spec): the bucket names in the
	// URLs are recorded in the chains' epoch records and must never change.
	bucket := func(name string) string {
		q := url.Values{}
		q.Set("create", strconv.FormatBool(c.createBuckets))
		if c.endpoint != "" {
			q.Set("endpoint", c.endpoint)
		}
		if c.region != "" {
			q.Set("region", c.region)
		}
		return "s3://" + name + "?" + q.Encode()
	}
	hosts := make([]string, len(c.etcdEndpoints))
	for i, ep := range c.etcdEndpoints {
		hosts[i] = strings.TrimPrefix(ep, "http://")
	}
	spec := open.Spec{
		Meta:        "etcd://" + strings.Join(hosts, ",") + "/" + c.etcdPrefix,
		Standard:    []string{bucket(c.standardBucket)},
		S3AccessKey: c.accessKey, S3SecretKey: c.secretKey,
	}
	for _, name := range c.expressBuckets {
		spec.Express = append(spec.Express, bucket(name))
	}
	cfg := loglet.DefaultConfig()
	cfg.Star = c.star
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	star, err := open.URL(ctx, cfg, spec) // the Star owns the etcd client: its Close closes it
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
