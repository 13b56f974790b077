package loglet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/flightlog/flightlog/envelope"
	"github.com/flightlog/flightlog/loglet/internal/chaincore"
)

// Exactly once across retries (docs/design.md, "Producers: exactly once
// across retries"): a batch carries its producer's identity, and the
// stream's leader commits it once however often it is retried.

// ProducerWindow bounds each stream's dedupe window (Config.ProducerWindow).
type ProducerWindow struct {
	// Producers is how many producers a stream remembers (0: 1024); the
	// least recently committed is forgotten first.
	Producers int
	// Age is how long a producer's committed batches are remembered after
	// its last commit (0: 10 minutes). Producer stops retrying a batch
	// this long after its first attempt.
	Age time.Duration
}

// ProducerWindowError: the leader cannot tell whether the batch is
// committed, because it is older than the window remembers: the producer
// has committed more than the window's batches after it (Oldest is the
// oldest remembered), or (Expired) the retry came later than
// ProducerWindow.Age after the first attempt. Nothing was admitted; the
// batch's own outcome stays unknown (it matches ErrOutcomeUnknown): read
// the stream to find out.
type ProducerWindowError struct {
	Stream  string
	ID      string
	Seq     uint64
	Oldest  uint64
	Expired bool
}

func (e *ProducerWindowError) Error() string {
	if e.Expired {
		return fmt.Sprintf("loglet: stream %q: batch %d of producer %q: retried past the dedupe window's age", e.Stream, e.Seq, e.ID)
	}
	return fmt.Sprintf("loglet: stream %q: batch %d of producer %q is past the dedupe window (the oldest the stream remembers is %d)", e.Stream, e.Seq, e.ID, e.Oldest)
}

// Unwrap: the batch's outcome is unknown.
func (e *ProducerWindowError) Unwrap() error { return ErrOutcomeUnknown }

// duplicateAnswer and inFlightAnswer carry the leader's answer to a retry
// from admission to Append; they never reach the caller.
type duplicateAnswer struct{ ack Ack }

func (*duplicateAnswer) Error() string { return "loglet: duplicate" }

type inFlightAnswer struct {
	l *lane
	b *chaincore.Batch
}

func (*inFlightAnswer) Error() string { return "loglet: in flight" }

func isProducerAnswer(err error) bool {
	var d *chaincore.DuplicateError
	var f *chaincore.InFlightError
	var w *chaincore.ProducerWindowError
	return errors.As(err, &d) || errors.As(err, &f) || errors.As(err, &w)
}

// producerAdmitError is the answer to a retry the core did not admit.
func (l *lane) producerAdmitError(stream string, err error) error {
	var d *chaincore.DuplicateError
	var f *chaincore.InFlightError
	var w *chaincore.ProducerWindowError
	switch {
	case errors.As(err, &d):
		return &duplicateAnswer{Ack{Start: d.Ack.Start, End: d.Ack.End, Tail: durableTail(d.Ack.Tail), Duplicate: true}}
	case errors.As(err, &f):
		return &inFlightAnswer{l: l, b: f.Batch}
	case errors.As(err, &w):
		return &ProducerWindowError{Stream: stream, ID: w.ID, Seq: w.Seq, Oldest: w.Oldest}
	}
	return notCommitted(err)
}

// checkProducer validates a batch's producer identity.
func checkProducer(p ProducerID) error {
	if p.ID == "" && p.Seq != 0 {
		return fmt.Errorf("%w: producer sequence %d without a producer ID", ErrInvalidBatch, p.Seq)
	}
	if len(p.ID) > envelope.MaxProducerIDLen {
		return fmt.Errorf("%w: producer ID of %d bytes (max %d)", ErrInvalidBatch, len(p.ID), envelope.MaxProducerIDLen)
	}
	return nil
}

// answered turns a retry's answer into Append's result: a duplicate's
// original range, or the outcome of the attempt still in flight. again
// says the attempt in flight was not committed: the retry may be admitted.
func answered(ctx context.Context, stream string, err error) (ack Ack, _ error, again, ok bool) {
	var d *duplicateAnswer
	var f *inFlightAnswer
	switch {
	case errors.As(err, &d):
		return d.ack, nil, false, true
	case errors.As(err, &f):
		select {
		case <-f.b.Done:
		case <-ctx.Done():
			return Ack{}, outcomeUnknown(fmt.Errorf("loglet: stream %q: gave up waiting for the outcome of the earlier attempt: %w", stream, ctx.Err())), false, true
		}
		ack, err := f.l.outcome(f.b)
		if err == nil {
			ack.Duplicate = true
			return ack, nil, false, true
		}
		if errors.Is(err, ErrNotCommitted) {
			return Ack{}, nil, true, true
		}
		return Ack{}, err, false, true
	}
	return Ack{}, err, false, false
}

// Producer appends to one stream under one producer identity, and
// retries for its caller: an append whose outcome is unknown is sent
// again with the same ProducerID until it is answered, so each batch is
// committed once. It is safe for concurrent use; each Append is its own
// batch.
type Producer struct {
	s      *Star
	stream string
	id     string
	seq    atomic.Uint64
}

// NewProducer returns a producer for stream with identity id ("" for a
// random one). Its batches are numbered from 1. A process that restarts
// and keeps id must go on numbering after its last batch (or take a new
// id): a number already committed is answered as a duplicate.
func (s *Star) NewProducer(stream, id string) *Producer {
	if id == "" {
		var b [16]byte
		rand.Read(b[:])
		id = hex.EncodeToString(b[:])
	}
	return &Producer{s: s, stream: stream, id: id}
}

// ID is the producer's identity.
func (p *Producer) ID() string { return p.id }

// Next returns the identity of the producer's next batch.
func (p *Producer) Next() ProducerID { return ProducerID{ID: p.id, Seq: p.seq.Add(1)} }

// Append writes b as the producer's next batch: AppendAs(ctx, p.Next(), b).
func (p *Producer) Append(ctx context.Context, b Batch) (Ack, error) {
	return p.AppendAs(ctx, p.Next(), b)
}

// Retry pacing of AppendAs.
const (
	producerMinBackoff = 10 * time.Millisecond
	producerMaxBackoff = time.Second
)

// AppendAs writes b under identity id (from Next, kept by the caller to
// retry later) and retries it while its outcome is unknown or its chain is
// halted, until it is acked (Ack.Duplicate when an earlier attempt was),
// definitely not committed, ctx ends, or ProducerWindow.Age has passed
// since this call began (a *ProducerWindowError: the leader would no
// longer recognise it). An error that ends it is the last attempt's:
// ErrOutcomeUnknown after ctx ends means that calling AppendAs again with
// the same id is safe.
func (p *Producer) AppendAs(ctx context.Context, id ProducerID, b Batch) (Ack, error) {
	if ctx == nil {
		return Ack{}, notCommitted(ErrNilContext)
	}
	if id.ID == "" {
		return Ack{}, notCommitted(fmt.Errorf("%w: AppendAs without a producer ID", ErrInvalidBatch))
	}
	b.Producer = id
	age := p.s.cfg.ProducerWindow.Age
	if age <= 0 {
		age = chaincore.DefaultProducerWindow.Age
	}
	deadline := time.Now().Add(age)
	backoff := producerMinBackoff
	for {
		ack, err := p.s.Append(ctx, p.stream, b)
		if err == nil || !retryable(err) || ctx.Err() != nil {
			return ack, err
		}
		if !time.Now().Add(backoff).Before(deadline) {
			return Ack{}, &ProducerWindowError{Stream: p.stream, ID: id.ID, Seq: id.Seq, Expired: true}
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return Ack{}, err
		}
		backoff = min(2*backoff, producerMaxBackoff)
	}
}

// retryable reports whether a Producer sends a batch again after err: its
// outcome is unknown, or its chain halted before admitting it.
func retryable(err error) bool {
	var w *ProducerWindowError
	if errors.As(err, &w) {
		return false
	}
	return errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrChainHalted)
}
