package loglet

import (
	"context"
	"errors"
	"testing"

	"github.com/flightlog/flightlog/objstore"
)

// TestEndedContextAdmitsNothing (issue 17, item 8): a context that ended
// before admission gives ErrNotCommitted and writes nothing, for Append and
// for a session's Submit, even with budget to spare. (Before, Append
// returned outcome-unknown and the record became durable; Submit admitted
// and acked.)
func TestEndedContextAdmitsNothing(t *testing.T) {
	r := newRig(t, Standard, 1, 1, nil)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	rec := Batch{Records: []Record{{Body: []byte("never")}}}
	if _, err := r.star.Append(ended, "a", rec); !errors.Is(err, ErrNotCommitted) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Append with an ended context: %v, want ErrNotCommitted and context.Canceled", err)
	}
	sess, err := r.star.OpenAppendSession(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	if f, err := sess.Submit(ended, rec); !errors.Is(err, ErrNotCommitted) || f != nil {
		t.Fatalf("Submit with an ended context: %v, %v; want no future and ErrNotCommitted", f, err)
	}
	ack, err := r.star.Append(context.Background(), "a", Batch{Records: []Record{{Body: []byte("first")}}})
	if err != nil || ack.Start != 0 {
		t.Fatalf("append after the refused ones: %+v %v, want seq 0", ack, err)
	}
	got := readAll(t, r.star, "a")
	if len(got) != 1 || string(got[0].Body) != "first" {
		t.Fatalf("stream holds %d records (%q...), want only \"first\"", len(got), got[0].Body)
	}
	if st := r.star.Stats().Standard; st.AckedBatches != 1 {
		t.Fatalf("AckedBatches = %d, want 1", st.AckedBatches)
	}
}

// TestNilContextIsAnError: every method that takes a context returns
// ErrNilContext for a nil one (but Star.Close, which closes), and none
// panics.
func TestNilContextIsAnError(t *testing.T) {
	r := newRig(t, Standard, 1, 2, nil)
	s := r.star
	if _, err := s.Append(context.Background(), "a", Batch{Records: []Record{{Body: []byte("x")}}}); err != nil {
		t.Fatal(err)
	}
	sess, err := s.OpenAppendSession(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	fut, err := sess.Submit(context.Background(), Batch{Records: []Record{{Body: []byte("y")}}})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := s.OpenReadSession(context.Background(), "a", ReadQuery{})
	if err != nil {
		t.Fatal(err)
	}
	rd, err := NewReader(ReaderConfig{Meta: r.meta, Standard: []objstore.Store{r.mems[0]}})
	if err != nil {
		t.Fatal(err)
	}
	var nilCtx context.Context
	calls := map[string]func() error{
		"Open":         func() error { _, err := Open(nilCtx, r.cfg); return err },
		"CreateStream": func() error { _, err := s.CreateStream(nilCtx, "b", StreamOptions{}); return err },
		"DeleteStream": func() error { return s.DeleteStream(nilCtx, "a") },
		"ListStreams":  func() error { _, err := s.ListStreams(nilCtx, ListOptions{}); return err },
		"Append": func() error {
			_, err := s.Append(nilCtx, "a", Batch{Records: []Record{{Body: []byte("z")}}})
			return err
		},
		"OpenAppendSession": func() error { _, err := s.OpenAppendSession(nilCtx, "a"); return err },
		"Submit":            func() error { _, err := sess.Submit(nilCtx, Batch{Records: []Record{{Body: []byte("z")}}}); return err },
		"AckFuture.Wait":    func() error { _, err := fut.Wait(nilCtx); return err },
		"CheckTail":         func() error { _, err := s.CheckTail(nilCtx, "a"); return err },
		"Read":              func() error { _, err := s.Read(nilCtx, "a", ReadQuery{}); return err },
		"OpenReadSession":   func() error { _, err := s.OpenReadSession(nilCtx, "a", ReadQuery{}); return err },
		"ReadSession.Recv":  func() error { _, err := rs.Recv(nilCtx); return err },
		"Reader.Read":       func() error { _, err := rd.Read(nilCtx, "a", ReadQuery{}); return err },
		"Reader.CheckTail":  func() error { _, err := rd.CheckTail(nilCtx, "a"); return err },
		"Reader.OpenReadSession": func() error {
			_, err := rd.OpenReadSession(nilCtx, "a", ReadQuery{})
			return err
		},
		"AppendSession.Close": func() error { return sess.Close(nilCtx) },
		// Star.Close(nil) closes the star (TestDeferredCloseNilClosesTheStar).
	}
	for name, call := range calls {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s(nil ctx) panicked: %v", name, p)
				}
			}()
			if err := call(); !errors.Is(err, ErrNilContext) {
				t.Errorf("%s(nil ctx) = %v, want ErrNilContext", name, err)
			}
		}()
	}
	if _, err := s.Append(nilCtx, "a", Batch{Records: []Record{{Body: []byte("z")}}}); !errors.Is(err, ErrNotCommitted) {
		t.Errorf("Append(nil ctx) = %v, want it to match ErrNotCommitted too", err)
	}
}

// TestStreamAdminAfterClose: CreateStream and DeleteStream after Close
// return ErrClosed and write nothing.
func TestStreamAdminAfterClose(t *testing.T) {
	r := newRig(t, Standard, 1, 3, nil)
	ctx := context.Background()
	if _, err := r.star.Append(ctx, "a", Batch{Records: []Record{{Body: []byte("x")}}}); err != nil {
		t.Fatal(err)
	}
	if err := r.star.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.star.CreateStream(ctx, "b", StreamOptions{}); !errors.Is(err, ErrClosed) {
		t.Errorf("CreateStream after Close: %v, want ErrClosed", err)
	}
	if err := r.star.DeleteStream(ctx, "a"); !errors.Is(err, ErrClosed) {
		t.Errorf("DeleteStream after Close: %v, want ErrClosed", err)
	}
	items, err := r.meta.Scan(ctx, "streams/", "", 10)
	if err != nil || len(items) != 1 {
		t.Fatalf("stream records after Close: %d (%v), want only a's", len(items), err)
	}
}

// TestCheckTailSaysWhatIsPending (issue 17, item 9): the leader's
// CheckTail counts admitted-but-unacked batches, and says how many records
// of its tail those are.
func TestCheckTailSaysWhatIsPending(t *testing.T) {
	r := newRig(t, Standard, 1, 4, nil)
	ctx := context.Background()
	if _, err := r.star.Append(ctx, "a", Batch{Records: []Record{{Body: []byte("x")}}}); err != nil {
		t.Fatal(err)
	}
	r.fault[0].SetDown(true) // the next flight cannot be acked yet
	sess, err := r.star.OpenAppendSession(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	fut, err := sess.Submit(ctx, Batch{Records: []Record{{Body: []byte("y")}, {Body: []byte("z")}}})
	if err != nil {
		t.Fatal(err)
	}
	tl, err := r.star.CheckTail(ctx, "a")
	if err != nil || tl.Seq != 3 || tl.Pending != 2 {
		t.Fatalf("CheckTail with a batch in flight: %+v %v, want Seq 3 Pending 2", tl, err)
	}
	r.fault[0].SetDown(false)
	if _, err := fut.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	tl, err = r.star.CheckTail(ctx, "a")
	if err != nil || tl.Seq != 3 || tl.Pending != 0 {
		t.Fatalf("CheckTail once acked: %+v %v, want Seq 3 Pending 0", tl, err)
	}
}
