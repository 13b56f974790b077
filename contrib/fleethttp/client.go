package fleethttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/flightlog/flightlog/loglet"
)

// Client calls the transport of a fleet's members. Any member serves any
// stream (forwarding to the leader), so the client spreads its requests
// over the members it was given, and moves to the next one when a member
// cannot be reached (a refused connection: nothing was sent). It is safe
// for concurrent use.
type Client struct {
	hc    *http.Client
	addrs []string
	next  atomic.Uint64
}

// NewClient returns a client of the members at addrs (URLs or host:port).
// hc nil is http.DefaultClient.
func NewClient(hc *http.Client, addrs ...string) (*Client, error) {
	if len(addrs) == 0 {
		return nil, errors.New("fleethttp: a client needs at least one member address")
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	c := &Client{hc: hc}
	for _, a := range addrs {
		u, err := url.Parse(baseURL(a))
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("fleethttp: member address %q is not a URL or host:port", a)
		}
		c.addrs = append(c.addrs, baseURL(a))
	}
	return c, nil
}

// Append appends b to stream through a member. Its error matches
// loglet.ErrNotCommitted or loglet.ErrOutcomeUnknown, as the facade's
// does: a failure after the request was sent is unknown (retry with the
// same b.Producer to have it committed once).
func (c *Client) Append(ctx context.Context, stream string, b loglet.Batch) (loglet.Ack, error) {
	body, err := encodeBatch(b)
	if err != nil {
		return loglet.Ack{}, fmt.Errorf("fleethttp: encode the batch: %v: %w", err, loglet.ErrNotCommitted)
	}
	var a wireAck
	if err := c.do(ctx, http.MethodPost, stream, "", nil, body, &a); err != nil {
		return loglet.Ack{}, err
	}
	return loglet.Ack{Start: a.Start, End: a.End, Tail: a.Tail.tail(), Duplicate: a.Duplicate}, nil
}

// CreateStream creates stream with o (its class, star and retention) on
// the leader of its star, as Star.CreateStream does. A name taken matches
// loglet.ErrStreamExists. A failure after the request was sent matches
// loglet.ErrOutcomeUnknown: the stream may exist (a retry then answers
// loglet.ErrStreamExists).
func (c *Client) CreateStream(ctx context.Context, stream string, o loglet.StreamOptions) (loglet.StreamInfo, error) {
	var w wireStream
	if err := c.do(ctx, http.MethodPut, stream, "", streamQuery(o), nil, &w); err != nil {
		return loglet.StreamInfo{}, err
	}
	info, err := w.info()
	if err != nil {
		return loglet.StreamInfo{}, fmt.Errorf("fleethttp: the created stream %q: %v: %w", stream, err, loglet.ErrOutcomeUnknown)
	}
	return info, nil
}

// ReadOptions bound a Read.
type ReadOptions struct {
	// MaxRecords and MaxBytes: as loglet.ReadQuery's (0: its defaults).
	MaxRecords, MaxBytes int
	// Wait, if positive, makes a read that finds nothing at from wait up
	// to Wait for the next record (a long poll) before answering empty.
	Wait time.Duration
}

// Read reads stream from seq from.
func (c *Client) Read(ctx context.Context, stream string, from uint64, o ReadOptions) (loglet.ReadResult, error) {
	q := url.Values{"from": {strconv.FormatUint(from, 10)}}
	if o.MaxRecords > 0 {
		q.Set("max", strconv.Itoa(o.MaxRecords))
	}
	if o.MaxBytes > 0 {
		q.Set("max_bytes", strconv.Itoa(o.MaxBytes))
	}
	if o.Wait > 0 {
		q.Set("wait", o.Wait.String())
	}
	var r wireRead
	if err := c.do(ctx, http.MethodGet, stream, "", q, nil, &r); err != nil {
		return loglet.ReadResult{}, err
	}
	return loglet.ReadResult{Records: fromWireRecords(r.Records), Next: r.Next, Tail: r.Tail.tail()}, nil
}

// CheckTail returns stream's tail, as its leader's Star.CheckTail does.
func (c *Client) CheckTail(ctx context.Context, stream string) (loglet.Tail, error) {
	var t wireTail
	if err := c.do(ctx, http.MethodGet, stream, "/tail", nil, nil, &t); err != nil {
		return loglet.Tail{}, err
	}
	return t.tail(), nil
}

// ReadSession follows a stream from a sequence number with long polls.
// Not safe for concurrent use.
type ReadSession struct {
	c      *Client
	stream string
	next   uint64
	opts   ReadOptions
}

// DefaultSessionWait is a ReadSession's long poll when ReadOptions.Wait
// is 0.
const DefaultSessionWait = 30 * time.Second

// OpenReadSession returns a session that reads stream from seq from.
func (c *Client) OpenReadSession(stream string, from uint64, o ReadOptions) *ReadSession {
	if o.Wait <= 0 {
		o.Wait = DefaultSessionWait
	}
	return &ReadSession{c: c, stream: stream, next: from, opts: o}
}

// Recv returns the next records, waiting until at least one is readable or
// ctx ends. Records come once each, in order.
func (s *ReadSession) Recv(ctx context.Context) ([]loglet.SequencedRecord, error) {
	for {
		res, err := s.c.Read(ctx, s.stream, s.next, s.opts)
		if err != nil {
			return nil, err
		}
		if res.Next > s.next {
			s.next = res.Next
		}
		if len(res.Records) > 0 {
			return res.Records, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// Next is the sequence number the session reads from next.
func (s *ReadSession) Next() uint64 { return s.next }

// do sends one request, to the next member in turn, and to the one after
// while a member cannot be reached; it decodes a 200 into out and
// anything else into a *RemoteError.
func (c *Client) do(ctx context.Context, method, stream, suffix string, q url.Values, body []byte, out any) error {
	path := "/v1/streams/" + url.PathEscape(stream) + suffix
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	start := c.next.Add(1)
	var lastErr error
	for i := range len(c.addrs) {
		addr := c.addrs[(start+uint64(i))%uint64(len(c.addrs))]
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, addr+path, rd)
		if err != nil {
			return fmt.Errorf("fleethttp: %v: %w", err, loglet.ErrNotCommitted)
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := c.hc.Do(req)
		if err != nil {
			if notSent(err) && ctx.Err() == nil {
				lastErr = err
				continue
			}
			kind := loglet.ErrNotCommitted
			if (method == http.MethodPost || method == http.MethodPut) && !notSent(err) {
				kind = loglet.ErrOutcomeUnknown
			}
			return fmt.Errorf("fleethttp: %s %s: %w", method, addr, errors.Join(err, kind))
		}
		return decode(resp, stream, out)
	}
	return fmt.Errorf("fleethttp: no member could be reached (last: %v): %w", lastErr, loglet.ErrNotCommitted)
}

func decode(resp *http.Response, stream string, out any) error {
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("fleethttp: decode the answer of %s: %v: %w", resp.Header.Get(ServedByHeader), err, loglet.ErrOutcomeUnknown)
		}
		return nil
	}
	var w wireError
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err := json.Unmarshal(b, &w); err != nil || w.Code == "" {
		w = wireError{Error: fmt.Sprintf("%q", bytes.TrimSpace(b))}
	}
	return remoteError(stream, resp.StatusCode, resp.Header, w)
}
