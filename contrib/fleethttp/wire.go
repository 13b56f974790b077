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
