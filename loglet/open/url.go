package open

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/metastore/bbolt"
	"github.com/flightlog/flightlog/metastore/etcd"
	"github.com/flightlog/flightlog/objstore"
	"github.com/flightlog/flightlog/objstore/file"
	"github.com/flightlog/flightlog/objstore/s3"
)

// Spec names a star's backends by URL, in go-cloud's convention: the
// scheme picks the backend, the host (or path) names the bucket or file,
// and the query holds the backend's options. Unknown schemes and query
// keys are errors, never ignored.
//
// Object stores, one URL per bucket:
//
//	s3://bucket?region=eu-west-1&endpoint=http://127.0.0.1:7070&path_style=true&create=true
//	file:///abs/dir/standard       a local directory (absolute path; created if absent)
//	mem://name                     an in-memory bucket (lost at exit; tests and trials)
//
// Other bucket schemes are opened by Spec.Schemes: contrib/gocloud's
// Schemes() adds gs://bucket and azblob://container.
//
// s3's path_style defaults to true when endpoint is set and the bucket is
// not a directory bucket (name ending in "--x-s3"), false otherwise;
// create=true creates the bucket if absent (objstore/s3's CreateBucket).
//
// Metastores:
//
//	bbolt:///abs/dir/meta.db?lock_timeout=1s   a bbolt file (one process at a time)
//	etcd://host1:2379,host2:2379/prefix/?max_txn_ops=128&max_request_bytes=1572864&tls=false
//	mem://                                     an in-memory metastore
//
// etcd's endpoints are dialled over plain http, or with tls=true over https
// (the system's roots, the endpoint's host as the server name); the path,
// without its leading '/', is the key prefix (etcd.Config.Prefix).
//
// A bucket's name is its URL's host (s3, mem) or the last element of its
// path (file), so file:///data/standard is the bucket Dir names
// "standard". These names are recorded in each chain's epoch record
// (loglet.ClassConfig.BucketNames) and are fixed forever: the same bucket
// must be given under the same name on every open, or loglet.Open refuses
// the chain. Moving a bucket to another endpoint or region keeps its name;
// renaming it does not.
type Spec struct {
	// Meta is the metastore's URL. Required.
	Meta string
	// Standard and Express are the buckets of each class, in order: one
	// for Standard (K=1) and three for Express (K=3, W=2), say. A class
	// with none is not configured.
	Standard, Express []string
	// S3AccessKey and S3SecretKey are static credentials for every s3://
	// bucket; credentials stay out of URLs, which end up in logs. Empty:
	// the SDK's default chain (environment, shared files, instance role).
	S3AccessKey, S3SecretKey string
	// Schemes opens buckets of schemes this package does not know, by
	// scheme: contrib/gocloud's Schemes() adds gs:// and azblob://. A
	// scheme this package opens itself (s3, file, mem) may not be given.
	Schemes map[string]BucketOpener
}

// A BucketOpener opens the bucket a URL of its scheme names (the URL as
// given, query included) and returns it with the bucket's name: the name
// goes into each chain's epoch record (loglet.ClassConfig.BucketNames) and
// must be the same on every open. A store that is an io.Closer is closed
// with the Backends (or the Star that owns them).
type BucketOpener func(ctx context.Context, rawURL string) (objstore.Store, string, error)

// builtinBuckets are the bucket schemes openBucket knows.
var builtinBuckets = []string{"s3", "file", "mem"}

// Backends are the stores a Spec opened. Close closes what needs closing
// (the metastore's file or client); the object stores hold nothing open.
type Backends struct {
	Meta                        metastore.Store
	Standard, Express           []objstore.Store
	StandardNames, ExpressNames []string

	closers []io.Closer
}

// Close closes the metastore's file or client. Once a Star owns the
// Backends (URL's Star), the Star's Close does it instead.
func (b *Backends) Close() error {
	var errs []error
	for i := len(b.closers) - 1; i >= 0; i-- {
		errs = append(errs, b.closers[i].Close())
	}
	b.closers = nil
	return errors.Join(errs...)
}

// Open opens every store the Spec names. On an error nothing is left
// open: a metastore dialled before a bad bucket URL is closed again.
func (s Spec) Open(ctx context.Context) (*Backends, error) {
	if ctx == nil {
		return nil, loglet.ErrNilContext
	}
	if s.Meta == "" {
		return nil, errors.New("open: Spec.Meta is empty: want a metastore URL (bbolt:///path/meta.db, etcd://host:port/prefix, mem://)")
	}
	for scheme, o := range s.Schemes {
		if slices.Contains(builtinBuckets, scheme) {
			return nil, fmt.Errorf("open: Spec.Schemes names %q, which this package opens itself", scheme)
		}
		if o == nil {
			return nil, fmt.Errorf("open: Spec.Schemes[%q] is nil", scheme)
		}
	}
	// Parse everything before dialling anything.
	metaU, err := parseURL("Meta", s.Meta)
	if err != nil {
		return nil, err
	}
	var buckets [2][]specURL
	for c, urls := range [2][]string{s.Standard, s.Express} {
		field := [2]string{"Standard", "Express"}[c]
		for i, raw := range urls {
			u, err := parseURL(fmt.Sprintf("%s[%d]", field, i), raw)
			if err != nil {
				return nil, err
			}
			buckets[c] = append(buckets[c], u)
		}
	}
	b := &Backends{}
	ok := false
	defer func() {
		if !ok {
			b.Close()
		}
	}()
	if b.Meta, err = s.openMeta(metaU); err != nil {
		return nil, err
	}
	if c, ok := b.Meta.(io.Closer); ok {
		b.closers = append(b.closers, c)
	}
	for c, us := range buckets {
		for i, u := range us {
			st, name, err := s.openBucket(ctx, fmt.Sprintf("%s[%d]", [2]string{"Standard", "Express"}[c], i), u)
			if err != nil {
				return nil, err
			}
			if c, ok := st.(io.Closer); ok {
				b.closers = append(b.closers, c)
			}
			if c == 0 {
				b.Standard, b.StandardNames = append(b.Standard, st), append(b.StandardNames, name)
			} else {
				b.Express, b.ExpressNames = append(b.Express, st), append(b.ExpressNames, name)
			}
		}
	}
	ok = true
	return b, nil
}

// URL opens the star the Spec names, with cfg as for loglet.Open: Meta and
// both classes' Stores and BucketNames left unset (URL supplies them and
// refuses a cfg that sets them); cfg.Star defaults to DefaultStar. The
// returned Star owns the metastore (its Close closes it); a failed URL
// leaves nothing open.
func URL(ctx context.Context, cfg loglet.Config, spec Spec) (*loglet.Star, error) {
	if ctx == nil {
		return nil, loglet.ErrNilContext
	}
	if err := refuseBackends("URL", cfg); err != nil {
		return nil, err
	}
	b, err := spec.Open(ctx)
	if err != nil {
		return nil, err
	}
	return b.Star(ctx, cfg)
}

// Star opens a star on b with cfg as URL takes it. The Star takes b over:
// its Close closes b's metastore, and a failed Star closes b.
func (b *Backends) Star(ctx context.Context, cfg loglet.Config) (*loglet.Star, error) {
	if err := refuseBackends("Backends.Star", cfg); err != nil {
		b.Close()
		return nil, err
	}
	if cfg.Star == "" {
		cfg.Star = DefaultStar
	}
	cfg.Meta = b.Meta
	cfg.Standard.Stores, cfg.Standard.BucketNames = b.Standard, b.StandardNames
	cfg.Express.Stores, cfg.Express.BucketNames = b.Express, b.ExpressNames
	cfg.Closers = append(append([]io.Closer(nil), cfg.Closers...), b.closers...)
	s, err := loglet.Open(ctx, cfg)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("open: star %q: %w", cfg.Star, err)
	}
	b.closers = nil // the Star's now
	return s, nil
}

// refuseBackends refuses a Config that sets what the caller supplies.
func refuseBackends(who string, cfg loglet.Config) error {
	var set []string
	if cfg.Meta != nil {
		set = append(set, "Meta")
	}
	for _, c := range []struct {
		name string
		cc   *loglet.ClassConfig
	}{{"Standard", &cfg.Standard}, {"Express", &cfg.Express}} {
		if len(c.cc.Stores) > 0 {
			set = append(set, c.name+".Stores")
		}
		if len(c.cc.BucketNames) > 0 {
			set = append(set, c.name+".BucketNames")
		}
	}
	if len(set) > 0 {
		return fmt.Errorf("open: %s: Config sets %v, which %s supplies (use loglet.Open for backends of your own)", who, set, who)
	}
	return nil
}

// specURL is a parsed URL of a Spec that prints as it was given (url.URL's
// String would show "s3://?region=x" as "s3:?region=x").
type specURL struct {
	*url.URL
	raw string
}

func (u specURL) String() string { return u.raw }

// parseURL parses one URL of a Spec; field names it in errors.
func parseURL(field, raw string) (specURL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return specURL{}, fmt.Errorf("open: %s %q: %w", field, raw, err)
	}
	if u.Scheme == "" {
		return specURL{}, fmt.Errorf("open: %s %q: no scheme (want e.g. s3://bucket, file:///abs/dir, bbolt:///abs/meta.db, etcd://host:port/prefix, mem://)", field, raw)
	}
	if u.User != nil {
		return specURL{}, fmt.Errorf("open: %s %q: credentials in the URL (user info): pass them in Spec.S3AccessKey/S3SecretKey or the environment, not in a URL", field, redact(u))
	}
	if u.Fragment != "" {
		return specURL{}, fmt.Errorf("open: %s %q: fragment %q means nothing here", field, raw, u.Fragment)
	}
	return specURL{u, raw}, nil
}

func redact(u *url.URL) string {
	c := *u
	c.User = nil
	return c.String()
}

// query reads a URL's query values, refusing repeats and keys no reader
// took.
type query struct {
	field, raw string
	v          url.Values
	err        error
}

func newQuery(field string, u specURL) *query {
	q := &query{field: field, raw: u.String()}
	q.v, q.err = url.ParseQuery(u.RawQuery)
	if q.err != nil {
		q.err = fmt.Errorf("open: %s %q: query: %w", field, q.raw, q.err)
	}
	return q
}

func (q *query) str(key string) string {
	vs, ok := q.v[key]
	delete(q.v, key)
	if !ok || q.err != nil {
		return ""
	}
	if len(vs) > 1 {
		q.err = fmt.Errorf("open: %s %q: query %s given %d times", q.field, q.raw, key, len(vs))
	}
	return vs[0]
}

func (q *query) parse(key, want string, parse func(string) error) {
	s := q.str(key)
	if s == "" || q.err != nil {
		return
	}
	if err := parse(s); err != nil {
		q.err = fmt.Errorf("open: %s %q: query %s=%q: want %s", q.field, q.raw, key, s, want)
	}
}

func (q *query) boolean(key string, dst *bool) {
	q.parse(key, "true or false", func(s string) (err error) { *dst, err = strconv.ParseBool(s); return })
}

func (q *query) positive(key string, dst *int) {
	q.parse(key, "a positive integer", func(s string) error {
		n, err := strconv.Atoi(s)
		if err == nil && n <= 0 {
			err = errors.New("not positive")
		}
		*dst = n
		return err
	})
}

func (q *query) duration(key string, dst *time.Duration) {
	q.parse(key, "a positive duration such as 1s", func(s string) error {
		d, err := time.ParseDuration(s)
		if err == nil && d <= 0 {
			err = errors.New("not positive")
		}
		*dst = d
		return err
	})
}

// done reports the first error, or a key nothing read.
func (q *query) done() error {
	if q.err != nil {
		return q.err
	}
	for k := range q.v {
		return fmt.Errorf("open: %s %q: unknown query key %q", q.field, q.raw, k)
	}
	return nil
}

func (s Spec) openMeta(u specURL) (metastore.Store, error) {
	const field = "Meta"
	q := newQuery(field, u)
	switch u.Scheme {
	case "mem":
		if err := q.done(); err != nil {
			return nil, err
		}
		return metastore.NewMem(), nil
	case "bbolt":
		p, err := absPath(field, u)
		if err != nil {
			return nil, err
		}
		var opts bbolt.Options
		q.duration("lock_timeout", &opts.LockTimeout)
		if err := q.done(); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, fmt.Errorf("open: Meta %q: %w", u, err)
		}
		st, err := bbolt.Open(p, &opts)
		if errors.Is(err, bbolt.ErrInUse) {
			return nil, fmt.Errorf("open: Meta %q: %w (bbolt allows one process at a time: is another process, or the flightlog CLI, using this file?)", u, err)
		}
		if err != nil {
			return nil, fmt.Errorf("open: Meta %q: %w", u, err)
		}
		return st, nil
	case "etcd":
		if u.Host == "" {
			return nil, fmt.Errorf("open: Meta %q: no endpoints (the host part): want etcd://host:port[,host:port...]/prefix", u)
		}
		cfg := etcd.Config{Prefix: strings.TrimPrefix(u.Path, "/")}
		var useTLS bool
		q.boolean("tls", &useTLS)
		scheme := "http://"
		if useTLS {
			scheme = "https://"
		}
		for _, h := range strings.Split(u.Host, ",") {
			if h == "" || strings.HasPrefix(h, ":") {
				return nil, fmt.Errorf("open: Meta %q: endpoint %q in the host part: want host:port", u, h)
			}
			cfg.Endpoints = append(cfg.Endpoints, scheme+h)
		}
		q.positive("max_txn_ops", &cfg.MaxCommitOps)
		q.positive("max_request_bytes", &cfg.MaxRequestBytes)
		q.duration("dial_timeout", &cfg.DialTimeout)
		if err := q.done(); err != nil {
			return nil, err
		}
		st, err := etcd.New(cfg)
		if err != nil {
			return nil, fmt.Errorf("open: Meta %q: %w", u, err)
		}
		return st, nil
	}
	return nil, fmt.Errorf("open: Meta %q: unknown scheme %q (want bbolt, etcd or mem)", u, u.Scheme)
}

func (s Spec) openBucket(ctx context.Context, field string, u specURL) (objstore.Store, string, error) {
	q := newQuery(field, u)
	switch u.Scheme {
	case "mem":
		if u.Host == "" {
			return nil, "", fmt.Errorf("open: %s %q: missing bucket name (the host part): want mem://name", field, u)
		}
		if err := q.done(); err != nil {
			return nil, "", err
		}
		return objstore.NewMem(), u.Host, nil
	case "file":
		p, err := absPath(field, u)
		if err != nil {
			return nil, "", err
		}
		if err := q.done(); err != nil {
			return nil, "", err
		}
		name := path.Base(p)
		if name == "/" || name == "." {
			return nil, "", fmt.Errorf("open: %s %q: the path names no directory to use as the bucket", field, u)
		}
		st, err := file.Open(p)
		if err != nil {
			return nil, "", fmt.Errorf("open: %s %q: %w", field, u, err)
		}
		return st, name, nil
	case "s3":
		if u.Host == "" {
			return nil, "", fmt.Errorf("open: %s %q: missing bucket name (the host part): want s3://bucket?region=...", field, u)
		}
		if u.Path != "" && u.Path != "/" {
			return nil, "", fmt.Errorf("open: %s %q: path %q: a bucket URL names the whole bucket (no key prefix)", field, u, u.Path)
		}
		cfg := s3.Config{Bucket: u.Host, AccessKey: s.S3AccessKey, SecretKey: s.S3SecretKey}
		cfg.Region = q.str("region")
		cfg.Endpoint = q.str("endpoint")
		if cfg.Endpoint != "" {
			if e, err := url.Parse(cfg.Endpoint); err != nil || e.Scheme == "" || e.Host == "" {
				return nil, "", fmt.Errorf("open: %s %q: query endpoint=%q: want a URL such as http://127.0.0.1:7070", field, u, cfg.Endpoint)
			}
		}
		cfg.UsePathStyle = cfg.Endpoint != "" && !s3.DirectoryBucket(cfg.Bucket)
		q.boolean("path_style", &cfg.UsePathStyle)
		var create bool
		q.boolean("create", &create)
		if err := q.done(); err != nil {
			return nil, "", err
		}
		st, err := s3.New(ctx, cfg)
		if err != nil {
			return nil, "", fmt.Errorf("open: %s %q: %w", field, u, err)
		}
		if create {
			if err := st.CreateBucket(ctx); err != nil {
				return nil, "", fmt.Errorf("open: %s %q: create: %w", field, u, err)
			}
		}
		return st, cfg.Bucket, nil
	}
	if open := s.Schemes[u.Scheme]; open != nil {
		st, name, err := open(ctx, u.raw)
		if err != nil {
			return nil, "", fmt.Errorf("open: %s %q: %w", field, u, err)
		}
		if st == nil || name == "" {
			if c, ok := st.(io.Closer); ok {
				c.Close()
			}
			return nil, "", fmt.Errorf("open: %s %q: the %s opener returned no store or no bucket name", field, u, u.Scheme)
		}
		return st, name, nil
	}
	want := append(slices.Clone(builtinBuckets), slices.Sorted(maps.Keys(s.Schemes))...)
	return nil, "", fmt.Errorf("open: %s %q: unknown scheme %q (want one of %s; contrib/gocloud's Schemes adds gs and azblob)", field, u, u.Scheme, strings.Join(want, ", "))
}

// absPath is a file or bbolt URL's path, which must be absolute: a host
// part (file://data/x) is the usual slip for a relative path.
func absPath(field string, u specURL) (string, error) {
	if u.Opaque != "" || (u.Host != "" && u.Host != "localhost") || !strings.HasPrefix(u.Path, "/") {
		return "", fmt.Errorf("open: %s %q: the path must be absolute, as in %s:///abs/path (a relative path such as %s://data/x puts \"data\" in the host part)", field, u, u.Scheme, u.Scheme)
	}
	return u.Path, nil
}
