package loglet

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func withToken(b Batch, token string) Batch {
	b.FencingToken = token
	return b
}

// mustFenced fails unless err is a *FencedError that is not committed.
func mustFenced(t *testing.T, what string, ack Ack, err error) {
	t.Helper()
	var fe *FencedError
	if !errors.As(err, &fe) || !errors.Is(err, ErrNotCommitted) {
		t.Fatalf("%s: %+v %v, want a *FencedError (not committed)", what, ack, err)
	}
}

// TestFencingHandoff is the writer handoff a host controls: writer A
// appends with token a; the host sets b; A's next append is refused; B
// appends with b. An append without a token on a fenced stream is refused,
// a fence whose expected token is stale is refused (the token stays), and
// clearing the token opens the stream to appends without one.
func TestFencingHandoff(t *testing.T) { synctest.Test(t, testFencingHandoff) }

func testFencingHandoff(t *testing.T) {
	w := newWorld(t)
	p1, err := w.open("p1", nil)
	if err != nil {
		t.Fatal(err)
	}
	s, ctx := p1.star, context.Background()
	if _, err := s.Append(ctx, "a", one("before")); err != nil {
		t.Fatal(err)
	}
	ack, err := s.Append(ctx, "a", withToken(one("unset"), "a"))
	mustFenced(t, "a token on a stream without one", ack, err)
	fa, err := s.SetFencingToken(ctx, "a", "a", "")
	if err != nil || fa.Start != 1 || fa.End != 2 {
		t.Fatalf("set a: %+v %v, want the fence record at 1", fa, err)
	}
	if _, err := s.Append(ctx, "a", withToken(one("A-1"), "a")); err != nil {
		t.Fatal(err)
	}
	ack, err = s.Append(ctx, "a", one("no token"))
	mustFenced(t, "no token on a fenced stream", ack, err)
	if _, err := s.SetFencingToken(ctx, "a", "b", "a"); err != nil {
		t.Fatal(err)
	}
	ack, err = s.Append(ctx, "a", withToken(one("A-2"), "a"))
	mustFenced(t, "writer A after the handoff", ack, err)
	if !strings.Contains(err.Error(), "fencing token changed") {
		t.Fatalf("the error %q does not say the token changed", err)
	}
	if _, err := s.Append(ctx, "a", withToken(one("B-1"), "b")); err != nil {
		t.Fatal(err)
	}
	ack, err = s.SetFencingToken(ctx, "a", "c", "a")
	mustFenced(t, "a fence expecting a stale token", ack, err)
	if _, err := s.Append(ctx, "a", withToken(one("B-2"), "b")); err != nil {
		t.Fatalf("the token after a refused fence: %v, want b still", err)
	}
	if _, err := s.SetFencingToken(ctx, "a", "", "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "a", one("cleared")); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range readAll(t, s, "a") {
		if len(r.Headers) == 1 && bytes.Equal(r.Headers[0].Name, FenceHeader.Name) && bytes.Equal(r.Headers[0].Value, FenceHeader.Value) {
			got = append(got, "fence:"+string(r.Body))
			continue
		}
		got = append(got, string(r.Body))
	}
	want := []string{"before", "fence:a", "A-1", "fence:b", "B-1", "B-2", "fence:", "cleared"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("records %q, want %q", got, want)
	}
}

// TestFencingTokenTooLong: a token past envelope.MaxFencingTokenLen is a
// clear invalid batch, never admitted.
func TestFencingTokenTooLong(t *testing.T) { synctest.Test(t, testFencingTokenTooLong) }

func testFencingTokenTooLong(t *testing.T) {
	w := newWorld(t)
	p1, err := w.open("p1", nil)
	if err != nil {
		t.Fatal(err)
	}
	s, ctx := p1.star, context.Background()
	long := strings.Repeat("t", 37)
	for what, call := range map[string]func() (Ack, error){
		"Batch.FencingToken":      func() (Ack, error) { return s.Append(ctx, "a", withToken(one("x"), long)) },
		"SetFencingToken's token": func() (Ack, error) { return s.SetFencingToken(ctx, "a", long, "") },
		"SetFencingToken's old":   func() (Ack, error) { return s.SetFencingToken(ctx, "a", "a", long) },
	} {
		ack, err := call()
		if !errors.Is(err, ErrInvalidBatch) || !errors.Is(err, ErrNotCommitted) || !strings.Contains(err.Error(), "37 bytes (max 36)") {
			t.Fatalf("%s of 37 bytes: %+v %v, want ErrInvalidBatch naming the length", what, ack, err)
		}
	}
	if _, err := s.SetFencingToken(ctx, "a", strings.Repeat("t", 36), ""); err != nil {
		t.Fatalf("a 36-byte token: %v", err)
	}
}

// TestFencingAcrossTakeover: a successor learns the token from the tails
// (an absorbed fence) and from its walk (a released, unabsorbed one), and
// so does the successor's successor: each refuses writer A's token and
// admits B's.
func TestFencingAcrossTakeover(t *testing.T) { synctest.Test(t, testFencingAcrossTakeover) }

func testFencingAcrossTakeover(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	p1, err := w.open("p1", func(c *Config) { c.AbsorbInterval = 10 * time.Millisecond })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p1.star.SetFencingToken(ctx, "a", "a", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := p1.star.Append(ctx, "a", withToken(one("A-1"), "a")); err != nil {
		t.Fatal(err)
	}
	waitAbsorbed(t, p1.star) // token a is in the tails
	p1.meta.SetDown(true)    // no more rounds: the next fence is released, never absorbed
	if _, err := p1.star.SetFencingToken(ctx, "a", "b", "a"); err != nil {
		t.Fatal(err)
	}
	p1.kill()
	check := func(s *Star, who, body string) {
		t.Helper()
		ack, err := s.Append(ctx, "a", withToken(one("A-late"), "a"))
		mustFenced(t, who+": writer A", ack, err)
		if _, err := s.Append(ctx, "a", withToken(one(body), "b")); err != nil {
			t.Fatalf("%s: writer B: %v", who, err)
		}
	}
	p2, err := w.open("p2", nil)
	if err != nil {
		t.Fatal(err)
	}
	check(p2.star, "successor", "B-1")
	waitAbsorbed(t, p2.star) // the walked fence is in p2's tails now
	p2.kill()
	p3, err := w.open("p3", nil)
	if err != nil {
		t.Fatal(err)
	}
	check(p3.star, "the successor's successor", "B-2")
}

// TestFenceBatchFails: a fence batch whose outcome is unknown (the buckets
// are down) is ahead of every later batch on its leader, which checks them
// against its token; the leader dies before it lands, so it is not
// committed, and the successor holds the old token: A's token is admitted
// and the fence's refused.
func TestFenceBatchFails(t *testing.T) { synctest.Test(t, testFenceBatchFails) }

func testFenceBatchFails(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	p1, err := w.open("p1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p1.star.SetFencingToken(ctx, "a", "a", ""); err != nil {
		t.Fatal(err)
	}
	p1.bkts[0].SetDown(true) // the Standard bucket
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	ack, err := p1.star.SetFencingToken(short, "a", "b", "a")
	cancel()
	if !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("a fence while the buckets are down: %+v %v, want outcome unknown", ack, err)
	}
	short, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
	ack, err = p1.star.Append(short, "a", withToken(one("A-behind-the-fence"), "a"))
	cancel()
	mustFenced(t, "writer A behind the admitted fence", ack, err)
	p1.kill()
	p2, err := w.open("p2", nil)
	if err != nil {
		t.Fatal(err)
	}
	ack, err = p2.star.Append(ctx, "a", withToken(one("B"), "b"))
	mustFenced(t, "the failed fence's token at the successor", ack, err)
	if _, err := p2.star.Append(ctx, "a", withToken(one("A-1"), "a")); err != nil {
		t.Fatalf("the old token at the successor: %v", err)
	}
	var bodies []string
	for _, r := range readAll(t, p2.star, "a") {
		bodies = append(bodies, string(r.Body))
	}
	if strings.Join(bodies, " ") != "a A-1" {
		t.Fatalf("records %q, want the first fence and A-1", bodies)
	}
}
