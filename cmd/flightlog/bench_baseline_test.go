package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/flightlog/flightlog/objstore/s3"
)

// TestPutBaselineAgainstS3: against the real server, the baseline times
// every PUT of both kinds and leaves no object behind.
func TestPutBaselineAgainstS3(t *testing.T) {
	ep := os.Getenv("FLIGHTLOG_S3_ENDPOINT")
	if ep == "" {
		msg := "FLIGHTLOG_S3_ENDPOINT is not set: run ./scripts/test.sh, which starts versitygw on loopback"
		if os.Getenv("FLIGHTLOG_REQUIRE_SERVERS") == "1" {
			t.Fatal(msg + " (FLIGHTLOG_REQUIRE_SERVERS=1)")
		}
		t.Skip(msg)
	}
	var b [6]byte
	rand.Read(b[:])
	ctx := context.Background()
	st, err := s3.New(ctx, s3.Config{
		Bucket: "flightlog-test-" + hex.EncodeToString(b[:]), Endpoint: ep, UsePathStyle: true,
		AccessKey: os.Getenv("FLIGHTLOG_S3_ACCESS_KEY"), SecretKey: os.Getenv("FLIGHTLOG_S3_SECRET_KEY"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateBucket(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := measurePutBaseline(ctx, st, "bench-test", 4096)
	if err != nil {
		t.Fatal(err)
	}
	if res == nil || res.N != putBaselineN || res.Bytes != 4096 || res.Raw.P50 <= 0 || res.Store.P50 <= 0 ||
		res.Raw.P99 < res.Raw.P50 || res.Store.P99 < res.Store.P50 {
		t.Errorf("baseline %+v: want %d PUTs of 4096 B each way, positive ascending percentiles", res, putBaselineN)
	}
	left, err := st.List(ctx, "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("the baseline left %d objects behind: %q", len(left), left)
	}
	if _, err := st.Client().DeleteBucket(ctx, &awss3.DeleteBucketInput{Bucket: aws.String(st.Bucket())}); err != nil {
		t.Logf("cleanup: delete bucket %s: %v", st.Bucket(), err)
	}
}
