// Package s3 is the objstore.Store backend for Amazon S3 and S3-compatible
// servers, built on aws-sdk-go-v2. One Store is one bucket.
//
// The invariant it keeps is objstore's: PutIfAbsent is a conditional create.
// It is a single PutObject carrying "If-None-Match: *" (never a multipart
// upload, never a copy), so the server decides, atomically, whether the key
// was free. Every attempt, including retries, carries the precondition; a
// unit test checks the header on the wire and the conformance kit checks an
// 8-way race against a real server.
//
// # Outcomes of PutIfAbsent
//
//   - nil: an attempt of this call got 2xx. The object is ours.
//   - objstore.ErrExists: 412 Precondition Failed, and no earlier attempt of
//     this call could have created the object (every earlier attempt was
//     answered with a definite refusal, such as 409, or never reached the
//     server). Definite: this call did not create the object.
//   - ErrAmbiguous: the outcome is unknown. An attempt timed out, got a 5xx,
//     or lost its connection after the request may have been sent, and no
//     later attempt settled it. In particular, a 412 that follows such an
//     attempt within the same call is reported as ErrAmbiguous, not ErrExists:
//     the object the 412 refers to may be this call's own earlier attempt.
//     The caller resolves it by reading the key (the chain compares the
//     envelope's epoch, slot and nonce). A later PutIfAbsent of the same key
//     will then return ErrExists; that too says nothing about whose object it
//     is, which is why the chain always resolves ownership by nonce.
//   - objstore.ErrPermanent: a refusal retrying will not cure (404
//     NoSuchBucket, 400 InvalidBucketName, 403 AccessDenied,
//     InvalidAccessKeyId or SignatureDoesNotMatch, 501 NotImplemented, and
//     any 404 that is not about the key, such as versitygw's
//     XAdminUserNotFound for an unknown access key; see permanentCodes). It
//     is not retried. After an earlier attempt of unknown outcome it comes
//     wrapped with ErrAmbiguous as well.
//   - other errors (another 400 or 409, a cancelled context before anything
//     was sent): the object was not created by this call, but callers
//     should treat every non-sentinel error as ambiguous unless they know
//     better; the chain does.
//
// A 404 reads as objstore.ErrNotFound only when it is about the key
// (NoSuchKey, or no error body). Note that S3 answers a GET of a missing
// key with 403 AccessDenied when the credentials lack s3:ListBucket: that
// is permanent here, and loglet.Open's pre-flight check finds it.
//
// A 409 ConditionalRequestConflict (S3's answer when conditional writes to
// one key race) is a definite refusal and is retried within the attempt
// budget. Connection failures while dialing wrap objstore.ErrUnavailable:
// nothing was sent.
//
// # Retries and timeouts
//
// The SDK's own retryer is replaced by aws.NopRetryer and this package runs
// its own bounded loop (Config.MaxAttempts, default 3, with short jittered
// backoff), because the SDK's standard retryer would retry a timed-out or
// 5xx PutObject and then hand back a 412 as if it were definite, and its
// retry token bucket can fail calls outright under a burst of errors. Each
// attempt has its own deadline (Config.AttemptTimeout plus the time to move
// the body at Config.AttemptBytesPerSecond), so a hung connection costs one
// attempt, not the caller's whole budget. A cancelled caller context ends the
// call at once with an error that wraps ctx.Err() (and ErrAmbiguous for a
// PutIfAbsent that may have been sent).
//
// # Checksums
//
// The SDK's default flexible-checksum behaviour (RequestChecksumCalculation
// "when supported") would add a CRC32 to every PutObject: over HTTPS as an
// aws-chunked body with a trailing checksum, which many S3-compatible
// servers do not accept, and over plain HTTP as a header. Response
// validation ("when supported") would ask for and check full-object
// checksums on GetObject, which is pointless for ranged reads. This package
// sets both to "when required" and instead computes CRC-32C itself
// (hardware-accelerated) and sends it as the x-amz-checksum-crc32c header of
// a plain, fixed-length PutObject. AWS general-purpose buckets, S3 Express
// directory buckets (where CRC-32C is the recommended algorithm) and
// versitygw all verify that header and reject a body that does not match it
// (400 BadDigest), so a corrupted upload can never become a slot object.
// Config.DisableContentChecksum turns it off for a server that rejects it.
// flightlog's own envelope and frame checksums protect reads.
//
// # The HTTP pool and the cost of a request
//
// Unless Config.AWSConfig brings its own HTTP client, New builds one with
// Config.MaxIdleConnsPerHost idle connections per host (so a window of
// parallel uploads reuses its connections) whose connections copy a
// request body through a pooled buffer: net/http hands a body of known
// length to the connection's ReadFrom, which for plain TCP would allocate
// 32 KiB per request. Signing is the SDK's: over plain http the payload's
// SHA-256 is part of the signature, over https PutObject is signed with an
// unsigned payload (TLS and the CRC-32C header protect the body). The
// rest of a request's CPU is the SDK's middleware and net/http's
// goroutines; BenchmarkPutPath measures it per PUT against a client with
// the SDK's defaults and against a bare PutObject, in one run.
//
// # S3 Express One Zone (directory buckets)
//
// A bucket whose name ends in "--x-s3" (base--<zone-id>--x-s3, e.g.
// flights--usw2-az1--x-s3) is a directory bucket. Leave Endpoint empty and
// UsePathStyle false: the SDK derives the zonal endpoint
// (s3express-<zone-id>.<region>.amazonaws.com, virtual-hosted) from the
// name and does the session authentication (s3.CreateSession, cached
// session credentials) itself; Region must be the zone's region. Conditional writes
// (If-None-Match) work as on general-purpose buckets. ListObjectsV2 on a
// directory bucket returns keys in no particular order and has no
// StartAfter: this Store then omits StartAfter, filters keys that do not sort
// after startAfter on the client side, and stops at limit, so a listing is a
// subset in arbitrary order (harness capabilities UnorderedList and
// NoStartAfter; see DirectoryBucket). Directory buckets also restrict
// listing prefixes and delimiters (see AWS's ListObjectsV2 notes for
// directory buckets; not verified here). Nothing on flightlog's write or
// takeover path lists.
package s3
