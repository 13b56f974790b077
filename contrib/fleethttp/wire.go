package fleethttp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/flightlog/flightlog/loglet"
)

// Headers of the transport.
const (
	// HopHeader marks a request one member forwarded to another: the
	// target serves it or answers 421, and never forwards it again.
	HopHeader = "Flightlog-Hop"
	// StarHeader is the star a forwarded request was routed to.
	StarHeader = "Flightlog-Star"
	// EpochHeader is the epoch of the lead a forwarded request was routed
	// on: a target holding the star at a lower epoch has been deposed.
	EpochHeader = "Flightlog-Epoch"
	// ServedByHeader names the member that served a request.
	ServedByHeader = "Flightlog-Served-By"
	// NextHeader and TailHeader carry a text read's next seq and the
	// stream's tail (format=text has no JSON body to hold them).
	NextHeader = "Flightlog-Next"
	TailHeader = "Flightlog-Tail"
)

type wireHeader struct {
	Name  []byte `json:"name"`
	Value []byte `json:"value"`
}

type wireRecord struct {
	Seq       uint64       `json:"seq"`
	Timestamp int64        `json:"ts,omitempty"`
	Headers   []wireHeader `json:"headers,omitempty"`
	Body      []byte       `json:"body"`
}

// wireBatch is an append's JSON body.
type wireBatch struct {
	Records      []wireRecord `json:"records"`
	MatchSeqNum  *uint64      `json:"match_seq_num,omitempty"`
	ProducerID   string       `json:"producer_id,omitempty"`
	ProducerSeq  uint64       `json:"producer_seq,omitempty"`
	FencingToken string       `json:"fencing_token,omitempty"`
}

type wireTail struct {
	Seq       uint64 `json:"seq"`
	Timestamp int64  `json:"ts,omitempty"`
	Pending   uint64 `json:"pending,omitempty"`
}

type wireAck struct {
	Start     uint64   `json:"start"`
	End       uint64   `json:"end"`
	Tail      wireTail `json:"tail"`
	Duplicate bool     `json:"duplicate,omitempty"`
}

type wireRead struct {
	Records []wireRecord `json:"records"`
	Next    uint64       `json:"next"`
	Tail    wireTail     `json:"tail"`
}

// wireStream is a created stream (loglet.StreamInfo).
type wireStream struct {
	Name        string `json:"name"`
	Class       string `json:"class"`
	Star        string `json:"star"`
	Incarnation string `json:"incarnation,omitempty"`
	MaxAge      string `json:"max_age,omitempty"` // a Go duration
	MaxBytes    int64  `json:"max_bytes,omitempty"`
}

func toWireStream(i loglet.StreamInfo) wireStream {
	w := wireStream{Name: i.Name, Class: i.Class.String(), Star: i.Star, Incarnation: i.Incarnation, MaxBytes: i.Retention.MaxBytes}
	if i.Retention.MaxAge > 0 {
		w.MaxAge = i.Retention.MaxAge.String()
	}
	return w
}

func (w wireStream) info() (loglet.StreamInfo, error) {
	c, err := parseClass(w.Class)
	if err != nil {
		return loglet.StreamInfo{}, err
	}
	i := loglet.StreamInfo{Name: w.Name, Class: c, Star: w.Star, Incarnation: w.Incarnation, Retention: loglet.Retention{MaxBytes: w.MaxBytes}}
	if w.MaxAge != "" {
		if i.Retention.MaxAge, err = time.ParseDuration(w.MaxAge); err != nil {
			return loglet.StreamInfo{}, fmt.Errorf("max_age: %v", err)
		}
	}
	return i, nil
}

// parseClass reads a class by its name ("" is Standard, StreamOptions'
// zero value).
func parseClass(s string) (loglet.Class, error) {
	switch s {
	case "", "standard":
		return loglet.Standard, nil
	case "express":
		return loglet.Express, nil
	}
	return 0, fmt.Errorf("class %q: want standard or express", s)
}

// streamQuery is a create's options as its query: class, star, max_age
// (a Go duration) and max_bytes, each left out at its zero value.
func streamQuery(o loglet.StreamOptions) url.Values {
	q := url.Values{}
	if o.Class != loglet.Standard {
		q.Set("class", o.Class.String())
	}
	if o.Star != "" {
		q.Set("star", o.Star)
	}
	if o.Retention.MaxAge != 0 {
		q.Set("max_age", o.Retention.MaxAge.String())
	}
	if o.Retention.MaxBytes != 0 {
		q.Set("max_bytes", strconv.FormatInt(o.Retention.MaxBytes, 10))
	}
	return q
}

// decodeStreamOptions reads a create's query (streamQuery).
func decodeStreamOptions(q url.Values) (loglet.StreamOptions, error) {
	var o loglet.StreamOptions
	var err error
	if o.Class, err = parseClass(q.Get("class")); err != nil {
		return o, err
	}
	o.Star = q.Get("star")
	if v := q.Get("max_age"); v != "" {
		if o.Retention.MaxAge, err = time.ParseDuration(v); err != nil || o.Retention.MaxAge < 0 {
			return o, fmt.Errorf("max_age %q: want a non-negative Go duration", v)
		}
	}
	if v := q.Get("max_bytes"); v != "" {
		if o.Retention.MaxBytes, err = strconv.ParseInt(v, 10, 64); err != nil || o.Retention.MaxBytes < 0 {
			return o, fmt.Errorf("max_bytes %q: want a non-negative integer", v)
		}
	}
	return o, nil
}

// wireError is every failure's body.
type wireError struct {
	Error string `json:"error"`
	Code  string `json:"code"`
	// Stream and Star name the request's stream and, when routed, its star.
	Stream string `json:"stream,omitempty"`
	Star   string `json:"star,omitempty"`
	// Tail: a seq_mismatch's current tail.
	Tail *wireTail `json:"tail,omitempty"`
	// Fenced: a fenced's FencedError.Fenced.
	Fenced bool `json:"fenced,omitempty"`
	// Leader and Epoch: a not_leader's last known leader.
	Leader string `json:"leader,omitempty"`
	Epoch  uint64 `json:"epoch,omitempty"`
	// Producer: a producer_window's details.
	Producer *wireWindow `json:"producer,omitempty"`
}

type wireWindow struct {
	ID      string `json:"id"`
	Seq     uint64 `json:"seq"`
	Oldest  uint64 `json:"oldest"`
	Expired bool   `json:"expired,omitempty"`
}

func toWireTail(t loglet.Tail) wireTail { return wireTail(t) }

func (t wireTail) tail() loglet.Tail { return loglet.Tail(t) }

func toWireRecords(recs []loglet.SequencedRecord) []wireRecord {
	out := make([]wireRecord, 0, len(recs))
	for _, r := range recs {
		w := wireRecord{Seq: r.Seq, Timestamp: r.Timestamp, Body: r.Body}
		for _, h := range r.Headers {
			w.Headers = append(w.Headers, wireHeader{Name: h.Name, Value: h.Value})
		}
		out = append(out, w)
	}
	return out
}

func fromWireRecords(ws []wireRecord) []loglet.SequencedRecord {
	out := make([]loglet.SequencedRecord, 0, len(ws))
	for _, w := range ws {
		r := loglet.SequencedRecord{Seq: w.Seq, Record: loglet.Record{Timestamp: w.Timestamp, Body: w.Body}}
		if r.Body == nil {
			r.Body = []byte{}
		}
		for _, h := range w.Headers {
			r.Headers = append(r.Headers, loglet.Header{Name: h.Name, Value: h.Value})
		}
		out = append(out, r)
	}
	return out
}

// encodeBatch is b as an append's JSON body.
func encodeBatch(b loglet.Batch) ([]byte, error) {
	w := wireBatch{MatchSeqNum: b.MatchSeqNum, ProducerID: b.Producer.ID, ProducerSeq: b.Producer.Seq, FencingToken: b.FencingToken}
	for _, r := range b.Records {
		wr := wireRecord{Timestamp: r.Timestamp, Body: r.Body}
		for _, h := range r.Headers {
			wr.Headers = append(wr.Headers, wireHeader{Name: h.Name, Value: h.Value})
		}
		w.Records = append(w.Records, wr)
	}
	return json.Marshal(w)
}

// decodeBatch reads an append: a JSON batch, or text lines with the
// batch's options in the query.
func decodeBatch(contentType string, q url.Values, body []byte) (loglet.Batch, error) {
	var b loglet.Batch
	if mt, _, _ := mime.ParseMediaType(contentType); mt == "application/json" {
		var w wireBatch
		if err := json.Unmarshal(body, &w); err != nil {
			return b, fmt.Errorf("the JSON batch: %v", err)
		}
		for _, r := range w.Records {
			rec := loglet.Record{Timestamp: r.Timestamp, Body: r.Body}
			for _, h := range r.Headers {
				rec.Headers = append(rec.Headers, loglet.Header{Name: h.Name, Value: h.Value})
			}
			b.Records = append(b.Records, rec)
		}
		b.MatchSeqNum, b.FencingToken = w.MatchSeqNum, w.FencingToken
		b.Producer = loglet.ProducerID{ID: w.ProducerID, Seq: w.ProducerSeq}
		return b, nil
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, len(body)+1)
	for sc.Scan() {
		b.Records = append(b.Records, loglet.Record{Body: bytes.Clone(sc.Bytes())})
	}
	if err := sc.Err(); err != nil {
		return b, fmt.Errorf("the text batch: %v", err)
	}
	if v := q.Get("match_seq_num"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return b, fmt.Errorf("match_seq_num: %v", err)
		}
		b.MatchSeqNum = &n
	}
	if id := q.Get("producer_id"); id != "" {
		n, err := strconv.ParseUint(q.Get("producer_seq"), 10, 64)
		if err != nil {
			return b, fmt.Errorf("producer_seq: %v", err)
		}
		b.Producer = loglet.ProducerID{ID: id, Seq: n}
	}
	b.FencingToken = q.Get("fencing_token")
	return b, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
