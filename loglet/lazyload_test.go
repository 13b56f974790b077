package loglet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestUnloadedStreamLikeLoaded: Open loads no stream record (issue 26), so
// right after a takeover over many streams, a stream's first lookup reads
// its record. A stream whose first touch is an append, a delete or a
// create (cold) behaves exactly as one whose record a read loaded first
// (warm): it continues from its tail, keeps its fencing token and its
// producer window (both from the tails snapshot), a stream deleted before
// the takeover stays deleted (appending creates it afresh), and a delete
// and re-create start a fresh incarnation. The two transcripts must be the
// same. And the retention pass trims a stream nothing looked up.
func TestUnloadedStreamLikeLoaded(t *testing.T) { synctest.Test(t, testUnloadedStreamLikeLoaded) }

func testUnloadedStreamLikeLoaded(t *testing.T) {
	const filler = 300
	w := newWorld(t)
	ctx := context.Background()
	p1, err := w.open("p1", nil)
	if err != nil {
		t.Fatal(err)
	}
	s1 := p1.star
	for i := 0; i < filler; i++ {
		if _, err := s1.Append(ctx, fmt.Sprintf("filler-%04d", i), one("f")); err != nil {
			t.Fatal(err)
		}
	}
	// A stream with a retention that no one touches after the takeover.
	if _, err := s1.CreateStream(ctx, "aged", StreamOptions{Class: Standard, Star: "s1", Retention: Retention{MaxAge: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Append(ctx, "aged", one("old")); err != nil {
		t.Fatal(err)
	}
	variants := []string{"cold", "warm"}
	for _, v := range variants {
		for _, name := range []string{"plain", "del", "deleted", "fenced", "prod"} {
			if _, err := s1.Append(ctx, v+"-"+name, one(name+"-0")); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s1.SetFencingToken(ctx, v+"-fenced", "a", ""); err != nil {
			t.Fatal(err)
		}
		if _, err := s1.Append(ctx, v+"-prod", withProducer(one("prod-1"), "P", 1)); err != nil {
			t.Fatal(err)
		}
		if err := s1.DeleteStream(ctx, v+"-deleted"); err != nil {
			t.Fatal(err)
		}
	}
	waitAbsorbed(t, s1) // the tokens and producer windows are in the tails snapshot
	p1.kill()

	p2, err := w.open("p2", nil)
	if err != nil {
		t.Fatal(err)
	}
	s2 := p2.star
	s2.mu.RLock()
	loaded := len(s2.streams)
	s2.mu.RUnlock()
	if loaded != 0 {
		t.Fatalf("Open loaded %d stream records, want none", loaded)
	}
	for _, name := range []string{"plain", "del", "fenced", "prod"} {
		readAll(t, s2, "warm-"+name) // loads the record
	}
	if _, err := s2.stream(ctx, "warm-deleted"); !errors.Is(err, ErrStreamNotFound) {
		t.Fatalf("lookup of a deleted stream: %v, want ErrStreamNotFound", err)
	}

	transcript := func(v string) string {
		var b strings.Builder
		say := func(what string, ack Ack, err error) {
			fmt.Fprintf(&b, "%s: [%d,%d) dup=%v err=%v\n", what, ack.Start, ack.End, ack.Duplicate, errKind(err))
		}
		bodies := func(name string) {
			var got []string
			for _, r := range readAll(t, s2, v+"-"+name) {
				got = append(got, fmt.Sprintf("%d:%s", r.Seq, r.Body))
			}
			fmt.Fprintf(&b, "%s: %v\n", name, got)
		}
		ack, err := s2.Append(ctx, v+"-plain", one("plain-1"))
		say("plain append", ack, err)
		bodies("plain")

		ack, err = s2.Append(ctx, v+"-fenced", one("no token"))
		say("fenced without a token", ack, err)
		ack, err = s2.Append(ctx, v+"-fenced", withToken(one("token b"), "b"))
		say("fenced with a stale token", ack, err)
		ack, err = s2.Append(ctx, v+"-fenced", withToken(one("token a"), "a"))
		say("fenced with its token", ack, err)

		ack, err = s2.Append(ctx, v+"-prod", withProducer(one("prod-1"), "P", 1))
		say("producer retry", ack, err)
		ack, err = s2.Append(ctx, v+"-prod", withProducer(one("prod-2"), "P", 2))
		say("producer next", ack, err)
		bodies("prod")

		ack, err = s2.Append(ctx, v+"-deleted", one("again"))
		say("append to a stream deleted before the takeover", ack, err)
		bodies("deleted")

		err = s2.DeleteStream(ctx, v+"-del")
		say("delete", Ack{}, err)
		_, err = s2.Read(ctx, v+"-del", ReadQuery{Start: AtSeq(0)})
		say("read after the delete", Ack{}, err)
		_, err = s2.CreateStream(ctx, v+"-del", StreamOptions{})
		say("re-create", Ack{}, err)
		ack, err = s2.Append(ctx, v+"-del", one("del-new"))
		say("append to the re-created stream", ack, err)
		bodies("del")
		return b.String()
	}
	cold, warm := transcript("cold"), transcript("warm")
	if cold != warm {
		t.Fatalf("a stream not loaded at Open behaves differently from a loaded one:\ncold:\n%s\nwarm:\n%s", cold, warm)
	}
	for _, want := range []string{
		"plain: [0:plain-0 1:plain-1]",
		"fenced without a token: [0,0) dup=false err=fenced",
		"fenced with its token: [2,3)",
		"producer retry: [1,2) dup=true",
		"producer next: [2,3) dup=false",
		"append to a stream deleted before the takeover: [0,1)",
		"deleted: [0:again]",
		"read after the delete: [0,0) dup=false err=not found",
		"del: [0:del-new]",
	} {
		if !strings.Contains(cold, want) {
			t.Fatalf("transcript lacks %q:\n%s", want, cold)
		}
	}
	// The retention pass finds the stream with a retention among the
	// records, though nothing looked it up, and trims it.
	s2.runRetention(ctx, time.Now().Add(2*time.Hour))
	if got := trimSeqOf(t, w.meta, "aged"); got != 1 {
		t.Fatalf("a stream with a retention not looked up since Open: trimmed at %d, want 1", got)
	}
}

// errKind names an error's class for a transcript.
func errKind(err error) string {
	var fe *FencedError
	switch {
	case err == nil:
		return "nil"
	case errors.As(err, &fe):
		return "fenced"
	case errors.Is(err, ErrStreamNotFound):
		return "not found"
	}
	return err.Error()
}
