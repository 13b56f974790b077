package peerbench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/loglet/open"
)

// A side is one system under test, opened fresh in a directory of its own.
type side interface {
	// producer returns producer i's appender. Each producer appends to a
	// sequence of its own: a flightlog stream, a JetStream subject of the
	// side's one stream.
	producer(ctx context.Context, i int) (producer, error)
	// read returns the bodies producer i appended, in order (for the
	// round-trip test).
	read(ctx context.Context, i int) ([][]byte, error)
	close(ctx context.Context) error
}

// A producer appends one record at a time.
type producer interface {
	// append writes body and returns at its ack.
	append(ctx context.Context, body []byte) error
	// submit starts an append of body and returns at once; wait returns at
	// its ack. Acks of one producer complete in submit order.
	submit(ctx context.Context, body []byte) (wait func() error, err error)
}

// A sideKind names a side and opens it in dir.
type sideKind struct {
	name string
	open func(ctx context.Context, dir string) (side, error)
}

func sideKinds() []sideKind {
	return []sideKind{
		{"flightlog-standard", func(ctx context.Context, dir string) (side, error) { return openFlightlog(ctx, dir, loglet.Standard) }},
		{"flightlog-express", func(ctx context.Context, dir string) (side, error) { return openFlightlog(ctx, dir, loglet.Express) }},
		{"jetstream-syncalways", func(ctx context.Context, dir string) (side, error) { return openJetStream(ctx, dir, true) }},
		{"jetstream-default", func(ctx context.Context, dir string) (side, error) { return openJetStream(ctx, dir, false) }},
	}
}

// ---- flightlog: the embedded default -----------------------------------

type flightlogSide struct {
	star  *loglet.Star
	class loglet.Class
}

// openFlightlog opens the embedded default exactly as the README's first
// program does (open.Dir with loglet.DefaultConfig), logging discarded.
func openFlightlog(ctx context.Context, dir string, class loglet.Class) (*flightlogSide, error) {
	cfg := loglet.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	star, err := open.Dir(ctx, dir, cfg)
	if err != nil {
		return nil, err
	}
	return &flightlogSide{star: star, class: class}, nil
}

func streamName(i int) string { return fmt.Sprintf("p%d", i) }

func (s *flightlogSide) producer(ctx context.Context, i int) (producer, error) {
	name := streamName(i)
	if _, err := s.star.CreateStream(ctx, name, loglet.StreamOptions{Class: s.class}); err != nil {
		return nil, err
	}
	sess, err := s.star.OpenAppendSession(ctx, name)
	if err != nil {
		return nil, err
	}
	return &flightlogProducer{star: s.star, stream: name, sess: sess}, nil
}

func (s *flightlogSide) read(ctx context.Context, i int) ([][]byte, error) {
	var out [][]byte
	for next := uint64(0); ; {
		res, err := s.star.Read(ctx, streamName(i), loglet.ReadQuery{Start: loglet.AtSeq(next)})
		if err != nil {
			return nil, err
		}
		for _, r := range res.Records {
			out = append(out, r.Body)
		}
		if len(res.Records) == 0 || res.Next >= res.Tail.Seq {
			return out, nil
		}
		next = res.Next
	}
}

func (s *flightlogSide) close(ctx context.Context) error { return s.star.Close(ctx) }

type flightlogProducer struct {
	star   *loglet.Star
	stream string
	sess   *loglet.AppendSession
}

func (p *flightlogProducer) append(ctx context.Context, body []byte) error {
	_, err := p.star.Append(ctx, p.stream, loglet.Batch{Records: []loglet.Record{{Body: body}}})
	return err
}

func (p *flightlogProducer) submit(ctx context.Context, body []byte) (func() error, error) {
	f, err := p.sess.Submit(ctx, loglet.Batch{Records: []loglet.Record{{Body: body}}})
	if err != nil {
		return nil, err
	}
	return func() error { _, err := f.Wait(ctx); return err }, nil
}

// ---- JetStream: an embedded nats-server with file storage --------------

type jetStreamSide struct {
	srv *server.Server
	nc  *nats.Conn
	js  jetstream.JetStream
	st  jetstream.Stream
}

const (
	jsStream  = "PEERBENCH"
	jsSubject = "peerbench"
)

// openJetStream starts a nats-server in this process with JetStream on
// and its store in dir, no network listener, connects to it in process and
// creates one file-storage stream. syncAlways sets the server's
// SyncAlways (sync_interval: always): each write is synced before it is
// acknowledged; without it the server syncs every two minutes.
func openJetStream(ctx context.Context, dir string, syncAlways bool) (*jetStreamSide, error) {
	opts := &server.Options{
		ServerName: "peerbench",
		DontListen: true,
		JetStream:  true,
		StoreDir:   dir,
		SyncAlways: syncAlways,
		NoLog:      true,
		NoSigs:     true,
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats-server: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("nats-server: not ready within 30s")
	}
	nc, err := nats.Connect("", nats.InProcessServer(srv))
	if err != nil {
		srv.Shutdown()
		return nil, fmt.Errorf("nats: connect in process: %w", err)
	}
	s := &jetStreamSide{srv: srv, nc: nc}
	if s.js, err = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096)); err != nil {
		s.close(ctx)
		return nil, err
	}
	s.st, err = s.js.CreateStream(ctx, jetstream.StreamConfig{
		Name:     jsStream,
		Subjects: []string{jsSubject + ".>"},
		Storage:  jetstream.FileStorage,
	})
	if err != nil {
		s.close(ctx)
		return nil, fmt.Errorf("jetstream: create stream: %w", err)
	}
	return s, nil
}

func (s *jetStreamSide) producer(ctx context.Context, i int) (producer, error) {
	return &jetStreamProducer{js: s.js, subject: fmt.Sprintf("%s.%d", jsSubject, i)}, nil
}

func (s *jetStreamSide) read(ctx context.Context, i int) ([][]byte, error) {
	subject := fmt.Sprintf("%s.%d", jsSubject, i)
	info, err := s.st.Info(ctx)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := s.st.GetMsg(ctx, seq)
		if err != nil {
			return nil, err
		}
		if m.Subject == subject {
			out = append(out, m.Data)
		}
	}
	return out, nil
}

func (s *jetStreamSide) close(ctx context.Context) error {
	if s.nc != nil {
		s.nc.Close()
	}
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
	return nil
}

type jetStreamProducer struct {
	js      jetstream.JetStream
	subject string
}

func (p *jetStreamProducer) append(ctx context.Context, body []byte) error {
	_, err := p.js.Publish(ctx, p.subject, body)
	return err
}

func (p *jetStreamProducer) submit(ctx context.Context, body []byte) (func() error, error) {
	f, err := p.js.PublishAsync(p.subject, body)
	if err != nil {
		return nil, err
	}
	return func() error {
		select {
		case <-f.Ok():
			return nil
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}, nil
}
