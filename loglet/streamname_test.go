package loglet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/flightlog/flightlog/chain"
	"github.com/flightlog/flightlog/objstore"
)

// TestStreamNameErrors: a name no stream can have is refused with
// ErrInvalidStreamName, a message that says "stream name" once, with one
// "loglet:" prefix, and the real limit (463 plain bytes: the longest name
// whose keys fit every backend); it still matches ErrInvalidBatch, as
// documented before the sentinel existed, and for an append
// ErrNotCommitted. A name at the limit is accepted.
func TestStreamNameErrors(t *testing.T) {
	r := newRig(t, Standard, 1, 9, nil)
	ctx := context.Background()
	if maxStreamNameLen != 463 {
		t.Fatalf("the longest stream name computed from the key layout is %d; the README says 463", maxStreamNameLen)
	}
	if _, err := r.star.CreateStream(ctx, strings.Repeat("a", maxStreamNameLen), StreamOptions{Class: Standard}); err != nil {
		t.Fatalf("CreateStream of a %d-byte name = %v; want it accepted", maxStreamNameLen, err)
	}
	rd, err := NewReader(ReaderConfig{Meta: r.meta, Standard: []objstore.Store{r.mems[0]}})
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, err error, notCommitted bool) {
		t.Helper()
		msg := fmt.Sprint(err)
		if !errors.Is(err, ErrInvalidStreamName) || !errors.Is(err, ErrInvalidBatch) || !errors.Is(err, chain.ErrInvalidName) {
			t.Errorf("%s = %v; want it to match ErrInvalidStreamName, ErrInvalidBatch and chain.ErrInvalidName", what, err)
		}
		if notCommitted && !errors.Is(err, ErrNotCommitted) {
			t.Errorf("%s = %v; want it to match ErrNotCommitted too", what, err)
		}
		if strings.Count(msg, "loglet:") != 1 || strings.Contains(msg, "batch") || strings.Contains(msg, "chain:") {
			t.Errorf("%s: message %q; want one loglet: prefix, and no mention of a batch", what, msg)
		}
	}
	for _, tc := range []struct {
		name string
		want string // in the message
	}{
		{strings.Repeat("a", 600), "want 1-463"},
		{strings.Repeat("a", maxStreamNameLen+1), "want 1-463"},
		{strings.Repeat("é", 100), "want 1-463"}, // 200 bytes, 600 escaped
		{"", "want 1-463"},
		{"bad\x01name", "control character"},
		{"bad\xffname", "UTF-8"},
	} {
		_, err := r.star.CreateStream(ctx, tc.name, StreamOptions{Class: Standard})
		check(fmt.Sprintf("CreateStream(%.12q)", tc.name), err, false)
		if !strings.Contains(fmt.Sprint(err), tc.want) {
			t.Errorf("CreateStream(%.12q) = %v; want it to say %q", tc.name, err, tc.want)
		}
	}
	long := strings.Repeat("a", 600)
	_, err = r.star.Append(ctx, long, Batch{Records: []Record{{Body: []byte("x")}}})
	check("Append", err, true)
	_, err = r.star.Read(ctx, long, ReadQuery{})
	check("Star.Read", err, false)
	_, err = rd.Read(ctx, long, ReadQuery{})
	check("Reader.Read", err, false)
	_, err = rd.CheckTail(ctx, "bad\x01name")
	check("Reader.CheckTail", err, false)
}
