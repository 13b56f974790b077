package flightwatermill_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	flightwatermill "github.com/flightlog/flightlog/contrib/watermill"
	"github.com/flightlog/flightlog/internal/hang"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/loglet/groups"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

func newPub(t *testing.T, star *loglet.Star, create bool) *flightwatermill.Publisher {
	t.Helper()
	pub, err := flightwatermill.NewPublisher(star, flightwatermill.PublisherConfig{CreateStreams: create})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	return pub
}

func newSub(t *testing.T, log flightwatermill.GroupLog, group string) *flightwatermill.Subscriber {
	t.Helper()
	sub, err := flightwatermill.NewSubscriber(log, flightwatermill.SubscriberConfig{ConsumerGroup: group, RetryDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	return sub
}

func next(t *testing.T, ch <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatalf("channel closed")
		}
		return m
	case <-hang.After(t):
		t.Fatal("no message")
	}
	return nil
}

func publish(t *testing.T, pub *flightwatermill.Publisher, topic string, ids ...string) {
	t.Helper()
	var msgs []*message.Message
	for _, id := range ids {
		msgs = append(msgs, message.NewMessage(id, []byte("body of "+id)))
	}
	if err := pub.Publish(topic, msgs...); err != nil {
		t.Fatal(err)
	}
}

// A message comes back as it went in: UUID, payload, metadata; and it is
// a record whose headers carry them.
func TestMessageRoundTrip(t *testing.T) {
	ctx := context.Background()
	star := openStar(t)
	pub := newPub(t, star, true)
	in := message.NewMessage("6f1c-uuid", []byte{0, 1, 2, 0xff})
	in.Metadata.Set("trace", "abc")
	in.Metadata.Set("empty", "")
	in.Metadata.Set(flightwatermill.UUIDHeader, "not carried")
	if err := pub.Publish("orders", in); err != nil {
		t.Fatal(err)
	}
	res, err := star.Read(ctx, "orders", loglet.ReadQuery{})
	if err != nil || len(res.Records) != 1 {
		t.Fatalf("read: %v, %d records", err, len(res.Records))
	}
	heads := map[string]string{}
	for _, h := range res.Records[0].Headers {
		heads[string(h.Name)] = string(h.Value)
	}
	if heads[flightwatermill.UUIDHeader] != "6f1c-uuid" || heads["trace"] != "abc" || len(heads) != 3 {
		t.Fatalf("record headers %v", heads)
	}

	msgs, err := newSub(t, star, "g").Subscribe(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	out := next(t, msgs)
	out.Ack()
	if out.UUID != in.UUID || string(out.Payload) != string(in.Payload) || out.Metadata.Get("trace") != "abc" || len(out.Metadata) != 2 {
		t.Fatalf("got %s %q %v, want %s %q trace=abc empty=", out.UUID, out.Payload, out.Metadata, in.UUID, in.Payload)
	}
	if _, ok := out.Metadata["empty"]; !ok {
		t.Fatalf("empty metadata value lost: %v", out.Metadata)
	}
}

// Ack commits; a message delivered and not acked when the subscriber
// closes (a crash between processing and commit) comes again to the
// group's next subscriber; a Nack delivers it again at once.
func TestAtLeastOnce(t *testing.T) {
	ctx := context.Background()
	star := openStar(t)
	publish(t, newPub(t, star, true), "orders", "m0", "m1", "m2")

	sub := newSub(t, star, "billing")
	msgs, err := sub.Subscribe(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	m := next(t, msgs)
	if m.UUID != "m0" {
		t.Fatalf("first message %s, want m0", m.UUID)
	}
	m.Nack()
	if m = next(t, msgs); m.UUID != "m0" {
		t.Fatalf("after a Nack got %s, want m0 again", m.UUID)
	}
	m.Ack()
	if m = next(t, msgs); m.UUID != "m1" {
		t.Fatalf("after the Ack got %s, want m1", m.UUID)
	}
	// m1 was delivered (and say processed) and never acked: the
	// subscriber goes away. m0's commit happened before m1 was delivered.
	if off, err := groups.OffsetsOf(star).Get(ctx, "billing", "orders"); err != nil || off.Next != 1 {
		t.Fatalf("offset after acking m0: %+v, %v; want 1", off, err)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case m, ok := <-msgs:
		if ok {
			t.Fatalf("message %s after Close", m.UUID)
		}
	default:
		t.Fatalf("channel still open after Close returned")
	}
	select {
	case <-m.Context().Done():
	default:
		t.Fatalf("an unacked message's context is not cancelled by Close")
	}

	msgs, err = newSub(t, star, "billing").Subscribe(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"m1", "m2"} {
		m := next(t, msgs)
		if m.UUID != want {
			t.Fatalf("next subscriber of the group got %s, want %s", m.UUID, want)
		}
		m.Ack()
	}
	// Another group reads everything.
	msgs, err = newSub(t, star, "audit").Subscribe(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if m := next(t, msgs); m.UUID != "m0" {
		t.Fatalf("a new group starts at %s, want m0", m.UUID)
	}
}

// A subscription to a stream that does not exist yet waits for it; a
// record not written by the Publisher gets a UUID from its position.
func TestSubscribeBeforeStreamExists(t *testing.T) {
	ctx := context.Background()
	star := openStar(t)
	msgs, err := newSub(t, star, "g").Subscribe(ctx, "later")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := star.CreateStream(ctx, "later", loglet.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := star.Append(ctx, "later", loglet.Batch{Records: []loglet.Record{{Body: []byte("plain")}}}); err != nil {
		t.Fatal(err)
	}
	m := next(t, msgs)
	if m.UUID != "flightlog:later:0" || string(m.Payload) != "plain" {
		t.Fatalf("got %s %q", m.UUID, m.Payload)
	}
	m.Ack()
}

func TestRefusals(t *testing.T) {
	star := openStar(t)
	pub := newPub(t, star, false)
	err := pub.Publish("missing", message.NewMessage("x", nil))
	if !errors.Is(err, loglet.ErrStreamNotFound) || !errors.Is(err, loglet.ErrNotCommitted) {
		t.Fatalf("publish to a missing stream without CreateStreams: %v", err)
	}
	pub.Close()
	if err := pub.Publish("missing", message.NewMessage("x", nil)); !errors.Is(err, flightwatermill.ErrClosed) {
		t.Fatalf("publish after Close: %v", err)
	}
	if _, err := flightwatermill.NewSubscriber(star, flightwatermill.SubscriberConfig{}); !errors.Is(err, groups.ErrInvalidName) {
		t.Fatalf("subscriber without a group: %v", err)
	}
	sub := newSub(t, star, "g")
	if _, err := sub.Subscribe(context.Background(), ""); err == nil {
		t.Fatalf("subscribe to an invalid topic succeeded")
	}
	sub.Close()
	if _, err := sub.Subscribe(context.Background(), "t"); !errors.Is(err, flightwatermill.ErrClosed) {
		t.Fatalf("subscribe after Close: %v", err)
	}
}

// A Subscriber over a Reader (a process that leads nothing) reads what the
// leader's Publisher wrote, and commits the same group offsets.
func TestSubscriberOnReader(t *testing.T) {
	ctx := context.Background()
	meta, bucket := metastore.NewMem(), objstore.NewMem()
	star := openStarOn(t, meta, bucket)
	publish(t, newPub(t, star, true), "orders", "m0", "m1")
	reader, err := loglet.NewReader(loglet.ReaderConfig{Meta: meta, Standard: []objstore.Store{bucket}, PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sub := newSub(t, reader, "billing")
	if err := sub.SubscribeInitialize("orders"); err != nil {
		t.Fatalf("SubscribeInitialize on a Reader: %v", err)
	}
	msgs, err := sub.Subscribe(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if m := next(t, msgs); m.UUID != "m0" {
		t.Fatalf("got %s, want m0", m.UUID)
	} else {
		m.Ack()
	}
	if m := next(t, msgs); m.UUID != "m1" {
		t.Fatalf("got %s, want m1", m.UUID)
	}
	if off, err := groups.OffsetsOf(star).Get(ctx, "billing", "orders"); err != nil || off.Next != 1 {
		t.Fatalf("the leader sees the Reader's commit as %+v, %v; want 1", off, err)
	}
}
