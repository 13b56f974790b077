package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/flightlog/flightlog/internal/hang"
	"github.com/flightlog/flightlog/loglet"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

func newTestServer(t *testing.T) (*httptest.Server, chan struct{}, *loglet.Star) {
	t.Helper()
	star, err := loglet.Open(context.Background(), loglet.Config{
		Star: "default", Meta: metastore.NewMem(),
		Standard:       loglet.ClassConfig{Stores: []objstore.Store{objstore.NewMem()}, FlushDeadline: time.Millisecond},
		CreateOnAppend: true,
		Logger:         slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	ts := httptest.NewServer((&server{star: star, done: done}).routes())
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			close(done)
		}
		ts.Close()
		star.Close(context.Background())
	})
	return ts, done, star
}

func post(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "text/plain", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func TestAppendReadTail(t *testing.T) {
	ts, done, _ := newTestServer(t)
	if code, out := post(t, ts.URL+"/streams/greetings", "hello\nworld\n"); code != 200 || out["start"] != 0.0 || out["end"] != 2.0 {
		t.Fatalf("append: %d %v", code, out)
	}
	if code, out := post(t, ts.URL+"/streams/greetings?match_seq_num=7", "late"); code != http.StatusConflict || out["tail"] != 2.0 {
		t.Fatalf("append with a stale match_seq_num: %d %v, want 409 with tail 2", code, out)
	}
	for i, dup := range []bool{false, true} { // a retry with the same producer identity
		if code, out := post(t, ts.URL+"/streams/other?producer_id=svc-1&producer_seq=1", "once"); code != 200 || out["start"] != 0.0 || out["duplicate"] != dup {
			t.Fatalf("append %d with a producer identity: %d %v, want [0, 1) duplicate=%v", i, code, out, dup)
		}
	}
	resp, err := http.Get(ts.URL + "/streams/greetings?from=1")
	if err != nil {
		t.Fatal(err)
	}
	var rd struct {
		Records []record `json:"records"`
		Next    uint64   `json:"next"`
	}
	json.NewDecoder(resp.Body).Decode(&rd)
	resp.Body.Close()
	if len(rd.Records) != 1 || rd.Records[0].Body != "world" || rd.Records[0].Seq != 1 || rd.Next != 2 {
		t.Fatalf("read from 1: %+v", rd)
	}

	// Tail from 0: the two records, then one appended while following.
	tresp, err := http.Get(ts.URL + "/streams/greetings/tail?from=0")
	if err != nil {
		t.Fatal(err)
	}
	defer tresp.Body.Close()
	if ct := tresp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("tail content type %q", ct)
	}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(tresp.Body)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "data: ") {
				lines <- strings.TrimPrefix(l, "data: ")
			}
		}
		close(lines)
	}()
	next := func() string {
		select {
		case l := <-lines:
			return l
		case <-hang.After(t):
			t.Fatal("tail: no event")
			return ""
		}
	}
	if a, b := next(), next(); a != "hello" || b != "world" {
		t.Fatalf("tail caught up with %q, %q", a, b)
	}
	if code, _ := post(t, ts.URL+"/streams/greetings", "again"); code != 200 {
		t.Fatalf("append while tailing: %d", code)
	}
	if l := next(); l != "again" {
		t.Fatalf("tail followed with %q, want again", l)
	}
	// Shutdown ends the tail.
	close(done)
	select {
	case _, ok := <-lines:
		for ok {
			_, ok = <-lines
		}
	case <-hang.After(t):
		t.Fatal("tail did not end at shutdown")
	}
	io.Copy(io.Discard, tresp.Body)
}
