package s3

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/flightlog/flightlog/objstore"
)

// Defaults for the zero values of Config.
const (
	DefaultAttemptTimeout        = 2 * time.Second
	DefaultAttemptBytesPerSecond = 16 << 20
	DefaultMaxAttempts           = 3
	DefaultBackoffBase           = 10 * time.Millisecond
	DefaultBackoffMax            = 200 * time.Millisecond
	DefaultMaxIdleConnsPerHost   = 100
	// DefaultEndpointRegion is the region used when Endpoint is set and no
	// region is configured anywhere (S3-compatible servers mostly ignore it,
	// but SigV4 needs one).
	DefaultEndpointRegion = "us-east-1"
)

// maxListPage is S3's largest ListObjectsV2 page.
const maxListPage = 1000

// Config says which bucket to use and how to reach it. Bucket is required;
// everything else has a default.
type Config struct {
	// Bucket is the bucket's name. A name ending in "--x-s3" is an S3
	// Express One Zone directory bucket (see the package doc).
	Bucket string

	// Region is the bucket's region. Empty: the region of AWSConfig or of
	// the default configuration chain (AWS_REGION, shared config), or
	// DefaultEndpointRegion when Endpoint is set.
	Region string

	// Endpoint is the base endpoint URL (the SDK's BaseEndpoint), for an
	// S3-compatible server, e.g. "http://127.0.0.1:7070". Empty: AWS.
	Endpoint string

	// UsePathStyle addresses the bucket as http://host/bucket/key rather
	// than http://bucket.host/key. Most S3-compatible servers need it; S3
	// Express directory buckets must not use it.
	UsePathStyle bool

	// AccessKey, SecretKey and SessionToken are static credentials. Empty
	// AccessKey: the credentials of AWSConfig, or the SDK's default chain
	// (environment, shared files, web identity, instance role).
	AccessKey    string
	SecretKey    string
	SessionToken string

	// AWSConfig, if set, is the base SDK configuration (credentials,
	// region, HTTP client, logging) instead of loading the default one.
	// Region, Endpoint and credentials above still override it.
	AWSConfig *aws.Config

	// Client, if set, is used as is for every request instead of building
	// one: Region, Endpoint, UsePathStyle, credentials, AWSConfig and
	// MaxIdleConnsPerHost are then ignored. Retry and checksum settings are
	// still applied per request (they override the client's own).
	Client *s3.Client

	// AttemptTimeout bounds one attempt of a request with no body or a small
	// one, up to the response headers (default 2s). Attempts that move a
	// body get AttemptTimeout plus the body's length at
	// AttemptBytesPerSecond.
	AttemptTimeout time.Duration
	// AttemptBytesPerSecond is the slowest transfer rate an attempt is
	// allowed before it is abandoned (default 16 MiB/s).
	AttemptBytesPerSecond int64

	// MaxAttempts is how many attempts a call makes at most (default 3; 1
	// means no retries). Only failures that may be transient are retried:
	// 409 ConditionalRequestConflict, 429, 5xx, timeouts and connection
	// errors.
	MaxAttempts int
	// BackoffBase and BackoffMax shape the jittered exponential backoff
	// between attempts (defaults 10ms and 200ms): the sleep before retry i
	// (from 1) is uniform in [0, min(BackoffMax, BackoffBase<<i)).
	BackoffBase time.Duration
	BackoffMax  time.Duration

	// MaxIdleConnsPerHost is the HTTP connection pool's idle connections per
	// host (default 100, the SDK's is 10), so that a window of parallel
	// uploads reuses its connections.
	MaxIdleConnsPerHost int

	// DisableContentChecksum stops sending x-amz-checksum-crc32c with
	// PutIfAbsent, for a server that rejects the header.
	DisableContentChecksum bool
}

// withDefaults returns c with zero values replaced by defaults.
func (c Config) withDefaults() Config {
	if c.AttemptTimeout == 0 {
		c.AttemptTimeout = DefaultAttemptTimeout
	}
	if c.AttemptBytesPerSecond == 0 {
		c.AttemptBytesPerSecond = DefaultAttemptBytesPerSecond
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.BackoffBase == 0 {
		c.BackoffBase = DefaultBackoffBase
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = DefaultBackoffMax
	}
	if c.MaxIdleConnsPerHost == 0 {
		c.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	}
	return c
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	switch {
	case c.Bucket == "":
		return errors.New("s3: config: Bucket is required")
	case c.AttemptTimeout < 0:
		return fmt.Errorf("s3: config: AttemptTimeout %v is negative", c.AttemptTimeout)
	case c.AttemptBytesPerSecond < 0:
		return fmt.Errorf("s3: config: AttemptBytesPerSecond %d is negative", c.AttemptBytesPerSecond)
	case c.MaxAttempts < 0:
		return fmt.Errorf("s3: config: MaxAttempts %d is negative", c.MaxAttempts)
	case c.BackoffBase < 0 || c.BackoffMax < 0:
		return errors.New("s3: config: backoff durations must not be negative")
	case c.MaxIdleConnsPerHost < 0:
		return fmt.Errorf("s3: config: MaxIdleConnsPerHost %d is negative", c.MaxIdleConnsPerHost)
	case (c.AccessKey == "") != (c.SecretKey == ""):
		return errors.New("s3: config: AccessKey and SecretKey go together")
	case DirectoryBucket(c.Bucket) && c.UsePathStyle:
		return fmt.Errorf("s3: config: directory bucket %q needs virtual-hosted addressing, not UsePathStyle", c.Bucket)
	}
	return nil
}

// DirectoryBucket reports whether bucket names an S3 Express One Zone
// directory bucket (its name ends in "--x-s3"). Such a bucket lists
// unordered and without StartAfter.
func DirectoryBucket(bucket string) bool {
	return strings.HasSuffix(bucket, "--x-s3")
}

// Store is one S3 bucket. It is safe for concurrent use.
type Store struct {
	cfg    Config
	client *s3.Client
	dir    bool
	opts   []func(*s3.Options)
}

var _ objstore.Store = (*Store)(nil)

// New returns a Store for cfg.Bucket. It does not contact the server (the
// bucket need not exist yet; see CreateBucket). ctx bounds loading the
// default SDK configuration only.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Store{cfg: cfg, dir: DirectoryBucket(cfg.Bucket)}
	s.opts = []func(*s3.Options){s.requestOptions}
	if cfg.Client != nil {
		s.client = cfg.Client
		return s, nil
	}

	var awsCfg aws.Config
	if cfg.AWSConfig != nil {
		awsCfg = cfg.AWSConfig.Copy()
	} else {
		var loadOpts []func(*config.LoadOptions) error
		if cfg.AccessKey != "" {
			// Do not even resolve the default chain: static keys win.
			loadOpts = append(loadOpts, config.WithCredentialsProvider(
				credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, cfg.SessionToken)))
		}
		var err error
		awsCfg, err = config.LoadDefaultConfig(ctx, loadOpts...)
		if err != nil {
			return nil, fmt.Errorf("s3: load SDK configuration: %w", err)
		}
	}
	if cfg.AccessKey != "" {
		awsCfg.Credentials = aws.NewCredentialsCache(
			credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, cfg.SessionToken))
	}
	if cfg.Region != "" {
		awsCfg.Region = cfg.Region
	}
	if awsCfg.Region == "" {
		if cfg.Endpoint == "" {
			return nil, errors.New("s3: config: no Region given and none in the SDK configuration")
		}
		awsCfg.Region = DefaultEndpointRegion
	}
	if cfg.AWSConfig == nil || cfg.AWSConfig.HTTPClient == nil {
		awsCfg.HTTPClient = awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
			tr.MaxIdleConnsPerHost = cfg.MaxIdleConnsPerHost
			if dial := tr.DialContext; dial != nil {
				tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
					c, err := dial(ctx, network, addr)
					if err != nil {
						return nil, err
					}
					return bodyConn{c}, nil
				}
			}
		})
	}
	s.client = s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.UsePathStyle
		s.requestOptions(o)
	})
	return s, nil
}

// requestOptions is applied to every request: this package retries by
// itself (see the package doc) and manages checksums by itself.
func (s *Store) requestOptions(o *s3.Options) {
	o.Retryer = aws.NopRetryer{}
	o.RetryMaxAttempts = 1
	o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
	o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
}

// Bucket returns the bucket's name.
func (s *Store) Bucket() string { return s.cfg.Bucket }

// Client returns the underlying SDK client.
func (s *Store) Client() *s3.Client { return s.client }

// PutIfAbsent creates key with body if key holds no object: one PutObject
// with If-None-Match: *. See the package doc for what each outcome means.
// body is not retained: every attempt has ended when it returns. (An HTTP
// transport may still be writing the tail of an attempt the server has
// already answered, e.g. a 412 sent before the whole body arrived; those
// bytes go to a request that is over, and the CRC-32C sent with every
// attempt would make the server refuse an attempt whose bytes changed.)
func (s *Store) PutIfAbsent(ctx context.Context, key string, body []byte) error {
	if err := objstore.ValidateKey(key); err != nil {
		return fmt.Errorf("s3: put %q: %w", key, err)
	}
	var sum *string
	if !s.cfg.DisableContentChecksum {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], crc32.Checksum(body, castagnoli))
		sum = aws.String(base64.StdEncoding.EncodeToString(b[:]))
	}
	err := s.retry(ctx, "put", key, true, int64(len(body)), func(actx context.Context, _ *attempt) error {
		_, err := s.client.PutObject(actx, &s3.PutObjectInput{
			Bucket:         aws.String(s.cfg.Bucket),
			Key:            aws.String(key),
			Body:           bytes.NewReader(body),
			ContentLength:  aws.Int64(int64(len(body))),
			IfNoneMatch:    aws.String("*"),
			ChecksumCRC32C: sum,
		}, s.opts...)
		return err
	})
	return err
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// bodyConn is a connection of this package's HTTP pool. net/http hands a
// request body of known length to the connection's ReadFrom, which for a
// TCP connection copies through a fresh 32 KiB buffer per request (the
// body reaches it wrapped, so no zero-copy path applies); this one copies
// through a pooled buffer instead. Over TLS the body goes through the
// tls.Conn on top, and this changes nothing.
type bodyConn struct{ net.Conn }

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// ReadFrom writes r to the connection through a pooled buffer.
func (c bodyConn) ReadFrom(r io.Reader) (int64, error) {
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	// struct{ io.Writer } hides this method from io.CopyBuffer.
	return io.CopyBuffer(struct{ io.Writer }{c.Conn}, r, *bp)
}

// Get returns up to n bytes of key from off (n < 0: to the end) with one
// ranged GetObject. A range starting at or past the end (416 InvalidRange)
// is an empty result; a missing key is objstore.ErrNotFound.
func (s *Store) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return nil, fmt.Errorf("s3: get %q: %w", key, err)
	}
	if off < 0 {
		return nil, fmt.Errorf("s3: get %q at %d: %w", key, off, objstore.ErrInvalidRange)
	}
	var rng *string
	switch {
	case n == 0:
		// Still one request: a missing key must say ErrNotFound.
		rng = aws.String(fmt.Sprintf("bytes=%d-%d", off, off))
	case n < 0 && off == 0:
		// Whole object: no Range, so an empty object is a plain 200.
	case n < 0:
		rng = aws.String(fmt.Sprintf("bytes=%d-", off))
	default:
		rng = aws.String(fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	}
	var data []byte
	err := s.retry(ctx, "get", key, false, 0, func(actx context.Context, a *attempt) error {
		out, err := s.client.GetObject(actx, &s3.GetObjectInput{
			Bucket: aws.String(s.cfg.Bucket),
			Key:    aws.String(key),
			Range:  rng,
		}, s.opts...)
		if err != nil {
			return err
		}
		defer out.Body.Close()
		length := aws.ToInt64(out.ContentLength)
		a.extend(length)
		body := io.Reader(out.Body)
		if rng != nil && aws.ToString(out.ContentRange) == "" {
			// The server ignored the Range and sent the whole object: cut
			// the range out here.
			if _, err := io.CopyN(io.Discard, body, off); err != nil {
				if errors.Is(err, io.EOF) {
					data = []byte{}
					return nil
				}
				return &bodyError{err}
			}
			length -= off
		}
		if n >= 0 {
			body = io.LimitReader(body, n)
			length = min(length, n)
		}
		buf := bytes.NewBuffer(make([]byte, 0, max(0, min(length, 64<<20))))
		if _, err := buf.ReadFrom(body); err != nil {
			return &bodyError{err}
		}
		data = buf.Bytes()
		return nil
	})
	if err != nil {
		if isStatus(err, http.StatusRequestedRangeNotSatisfiable) {
			return []byte{}, nil
		}
		return nil, err
	}
	return data, nil
}

// Delete removes key with DeleteObject. A missing key is not an error (S3
// answers 204; a 404 from a server that says otherwise is mapped to nil).
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := objstore.ValidateKey(key); err != nil {
		return fmt.Errorf("s3: delete %q: %w", key, err)
	}
	err := s.retry(ctx, "delete", key, false, 0, func(actx context.Context, _ *attempt) error {
		_, err := s.client.DeleteObject(actx, &s3.DeleteObjectInput{
			Bucket: aws.String(s.cfg.Bucket),
			Key:    aws.String(key),
		}, s.opts...)
		return err
	})
	if errors.Is(err, objstore.ErrNotFound) {
		return nil
	}
	return err
}

// List pages through ListObjectsV2 with Prefix, StartAfter and MaxKeys. On
// a directory bucket keys come unordered and startAfter is applied on the
// client side (see the package doc).
func (s *Store) List(ctx context.Context, prefix, startAfter string, limit int) ([]string, error) {
	var keys []string
	var token *string
	for {
		page := maxListPage
		if limit > 0 {
			page = min(page, limit-len(keys))
		}
		in := &s3.ListObjectsV2Input{
			Bucket:            aws.String(s.cfg.Bucket),
			MaxKeys:           aws.Int32(int32(page)),
			ContinuationToken: token,
		}
		if prefix != "" {
			in.Prefix = aws.String(prefix)
		}
		if startAfter != "" && token == nil && !s.dir {
			in.StartAfter = aws.String(startAfter)
		}
		var out *s3.ListObjectsV2Output
		err := s.retry(ctx, "list", prefix, false, 0, func(actx context.Context, _ *attempt) error {
			var err error
			out, err = s.client.ListObjectsV2(actx, in, s.opts...)
			return err
		})
		if err != nil {
			return nil, err
		}
		for _, o := range out.Contents {
			k := aws.ToString(o.Key)
			if s.dir && startAfter != "" && k <= startAfter {
				continue
			}
			keys = append(keys, k)
			if limit > 0 && len(keys) == limit {
				return keys, nil
			}
		}
		if !aws.ToBool(out.IsTruncated) || out.NextContinuationToken == nil {
			return keys, nil
		}
		token = out.NextContinuationToken
	}
}

// CreateBucket creates the Store's bucket, for tests and the CLI. A bucket
// that already exists and is ours is not an error. A directory bucket
// (name base--<zone-id>--x-s3) is created single-zone in that zone.
func (s *Store) CreateBucket(ctx context.Context) error {
	in := &s3.CreateBucketInput{Bucket: aws.String(s.cfg.Bucket)}
	if s.dir {
		zone, ok := directoryBucketZone(s.cfg.Bucket)
		if !ok {
			return fmt.Errorf("s3: create bucket %q: directory bucket names look like base--<zone-id>--x-s3", s.cfg.Bucket)
		}
		in.CreateBucketConfiguration = &types.CreateBucketConfiguration{
			Location: &types.LocationInfo{Type: types.LocationTypeAvailabilityZone, Name: aws.String(zone)},
			Bucket:   &types.BucketInfo{Type: types.BucketTypeDirectory, DataRedundancy: types.DataRedundancySingleAvailabilityZone},
		}
	} else if r := s.client.Options().Region; r != "" && r != "us-east-1" && s.cfg.Endpoint == "" {
		in.CreateBucketConfiguration = &types.CreateBucketConfiguration{
			LocationConstraint: types.BucketLocationConstraint(r),
		}
	}
	err := s.retry(ctx, "create bucket", s.cfg.Bucket, false, 0, func(actx context.Context, _ *attempt) error {
		_, err := s.client.CreateBucket(actx, in, s.opts...)
		return err
	})
	var owned *types.BucketAlreadyOwnedByYou
	if errors.As(err, &owned) {
		return nil
	}
	return err
}

// directoryBucketZone returns the zone id of a directory bucket name
// base--<zone-id>--x-s3.
func directoryBucketZone(bucket string) (string, bool) {
	rest, ok := strings.CutSuffix(bucket, "--x-s3")
	if !ok {
		return "", false
	}
	i := strings.LastIndex(rest, "--")
	if i <= 0 || i+2 == len(rest) {
		return "", false
	}
	return rest[i+2:], true
}

// String describes the store for logs.
func (s *Store) String() string {
	return "s3://" + s.cfg.Bucket + " (max " + strconv.Itoa(s.cfg.MaxAttempts) + " attempts)"
}
