package loglet_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// closeLog is an io.Closer that records its name when closed.
type closeLog struct {
	name string
	log  *[]string
	err  error
}

func (c closeLog) Close() error { *c.log = append(*c.log, c.name); return c.err }

// Config.Closers are the host's: a failed Open closes none, a nil one is
// refused, and Close closes them after the chains, in reverse order,
// joining their errors to its own.
func TestConfigClosers(t *testing.T) {
	ctx := context.Background()
	var closed []string
	boom := errors.New("boom")
	cfg := func() loglet.Config {
		return loglet.Config{Star: "s1", Meta: metastore.NewMem(), Logger: slog.New(slog.DiscardHandler),
			Standard: loglet.ClassConfig{Stores: []objstore.Store{objstore.NewMem()}},
			Closers:  []io.Closer{closeLog{"a", &closed, nil}, closeLog{"b", &closed, boom}}}
	}

	bad := cfg()
	bad.Star = "Not A Star"
	if _, err := loglet.Open(ctx, bad); err == nil {
		t.Fatal("Open with a bad star name succeeded")
	}
	if len(closed) != 0 {
		t.Fatalf("a failed Open closed %v", closed)
	}
	nilOne := cfg()
	nilOne.Closers = append(nilOne.Closers, nil)
	if _, err := loglet.Open(ctx, nilOne); err == nil || !strings.Contains(err.Error(), "Closers[2] is nil") {
		t.Fatalf("Open with a nil closer: %v, want it refused", err)
	}

	s, err := loglet.Open(ctx, cfg())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); !errors.Is(err, boom) {
		t.Fatalf("Close: %v, want the closer's error joined", err)
	}
	if !slices.Equal(closed, []string{"b", "a"}) {
		t.Fatalf("closed %v, want [b a]", closed)
	}
}
