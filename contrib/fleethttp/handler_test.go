package fleethttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/flightlog/flightlog/loglet"
)

// post appends text lines through member via plain HTTP (what curl does)
// and returns the status, the member that served it and the body.
func post(t *testing.T, m *member, stream, text string) (int, string, []byte) {
	t.Helper()
	resp, err := http.Post(m.srv.URL+"/v1/streams/"+stream, "text/plain", strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get(ServedByHeader), b
}

// Any member accepts an append; it lands on the star's leader, in one hop,
// and reads back through any member in order, byte for byte.
func TestAppendLandsOnLeader(t *testing.T) {
	f := newTestFleet(t, Config{}, "a", "b", "c")
	f.lead("s0", "a")
	f.lead("s1", "b")
	leader := map[string]string{"s0": "a", "s1": "b"}
	for _, star := range []string{"s0", "s1"} {
		stream := f.streamOn(star, "orders")
		var want []string
		for i, via := range []string{"a", "b", "c", "a", "c"} {
			line := fmt.Sprintf("record %d via %s", i, via)
			status, servedBy, body := post(t, f.members[via], stream, line)
			if status != http.StatusOK || servedBy != leader[star] {
				t.Fatalf("append via %s: status %d served by %q (want 200 by %s): %s", via, status, servedBy, leader[star], body)
			}
			want = append(want, line)
		}
		res, err := f.client("c").Read(t.Context(), stream, 0, ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for i, r := range res.Records {
			if r.Seq != uint64(i) {
				t.Fatalf("record %d has seq %d", i, r.Seq)
			}
			got = append(got, string(r.Body))
		}
		if strings.Join(got, "|") != strings.Join(want, "|") || res.Next != uint64(len(want)) {
			t.Fatalf("read %s: got %q next %d, want %q", stream, got, res.Next, want)
		}
		// The same as text, through a member that forwards (curl's view).
		resp, err := http.Get(f.members["c"].srv.URL + "/v1/streams/" + stream + "?from=0&format=text")
		if err != nil {
			t.Fatal(err)
		}
		text, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(text) != strings.Join(want, "\n")+"\n" ||
			resp.Header.Get(NextHeader) != fmt.Sprint(len(want)) || resp.Header.Get(ServedByHeader) != leader[star] {
			t.Fatalf("text read of %s: %d %q next %q by %q", stream, resp.StatusCode, text, resp.Header.Get(NextHeader), resp.Header.Get(ServedByHeader))
		}
	}
	// One hop each: a forwarded only its two appends on s1 (b's star).
	if n := f.members["a"].sent.Load(); n != 2 {
		t.Fatalf("member a forwarded %d requests, want 2 (one hop each)", n)
	}
}

// A JSON batch keeps headers, timestamps and arbitrary bytes; a producer's
// retry is answered with the original range.
func TestClientRoundTrip(t *testing.T) {
	f := newTestFleet(t, Config{}, "a", "b")
	f.lead("s0", "a")
	f.lead("s1", "a")
	c := f.client("b")
	ctx := t.Context()
	body := []byte{0, 1, 2, '\n', 0xff}
	b := loglet.Batch{
		Records: []loglet.Record{
			{Timestamp: 1000, Headers: []loglet.Header{{Name: []byte("k"), Value: []byte{0, 9}}}, Body: body},
			{Timestamp: 1001, Body: []byte{}},
		},
		Producer: loglet.ProducerID{ID: "p1", Seq: 0},
	}
	ack, err := c.Append(ctx, "bytes", b)
	if err != nil || ack.Start != 0 || ack.End != 2 || ack.Duplicate {
		t.Fatalf("append: %+v, %v", ack, err)
	}
	again, err := c.Append(ctx, "bytes", b)
	if err != nil || again.Start != 0 || again.End != 2 || !again.Duplicate {
		t.Fatalf("retry of the same producer seq: %+v, %v (want [0,2) duplicate)", again, err)
	}
	res, err := c.Read(ctx, "bytes", 0, ReadOptions{})
	if err != nil || len(res.Records) != 2 {
		t.Fatalf("read: %+v, %v", res, err)
	}
	r0 := res.Records[0]
	if !bytes.Equal(r0.Body, body) || r0.Timestamp != 1000 || len(r0.Headers) != 1 ||
		string(r0.Headers[0].Name) != "k" || !bytes.Equal(r0.Headers[0].Value, []byte{0, 9}) {
		t.Fatalf("record 0 came back as %+v", r0)
	}
	if len(res.Records[1].Body) != 0 {
		t.Fatalf("record 1 came back as %+v", res.Records[1])
	}
	tail, err := c.CheckTail(ctx, "bytes")
	if err != nil || tail.Seq != 2 {
		t.Fatalf("check tail: %+v, %v", tail, err)
	}
}

// A route to a member that no longer leads the star (it closed it; the
// table has not caught up) is answered 421 by that member, and the member
// that forwarded routes again once the table changes.
func TestStaleRouteRoutesAgain(t *testing.T) {
	f := newTestFleet(t, Config{RouteWait: time.Hour}, "a", "b", "c")
	f.lead("s0", "a")
	f.lead("s1", "a")
	stream := f.streamOn("s0", "moving")
	if status, by, body := post(t, f.members["c"], stream, "before"); status != 200 || by != "a" {
		t.Fatalf("first append: %d by %q: %s", status, by, body)
	}
	f.release("s0", "a") // the table still says a
	type result struct {
		status int
		by     string
		body   []byte
	}
	done := make(chan result, 1)
	go func() {
		s, by, b := post(t, f.members["c"], stream, "after")
		done <- result{s, by, b}
	}()
	// c forwards to a, which answers 421; c then waits for the table
	// (RouteWait is an hour: only the change below can end the wait).
	select {
	case r := <-done:
		t.Fatalf("the append ended before the move: %d by %q: %s", r.status, r.by, r.body)
	case <-f.members["a"].misdirected:
	}
	f.lead("s0", "b")
	r := <-done
	if r.status != 200 || r.by != "b" {
		t.Fatalf("append after the move: %d by %q: %s", r.status, r.by, r.body)
	}
	res, err := f.client("a").Read(t.Context(), stream, 0, ReadOptions{})
	if err != nil || len(res.Records) != 2 || string(res.Records[0].Body) != "before" || string(res.Records[1].Body) != "after" {
		t.Fatalf("read back: %+v, %v", res.Records, err)
	}
}

// A forwarded request is served or answered 421, never forwarded again;
// one routed on an epoch above the target's is refused as deposed.
func TestForwardedNeverForwardsAgain(t *testing.T) {
	f := newTestFleet(t, Config{}, "a", "b")
	f.lead("s0", "a")
	f.lead("s1", "a")
	stream := f.streamOn("s0", "hop")
	_, epoch, _ := f.members["a"].Star("s0")
	cases := []struct {
		name   string
		to     string
		star   string
		epoch  uint64
		status int
	}{
		{"to a member that does not lead the star", "b", "s0", epoch, http.StatusMisdirectedRequest},
		{"routed on a later epoch than the target's", "a", "s0", epoch + 1, http.StatusMisdirectedRequest},
		{"routed on the target's epoch", "a", "s0", epoch, http.StatusOK},
		{"routed on an earlier epoch", "a", "s0", epoch - 1, http.StatusOK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, f.members[tc.to].srv.URL+"/v1/streams/"+stream, strings.NewReader("x"))
			req.Header.Set(HopHeader, "test")
			req.Header.Set(StarHeader, tc.star)
			req.Header.Set(EpochHeader, fmt.Sprint(tc.epoch))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
		})
	}
	if a, b := f.members["a"].sent.Load(), f.members["b"].sent.Load(); a+b != 0 {
		t.Fatalf("forwarded requests were forwarded again: a sent %d, b sent %d", a, b)
	}
}

// A star nobody leads is answered 503 with Retry-After after the
// attempts, and the client sees a *loglet.NotLeaderError, not committed.
func TestUnledIs503(t *testing.T) {
	f := newTestFleet(t, Config{Attempts: 2, RouteWait: time.Millisecond}, "a")
	f.lead("s1", "a")
	stream := f.streamOn("s0", "unled")
	_, err := f.client("a").Append(t.Context(), stream, loglet.Batch{Records: []loglet.Record{{Body: []byte("x")}}})
	var re *RemoteError
	var nl *loglet.NotLeaderError
	if !errors.As(err, &re) || re.StatusCode != http.StatusServiceUnavailable || re.RetryAfter != time.Second ||
		!errors.As(err, &nl) || nl.Star != "s0" || !errors.Is(err, loglet.ErrNotCommitted) || errors.Is(err, loglet.ErrOutcomeUnknown) {
		t.Fatalf("append to an unled star: %v (%#v)", err, re)
	}
}

// Each failure has its status and code, and the client gives back the
// facade's error for it.
func TestErrorsMapBothWays(t *testing.T) {
	f := newTestFleet(t, Config{MaxBodyBytes: 4 << 10}, "a", "b")
	f.lead("s0", "a")
	f.lead("s1", "a")
	c := f.client("b")
	ctx := t.Context()
	one := func(body string) loglet.Batch { return loglet.Batch{Records: []loglet.Record{{Body: []byte(body)}}} }
	for _, s := range []string{"fenced", "plain"} {
		if _, err := c.Append(ctx, s, one("x")); err != nil {
			t.Fatal(err)
		}
	}
	st, _, _ := f.members["a"].Star(f.streamStar("fenced"))
	if _, err := st.SetFencingToken(ctx, "fenced", "t1", ""); err != nil {
		t.Fatal(err)
	}
	five := uint64(5)
	cases := []struct {
		name   string
		call   func() error
		status int
		code   string
		match  func(error) bool
	}{
		{"bad stream name", func() error { _, err := c.Append(ctx, strings.Repeat("n", 600), one("x")); return err }, 400, CodeInvalid,
			func(err error) bool { return errors.Is(err, loglet.ErrNotCommitted) }},
		{"too large", func() error { _, err := c.Append(ctx, "big", one(strings.Repeat("x", 8<<10))); return err }, 413, CodeTooLarge,
			func(err error) bool {
				return errors.Is(err, loglet.ErrInvalidBatch) && errors.Is(err, loglet.ErrNotCommitted)
			}},
		{"fenced", func() error {
			b := one("y")
			b.FencingToken = "t0"
			_, err := c.Append(ctx, "fenced", b)
			return err
		}, 409, CodeFenced, func(err error) bool {
			var fe *loglet.FencedError
			return errors.As(err, &fe) && fe.Fenced && errors.Is(err, loglet.ErrNotCommitted)
		}},
		{"seq mismatch", func() error {
			b := one("z")
			b.MatchSeqNum = &five
			_, err := c.Append(ctx, "plain", b)
			return err
		}, 412, CodeSeqMismatch, func(err error) bool {
			var m *loglet.SeqNumMismatchError
			return errors.As(err, &m) && m.Tail.Seq == 1 && errors.Is(err, loglet.ErrNotCommitted)
		}},
		{"not found", func() error { _, err := c.CheckTail(ctx, "nobody"); return err }, 404, CodeNotFound,
			func(err error) bool { return errors.Is(err, loglet.ErrStreamNotFound) }},
		{"bad parameter", func() error { _, err := c.Read(ctx, "fenced", 0, ReadOptions{Wait: -1}); return err }, 0, "",
			func(err error) bool { return err == nil }}, // a negative wait is not sent
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			var re *RemoteError
			if tc.status != 0 && (!errors.As(err, &re) || re.StatusCode != tc.status || re.Code != tc.code) {
				t.Fatalf("got %v, want status %d code %s", err, tc.status, tc.code)
			}
			if !tc.match(err) {
				t.Fatalf("%v does not match the facade's error", err)
			}
		})
	}
	// A bad parameter on the wire.
	resp, err := http.Get(f.members["b"].srv.URL + "/v1/streams/fenced?from=-1")
	if err != nil {
		t.Fatal(err)
	}
	var e wireError
	json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != 400 || e.Code != CodeInvalid {
		t.Fatalf("from=-1: %d %+v", resp.StatusCode, e)
	}
}

func (f *testFleet) streamStar(stream string) string {
	star, _, _, _ := f.members["a"].Route(f.t.Context(), stream)
	return star
}

// A read session's long poll waits on the leader for the next record
// (woken by the release, not by a timer) and reads every record once, in
// order, through a member that forwards.
func TestReadSessionLongPoll(t *testing.T) {
	f := newTestFleet(t, Config{}, "a", "b")
	f.lead("s0", "a")
	f.lead("s1", "a")
	c := f.client("b")
	ctx := t.Context()
	// The stream exists before the session starts (a read of a stream
	// that does not exist is a 404, not a wait).
	if _, err := c.Append(ctx, "follow", loglet.Batch{Records: []loglet.Record{{Body: []byte("r0")}}}); err != nil {
		t.Fatal(err)
	}
	sess := c.OpenReadSession("follow", 0, ReadOptions{Wait: time.Hour})
	got := make(chan []loglet.SequencedRecord, 1)
	errc := make(chan error, 1)
	go func() {
		var all []loglet.SequencedRecord
		for len(all) < 3 {
			recs, err := sess.Recv(ctx)
			if err != nil {
				errc <- err
				return
			}
			all = append(all, recs...)
		}
		got <- all
	}()
	for i := 1; i < 3; i++ {
		if _, err := c.Append(ctx, "follow", loglet.Batch{Records: []loglet.Record{{Body: fmt.Appendf(nil, "r%d", i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-errc:
		t.Fatal(err)
	case all := <-got:
		for i, r := range all {
			if r.Seq != uint64(i) || string(r.Body) != fmt.Sprintf("r%d", i) {
				t.Fatalf("record %d: %+v", i, r)
			}
		}
		if sess.Next() != 3 {
			t.Fatalf("next %d, want 3", sess.Next())
		}
	}
}

// The client moves to the next member when one cannot be reached.
func TestClientSkipsUnreachableMember(t *testing.T) {
	f := newTestFleet(t, Config{}, "a", "b")
	f.lead("s0", "a")
	f.lead("s1", "a")
	dead := f.members["b"].srv.URL
	f.members["b"].srv.Close()
	c, err := NewClient(nil, dead, f.members["a"].srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if _, err := c.Append(t.Context(), "skip", loglet.Batch{Records: []loglet.Record{{Body: []byte("x")}}}); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
}

// Closing Config.Done (a shutdown) ends a long poll at once, with an
// empty answer, rather than holding http.Server.Shutdown up.
func TestDoneEndsLongPolls(t *testing.T) {
	done := make(chan struct{})
	f := newTestFleet(t, Config{Done: done}, "a")
	f.lead("s0", "a")
	f.lead("s1", "a")
	c := f.client("a")
	if _, err := c.Append(t.Context(), "quiet", loglet.Batch{Records: []loglet.Record{{Body: []byte("x")}}}); err != nil {
		t.Fatal(err)
	}
	type result struct {
		res loglet.ReadResult
		err error
	}
	got := make(chan result, 1)
	go func() {
		res, err := c.Read(t.Context(), "quiet", 1, ReadOptions{Wait: time.Hour})
		got <- result{res, err}
	}()
	close(done)
	r := <-got
	if r.err != nil || len(r.res.Records) != 0 || r.res.Next != 1 {
		t.Fatalf("long poll at shutdown: %+v, %v (want no records, next 1)", r.res, r.err)
	}
}

// BenchmarkAppend compares an append sent to the star's leader with one
// sent to another member, which forwards it (one hop on loopback).
func BenchmarkAppend(b *testing.B) {
	for _, via := range []string{"leader", "forwarded"} {
		b.Run("via="+via, func(b *testing.B) {
			f := newTestFleet(b, Config{}, "a", "b")
			f.lead("s0", "a")
			f.lead("s1", "a")
			member := "a"
			if via == "forwarded" {
				member = "b"
			}
			c := f.client(member)
			batch := loglet.Batch{Records: []loglet.Record{{Body: bytes.Repeat([]byte("x"), 100)}}}
			b.ResetTimer()
			for b.Loop() {
				if _, err := c.Append(b.Context(), "bench", batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A leader deposed by the epoch protocol (another member took the star
// over; the table has not caught up) answers a forwarded append with
// 421, from its *loglet.NotLeaderError; the member that forwarded routes
// again once the table changes, and the append lands on the successor.
func TestDeposedLeaderRoutesAgain(t *testing.T) {
	f := newTestFleet(t, Config{RouteWait: time.Hour}, "a", "b", "c")
	f.lead("s0", "a")
	f.lead("s1", "a")
	stream := f.streamOn("s0", "deposed")
	if status, by, body := post(t, f.members["c"], stream, "before"); status != 200 || by != "a" {
		t.Fatalf("first append: %d by %q: %s", status, by, body)
	}
	// b takes s0 over (seal, fence, mint) without a clean close by a, and
	// the table still routes to a, which still holds its star.
	cfg := f.cfg
	cfg.Star = "s0"
	succ, err := loglet.Open(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := f.members["b"]
	b.mu.Lock()
	b.stars["s0"] = succ
	b.mu.Unlock()
	// a itself says so: its star refuses the append (a *NotLeaderError),
	// and it answers 421 rather than forward.
	_, aEpoch, _ := f.members["a"].Star("s0")
	req, _ := http.NewRequest(http.MethodPost, f.members["a"].srv.URL+"/v1/streams/"+stream, strings.NewReader("refused"))
	req.Header.Set(HopHeader, "test")
	req.Header.Set(StarHeader, "s0")
	req.Header.Set(EpochHeader, fmt.Sprint(aEpoch))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var e wireError
	json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest || e.Epoch <= aEpoch || e.Leader == "" {
		t.Fatalf("the deposed a answered %d %+v, want 421 from a NotLeaderError", resp.StatusCode, e)
	}
	<-f.members["a"].misdirected
	type result struct {
		status int
		by     string
		body   []byte
	}
	done := make(chan result, 1)
	go func() {
		s, by, body := post(t, f.members["c"], stream, "after")
		done <- result{s, by, body}
	}()
	select {
	case r := <-done:
		t.Fatalf("the append ended while the table named the deposed a: %d by %q: %s", r.status, r.by, r.body)
	case <-f.members["a"].misdirected:
	}
	f.tb.set("s0", b.Member, epochOf(succ))
	r := <-done
	if r.status != 200 || r.by != "b" {
		t.Fatalf("append after the takeover: %d by %q: %s", r.status, r.by, r.body)
	}
	res, err := f.client("b").Read(t.Context(), stream, 0, ReadOptions{})
	if err != nil || len(res.Records) != 2 || string(res.Records[0].Body) != "before" || string(res.Records[1].Body) != "after" {
		t.Fatalf("read back: %+v, %v", res.Records, err)
	}
}

// A create through any member lands on the leader of the stream's star
// (the one it names, or the one its name hashes to) with its class and
// retention; the stream then takes appends of that class; a second
// create is ErrStreamExists across the wire; a bad class or an unknown
// star is 400.
func TestCreateStreamThroughMembers(t *testing.T) {
	f := newTestFleet(t, Config{}, "a", "b")
	f.lead("s0", "a")
	f.lead("s1", "b")
	c := f.client("b")
	ctx := t.Context()

	orders := f.streamOn("s0", "orders")
	opts := loglet.StreamOptions{Class: loglet.Express, Retention: loglet.Retention{MaxAge: 24 * time.Hour, MaxBytes: 1 << 30}}
	info, err := c.CreateStream(ctx, orders, opts)
	if err != nil || info.Name != orders || info.Class != loglet.Express || info.Star != "s0" || info.Retention != opts.Retention || info.Incarnation == "" {
		t.Fatalf("create %s: %+v, %v; want Express on s0 with retention %+v", orders, info, err, opts.Retention)
	}
	if _, err := c.Append(ctx, orders, loglet.Batch{Records: []loglet.Record{{Body: []byte("o1")}}}); err != nil {
		t.Fatalf("append to the Express stream: %v", err)
	}
	st, _, _ := f.members["a"].Star("s0")
	if ex := st.Stats().Express; ex == nil || ex.AckedRecords == 0 {
		t.Fatalf("the append was not acked by s0's Express chain: %+v", ex)
	}
	if _, err := c.CreateStream(ctx, orders, opts); !errors.Is(err, loglet.ErrStreamExists) {
		t.Fatalf("create %s again: %v, want ErrStreamExists", orders, err)
	}

	// Named star: s1's leader (b) creates it, though the name hashes to s0.
	placed := f.streamOn("s0", "placed")
	info, err = f.client("a").CreateStream(ctx, placed, loglet.StreamOptions{Star: "s1"})
	if err != nil || info.Star != "s1" || info.Class != loglet.Standard {
		t.Fatalf("create %s on s1: %+v, %v", placed, info, err)
	}
	st1, _, _ := f.members["b"].Star("s1")
	list, err := st1.ListStreams(ctx, loglet.ListOptions{Prefix: placed})
	if err != nil || len(list) != 1 || list[0].Star != "s1" {
		t.Fatalf("s1 lists %+v, %v; want %s on s1", list, err, placed)
	}

	for _, q := range []string{"class=premium", "star=nope", "max_age=-1s", "max_bytes=x"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, f.members["a"].srv.URL+"/v1/streams/bad?"+q, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("create with %s: %d, want 400", q, resp.StatusCode)
		}
	}
}
