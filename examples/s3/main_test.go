package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/flightlog/flightlog/objstore/s3"
)

// servers returns the configuration scripts/test.sh exports, or skips
// (fails under FLIGHTLOG_REQUIRE_SERVERS=1).
func servers(t *testing.T) config {
	t.Helper()
	ep, eps := os.Getenv("FLIGHTLOG_S3_ENDPOINT"), os.Getenv("FLIGHTLOG_ETCD_ENDPOINTS")
	if ep == "" || eps == "" {
		msg := "FLIGHTLOG_S3_ENDPOINT or FLIGHTLOG_ETCD_ENDPOINTS is not set: run ./scripts/test.sh, which starts versitygw and etcd on loopback"
		if os.Getenv("FLIGHTLOG_REQUIRE_SERVERS") == "1" {
			t.Fatal(msg + " (FLIGHTLOG_REQUIRE_SERVERS=1: a missing server is a failure)")
		}
		t.Skip(msg)
	}
	var b [5]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	return config{
		endpoint:       ep,
		accessKey:      os.Getenv("FLIGHTLOG_S3_ACCESS_KEY"),
		secretKey:      os.Getenv("FLIGHTLOG_S3_SECRET_KEY"),
		standardBucket: "flightlog-ex-" + id + "-std",
		expressBuckets: []string{"flightlog-ex-" + id + "-a", "flightlog-ex-" + id + "-b", "flightlog-ex-" + id + "-c"},
		createBuckets:  true,
		etcdEndpoints:  strings.Split(eps, ","),
		etcdPrefix:     "flightlog-test/examples-s3/" + id + "/",
		star:           "default",
	}
}

// removeBuckets empties and deletes the example's buckets, best effort.
func removeBuckets(t *testing.T, c config) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, name := range append([]string{c.standardBucket}, c.expressBuckets...) {
		s, err := s3.New(ctx, s3.Config{Bucket: name, Endpoint: c.endpoint, UsePathStyle: true, AccessKey: c.accessKey, SecretKey: c.secretKey})
		if err != nil {
			continue
		}
		keys, _ := s.List(ctx, "", "", 0)
		for _, k := range keys {
			s.Delete(ctx, k)
		}
		if _, err := s.Client().DeleteBucket(ctx, &awss3.DeleteBucketInput{Bucket: aws.String(name)}); err != nil {
			t.Logf("cleanup: delete bucket %s: %v", name, err)
		}
	}
}

func TestAgainstServers(t *testing.T) {
	c := servers(t)
	t.Cleanup(func() { removeBuckets(t, c) })
	var first strings.Builder
	if err := run(context.Background(), c, &first); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"orders (standard): appended 3 records at seq [0, 3)", "read 2: 3 x filter papers", "clicks (express): appended 3 records at seq [0, 3)", "read 0: /home"} {
		if !strings.Contains(first.String(), want) {
			t.Errorf("first run lacks %q:\n%s", want, first.String())
		}
	}
	var second strings.Builder
	err := run(context.Background(), c, &second)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(second.String(), "clicks (express): appended 3 records at seq [3, 6)") {
		t.Errorf("second run did not continue the streams:\n%s", second.String())
	}
}

func TestNeedsEtcd(t *testing.T) {
	if err := run(context.Background(), config{expressBuckets: []string{"a", "b", "c"}}, nil); err == nil || !strings.Contains(err.Error(), "etcd") {
		t.Fatalf("run without etcd: %v", err)
	}
}
