package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/flightlog/flightlog/histogram"
	"github.com/flightlog/flightlog/objstore"
)

// putBaselineN is how many PUTs of each kind the baseline makes.
const putBaselineN = 60

// putBaseline is the raw PUT latency of a real S3 backend, measured in the
// same run as the load: one PUT at a time, nothing else running, of the
// run's median flight size, through the same SDK client the star used.
type putBaseline struct {
	Bytes int `json:"bytes"`
	N     int `json:"n"`
	// Raw is PutObject with If-None-Match: * straight through the client:
	// the server, the network and the SDK, and nothing of flightlog's.
	Raw latency `json:"raw_put_object"`
	// Store is the same PUT through the store's PutIfAbsent (its retry
	// loop, attempt deadline and CRC-32C header), interleaved with Raw.
	Store latency `json:"store_put_if_absent"`
}

// sdkClient is what a store built on the AWS SDK exposes (objstore/s3's
// Store).
type sdkClient interface {
	Client() *awss3.Client
	Bucket() string
}

// measurePutBaseline times putBaselineN raw PutObject calls and as many
// PutIfAbsent calls of size bytes on st, alternating, under keys of their
// own that it deletes afterwards. It returns nil when st is not an SDK
// store (the latency models).
func measurePutBaseline(ctx context.Context, st objstore.Store, star string, size int) (*putBaseline, error) {
	sc, ok := st.(sdkClient)
	if !ok {
		return nil, nil
	}
	body := make([]byte, max(size, 1))
	for i := range body {
		body[i] = byte(i*7 + i>>9)
	}
	client, bucket := sc.Client(), sc.Bucket()
	var raw, through histogram.H
	var keys []string
	var errs []error
	for i := range putBaselineN {
		rk := fmt.Sprintf("bench/%s/put-baseline/raw-%04d", star, i)
		sk := fmt.Sprintf("bench/%s/put-baseline/store-%04d", star, i)
		start := time.Now()
		_, err := client.PutObject(ctx, &awss3.PutObjectInput{
			Bucket: aws.String(bucket), Key: aws.String(rk),
			Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body))),
			IfNoneMatch: aws.String("*"),
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("bench: PUT baseline: PutObject %s: %w", rk, err))
			break
		}
		raw.RecordDuration(time.Since(start))
		keys = append(keys, rk)
		start = time.Now()
		if err := st.PutIfAbsent(ctx, sk, body); err != nil {
			errs = append(errs, fmt.Errorf("bench: PUT baseline: PutIfAbsent %s: %w", sk, err))
			break
		}
		through.RecordDuration(time.Since(start))
		keys = append(keys, sk)
	}
	for _, k := range keys {
		if err := st.Delete(ctx, k); err != nil {
			errs = append(errs, fmt.Errorf("bench: PUT baseline: delete %s: %w", k, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	rs, ts := raw.Snapshot(), through.Snapshot()
	return &putBaseline{
		Bytes: len(body), N: putBaselineN,
		Raw:   latency{us(rs.Quantile(0.5)), us(rs.Quantile(0.99)), us(rs.Quantile(0.999))},
		Store: latency{us(ts.Quantile(0.5)), us(ts.Quantile(0.99)), us(ts.Quantile(0.999))},
	}, nil
}
