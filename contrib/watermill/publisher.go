package flightwatermill

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/flightlog/flightlog/loglet"
)

// UUIDHeader is the record header that carries a message's UUID.
const UUIDHeader = "_watermill_message_uuid"

// ErrClosed is returned by a Publisher or Subscriber used after Close.
var ErrClosed = errors.New("flightwatermill: closed")

// Appender is what a Publisher writes to: a *loglet.Star.
type Appender interface {
	Append(ctx context.Context, stream string, b loglet.Batch) (loglet.Ack, error)
	CreateStream(ctx context.Context, name string, opts loglet.StreamOptions) (loglet.StreamInfo, error)
}

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// CreateStreams creates a topic's stream, with StreamOptions, when a
	// publish finds it missing (one metastore write per new stream). Off:
	// publishing to a missing stream fails with loglet.ErrStreamNotFound,
	// unless the star itself creates on append (loglet.Config.CreateOnAppend).
	CreateStreams bool
	// StreamOptions are the options of streams created by CreateStreams.
	StreamOptions loglet.StreamOptions
	// MaxBatchRecords bounds the messages one Append carries (default
	// 1000, loglet's default Config.MaxBatchRecords): a Publish of more is
	// appended in several batches, each all or nothing, in order.
	MaxBatchRecords int
	// Logger receives the Publisher's events (default: none).
	Logger watermill.LoggerAdapter
}

// Publisher publishes Watermill messages to flightlog streams, one stream
// per topic. Safe for concurrent use.
type Publisher struct {
	log Appender
	cfg PublisherConfig

	mu       sync.RWMutex // held shared by Publish, exclusively by Close
	closed   bool
	inflight sync.WaitGroup
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher over log.
func NewPublisher(log Appender, cfg PublisherConfig) (*Publisher, error) {
	if log == nil {
		return nil, errors.New("flightwatermill: NewPublisher: nil log")
	}
	if cfg.MaxBatchRecords <= 0 {
		cfg.MaxBatchRecords = 1000
	}
	if cfg.Logger == nil {
		cfg.Logger = watermill.NopLogger{}
	}
	return &Publisher{log: log, cfg: cfg}, nil
}

// Publish appends msgs to the stream named topic, in order, and returns
// once they are durable (acked by the log). The context is the first
// message's (msg.Context()). An error says which messages may not be
// published: those of the batch that failed and every later one; it wraps
// the loglet error, which tells a batch that is definitely not committed
// (loglet.ErrNotCommitted: safe to publish again) from one whose outcome is
// unknown (loglet.ErrOutcomeUnknown: publishing again may duplicate, which
// at-least-once consumers tolerate).
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		return ErrClosed
	}
	p.inflight.Add(1)
	p.mu.RUnlock()
	defer p.inflight.Done()
	if len(msgs) == 0 {
		return nil
	}
	ctx := msgs[0].Context()
	for start := 0; start < len(msgs); start += p.cfg.MaxBatchRecords {
		end := min(start+p.cfg.MaxBatchRecords, len(msgs))
		b := loglet.Batch{Records: make([]loglet.Record, 0, end-start)}
		for _, m := range msgs[start:end] {
			b.Records = append(b.Records, toRecord(m))
		}
		if err := p.append(ctx, topic, b); err != nil {
			return fmt.Errorf("flightwatermill: publish messages %d..%d of %d to %q: %w", start, len(msgs)-1, len(msgs), topic, err)
		}
	}
	return nil
}

func (p *Publisher) append(ctx context.Context, topic string, b loglet.Batch) error {
	_, err := p.log.Append(ctx, topic, b)
	if !errors.Is(err, loglet.ErrStreamNotFound) || !p.cfg.CreateStreams {
		return err
	}
	// Not found is not committed: create the stream and append again.
	if _, cerr := p.log.CreateStream(ctx, topic, p.cfg.StreamOptions); cerr != nil && !errors.Is(cerr, loglet.ErrStreamExists) {
		return fmt.Errorf("create stream: %w", cerr)
	}
	p.cfg.Logger.Debug("created stream on publish", watermill.LogFields{"topic": topic})
	_, err = p.log.Append(ctx, topic, b)
	return err
}

// toRecord encodes a message as a record: payload as body, UUID and
// metadata as headers.
func toRecord(m *message.Message) loglet.Record {
	rec := loglet.Record{Body: m.Payload, Headers: make([]loglet.Header, 0, 1+len(m.Metadata))}
	rec.Headers = append(rec.Headers, loglet.Header{Name: []byte(UUIDHeader), Value: []byte(m.UUID)})
	for k, v := range m.Metadata {
		if k == UUIDHeader {
			continue
		}
		rec.Headers = append(rec.Headers, loglet.Header{Name: []byte(k), Value: []byte(v)})
	}
	return rec
}

// Close waits for the publishes in flight and refuses later ones. It does
// not close the log.
func (p *Publisher) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.inflight.Wait()
	return nil
}
