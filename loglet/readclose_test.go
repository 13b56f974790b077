package loglet_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// ReadSession.Close ends a Recv blocked on the tail, on a Star's session
// (woken by releases) as on a Reader's (watching or polling), and every
// Recv after it; the session says which incarnation it reads.
func TestReadSessionClose(t *testing.T) {
	ctx := context.Background()
	meta, bucket := metastore.NewMem(), objstore.NewMem()
	star, err := loglet.Open(ctx, loglet.Config{Star: "s1", Meta: meta, Logger: slog.New(slog.DiscardHandler),
		Standard: loglet.ClassConfig{Stores: []objstore.Store{bucket}}})
	if err != nil {
		t.Fatal(err)
	}
	defer star.Close(ctx)
	info, err := star.CreateStream(ctx, "orders", loglet.StreamOptions{Class: loglet.Standard})
	if err != nil {
		t.Fatal(err)
	}
	reader, err := loglet.NewReader(loglet.ReaderConfig{Meta: meta, Standard: []objstore.Store{bucket}, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for name, open := range map[string]func() (*loglet.ReadSession, error){
		"star":   func() (*loglet.ReadSession, error) { return star.OpenReadSession(ctx, "orders", loglet.ReadQuery{}) },
		"reader": func() (*loglet.ReadSession, error) { return reader.OpenReadSession(ctx, "orders", loglet.ReadQuery{}) },
	} {
		t.Run(name, func(t *testing.T) {
			sess, err := open()
			if err != nil {
				t.Fatal(err)
			}
			if sess.Incarnation() != info.Incarnation {
				t.Errorf("Incarnation() = %q, want %q", sess.Incarnation(), info.Incarnation)
			}
			done := make(chan error, 1)
			go func() {
				_, err := sess.Recv(ctx) // an empty stream: blocks (or, if Close came first, fails at once)
				done <- err
			}()
			if err := sess.Close(); err != nil {
				t.Fatal(err)
			}
			if err := <-done; !errors.Is(err, loglet.ErrClosed) {
				t.Fatalf("blocked Recv after Close: %v, want ErrClosed", err)
			}
			if _, err := sess.Recv(ctx); !errors.Is(err, loglet.ErrClosed) {
				t.Fatalf("Recv after Close: %v, want ErrClosed", err)
			}
			if err := sess.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
		})
	}
}
