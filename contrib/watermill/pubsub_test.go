package flightwatermill_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	flightwatermill "github.com/flightlog/flightlog/contrib/watermill"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// openStar opens a star over new in-memory stores, closed at the end of t.
func openStar(t *testing.T) *loglet.Star {
	t.Helper()
	return openStarOn(t, metastore.NewMem(), objstore.NewMem())
}

// openStarOn opens a star over meta and bucket, closed at the end of t.
func openStarOn(t *testing.T, meta metastore.Store, bucket objstore.Store) *loglet.Star {
	t.Helper()
	star, err := loglet.Open(context.Background(), loglet.Config{
		Star: "wm", Meta: meta, Logger: slog.New(slog.DiscardHandler),
		AbsorbInterval: 5 * time.Millisecond,
		// A short flush deadline: the suite publishes one message per
		// Publish, mostly one after another.
		Standard: loglet.ClassConfig{Stores: []objstore.Store{bucket}, FlushDeadline: time.Millisecond},
	})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if err := star.Close(context.Background()); err != nil {
			t.Errorf("close star: %v", err)
		}
	})
	return star
}

// features are what the adapter declares; the package doc says why.
var features = tests.Features{
	ConsumerGroups:                      true,
	ExactlyOnceDelivery:                 false,
	GuaranteedOrder:                     true,
	GuaranteedOrderWithSingleSubscriber: false,
	Persistent:                          true,
	NewSubscriberReceivesOldMessages:    false,
	RequireSingleInstance:               false,
}

// TestPubSub runs Watermill's own pub/sub suite. Every Publisher and
// Subscriber the suite makes (many per test) is a new one over the same
// star, as the instances of a service share its log; the plain
// constructor's subscribers share one consumer group.
func TestPubSub(t *testing.T) {
	star := openStar(t)
	newPubSub := func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
		pub, err := flightwatermill.NewPublisher(star, flightwatermill.PublisherConfig{CreateStreams: true})
		if err != nil {
			t.Fatal(err)
		}
		sub, err := flightwatermill.NewSubscriber(star, flightwatermill.SubscriberConfig{ConsumerGroup: group})
		if err != nil {
			t.Fatal(err)
		}
		return pub, sub
	}
	tests.TestPubSub(t, features,
		func(t *testing.T) (message.Publisher, message.Subscriber) { return newPubSub(t, "watermill-test") },
		newPubSub,
	)
}
