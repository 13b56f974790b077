package loglet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/flightlog/flightlog/internal/hang"
	"github.com/flightlog/flightlog/metastore"
	"github.com/flightlog/flightlog/objstore"
)

// watchProbe is a metastore.Mem whose Watch the test observes and bends:
// watching receives the prefix of each Watch as it is put in place; before
// runs first (once); fail refuses the Watch; ended returns a channel that is
// already closed; silent returns a channel that never signals or closes.
type watchProbe struct {
	*metastore.Mem
	watching chan string

	mu                  sync.Mutex
	before              func(prefix string)
	fail, ended, silent bool
	watches             int
}

var _ metastore.Watcher = (*watchProbe)(nil)

func newWatchProbe(m *metastore.Mem) *watchProbe {
	return &watchProbe{Mem: m, watching: make(chan string, 1024)}
}

func (p *watchProbe) Watch(ctx context.Context, prefix string) (<-chan struct{}, error) {
	p.mu.Lock()
	before := p.before
	p.before = nil
	fail, ended, silent := p.fail, p.ended, p.silent
	p.watches++
	p.mu.Unlock()
	if before != nil {
		before(prefix)
	}
	var ch <-chan struct{}
	var err error
	switch {
	case fail:
		err = fmt.Errorf("probe: watch refused: %w", metastore.ErrUnavailable)
	case ended:
		c := make(chan struct{})
		close(c)
		ch = c
	case silent:
		ch = make(chan struct{})
	default:
		ch, err = p.Mem.Watch(ctx, prefix)
	}
	select {
	case p.watching <- prefix:
	default:
	}
	return ch, err
}

func (p *watchProbe) watchCalls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.watches
}

// noWatch hides the Watch of the store it wraps.
type noWatch struct{ metastore.Store }

// readerRig is a leader over a Mem metastore and a Mem bucket, and a
// Reader over the same stores whose metastore the test chooses.
type readerRig struct {
	meta   *metastore.Mem
	bucket objstore.Store
	star   *Star
}

func newReaderRig(t *testing.T, createOnAppend bool) *readerRig {
	t.Helper()
	r := &readerRig{meta: metastore.NewMem(), bucket: objstore.NewMem()}
	s, err := Open(context.Background(), Config{Star: "s1", Meta: r.meta, CreateOnAppend: createOnAppend, Logger: quietLogger(),
		AbsorbInterval: time.Millisecond, Standard: ClassConfig{Stores: []objstore.Store{r.bucket}, FlushDeadline: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	r.star = s
	return r
}

func (r *readerRig) reader(t *testing.T, meta metastore.Store, poll time.Duration) *Reader {
	t.Helper()
	rd, err := NewReader(ReaderConfig{Meta: meta, Standard: []objstore.Store{r.bucket}, PollInterval: poll})
	if err != nil {
		t.Fatal(err)
	}
	return rd
}

func (r *readerRig) create(t *testing.T, name string) {
	t.Helper()
	if _, err := r.star.CreateStream(t.Context(), name, StreamOptions{Class: Standard, Star: "s1"}); err != nil {
		t.Fatal(err)
	}
}

func (r *readerRig) append(t *testing.T, name, body string) Ack {
	t.Helper()
	ack, err := r.star.Append(context.Background(), name, Batch{Records: []Record{{Body: []byte(body)}}})
	if err != nil {
		t.Errorf("append to %s: %v", name, err)
	}
	return ack
}

type recvResult struct {
	recs []SequencedRecord
	err  error
}

// recvAsync runs one Recv in a goroutine.
func recvAsync(ctx context.Context, rs *ReadSession) <-chan recvResult {
	out := make(chan recvResult, 1)
	go func() {
		recs, err := rs.Recv(ctx)
		out <- recvResult{recs, err}
	}()
	return out
}

// wantRecords fails unless the Recv delivers exactly bodies from seq first.
func wantRecords(t *testing.T, got <-chan recvResult, first uint64, bodies ...string) {
	t.Helper()
	select {
	case res := <-got:
		if res.err != nil {
			t.Fatalf("Recv: %v", res.err)
		}
		if len(res.recs) != len(bodies) {
			t.Fatalf("Recv returned %d records, want %d", len(res.recs), len(bodies))
		}
		for i, rec := range res.recs {
			if rec.Seq != first+uint64(i) || string(rec.Body) != bodies[i] {
				t.Fatalf("Recv record %d = seq %d %q, want seq %d %q", i, rec.Seq, rec.Body, first+uint64(i), bodies[i])
			}
		}
	case <-hang.After(t): // a session never woken fails before go test's -timeout
		t.Fatal("Recv delivered nothing")
	}
}

// waitWatching waits until the probe has put a watch in place.
func waitWatching(t *testing.T, p *watchProbe) string {
	t.Helper()
	select {
	case prefix := <-p.watching:
		return prefix
	case <-hang.After(t):
		t.Fatal("the session never watched")
		return ""
	}
}

// TestReaderSessionWakesByWatch: with a poll interval of an hour, only the
// watch can wake the session, and it does, once per record, on a stream
// that was empty when the session opened.
func TestReaderSessionWakesByWatch(t *testing.T) {
	r := newReaderRig(t, false)
	r.create(t, "a")
	probe := newWatchProbe(r.meta)
	rd := r.reader(t, probe, time.Hour)
	rs, err := rd.OpenReadSession(t.Context(), "a", ReadQuery{Start: AtSeq(0)})
	if err != nil {
		t.Fatal(err)
	}
	if rs.Next() != 0 {
		t.Fatalf("a session on an empty stream opens at %d, want 0", rs.Next())
	}
	for i := range 3 {
		got := recvAsync(t.Context(), rs)
		waitWatching(t, probe) // Recv found nothing and waits on the watch
		body := fmt.Sprint("r", i)
		r.append(t, "a", body)
		wantRecords(t, got, uint64(i), body)
	}
}

// TestReaderSessionRechecksAfterWatching: the record's ref lands after the
// session's read found nothing and before its watch is in place, so no
// signal will ever come for it; the session must find it by looking again
// once watching (the poll interval is an hour).
func TestReaderSessionRechecksAfterWatching(t *testing.T) {
	r := newReaderRig(t, false)
	r.create(t, "a")
	probe := newWatchProbe(r.meta)
	probe.before = func(prefix string) {
		refs, err := r.meta.Watch(t.Context(), prefix)
		if err != nil {
			t.Error(err)
			return
		}
		r.append(t, "a", "early")
		<-refs // its ref is written
	}
	rd := r.reader(t, probe, time.Hour)
	rs, err := rd.OpenReadSession(t.Context(), "a", ReadQuery{Start: AtSeq(0)})
	if err != nil {
		t.Fatal(err)
	}
	wantRecords(t, recvAsync(t.Context(), rs), 0, "early")
}

// TestReaderSessionFallsBackToPolling: a store without Watch, a Watch that
// fails and a watch that ends at once all leave the session polling, and
// a watch that never signals is caught by the safety poll.
func TestReaderSessionFallsBackToPolling(t *testing.T) {
	for _, c := range []struct {
		name  string
		bend  func(p *watchProbe)
		watch bool // the store is a Watcher
	}{
		{"no Watcher", nil, false},
		{"Watch fails", func(p *watchProbe) { p.fail = true }, true},
		{"watch ends at once", func(p *watchProbe) { p.ended = true }, true},
		{"watch never signals", func(p *watchProbe) { p.silent = true }, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newReaderRig(t, false)
			r.create(t, "a")
			probe := newWatchProbe(r.meta)
			var meta metastore.Store = probe
			if c.bend != nil {
				c.bend(probe)
			}
			if !c.watch {
				meta = noWatch{probe}
			}
			rd := r.reader(t, meta, time.Millisecond)
			rs, err := rd.OpenReadSession(t.Context(), "a", ReadQuery{Start: AtSeq(0)})
			if err != nil {
				t.Fatal(err)
			}
			got := recvAsync(t.Context(), rs)
			if c.watch {
				waitWatching(t, probe)
			}
			r.append(t, "a", "x")
			wantRecords(t, got, 0, "x")
			if n := probe.watchCalls(); (n > 0) != c.watch {
				t.Fatalf("Watch called %d times; want calls only on a Watcher", n)
			}
		})
	}
}

// TestOpenReadSessionBeforeTheFirstRecord pins what a session does on a
// stream that exists but is empty, and on a name not created yet under
// CreateOnAppend, for a Reader and for the leader.
func TestOpenReadSessionBeforeTheFirstRecord(t *testing.T) {
	r := newReaderRig(t, true)
	probe := newWatchProbe(r.meta)
	rd := r.reader(t, probe, time.Hour)
	ctx := t.Context()

	// Not created yet: ErrStreamNotFound for both, and opening creates
	// nothing.
	if _, err := rd.OpenReadSession(ctx, "later", ReadQuery{}); !errors.Is(err, ErrStreamNotFound) {
		t.Fatalf("Reader.OpenReadSession before the stream exists = %v, want ErrStreamNotFound", err)
	}
	if _, err := r.star.OpenReadSession(ctx, "later", ReadQuery{}); !errors.Is(err, ErrStreamNotFound) {
		t.Fatalf("Star.OpenReadSession before the stream exists (CreateOnAppend) = %v, want ErrStreamNotFound", err)
	}
	if _, err := rd.CheckTail(ctx, "later"); !errors.Is(err, ErrStreamNotFound) {
		t.Fatalf("after both opens, CheckTail = %v, want ErrStreamNotFound (opening a session creates no stream)", err)
	}
	// The first append creates it; then sessions open and read from 0.
	r.append(t, "later", "first")
	rs, err := rd.OpenReadSession(ctx, "later", ReadQuery{Start: AtSeq(0)})
	if err != nil {
		t.Fatalf("Reader.OpenReadSession once the first append created the stream: %v", err)
	}
	wantRecords(t, recvAsync(ctx, rs), 0, "first")

	// Exists, empty: every kind of start opens at 0 and waits for the
	// first record.
	r.create(t, "empty")
	starts := map[string]Position{"AtSeq(0)": AtSeq(0), "TailOffset(5)": TailOffset(5), "AtTimestamp(now)": AtTimestamp(time.Now().UnixMilli())}
	sessions := map[string]*ReadSession{}
	for name, p := range starts {
		rs, err := rd.OpenReadSession(ctx, "empty", ReadQuery{Start: p})
		if err != nil {
			t.Fatalf("Reader.OpenReadSession(%s) on an empty stream: %v", name, err)
		}
		if rs.Next() != 0 {
			t.Fatalf("Reader.OpenReadSession(%s) on an empty stream opens at %d, want 0", name, rs.Next())
		}
		sessions[name] = rs
	}
	leader, err := r.star.OpenReadSession(ctx, "empty", ReadQuery{Start: AtSeq(0)})
	if err != nil {
		t.Fatalf("Star.OpenReadSession on an empty stream: %v", err)
	}
	gotLeader := recvAsync(ctx, leader)
	var got []<-chan recvResult
	for len(probe.watching) > 0 {
		<-probe.watching // what the session on "later" left, if it waited
	}
	for _, rs := range sessions {
		got = append(got, recvAsync(ctx, rs))
		waitWatching(t, probe) // this Recv is waiting for the first record
	}
	r.append(t, "empty", "one")
	for _, g := range got {
		wantRecords(t, g, 0, "one")
	}
	wantRecords(t, gotLeader, 0, "one")
}
