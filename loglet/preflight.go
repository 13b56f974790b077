package loglet

import (
	"bytes"
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// DefaultPreflightTimeout is Config.PreflightTimeout's default.
const DefaultPreflightTimeout = 5 * time.Second

// preflightPrefix leads the key of every pre-flight probe object. Nothing
// else lives under it: chain slots are under chains/, settled objects under
// settled/, tails snapshots under snapshots/ (docs/design.md, "Key layout"),
// and the probe's key ends in a fresh random nonce, so it cannot collide
// with anything, another process's probe included.
const preflightPrefix = "preflight/"

// PreflightError is Open's refusal to start because a bucket or the
// metastore failed the pre-flight check. It names the one that failed
// and unwraps to the cause (errors.Is(err, objstore.ErrPermanent) for a
// refusal retrying will not cure: a missing bucket, a name the server
// rejects, wrong credentials).
type PreflightError struct {
	// Class and Bucket (the index in the class's set) and Name (its
	// BucketNames entry) say which bucket failed; Bucket is -1 when it is
	// the metastore.
	Class  Class
	Bucket int
	Name   string
	// Step is what failed: "read a missing key", "write", "read back",
	// or, for the metastore, "read".
	Step string
	// Err is the cause.
	Err error
}

// Error names the bucket, the step and the cause.
func (e *PreflightError) Error() string {
	if e.Bucket < 0 {
		return fmt.Sprintf("loglet: pre-flight: the metastore does not answer a %s: %v", e.Step, e.Err)
	}
	return fmt.Sprintf("loglet: pre-flight: %s bucket %d (%q): %s: %v", e.Class, e.Bucket, e.Name, e.Step, e.Err)
}

// Unwrap returns the cause.
func (e *PreflightError) Unwrap() error { return e.Err }

// Preflight runs Open's pre-flight check alone (see Config.PreflightTimeout)
// against cfg's metastore and buckets, leading nothing: a host that opens
// many stars on the same buckets (a fleet member, on every handoff to it)
// checks them once, then opens each star with a negative PreflightTimeout,
// so no open pays the probes' requests on its path. It returns what Open
// would: nil, a configuration error, or errors.Join of *PreflightError.
func Preflight(ctx context.Context, cfg Config) error {
	if ctx == nil {
		return ErrNilContext
	}
	cfg.applyDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	return preflight(ctx, &cfg)
}

// preflight checks, before Open leads anything, that the metastore answers
// and that every bucket of every configured class is there, readable and
// writable, within Config.PreflightTimeout (a negative one skips the check).
// Each bucket gets four requests on a key of its own under preflight/: a GET
// of the (absent) key, which must say not found (S3 answers 403 instead when
// the credentials lack s3:ListBucket, and the fence and the walk would then
// misread every empty slot); a PutIfAbsent of a small body; a GET that must
// return it; a Delete. The metastore gets one read of the Standard chain's
// epoch record. Nothing here needs more than the leader needs anyway, and
// a Reader (which leads nothing) never runs it: read-only credentials
// suffice there.
//
// It fails, with a *PreflightError per culprit, when the metastore does not
// answer within the bound, when a bucket refuses for good
// (objstore.ErrPermanent or objstore.ErrInvalidKey: a missing bucket, a
// name the server rejects, wrong credentials, missing permissions; or a
// read back that differs from what was written), and when so many buckets
// of a class cannot be reached at all (objstore.ErrUnavailable: the S3
// backend's connection refused, or a host that does not resolve) that
// fewer than W are left: such a chain could neither ack nor fence, and
// Open would retry its first read of a bucket for as long as its context
// lasts (for ever under context.Background()). A bucket that merely does
// not answer within the bound (timing out), or an unreachable one that
// still leaves W, is a WARN, not a failure: an outage is the chain's to
// ride out (a K=3, W=2 Express set serves with one zone down), and Open
// does not wait for a call the store does not end.
// A failed Delete is a WARN too (trim and the garbage probe delete; the
// probe object is left behind under preflight/).
func preflight(ctx context.Context, cfg *Config) error {
	bound := cfg.PreflightTimeout
	if bound < 0 {
		return nil
	}
	if bound == 0 {
		bound = DefaultPreflightTimeout
	}
	ctx, cancel := context.WithTimeoutCause(ctx, bound, fmt.Errorf("no answer within the pre-flight bound of %v", bound))
	defer cancel()
	nonce := envelope.NewNonce()
	tag := hex.EncodeToString(nonce[:])

	type result struct {
		class  Class
		bucket int
		err    *PreflightError
		warn   string
	}
	// Buffered for every probe: a probe the store does not end in time
	// finishes (or not) on its own, after preflight has returned.
	out := make(chan result, 1+len(cfg.Standard.Stores)+len(cfg.Express.Stores))
	pending := 1
	go func() {
		_, err := cfg.Meta.Get(ctx, chain.EpochKey(cfg.Star, Standard))
		if errors.Is(err, metastore.ErrNotFound) {
			err = nil
		}
		r := result{bucket: -1}
		if err != nil {
			r.err = &PreflightError{Bucket: -1, Name: "metastore", Step: "read", Err: withCause(ctx, err)}
		}
		out <- r
	}()
	names := map[[2]int]string{}
	for _, c := range chain.Classes() {
		cc := classOf(cfg, c)
		for i, b := range cc.Stores {
			name := fmt.Sprintf("bucket-%d", i)
			if i < len(cc.BucketNames) {
				name = cc.BucketNames[i]
			}
			names[[2]int{int(c), i}] = name
			key := fmt.Sprintf("%s%s/%s/%d-%s", preflightPrefix, cfg.Star, c, i, tag)
			pending++
			go func() {
				step, err, warn := probeBucket(ctx, b, key)
				r := result{class: c, bucket: i, warn: warn}
				if err != nil {
					r.err = &PreflightError{Class: c, Bucket: i, Name: name, Step: step, Err: withCause(ctx, err)}
				}
				out <- r
			}()
		}
	}
	var results []result
	answered := map[[2]int]bool{}
	metaAnswered := false
collect:
	for pending > 0 {
		select {
		case r := <-out:
			pending--
			results = append(results, r)
			if r.bucket < 0 {
				metaAnswered = true
			} else {
				answered[[2]int{int(r.class), r.bucket}] = true
			}
		case <-ctx.Done():
			break collect
		}
	}
	if !metaAnswered {
		results = append(results, result{bucket: -1, err: &PreflightError{Bucket: -1, Name: "metastore", Step: "read", Err: context.Cause(ctx)}})
	}
	for _, c := range chain.Classes() {
		for i := range classOf(cfg, c).Stores {
			if !answered[[2]int{int(c), i}] {
				results = append(results, result{class: c, bucket: i, err: &PreflightError{Class: c, Bucket: i, Name: names[[2]int{int(c), i}], Step: "probe", Err: context.Cause(ctx)}})
			}
		}
	}
	slices.SortFunc(results, func(a, b result) int { return cmp.Or(cmp.Compare(a.class, b.class), cmp.Compare(a.bucket, b.bucket)) })

	// A class whose unreachable buckets leave fewer than W that could
	// answer can neither ack a flight nor decide a slot in a fence: Open
	// would retry its first bucket read for as long as its context lasts.
	var unreachable [2]int
	for _, r := range results {
		if r.bucket >= 0 && r.err != nil && unreachableBucket(r.err.Err) {
			unreachable[r.class]++
		}
	}
	cutOff := func(c Class) bool {
		cc := classOf(cfg, c)
		return len(cc.Stores)-unreachable[c] < cc.W
	}
	var errs []error
	for _, r := range results {
		if r.warn != "" {
			cfg.Logger.Warn("pre-flight: "+r.warn, "class", r.class.String(), "bucket", r.bucket)
		}
		switch {
		case r.err == nil:
		case r.bucket < 0 || refusedForGood(r.err.Err):
			errs = append(errs, r.err)
		case unreachableBucket(r.err.Err) && cutOff(r.class):
			cc := classOf(cfg, r.class)
			r.err.Err = fmt.Errorf("%w (%d of the class's %d buckets cannot be reached: the %d left are fewer than W=%d, so nothing could be acked or fenced)",
				r.err.Err, unreachable[r.class], len(cc.Stores), len(cc.Stores)-unreachable[r.class], cc.W)
			errs = append(errs, r.err)
		default:
			cfg.Logger.Warn("pre-flight: a bucket does not answer; opening anyway (the chain rides out an outage)", "class", r.class.String(), "bucket", r.bucket, "name", r.err.Name, "err", r.err)
		}
	}
	return errors.Join(errs...)
}

// unreachableBucket reports whether a probe's failure says the bucket
// cannot be reached at all (objstore.ErrUnavailable: for the S3 backend, a
// connection that was refused or could not be dialled, nothing sent), as
// opposed to a bucket that did not answer in time.
func unreachableBucket(err error) bool {
	return errors.Is(err, objstore.ErrUnavailable)
}

// probeBucket runs one bucket's four requests; it returns the step that
// failed and why, and a warning for a failed Delete.
func probeBucket(ctx context.Context, b objstore.Store, key string) (step string, err error, warn string) {
	if _, err := b.Get(ctx, key, 0, -1); !errors.Is(err, objstore.ErrNotFound) {
		if err == nil {
			err = errors.New("a key never written reads as present")
		}
		return "read a missing key", err, ""
	}
	body := []byte("flightlog pre-flight probe " + key)
	if err := b.PutIfAbsent(ctx, key, body); err != nil && !errors.Is(err, objstore.ErrExists) {
		return "write", err, ""
	}
	got, err := b.Get(ctx, key, 0, -1)
	if err == nil && !bytes.Equal(got, body) {
		err = fmt.Errorf("%w: read back %d bytes that differ from the %d written", objstore.ErrPermanent, len(got), len(body))
	}
	if err != nil {
		b.Delete(ctx, key)
		return "read back", err, ""
	}
	if err := b.Delete(ctx, key); err != nil {
		return "", nil, fmt.Sprintf("cannot delete the probe object %q (trim and the garbage probe will fail too): %v", key, err)
	}
	return "", nil, ""
}

// refusedForGood reports whether a probe's failure is a misconfiguration
// rather than a bucket that did not answer.
func refusedForGood(err error) bool {
	return errors.Is(err, objstore.ErrPermanent) || errors.Is(err, objstore.ErrInvalidKey)
}

// withCause adds the pre-flight bound to an error the bound caused.
func withCause(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil && !strings.Contains(err.Error(), context.Cause(ctx).Error()) {
		return fmt.Errorf("%w (%v)", err, context.Cause(ctx))
	}
	return err
}

// classOf is a class's configuration.
func classOf(cfg *Config, c Class) *ClassConfig {
	if c == Express {
		return &cfg.Express
	}
	return &cfg.Standard
}
