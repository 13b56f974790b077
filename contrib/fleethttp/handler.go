package fleethttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/flightlog/flightlog/fleet"
	"github.com/flightlog/flightlog/loglet"
)

// Defaults of Config.
const (
	// DefaultAttempts bounds the routes a request is given: each one that
	// finds no leader, a leader that is not (loglet.NotLeaderError), or a
	// target that answers 421, waits for the routing table to change (at
	// most RouteWait) and routes again.
	DefaultAttempts = 4
	// DefaultRouteWait bounds one wait for the routing table to change.
	DefaultRouteWait = 2 * time.Second
	// DefaultMaxBodyBytes bounds an append's body: above the facade's
	// default MaxBatchBytes, so the facade's own limit speaks first for
	// a batch of the default size.
	DefaultMaxBodyBytes = 4 << 20
	// DefaultMaxWait bounds a read's wait parameter.
	DefaultMaxWait = time.Minute
)

// Config configures a Handler. The zero value of each field is its default.
type Config struct {
	// Attempts bounds the routes one request is given (default
	// DefaultAttempts).
	Attempts int
	// RouteWait bounds each wait for the routing table to change between
	// two routes (default DefaultRouteWait).
	RouteWait time.Duration
	// MaxBodyBytes bounds an append's body; a larger one is answered 413
	// (default DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// MaxWait bounds a read's wait (default DefaultMaxWait).
	MaxWait time.Duration
	// Client forwards requests to other members (default: a client of its
	// own over http.DefaultTransport's settings, without a timeout: a
	// forwarded long poll lasts as long as the request's context).
	Client *http.Client
	// Logger receives forwarding failures (default slog.Default()).
	Logger *slog.Logger
	// Done, when closed, ends the waits of reads in progress (a
	// shutdown: http.Server.Shutdown waits for handlers, and a long poll
	// would hold it up). Optional.
	Done <-chan struct{}
}

func (c *Config) defaults() {
	if c.Attempts <= 0 {
		c.Attempts = DefaultAttempts
	}
	if c.RouteWait <= 0 {
		c.RouteWait = DefaultRouteWait
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxWait <= 0 {
		c.MaxWait = DefaultMaxWait
	}
	if c.Client == nil {
		c.Client = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Handler serves the transport for one member. Create it with NewHandler.
type Handler struct {
	f   Fleet
	cfg Config
	mux *http.ServeMux
}

var _ http.Handler = (*Handler)(nil)

// NewHandler returns the handler of the member f is.
func NewHandler(f Fleet, cfg Config) *Handler {
	cfg.defaults()
	h := &Handler{f: f, cfg: cfg, mux: http.NewServeMux()}
	h.mux.HandleFunc("PUT /v1/streams/{name}", h.create)
	h.mux.HandleFunc("POST /v1/streams/{name}", h.append)
	h.mux.HandleFunc("GET /v1/streams/{name}", h.read)
	h.mux.HandleFunc("GET /v1/streams/{name}/tail", h.checkTail)
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(ServedByHeader, h.f.Self())
	h.mux.ServeHTTP(w, r)
}

// op serves a request on the star this member leads: it writes the
// response and returns nil, or returns the error to answer (a
// *loglet.NotLeaderError is routed again).
type op func(ctx context.Context, st *loglet.Star) error

// create creates a stream with the options in the query
// (decodeStreamOptions), on the leader of its star: the one it names, or
// the one chain.PlaceStream gives the name.
func (h *Handler) create(w http.ResponseWriter, r *http.Request) {
	stream := r.PathValue("name")
	o, err := decodeStreamOptions(r.URL.Query())
	if err != nil {
		writeJSON(w, http.StatusBadRequest, wireError{Code: CodeInvalid, Stream: stream, Error: "fleethttp: " + err.Error()})
		return
	}
	h.serveOn(w, r, stream, o.Star, nil, func(ctx context.Context, st *loglet.Star) error {
		info, err := st.CreateStream(ctx, stream, o)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, toWireStream(info))
		return nil
	})
}

func (h *Handler) append(w http.ResponseWriter, r *http.Request) {
	stream := r.PathValue("name")
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeJSON(w, http.StatusRequestEntityTooLarge, wireError{Code: CodeTooLarge, Stream: stream,
				Error: fmt.Sprintf("fleethttp: the batch is over %d bytes; nothing was appended", h.cfg.MaxBodyBytes)})
			return
		}
		writeJSON(w, http.StatusBadRequest, wireError{Code: CodeInvalid, Stream: stream, Error: "fleethttp: reading the body: " + err.Error()})
		return
	}
	b, err := decodeBatch(r.Header.Get("Content-Type"), r.URL.Query(), body)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, wireError{Code: CodeInvalid, Stream: stream, Error: "fleethttp: " + err.Error()})
		return
	}
	h.serve(w, r, stream, body, func(ctx context.Context, st *loglet.Star) error {
		ack, err := st.Append(ctx, stream, b)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, wireAck{Start: ack.Start, End: ack.End, Tail: toWireTail(ack.Tail), Duplicate: ack.Duplicate})
		return nil
	})
}

func (h *Handler) read(w http.ResponseWriter, r *http.Request) {
	stream := r.PathValue("name")
	q := r.URL.Query()
	from, err1 := uintParam(q.Get("from"), 0)
	maxRecs, err2 := uintParam(q.Get("max"), 0)
	maxBytes, err3 := uintParam(q.Get("max_bytes"), 0)
	var wait time.Duration
	var err4 error
	if v := q.Get("wait"); v != "" {
		wait, err4 = time.ParseDuration(v)
		if err4 == nil && wait < 0 {
			err4 = fmt.Errorf("wait %v is negative", wait)
		}
	}
	var err5 error
	text := false
	switch f := q.Get("format"); f {
	case "", "json":
	case "text":
		text = true
	default:
		err5 = fmt.Errorf("format %q: want json or text", f)
	}
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		writeJSON(w, http.StatusBadRequest, wireError{Code: CodeInvalid, Stream: stream, Error: "fleethttp: " + err.Error()})
		return
	}
	rq := loglet.ReadQuery{Start: loglet.AtSeq(from), MaxRecords: int(min(maxRecs, 1<<20)), MaxBytes: int(min(maxBytes, 1<<30))}
	wait = min(wait, h.cfg.MaxWait)
	h.serve(w, r, stream, nil, func(ctx context.Context, st *loglet.Star) error {
		res, err := st.Read(ctx, stream, rq)
		if err != nil {
			return err
		}
		if len(res.Records) == 0 && wait > 0 {
			recs, next, err := h.await(ctx, st, stream, rq, wait)
			if err != nil {
				return err
			}
			res.Records, res.Next = recs, max(next, res.Next)
		}
		if text {
			writeText(w, res)
			return nil
		}
		writeJSON(w, http.StatusOK, wireRead{Records: toWireRecords(res.Records), Next: res.Next, Tail: toWireTail(res.Tail)})
		return nil
	})
}

// writeText answers a read with format=text: the bodies, each followed by
// a newline (for curl; a body holding a newline reads as two lines), and
// the next seq and the tail in headers.
func writeText(w http.ResponseWriter, res loglet.ReadResult) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set(NextHeader, strconv.FormatUint(res.Next, 10))
	w.Header().Set(TailHeader, strconv.FormatUint(res.Tail.Seq, 10))
	w.WriteHeader(http.StatusOK)
	for _, r := range res.Records {
		w.Write(r.Body)
		w.Write([]byte{'\n'})
	}
}

// await waits up to wait for records at rq.Start in a read session (woken
// by the leader's releases); none by then is an empty answer, not an error.
func (h *Handler) await(ctx context.Context, st *loglet.Star, stream string, rq loglet.ReadQuery, wait time.Duration) ([]loglet.SequencedRecord, uint64, error) {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if h.cfg.Done != nil {
		go func() {
			select {
			case <-h.cfg.Done:
				cancel()
			case <-wctx.Done():
			}
		}()
	}
	sess, err := st.OpenReadSession(wctx, stream, rq)
	if err != nil {
		if wctx.Err() != nil && ctx.Err() == nil {
			return nil, 0, nil
		}
		return nil, 0, err
	}
	defer sess.Close()
	recs, err := sess.Recv(wctx)
	if err != nil && wctx.Err() != nil && ctx.Err() == nil {
		return nil, sess.Next(), nil // the wait is over: nothing new
	}
	return recs, sess.Next(), err
}

func (h *Handler) checkTail(w http.ResponseWriter, r *http.Request) {
	stream := r.PathValue("name")
	h.serve(w, r, stream, nil, func(ctx context.Context, st *loglet.Star) error {
		t, err := st.CheckTail(ctx, stream)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, toWireTail(t))
		return nil
	})
}

// serve routes a request: served here when this member leads the
// stream's star, else forwarded once to the leader. A forwarded request
// (HopHeader) is served here or answered 421, never forwarded again.
func (h *Handler) serve(w http.ResponseWriter, r *http.Request, stream string, body []byte, do op) {
	h.serveOn(w, r, stream, "", body, do)
}

// serveOn is serve on star's leader when star is not "" (a create that
// names its star), on the leader of stream's star otherwise.
func (h *Handler) serveOn(w http.ResponseWriter, r *http.Request, stream, onStar string, body []byte, do op) {
	ctx := r.Context()
	if r.Header.Get(HopHeader) != "" {
		h.serveForwarded(w, r, stream, do)
		return
	}
	var last wireError
	var changed <-chan struct{}
	for attempt := 0; attempt < h.cfg.Attempts; attempt++ {
		if attempt > 0 && !h.waitChange(ctx, changed) {
			break
		}
		// Taken before the route, so a change between the two wakes the
		// next wait.
		changed = h.f.Changed()
		var (
			star   string
			leader fleet.Member
			epoch  uint64
			err    error
		)
		if onStar != "" {
			star = onStar
			leader, epoch, err = h.f.RouteStar(star)
		} else {
			star, leader, epoch, err = h.f.Route(ctx, stream)
		}
		switch {
		case errors.Is(err, fleet.ErrUnled):
			last = wireError{Code: CodeNotLeader, Stream: stream, Star: star, Error: err.Error()}
		case err != nil:
			status, e := classify(err)
			e.Stream = stream
			writeJSON(w, status, e)
			return
		case leader.Name == h.f.Self():
			st, _, ok := h.f.Star(star)
			if !ok {
				last = wireError{Code: CodeNotLeader, Stream: stream, Star: star, Leader: leader.Name, Epoch: epoch,
					Error: fmt.Sprintf("fleethttp: star %q is routed to this member (%s), which does not lead it yet", star, leader.Name)}
				break
			}
			err := do(ctx, st)
			if err == nil {
				return
			}
			var nl *loglet.NotLeaderError
			if errors.As(err, &nl) {
				last = wireError{Code: CodeNotLeader, Stream: stream, Star: star, Leader: nl.Leader, Epoch: nl.Epoch, Error: err.Error()}
				break
			}
			status, e := classify(err)
			e.Stream, e.Star = stream, star
			writeJSON(w, status, e)
			return
		default:
			done, e := h.forward(w, r, body, star, leader, epoch)
			if done {
				return
			}
			last = e
		}
	}
	if ctx.Err() != nil {
		return // the caller left
	}
	last.Error = fmt.Sprintf("fleethttp: no member leads the star of stream %q after %d routes: %s", stream, h.cfg.Attempts, last.Error)
	w.Header().Set("Retry-After", "1")
	writeJSON(w, http.StatusServiceUnavailable, last)
}

// waitChange waits for the routing table to change, at most RouteWait;
// false when ctx ended.
func (h *Handler) waitChange(ctx context.Context, changed <-chan struct{}) bool {
	t := time.NewTimer(h.cfg.RouteWait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-changed:
	case <-t.C:
	}
	return true
}

// serveForwarded serves a request another member forwarded here: only on
// the star it was routed to, held at the epoch it was routed on or a
// later one; anything else is 421, for the forwarder to route again.
func (h *Handler) serveForwarded(w http.ResponseWriter, r *http.Request, stream string, do op) {
	star := r.Header.Get(StarHeader)
	routed, err := strconv.ParseUint(r.Header.Get(EpochHeader), 10, 64)
	if star == "" || err != nil {
		writeJSON(w, http.StatusBadRequest, wireError{Code: CodeInvalid, Stream: stream,
			Error: fmt.Sprintf("fleethttp: a forwarded request needs %s and a numeric %s", StarHeader, EpochHeader)})
		return
	}
	misdirected := func(why string) {
		writeJSON(w, http.StatusMisdirectedRequest, wireError{Code: CodeMisdirected, Stream: stream, Star: star, Epoch: routed,
			Error: fmt.Sprintf("fleethttp: member %s: %s", h.f.Self(), why)})
	}
	st, epoch, ok := h.f.Star(star)
	switch {
	case !ok:
		misdirected(fmt.Sprintf("does not lead star %q", star))
		return
	case epoch < routed:
		misdirected(fmt.Sprintf("leads star %q at epoch %d, below the %d it was routed on (deposed)", star, epoch, routed))
		return
	}
	err = do(r.Context(), st)
	if err == nil {
		return
	}
	var nl *loglet.NotLeaderError
	if errors.As(err, &nl) {
		// Deposed: the body names the successor's owner and epoch.
		writeJSON(w, http.StatusMisdirectedRequest, wireError{Code: CodeMisdirected, Stream: stream, Star: star, Leader: nl.Leader, Epoch: nl.Epoch,
			Error: fmt.Sprintf("fleethttp: member %s: %v", h.f.Self(), err)})
		return
	}
	status, e := classify(err)
	e.Stream, e.Star = stream, star
	writeJSON(w, status, e)
}

// forward sends the request to leader once and copies its answer, unless
// the answer (421) or a failure to connect says to route again: then it
// returns false and why. A failure after the request may have reached the
// leader is answered 504 for an append or a create (outcome unknown), 503
// otherwise.
func (h *Handler) forward(w http.ResponseWriter, r *http.Request, body []byte, star string, leader fleet.Member, epoch uint64) (bool, wireError) {
	stream := r.PathValue("name")
	if leader.Addr == "" {
		return false, wireError{Code: CodeNotLeader, Stream: stream, Star: star, Leader: leader.Name, Epoch: epoch,
			Error: fmt.Sprintf("fleethttp: member %s leads star %q but published no address", leader.Name, star)}
	}
	target := baseURL(leader.Addr) + r.URL.EscapedPath()
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, target, rd)
	if err != nil {
		return false, wireError{Code: CodeNotLeader, Stream: stream, Star: star, Leader: leader.Name, Epoch: epoch,
			Error: fmt.Sprintf("fleethttp: the address %q of member %s: %v", leader.Addr, leader.Name, err)}
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	req.Header.Set(HopHeader, h.f.Self())
	req.Header.Set(StarHeader, star)
	req.Header.Set(EpochHeader, strconv.FormatUint(epoch, 10))
	resp, err := h.cfg.Client.Do(req)
	if err != nil {
		e := wireError{Code: CodeNotLeader, Stream: stream, Star: star, Leader: leader.Name, Epoch: epoch,
			Error: fmt.Sprintf("fleethttp: forwarding to member %s at %s: %v", leader.Name, leader.Addr, err)}
		if notSent(err) || r.Context().Err() != nil {
			return r.Context().Err() != nil, e
		}
		h.cfg.Logger.Warn("fleethttp: a forwarded request failed after it was sent", "member", leader.Name, "stream", stream, "err", err)
		status, code := http.StatusServiceUnavailable, CodeNotCommitted
		if r.Method == http.MethodPost || r.Method == http.MethodPut {
			status, code = http.StatusGatewayTimeout, CodeOutcomeUnknown
		}
		e.Code = code
		writeJSON(w, status, e)
		return true, e
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusMisdirectedRequest {
		var e wireError
		dec := json.NewDecoder(io.LimitReader(resp.Body, 64<<10))
		if dec.Decode(&e) != nil {
			e = wireError{Error: "fleethttp: member " + leader.Name + " answered 421"}
		}
		e.Code, e.Stream, e.Star, e.Leader = CodeNotLeader, stream, star, leader.Name
		return false, e
	}
	for _, k := range []string{"Content-Type", "Retry-After", ServedByHeader, NextHeader, TailHeader} {
		if v := resp.Header.Get(k); v != "" {
			w.Header().Set(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
	return true, wireError{}
}

// notSent reports a failure to reach the member at all (no connection):
// the request was not delivered, so it is safe to route again.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// baseURL makes a member's Addr (a URL or host:port) a URL without a
// trailing slash.
func baseURL(addr string) string {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return strings.TrimSuffix(addr, "/")
}

func uintParam(v string, def uint64) (uint64, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a non-negative integer", v)
	}
	return n, nil
}
