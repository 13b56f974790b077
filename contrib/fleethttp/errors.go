package fleethttp

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/flightlog/flightlog/loglet"
)

// Codes of the error bodies (wireError.Code, RemoteError.Code).
const (
	CodeInvalid        = "invalid"
	CodeNotFound       = "not_found"
	CodeExists         = "exists"
	CodeFenced         = "fenced"
	CodeTrimmed        = "trimmed"
	CodeSeqMismatch    = "seq_mismatch"
	CodeTooLarge       = "too_large"
	CodeMisdirected    = "misdirected"
	CodeNotLeader      = "not_leader"
	CodeNotCommitted   = "not_committed"
	CodeOutcomeUnknown = "outcome_unknown"
	CodeProducerWindow = "producer_window"
	CodeInternal       = "internal"
)

// classify maps a facade error to its status and body.
func classify(err error) (int, wireError) {
	e := wireError{Error: err.Error()}
	var (
		mismatch *loglet.SeqNumMismatchError
		fenced   *loglet.FencedError
		window   *loglet.ProducerWindowError
		notLead  *loglet.NotLeaderError
	)
	switch {
	case errors.As(err, &mismatch):
		t := toWireTail(mismatch.Tail)
		e.Code, e.Tail = CodeSeqMismatch, &t
		return http.StatusPreconditionFailed, e
	case errors.As(err, &fenced):
		e.Code, e.Fenced = CodeFenced, fenced.Fenced
		return http.StatusConflict, e
	case errors.As(err, &window):
		e.Code = CodeProducerWindow
		e.Producer = &wireWindow{ID: window.ID, Seq: window.Seq, Oldest: window.Oldest, Expired: window.Expired}
		return http.StatusGatewayTimeout, e
	case errors.As(err, &notLead):
		e.Code, e.Star, e.Leader, e.Epoch = CodeNotLeader, notLead.Star, notLead.Leader, notLead.Epoch
		return http.StatusServiceUnavailable, e
	case errors.Is(err, loglet.ErrStreamExists):
		e.Code = CodeExists
		return http.StatusConflict, e
	case errors.Is(err, loglet.ErrInvalidStreamName), errors.Is(err, loglet.ErrInvalidBatch), errors.Is(err, loglet.ErrClassDisabled):
		e.Code = CodeInvalid
		return http.StatusBadRequest, e
	case errors.Is(err, loglet.ErrStreamNotFound):
		e.Code = CodeNotFound
		return http.StatusNotFound, e
	case errors.Is(err, loglet.ErrHistoryTrimmed):
		e.Code = CodeTrimmed
		return http.StatusGone, e
	case errors.Is(err, loglet.ErrOutcomeUnknown):
		e.Code = CodeOutcomeUnknown
		return http.StatusGatewayTimeout, e
	case errors.Is(err, loglet.ErrNotCommitted), errors.Is(err, loglet.ErrClosed):
		e.Code = CodeNotCommitted
		return http.StatusServiceUnavailable, e
	}
	e.Code = CodeInternal
	return http.StatusInternalServerError, e
}

// RemoteError is a failure a member answered. It matches (errors.Is,
// errors.As) the facade's error its code stands for: *loglet.FencedError,
// *loglet.SeqNumMismatchError, *loglet.NotLeaderError,
// *loglet.ProducerWindowError, loglet.ErrStreamNotFound, loglet.ErrStreamExists,
// loglet.ErrInvalidBatch, loglet.ErrHistoryTrimmed, loglet.ErrNotCommitted
// or loglet.ErrOutcomeUnknown (an append's error always matches one of the
// last two, or none for a read's internal error).
type RemoteError struct {
	StatusCode int
	Code       string
	Message    string
	// Member is the member that answered (ServedByHeader), if it said.
	Member string
	// RetryAfter is the 503's Retry-After (0: none).
	RetryAfter time.Duration
	errs       []error
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("fleethttp: %d %s: %s", e.StatusCode, e.Code, e.Message)
}

// Unwrap returns the facade errors e stands for.
func (e *RemoteError) Unwrap() []error { return e.errs }

// remoteError rebuilds the facade's error from a failure's body.
func remoteError(stream string, status int, h http.Header, w wireError) *RemoteError {
	e := &RemoteError{StatusCode: status, Code: w.Code, Message: w.Error, Member: h.Get(ServedByHeader)}
	if s, err := strconv.Atoi(h.Get("Retry-After")); err == nil && s > 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	switch w.Code {
	case CodeInvalid:
		e.errs = []error{loglet.ErrInvalidBatch, loglet.ErrNotCommitted}
	case CodeTooLarge:
		e.errs = []error{loglet.ErrInvalidBatch, loglet.ErrNotCommitted}
	case CodeNotFound:
		e.errs = []error{loglet.ErrStreamNotFound, loglet.ErrNotCommitted}
	case CodeExists:
		e.errs = []error{loglet.ErrStreamExists}
	case CodeFenced:
		e.errs = []error{&loglet.FencedError{Stream: stream, Fenced: w.Fenced}}
	case CodeTrimmed:
		e.errs = []error{loglet.ErrHistoryTrimmed}
	case CodeSeqMismatch:
		m := &loglet.SeqNumMismatchError{Stream: stream}
		if w.Tail != nil {
			m.Tail = w.Tail.tail()
		}
		e.errs = []error{m}
	case CodeNotLeader, CodeMisdirected:
		e.errs = []error{&loglet.NotLeaderError{Stream: stream, Star: w.Star, Leader: w.Leader, Epoch: w.Epoch}}
	case CodeProducerWindow:
		pw := &loglet.ProducerWindowError{Stream: stream}
		if w.Producer != nil {
			pw.ID, pw.Seq, pw.Oldest, pw.Expired = w.Producer.ID, w.Producer.Seq, w.Producer.Oldest, w.Producer.Expired
		}
		e.errs = []error{pw}
	case CodeOutcomeUnknown:
		e.errs = []error{loglet.ErrOutcomeUnknown}
	case CodeNotCommitted:
		e.errs = []error{loglet.ErrNotCommitted}
	default:
		// An unknown code (a newer server) or internal: a 5xx other than
		// 503 may have committed an append.
		if status == http.StatusServiceUnavailable {
			e.errs = []error{loglet.ErrNotCommitted}
		} else if status >= 500 {
			e.errs = []error{loglet.ErrOutcomeUnknown}
		} else {
			e.errs = []error{loglet.ErrNotCommitted}
		}
	}
	return e
}
