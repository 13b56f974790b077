package gocloud

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"syscall"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/flightlog/flightlog/loglet/open"
	"github.com/flightlog/flightlog/objstore"
)

var _ objstore.Store = (*Store)(nil)

// Store is an objstore.Store over one go-cloud bucket. It is safe for
// concurrent use.
type Store struct {
	bucket *blob.Bucket
	name   string
	owned  bool // opened by Open: Close closes the bucket
}

// Option configures a Store made by New or Open.
type Option func(*Store)

// WithName names the bucket in error messages (Open uses the URL without
// its query; New uses "bucket" unless told).
func WithName(name string) Option { return func(s *Store) { s.name = name } }

// New returns a Store over bucket. The caller keeps ownership of bucket:
// Store.Close does not close it.
func New(bucket *blob.Bucket, opts ...Option) *Store {
	s := &Store{bucket: bucket, name: "bucket"}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Open opens the bucket at urlstr with blob.OpenBucket (every driver this
// package imports is registered: gs://, azblob://, s3://, file://, mem://)
// and checks that it exists. The Store owns the bucket: Close closes it.
// A bucket that does not exist or cannot be reached with the given
// credentials is objstore.ErrPermanent.
func Open(ctx context.Context, urlstr string, opts ...Option) (*Store, error) {
	if ctx == nil {
		return nil, errors.New("gocloud: Open: nil context")
	}
	name := urlstr
	if u, err := url.Parse(urlstr); err == nil {
		u.RawQuery = ""
		u.User = nil
		name = u.String()
	}
	b, err := blob.OpenBucket(ctx, urlstr)
	if err != nil {
		return nil, fmt.Errorf("gocloud: open %s: %w", name, err)
	}
	s := New(b, append([]Option{WithName(name)}, opts...)...)
	s.owned = true
	ok, err := b.IsAccessible(ctx)
	if err == nil && !ok {
		err = fmt.Errorf("gocloud: open %s: the bucket does not exist: %w", s.name, objstore.ErrPermanent)
	} else if err != nil {
		err = s.wrap(ctx, "open", "", err)
	}
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	return s, nil
}

// Schemes returns bucket openers for open.Spec.Schemes, so that open.URL
// (and open.Spec.Open) take gs://bucket and azblob://container URLs:
//
//	spec := open.Spec{Meta: "etcd://...", Standard: []string{"gs://orders-standard"}, Schemes: gocloud.Schemes()}
//
// Each bucket is opened with Open and opts (credentials from the
// environment, as go-cloud's drivers take them) and named by its URL's
// host, the bucket or container: the name recorded in the chain's epoch
// record, so the same bucket must keep the same URL host. The star that
// opens them closes them.
func Schemes(opts ...Option) map[string]open.BucketOpener {
	o := func(ctx context.Context, raw string) (objstore.Store, string, error) {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, "", err
		}
		if u.Host == "" {
			return nil, "", fmt.Errorf("gocloud: no bucket name (the host part): want %s://name", u.Scheme)
		}
		s, err := Open(ctx, raw, opts...)
		if err != nil {
			return nil, "", err
		}
		return s, u.Host, nil
	}
	return map[string]open.BucketOpener{"gs": o, "azblob": o}
}

// Name returns the bucket's name as errors give it (WithName, or the URL
// Open was given without its query).
func (s *Store) Name() string { return s.name }

// Bucket returns the underlying go-cloud bucket.
func (s *Store) Bucket() *blob.Bucket { return s.bucket }

// Close closes the bucket if Open opened it; a Store from New leaves its
// bucket to the caller.
func (s *Store) Close() error {
	if !s.owned {
		return nil
	}
	if err := s.bucket.Close(); err != nil {
		return fmt.Errorf("gocloud: close %s: %w", s.name, err)
	}
	return nil
}

// check rejects what no request should be sent for: a nil or done context
// and an invalid key.
func (s *Store) check(ctx context.Context, op, key string, validate bool) error {
	if ctx == nil {
		return fmt.Errorf("gocloud: %s %q in %s: nil context", op, key, s.name)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("gocloud: %s %q in %s: %w", op, key, s.name, err)
	}
	if validate {
		if err := objstore.ValidateKey(key); err != nil {
			return fmt.Errorf("gocloud: %s %q in %s: %w", op, key, s.name, err)
		}
	}
	return nil
}

// PutIfAbsent writes body to key with WriterOptions.IfNotExist. The
// driver's precondition failure is objstore.ErrExists; a missing bucket or
// refused credentials are objstore.ErrPermanent; anything else is an error
// of unknown outcome. The GCS and Azure clients are told not to retry the
// write, so a precondition failure cannot be the echo of an earlier attempt
// of the same call (see the package documentation for S3).
func (s *Store) PutIfAbsent(ctx context.Context, key string, body []byte) error {
	if err := s.check(ctx, "put", key, true); err != nil {
		return err
	}
	opts := &blob.WriterOptions{
		IfNotExist:                  true,
		ContentType:                 "application/octet-stream",
		DisableContentTypeDetection: true,
		// One request where the driver allows it: bodies are flights,
		// small enough to send whole.
		BufferSize:  max(len(body), 1<<20),
		BeforeWrite: noRetryWrite,
	}
	err := s.bucket.WriteAll(noRetryContext(ctx), key, body, opts)
	if err == nil {
		return nil
	}
	return s.wrap(ctx, "put", key, err)
}

// Get reads up to n bytes of key from off (n < 0: to the end) with one
// ranged read. A range starting at or past the end is an empty result; a
// driver that refuses such a range is asked for the object's size to tell
// it from a missing key.
func (s *Store) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if err := s.check(ctx, "get", key, true); err != nil {
		return nil, err
	}
	if off < 0 {
		return nil, fmt.Errorf("gocloud: get %q in %s: offset %d: %w", key, s.name, off, objstore.ErrInvalidRange)
	}
	length := n
	if n < 0 {
		length = -1
	}
	r, err := s.bucket.NewRangeReader(ctx, key, off, length, nil)
	if err != nil {
		if gcerrors.Code(err) != gcerrors.NotFound && ctx.Err() == nil {
			// Some servers refuse a range that starts past the end (416);
			// the contract makes it an empty read.
			if a, aerr := s.bucket.Attributes(ctx, key); aerr == nil && off >= a.Size {
				return []byte{}, nil
			}
		}
		if err := s.confirmBucket(ctx, "get", key, err); err != nil {
			return nil, err
		}
		return nil, s.wrap(ctx, "get", key, err)
	}
	defer r.Close()
	want := r.Size() - off
	if n >= 0 && n < want {
		want = n
	}
	var buf bytes.Buffer
	if want > 0 {
		buf.Grow(int(want))
	}
	if _, err := io.Copy(&buf, r); err != nil {
		return nil, s.wrap(ctx, "get", key, err)
	}
	out := buf.Bytes()
	if n >= 0 && int64(len(out)) > n {
		// A driver that ignores the length must not hand back more.
		out = out[:n]
	}
	if out == nil {
		out = []byte{}
	}
	return out, nil
}

// Delete removes key; a missing key is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.check(ctx, "delete", key, true); err != nil {
		return err
	}
	err := s.bucket.Delete(ctx, key)
	if err == nil {
		return nil
	}
	if gcerrors.Code(err) == gcerrors.NotFound && ctx.Err() == nil && !bucketMissing(err) && !denied(err) {
		return s.confirmBucket(ctx, "delete", key, err)
	}
	return s.wrap(ctx, "delete", key, err)
}

// List reads the bucket's whole listing of prefix (no delimiter) and
// returns the keys after startAfter, sorted, up to limit. It cannot stop
// early: go-cloud drivers escape characters their service mishandles
// (Azure: '%', '#', '?', '"', '\\' and control characters), and a
// service lists escaped names in its own order, so only the complete
// listing gives the first keys in byte order. A listing therefore costs
// one request per 1000 keys under prefix; List is for operators' tools.
func (s *Store) List(ctx context.Context, prefix, startAfter string, limit int) ([]string, error) {
	if err := s.check(ctx, "list", prefix, false); err != nil {
		return nil, err
	}
	var keys []string
	it := s.bucket.List(&blob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, s.wrap(ctx, "list", prefix, err)
		}
		if obj.IsDir || obj.Key <= startAfter {
			continue
		}
		keys = append(keys, obj.Key)
	}
	slices.Sort(keys)
	if limit > 0 && len(keys) > limit {
		keys = keys[:limit:limit]
	}
	return keys, nil
}

// confirmBucket is nil unless err may hide a missing bucket behind a
// missing object (see ambiguousNotFound) and the bucket is not there, or
// cannot be checked: then it is the error to return instead.
func (s *Store) confirmBucket(ctx context.Context, op, key string, err error) error {
	if !ambiguousNotFound(err) || ctx.Err() != nil {
		return nil
	}
	ok, aerr := s.bucket.IsAccessible(ctx)
	if aerr != nil {
		return s.wrap(ctx, op, key, fmt.Errorf("%w (checking that the bucket exists after: %v)", aerr, err))
	}
	if !ok {
		return fmt.Errorf("gocloud: %s %q in %s: the bucket does not exist: %w", op, key, s.name, objstore.ErrPermanent)
	}
	return nil
}

// wrap turns a driver error into the objstore contract's: the caller's
// context error when ctx is done, objstore.ErrExists for a failed
// precondition on a write, objstore.ErrNotFound for a missing key on a
// read, objstore.ErrPermanent for a missing bucket, refused credentials
// or a rejected request, and otherwise the error itself (ambiguous for a
// write).
func (s *Store) wrap(ctx context.Context, op, key string, err error) error {
	where := fmt.Sprintf("gocloud: %s %q in %s", op, key, s.name)
	if op == "open" || op == "list" {
		where = fmt.Sprintf("gocloud: %s %s", op, s.name)
		if op == "list" {
			where += fmt.Sprintf(" (prefix %q)", key)
		}
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%s: %w (%v)", where, cerr, err)
	}
	if bucketMissing(err) {
		return fmt.Errorf("%s: the bucket does not exist: %w: %v", where, objstore.ErrPermanent, err)
	}
	if denied(err) {
		return fmt.Errorf("%s: access denied: %w: %v", where, objstore.ErrPermanent, err)
	}
	if op == "get" && errors.Is(err, syscall.ENOTDIR) {
		// fileblob: a key below a key that is a file ("a/b/c" under "a/b")
		// cannot exist.
		return fmt.Errorf("%s: %w", where, objstore.ErrNotFound)
	}
	switch gcerrors.Code(err) {
	case gcerrors.FailedPrecondition, gcerrors.AlreadyExists:
		if op == "put" {
			return fmt.Errorf("%s: %w", where, objstore.ErrExists)
		}
	case gcerrors.NotFound:
		if op == "get" {
			return fmt.Errorf("%s: %w", where, objstore.ErrNotFound)
		}
		// A write or a listing cannot miss a key: the bucket is missing.
		return fmt.Errorf("%s: %w: %v", where, objstore.ErrPermanent, err)
	case gcerrors.PermissionDenied, gcerrors.InvalidArgument, gcerrors.Unimplemented:
		return fmt.Errorf("%s: %w: %v", where, objstore.ErrPermanent, err)
	}
	return fmt.Errorf("%s: %w", where, err)
}
