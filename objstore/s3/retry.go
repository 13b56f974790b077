package s3

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/flightlog/flightlog/objstore"
)

// ErrAmbiguous marks a failure after which the outcome of a write is
// unknown: the request may have been applied. It is never wrapped together
// with objstore.ErrExists or objstore.ErrNotFound. Callers resolve it by
// reading the key.
var ErrAmbiguous = errors.New("s3: outcome unknown")

// errAttemptTimeout is the cause of an attempt's context when its own
// deadline (not the caller's) ends it.
var errAttemptTimeout = errors.New("s3: attempt timed out")

// verdict is what one attempt's result means for the call.
type verdict int

const (
	// final: a definite answer (success or a sentinel) or a definite
	// failure that retrying will not fix; stop.
	final verdict = iota
	// refused: the server definitely did not apply the request, and a retry
	// may succeed (409 ConditionalRequestConflict, a failed dial).
	refused
	// unknown: the request may have been applied (5xx, timeout, connection
	// lost after sending), and a retry may succeed.
	unknown
)

// attempt is one attempt's deadline, which a call may extend once it knows
// how many body bytes are coming.
type attempt struct {
	s      *Store
	mu     sync.Mutex
	timer  *time.Timer
	cancel context.CancelCauseFunc
}

// extend resets the attempt's deadline to AttemptTimeout plus the time to
// move n bytes at AttemptBytesPerSecond, from now.
func (a *attempt) extend(n int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.timer != nil {
		a.timer.Reset(a.s.attemptTimeout(n))
	}
}

func (a *attempt) stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.timer.Stop()
	a.timer = nil
	a.cancel(context.Canceled)
}

// attemptTimeout is the deadline of an attempt that moves n body bytes.
func (s *Store) attemptTimeout(n int64) time.Duration {
	return s.cfg.AttemptTimeout + time.Duration(float64(max(n, 0))/float64(s.cfg.AttemptBytesPerSecond)*float64(time.Second))
}

// retry runs fn up to MaxAttempts times. write says the request creates
// state (PutIfAbsent), so that a 412 after an attempt of unknown outcome is
// reported as ErrAmbiguous rather than ErrExists. size is the request body's
// length, for the attempt deadline.
func (s *Store) retry(ctx context.Context, op, key string, write bool, size int64,
	fn func(ctx context.Context, a *attempt) error) error {
	var (
		mayHaveApplied bool
		lastErr        error
		attempts       int
	)
	for attempts < s.cfg.MaxAttempts {
		if attempts > 0 {
			if err := s.backoff(ctx, attempts); err != nil {
				break
			}
		}
		if ctx.Err() != nil {
			break // nothing more is sent for a caller who gave up
		}
		attempts++
		actx, cancel := context.WithCancelCause(ctx)
		a := &attempt{s: s, cancel: cancel}
		a.timer = time.AfterFunc(s.attemptTimeout(size), func() { cancel(errAttemptTimeout) })
		err := fn(actx, a)
		timedOut := errors.Is(context.Cause(actx), errAttemptTimeout)
		a.stop()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			// The caller gave up; whatever this attempt sent is in flight.
			lastErr = fmt.Errorf("%w (%w)", ctx.Err(), err)
			mayHaveApplied = true
			break
		}
		v, mapped := classify(err, timedOut)
		if timedOut && v == unknown {
			// Not %w: the SDK's error wraps context.Canceled from the
			// attempt's own context, which must not pass for the caller's.
			mapped = fmt.Errorf("%w after %v (%v)", errAttemptTimeout, s.attemptTimeout(size).Round(time.Millisecond), err)
		}
		lastErr = mapped
		if v == final {
			if write && mayHaveApplied && errors.Is(mapped, objstore.ErrExists) {
				// Our own earlier attempt may be the object that is there.
				return fmt.Errorf("s3: %s %q: %w: precondition failed after an earlier attempt of this call may have created the object (attempt %d of %d): %w",
					op, key, ErrAmbiguous, attempts, s.cfg.MaxAttempts, err)
			}
			if write && mayHaveApplied && errors.Is(mapped, objstore.ErrPermanent) {
				return fmt.Errorf("s3: %s %q: %w: refused for good after an earlier attempt of this call may have created the object (attempt %d of %d): %w",
					op, key, ErrAmbiguous, attempts, s.cfg.MaxAttempts, mapped)
			}
			return fmt.Errorf("s3: %s %q: %w", op, key, mapped)
		}
		if v == unknown {
			mayHaveApplied = true
		}
	}
	if lastErr == nil {
		// The caller's context ended before the first attempt: nothing was
		// sent.
		return fmt.Errorf("s3: %s %q: %w", op, key, ctx.Err())
	}
	if ctx.Err() != nil && !errors.Is(lastErr, ctx.Err()) {
		// The caller gave up during a backoff.
		lastErr = fmt.Errorf("%w (last attempt: %w)", ctx.Err(), lastErr)
	}
	if write && mayHaveApplied {
		return fmt.Errorf("s3: %s %q: %w after %d attempts: %w", op, key, ErrAmbiguous, attempts, lastErr)
	}
	return fmt.Errorf("s3: %s %q: gave up after %d attempts: %w", op, key, attempts, lastErr)
}

// backoff sleeps before retry number i (from 1), honouring ctx.
func (s *Store) backoff(ctx context.Context, i int) error {
	ceil := s.cfg.BackoffBase << min(i, 20)
	if ceil > s.cfg.BackoffMax || ceil <= 0 {
		ceil = s.cfg.BackoffMax
	}
	if ceil <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(rand.N(ceil))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// classify maps one attempt's error to a verdict and the error to report:
// sentinels for the definite answers, ErrUnavailable for a failed dial.
func classify(err error, timedOut bool) (verdict, error) {
	var se *smithyhttp.RequestSendError
	var re *smithyhttp.ResponseError
	if !errors.As(err, &se) && errors.As(err, &re) && re.HTTPStatusCode() != 0 {
		code := ""
		var ae smithy.APIError
		if errors.As(err, &ae) {
			code = ae.ErrorCode()
		}
		status := re.HTTPStatusCode()
		switch {
		case status == http.StatusPreconditionFailed:
			return final, fmt.Errorf("%w (%w)", objstore.ErrExists, err)
		case status == http.StatusNotFound && missingKeyCodes[code]:
			return final, fmt.Errorf("%w (%w)", objstore.ErrNotFound, err)
		case status == http.StatusConflict && code == "ConditionalRequestConflict":
			return refused, err
		case permanent(status, code):
			return final, fmt.Errorf("%w (%w)", objstore.ErrPermanent, err)
		case status == http.StatusTooManyRequests || status >= 500:
			return unknown, err
		default:
			// Any other answer (400, 416, another 409) is definite and
			// will not change by retrying this request.
			return final, err
		}
	}
	var be *bodyError
	if timedOut || errors.As(err, &be) {
		return unknown, err
	}
	if se == nil {
		// Not a transport failure: the SDK rejected the request before
		// sending it (validation, signing, endpoint resolution).
		return final, err
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return refused, fmt.Errorf("%w: nothing was sent (%w)", objstore.ErrUnavailable, err)
	}
	return unknown, err
}

// missingKeyCodes are the codes of a 404 that says the key holds no
// object ("" for an answer without a body). Any other 404 (NoSuchBucket,
// versitygw's XAdminUserNotFound for an unknown access key) is not about
// the key, and reading it as "absent" would let a misconfigured reader or
// fencer conclude that a slot is empty.
var missingKeyCodes = map[string]bool{"": true, "NoSuchKey": true, "NotFound": true}

// permanentCodes are S3 error codes that retrying the same request will
// not cure: the bucket, the credentials or the request is wrong.
var permanentCodes = map[string]bool{
	"NoSuchBucket":                 true,
	"InvalidBucketName":            true,
	"AccessDenied":                 true,
	"AllAccessDisabled":            true,
	"AccountProblem":               true,
	"InvalidAccessKeyId":           true,
	"SignatureDoesNotMatch":        true,
	"AuthorizationHeaderMalformed": true, // e.g. the wrong region
	"PermanentRedirect":            true, // the bucket lives in another region
	"InvalidRequest":               true,
	"InvalidArgument":              true,
	"NotImplemented":               true, // e.g. no conditional writes
	"MethodNotAllowed":             true,
	"XAdminUserNotFound":           true, // versitygw: unknown access key
}

// transientAuthCodes are 401/403 answers a retry can cure: the SDK
// refreshes expiring credentials and corrects its clock skew.
var transientAuthCodes = map[string]bool{
	"ExpiredToken":         true,
	"TokenRefreshRequired": true,
	"RequestTimeTooSkewed": true,
	"RequestExpired":       true,
	"SlowDown":             true,
}

// permanent reports whether an answer is a refusal retrying will not
// cure (objstore.ErrPermanent): a code known to be permanent, any other
// 404 than a missing key, and 401/403 unless the code says a retry may
// pass.
func permanent(status int, code string) bool {
	switch {
	case permanentCodes[code]:
		return true
	case status == http.StatusNotFound:
		return !missingKeyCodes[code]
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return !transientAuthCodes[code]
	}
	return false
}

// bodyError is a failure while reading a response body: the request was
// sent and answered, the answer was lost on the way.
type bodyError struct{ err error }

func (e *bodyError) Error() string { return "reading response body: " + e.err.Error() }
func (e *bodyError) Unwrap() error { return e.err }

// isStatus reports whether err carries an HTTP response with the status.
func isStatus(err error, status int) bool {
	var re *smithyhttp.ResponseError
	return errors.As(err, &re) && re.HTTPStatusCode() == status
}
