package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/flightlog/flightlog/loglet"
)

// server serves one embedded star over HTTP:
//
//	POST /streams/{name}          append the body, one record per line; 200 {"start","end","duplicate"}
//	GET  /streams/{name}?from=N   read from seq N (&max=M); 200 {"records":[...],"next","tail"}
//	GET  /streams/{name}/tail     follow new records as server-sent events (?from=N to start earlier)
//
// The three outcomes of an append map to statuses: acked 200; definitely
// not committed 409 (a match_seq_num miss, with the tail) or 503 (safe to
// retry); outcome unknown 504: retry with the same ?producer_id=P&producer_seq=N
// (the batch's producer identity) and it is committed once; a retry of a
// committed batch answers its original range with "duplicate": true. A
// match_seq_num miss says someone's batch is at that position, not that
// yours landed.
type server struct {
	star *loglet.Star
	// done ends tails when the service shuts down (http.Server.Shutdown
	// does not cancel handlers that never return).
	done <-chan struct{}
}

func (s *server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /streams/{name}", s.append)
	mux.HandleFunc("GET /streams/{name}", s.read)
	mux.HandleFunc("GET /streams/{name}/tail", s.tail)
	return mux
}

type record struct {
	Seq       uint64 `json:"seq"`
	Timestamp int64  `json:"ts"`
	Body      string `json:"body"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	var mismatch *loglet.SeqNumMismatchError
	switch {
	case errors.As(err, &mismatch):
		writeJSON(w, http.StatusConflict, map[string]any{"error": err.Error(), "tail": mismatch.Tail.Seq})
		return
	case errors.Is(err, loglet.ErrStreamNotFound):
		status = http.StatusNotFound
	case errors.Is(err, loglet.ErrInvalidBatch):
		status = http.StatusBadRequest
	case errors.Is(err, loglet.ErrOutcomeUnknown):
		status = http.StatusGatewayTimeout
	case errors.Is(err, loglet.ErrNotCommitted), errors.Is(err, loglet.ErrClosed):
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, map[string]string{"error": err.Error()})
}

func (s *server) append(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var b loglet.Batch
	sc := bufio.NewScanner(http.MaxBytesReader(w, r.Body, 1<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		b.Records = append(b.Records, loglet.Record{Body: append([]byte(nil), sc.Bytes()...)})
	}
	if err := sc.Err(); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	if v := r.URL.Query().Get("match_seq_num"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "match_seq_num: " + err.Error()})
			return
		}
		b.MatchSeqNum = &n
	}
	if id := r.URL.Query().Get("producer_id"); id != "" {
		n, err := strconv.ParseUint(r.URL.Query().Get("producer_seq"), 10, 64)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "producer_seq: " + err.Error()})
			return
		}
		b.Producer = loglet.ProducerID{ID: id, Seq: n}
	}
	ack, err := s.star.Append(r.Context(), name, b)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"start": ack.Start, "end": ack.End, "duplicate": ack.Duplicate})
}

func (s *server) read(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	from, err := uintParam(r, "from", 0)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	max, err := uintParam(r, "max", 100)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	res, err := s.star.Read(r.Context(), name, loglet.ReadQuery{Start: loglet.AtSeq(from), MaxRecords: int(min(max, 1000))})
	if err != nil {
		writeError(w, err)
		return
	}
	out := struct {
		Records []record `json:"records"`
		Next    uint64   `json:"next"`
		Tail    uint64   `json:"tail"`
	}{Records: []record{}, Next: res.Next, Tail: res.Tail.Seq}
	for _, rec := range res.Records {
		out.Records = append(out.Records, record{rec.Seq, rec.Timestamp, string(rec.Body)})
	}
	writeJSON(w, http.StatusOK, out)
}

// tail streams records as server-sent events, one event per record (id:
// its seq), until the client leaves or the service shuts down.
func (s *server) tail(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	start := loglet.TailOffset(0)
	if r.URL.Query().Has("from") {
		from, err := uintParam(r, "from", 0)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		start = loglet.AtSeq(from)
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	sess, err := s.star.OpenReadSession(ctx, name, loglet.ReadQuery{Start: start})
	if err != nil {
		writeError(w, err)
		return
	}
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if flusher != nil {
		flusher.Flush()
	}
	for {
		recs, err := sess.Recv(ctx)
		if err != nil {
			return // client gone, shutdown, or the star closed
		}
		for _, rec := range recs {
			// A body is one line (appends split on newlines), so one data: line.
			fmt.Fprintf(w, "id: %d\ndata: %s\n\n", rec.Seq, rec.Body)
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
}

func uintParam(r *http.Request, name string, def uint64) (uint64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %v", name, err)
	}
	return n, nil
}
