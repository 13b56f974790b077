package flightwatermill

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/loglet/groups"
)

// GroupLog is what a Subscriber reads from: a *loglet.Star (sessions woken
// by the leader's releases) or a *loglet.Reader (sessions that poll), as
// loglet/groups takes it.
type GroupLog = groups.Log

// StreamCreator is implemented by a GroupLog that can create streams (a
// *loglet.Star); SubscribeInitialize uses it.
type StreamCreator interface {
	CreateStream(ctx context.Context, name string, opts loglet.StreamOptions) (loglet.StreamInfo, error)
}

// SubscriberConfig configures a Subscriber.
type SubscriberConfig struct {
	// ConsumerGroup names the group whose offsets the Subscriber reads and
	// commits: 1..groups.MaxNameLen bytes of [A-Za-z0-9._-]. Required.
	ConsumerGroup string
	// Start is where a group that has committed nothing on a topic starts
	// (the zero Position: the oldest record; loglet.TailOffset(0): only
	// messages published from now on).
	Start loglet.Position
	// StreamOptions are the options of the streams SubscribeInitialize
	// creates.
	StreamOptions loglet.StreamOptions
	// MaxRecords bounds the records one read of the log returns (0:
	// loglet's default).
	MaxRecords int
	// NackResendDelay is waited before a nacked message is delivered again
	// (default 0: at once).
	NackResendDelay time.Duration
	// RetryDelay is waited before a subscription tries again after its
	// stream was missing or a read or commit failed (default 100ms). It
	// then resumes from the group's committed offset: what was delivered
	// and not committed comes again.
	RetryDelay time.Duration
	// CommitTimeout bounds the commit of an Ack (default 10s). The commit
	// runs even while the subscription is being closed, so an Ack that
	// came before Close is kept when the metastore answers in time.
	CommitTimeout time.Duration
	// Logger receives the Subscriber's events (default: none).
	Logger watermill.LoggerAdapter
}

// Subscriber subscribes to flightlog streams as a consumer group. Each
// Subscribe call is a subscription of its own (a groups.Session):
// it delivers one message at a time, in stream order, and the next only
// after the previous was acked; an Ack commits the group's offset past it
// before the next is delivered, a Nack delivers it again. See the package
// doc for the delivery guarantees. Safe for concurrent use.
type Subscriber struct {
	log GroupLog
	cfg SubscriberConfig

	mu      sync.Mutex
	closed  bool
	cancels map[int]context.CancelFunc
	nextID  int
	subs    sync.WaitGroup
}

var (
	_ message.Subscriber           = (*Subscriber)(nil)
	_ message.SubscribeInitializer = (*Subscriber)(nil)
)

// NewSubscriber returns a Subscriber over log.
func NewSubscriber(log GroupLog, cfg SubscriberConfig) (*Subscriber, error) {
	if log == nil {
		return nil, errors.New("flightwatermill: NewSubscriber: nil log")
	}
	if err := groups.ValidateName(cfg.ConsumerGroup); err != nil {
		return nil, fmt.Errorf("flightwatermill: SubscriberConfig.ConsumerGroup: %w", err)
	}
	if cfg.RetryDelay <= 0 {
		cfg.RetryDelay = 100 * time.Millisecond
	}
	if cfg.CommitTimeout <= 0 {
		cfg.CommitTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = watermill.NopLogger{}
	}
	return &Subscriber{log: log, cfg: cfg, cancels: map[int]context.CancelFunc{}}, nil
}

// Subscribe starts a subscription to the stream named topic and returns its
// messages. The channel is closed when ctx ends or the Subscriber is
// closed. A topic whose stream does not exist yet is waited for (checked
// every RetryDelay). A group and topic whose offset key cannot exist (see
// groups.ValidateKey) are refused at once.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if err := groups.ValidateKey(s.cfg.ConsumerGroup, topic); err != nil {
		return nil, fmt.Errorf("flightwatermill: subscribe to %q: %w", topic, err)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	id := s.nextID
	s.nextID++
	s.cancels[id] = cancel
	s.subs.Add(1)
	s.mu.Unlock()

	out := make(chan *message.Message)
	go func() {
		defer s.subs.Done()
		defer close(out)
		defer func() {
			cancel()
			s.mu.Lock()
			delete(s.cancels, id)
			s.mu.Unlock()
		}()
		s.run(ctx, topic, out)
	}()
	return out, nil
}

// run delivers topic's messages to out until ctx ends, opening the group's
// session again (from its committed offset) after any failure.
func (s *Subscriber) run(ctx context.Context, topic string, out chan<- *message.Message) {
	fields := watermill.LogFields{"topic": topic, "consumer_group": s.cfg.ConsumerGroup}
	for {
		g, err := groups.Open(ctx, s.log, s.cfg.ConsumerGroup, topic, groups.Options{Start: s.cfg.Start, MaxRecords: s.cfg.MaxRecords})
		if err == nil {
			err = s.consume(ctx, topic, g, out)
			g.Close()
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, loglet.ErrStreamNotFound) {
			s.cfg.Logger.Debug("waiting for the topic's stream", fields.Add(watermill.LogFields{"err": err}))
		} else {
			s.cfg.Logger.Error("subscription failed; resuming from the group's committed offset", err, fields)
		}
		if !wait(ctx, s.cfg.RetryDelay) {
			return
		}
	}
}

// consume delivers the session's records one at a time until ctx ends or
// something fails.
func (s *Subscriber) consume(ctx context.Context, topic string, g *groups.Session, out chan<- *message.Message) error {
	for {
		recs, err := g.Recv(ctx)
		if err != nil {
			return err
		}
		for _, rec := range recs {
			if err := s.deliver(ctx, topic, g, rec, out); err != nil {
				return err
			}
		}
	}
}

// deliver hands rec to the consumer until it is acked, and commits it.
func (s *Subscriber) deliver(ctx context.Context, topic string, g *groups.Session, rec loglet.SequencedRecord, out chan<- *message.Message) error {
	for {
		msg := toMessage(topic, rec)
		mctx, cancel := context.WithCancel(ctx)
		msg.SetContext(mctx)
		select {
		case out <- msg:
		case <-ctx.Done():
			cancel()
			return ctx.Err()
		}
		// An Ack wins over a Close that comes with it: it is committed.
		select {
		case <-msg.Acked():
		case <-msg.Nacked():
		case <-ctx.Done():
			select {
			case <-msg.Acked():
			default:
				cancel()
				return ctx.Err()
			}
		}
		cancel()
		select {
		case <-msg.Acked():
			cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.CommitTimeout)
			err := g.Ack(cctx, rec.Seq)
			ccancel()
			if err != nil {
				return fmt.Errorf("flightwatermill: commit %q at %d for group %q: %w", topic, rec.Seq+1, s.cfg.ConsumerGroup, err)
			}
			return nil
		default: // nacked: deliver it again
			if !wait(ctx, s.cfg.NackResendDelay) {
				return ctx.Err()
			}
		}
	}
}

// toMessage decodes a record as a message.
func toMessage(topic string, rec loglet.SequencedRecord) *message.Message {
	uuid := ""
	md := make(message.Metadata, len(rec.Headers))
	for _, h := range rec.Headers {
		if string(h.Name) == UUIDHeader {
			uuid = string(h.Value)
			continue
		}
		md[string(h.Name)] = string(h.Value)
	}
	if uuid == "" {
		uuid = "flightlog:" + topic + ":" + strconv.FormatUint(rec.Seq, 10)
	}
	msg := message.NewMessage(uuid, rec.Body)
	msg.Metadata = md
	return msg
}

// wait waits d (0: not at all) or until ctx ends; false if ctx ended.
func wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// SubscribeInitialize creates topic's stream (with StreamOptions) if the
// log can create streams and the stream does not exist. On a log that
// cannot (a *loglet.Reader), it does nothing: Subscribe waits for the
// stream's leader to create it.
func (s *Subscriber) SubscribeInitialize(topic string) error {
	c, ok := s.log.(StreamCreator)
	if !ok {
		return nil
	}
	if _, err := c.CreateStream(context.Background(), topic, s.cfg.StreamOptions); err != nil && !errors.Is(err, loglet.ErrStreamExists) {
		return fmt.Errorf("flightwatermill: initialize %q: %w", topic, err)
	}
	return nil
}

// Close ends every subscription, closes their channels and waits for them
// (an Ack being committed is given up to CommitTimeout). Messages delivered
// and not acked are delivered again to the group's next subscription. It
// does not close the log.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	s.closed = true
	for _, cancel := range s.cancels {
		cancel()
	}
	s.mu.Unlock()
	s.subs.Wait()
	return nil
}
