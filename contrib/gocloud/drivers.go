package gocloud

import (
	"context"
	"errors"
	"net/http"

	"cloud.google.com/go/storage"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/aws/smithy-go"
	"google.golang.org/api/googleapi"

	// The drivers Open can open, registered for blob.OpenBucket.
	_ "gocloud.dev/blob/azureblob"
	_ "gocloud.dev/blob/fileblob"
	_ "gocloud.dev/blob/gcsblob"
	_ "gocloud.dev/blob/memblob"
	_ "gocloud.dev/blob/s3blob"
)

// What go-cloud's error codes blur, read from the drivers' own errors:
// gcsblob reports a missing bucket and a 403 as NotFound, azureblob a
// missing container as NotFound, s3blob NoSuchBucket as NotFound. A Get
// must not read a missing bucket as a missing key (the chain would take an
// empty slot for it), so these are told apart here.

// bucketMissing reports whether err says the bucket (container) itself
// does not exist.
func bucketMissing(err error) bool {
	if errors.Is(err, storage.ErrBucketNotExist) {
		return true
	}
	var az *azcore.ResponseError
	if errors.As(err, &az) {
		return az.ErrorCode == "ContainerNotFound" || az.ErrorCode == "ContainerBeingDeleted"
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		return api.ErrorCode() == "NoSuchBucket"
	}
	return false
}

// ambiguousNotFound reports whether err is a missing object that may be a
// missing bucket: the GCS client reports every 404 of an object read or
// delete as storage.ErrObjectNotExist, whichever was missing. The caller
// then asks whether the bucket exists (one more request per miss, on GCS
// only).
func ambiguousNotFound(err error) bool {
	return errors.Is(err, storage.ErrObjectNotExist)
}

// denied reports whether the service refused the credentials or the
// permission (401, 403).
func denied(err error) bool {
	var g *googleapi.Error
	if errors.As(err, &g) {
		return g.Code == http.StatusUnauthorized || g.Code == http.StatusForbidden
	}
	var az *azcore.ResponseError
	if errors.As(err, &az) {
		return az.StatusCode == http.StatusUnauthorized || az.StatusCode == http.StatusForbidden
	}
	return false
}

// noRetryWrite tells the GCS client not to retry the conditional write: a
// retried attempt would meet the object its predecessor created and report
// a precondition failure as if another writer held the key. Other drivers
// ignore it.
func noRetryWrite(as func(any) bool) error {
	var h **storage.ObjectHandle
	if as(&h) && h != nil && *h != nil {
		*h = (*h).Retryer(storage.WithPolicy(storage.RetryNever))
	}
	return nil
}

// noRetryContext does the same for the Azure client, whose retry policy
// reads its options from the request's context. Other drivers ignore it.
func noRetryContext(ctx context.Context) context.Context {
	return policy.WithRetryOptions(ctx, policy.RetryOptions{MaxRetries: -1})
}
