// Package gocloud is the objstore.Store backend over go-cloud's blob
// package (gocloud.dev/blob): Google Cloud Storage, Azure Blob Storage,
// S3 and S3-compatible stores, a directory and memory, each through its
// go-cloud driver. One Store is one bucket (one Azure container).
//
// It lives in a module of its own (github.com/flightlog/flightlog/contrib/gocloud)
// so the core does not carry three cloud SDKs.
//
// The invariant it keeps is objstore's: PutIfAbsent is a conditional
// create. It is one blob.Bucket.WriteAll with WriterOptions.IfNotExist,
// which each driver sends as the service's own precondition (GCS
// ifGenerationMatch=0, Azure If-None-Match: *, S3 If-None-Match: *), so
// the service decides atomically whether the key was free.
//
// # Outcomes of PutIfAbsent
//
//   - nil: the write was accepted. The object is ours.
//   - objstore.ErrExists: the driver reported a failed precondition
//     (gcerrors.FailedPrecondition or AlreadyExists: GCS 412, Azure 409
//     BlobAlreadyExists or 412 ConditionNotMet, S3 412). The GCS and Azure
//     clients are told not to retry this write, so the answer is about an
//     object this call did not create. The s3blob driver's client retries
//     as configured by whoever built it; a 412 after a retried attempt may
//     then be this call's own object (the chain resolves ownership by the
//     envelope's nonce in any case; objstore/s3, flightlog's own S3
//     backend, tells the two apart and is the better choice for S3).
//   - objstore.ErrPermanent: a missing bucket or container, refused
//     credentials (401, 403), a request the service rejects
//     (gcerrors.InvalidArgument, Unimplemented).
//   - any other error: the outcome is unknown; read the key back.
//
// A Get maps gcerrors.NotFound to objstore.ErrNotFound unless the driver's
// own error says the bucket is missing (GCS storage.ErrBucketNotExist,
// Azure ContainerNotFound, S3 NoSuchBucket) or access was denied: go-cloud
// folds those into NotFound, and a missing bucket read as a missing key
// would look like an empty slot. The GCS client reports every 404 of an
// object read or delete as storage.ErrObjectNotExist, so on GCS a miss
// costs a second request that asks whether the bucket exists.
//
// Ranged reads are one NewRangeReader each. A service that refuses a range
// starting at or past the end (Azure answers 416) is asked for the
// object's size, and such a range reads as empty, as objstore.Store
// requires.
//
// List reads the whole listing under its prefix and sorts it (drivers
// escape some characters in names, so the service's order is not byte
// order): it is for operators' tools, as objstore.Store says.
//
// Open opens a bucket from a go-cloud URL (gs://bucket, azblob://container,
// s3://bucket?region=..., file:///dir, mem://); this package registers
// those drivers.
package gocloud
