package metastoretest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/flightlog/flightlog/metastore"
)

// watchWait bounds how long the kit waits for a watch to signal or end. A
// backend that never does fails after it, instead of hanging the run.
const watchWait = 10 * time.Second

// watcher returns s as a metastore.Watcher, or skips: Watcher is optional.
func watcher(t *testing.T, s metastore.Store) metastore.Watcher {
	t.Helper()
	w, ok := s.(metastore.Watcher)
	if !ok {
		t.Skip("the store does not implement metastore.Watcher")
	}
	return w
}

// watch starts a watch of prefix that ends with the test.
func watch(t *testing.T, w metastore.Watcher, prefix string) <-chan struct{} {
	t.Helper()
	ch, err := w.Watch(t.Context(), prefix)
	if err != nil {
		t.Fatalf("Watch(%q): %v", prefix, err)
	}
	if cap(ch) > 1 {
		t.Fatalf("Watch(%q) returned a channel of capacity %d: signals must coalesce into at most one pending", prefix, cap(ch))
	}
	return ch
}

// WantSignal fails unless ch delivers a signal within watchWait. It and
// WantEnded are exported for a backend's own watch tests.
func WantSignal(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	timer := time.NewTimer(watchWait)
	defer timer.Stop()
	select {
	case _, ok := <-ch:
		if !ok {
			t.Fatalf("%s: the watch ended, want a signal", what)
		}
	case <-timer.C:
		t.Fatalf("%s: no signal within %v", what, watchWait)
	}
}

// WantEnded fails unless ch is closed within watchWait (signals still
// pending before the close are drained).
func WantEnded(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	timer := time.NewTimer(watchWait)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timer.C:
			t.Fatalf("%s: the watch's channel is still open after %v", what, watchWait)
		}
	}
}

// drain takes a pending signal, if any, without waiting.
func drain(ch <-chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

func (k kit) watchTests() []kitTest {
	return []kitTest{
		{"put_after_watch_returns_signals", func(t *testing.T, s metastore.Store) {
			// A new watch each round, written to at once: a Watch that
			// returns before the watch is in place misses some of them.
			w := watcher(t, s)
			for i := range 20 {
				ctx, cancel := context.WithCancel(t.Context())
				ch, err := w.Watch(ctx, "p/")
				if err != nil {
					t.Fatalf("Watch: %v", err)
				}
				put(t, s, fmt.Sprintf("p/%d/deeper", i), "x", metastore.NoVersion)
				WantSignal(t, ch, fmt.Sprintf("round %d: Put under the prefix right after Watch returned", i))
				cancel()
			}
		}},
		{"delete_and_commit_signal", func(t *testing.T, s metastore.Store) {
			w := watcher(t, s)
			v := put(t, s, "p/a", "x", metastore.NoVersion)
			ch := watch(t, w, "p/")
			if err := s.Delete(t.Context(), "p/a", v); err != nil {
				t.Fatal(err)
			}
			WantSignal(t, ch, "Delete under the prefix")
			drain(ch)
			// One op of a Commit under the prefix, the others outside it.
			if _, err := s.Commit(t.Context(), []metastore.Op{
				{Kind: metastore.OpPut, Key: "q/1", Value: []byte("x"), Expect: metastore.NoVersion},
				{Kind: metastore.OpPut, Key: "p/b", Value: []byte("x"), Expect: metastore.NoVersion},
				{Kind: metastore.OpPut, Key: "r/1", Value: []byte("x"), Expect: metastore.NoVersion},
			}); err != nil {
				t.Fatal(err)
			}
			WantSignal(t, ch, "Commit with one put under the prefix")
			drain(ch)
			if _, err := s.Commit(t.Context(), []metastore.Op{
				{Kind: metastore.OpPut, Key: "q/2", Value: []byte("x"), Expect: metastore.NoVersion},
				{Kind: metastore.OpDelete, Key: "p/b", Expect: metastore.AnyVersion},
			}); err != nil {
				t.Fatal(err)
			}
			WantSignal(t, ch, "Commit with one delete under the prefix")
		}},
		{"signals_coalesce", func(t *testing.T, s metastore.Store) {
			// Many writes and no receive: the backend must neither block
			// its writers nor queue a signal per write.
			w := watcher(t, s)
			ch := watch(t, w, "p/")
			for i := range 50 {
				put(t, s, fmt.Sprintf("p/%02d", i), "x", metastore.NoVersion)
			}
			WantSignal(t, ch, "50 puts under the prefix")
			if n := len(ch); n > 1 {
				t.Fatalf("%d signals pending after one receive, want at most 1", n)
			}
			// Still live after the burst.
			drain(ch)
			put(t, s, "p/last", "x", metastore.NoVersion)
			WantSignal(t, ch, "a put after the burst")
		}},
		{"every_watch_of_a_prefix_is_signalled", func(t *testing.T, s metastore.Store) {
			w := watcher(t, s)
			a, b, all := watch(t, w, "p/"), watch(t, w, "p/x"), watch(t, w, "")
			put(t, s, "p/x1", "x", metastore.NoVersion)
			WantSignal(t, a, `watch "p/"`)
			WantSignal(t, b, `watch "p/x"`)
			WantSignal(t, all, `watch "" (every key)`)
		}},
		{"ended_context_ends_the_watch", func(t *testing.T, s metastore.Store) {
			w := watcher(t, s)
			ctx, cancel := context.WithCancel(t.Context())
			ch, err := w.Watch(ctx, "p/")
			if err != nil {
				t.Fatal(err)
			}
			put(t, s, "p/a", "x", metastore.NoVersion) // a pending signal does not keep it open
			cancel()
			WantEnded(t, ch, "after its context was cancelled")
			// The store serves on, and new watches work.
			ch = watch(t, w, "p/")
			put(t, s, "p/b", "x", metastore.NoVersion)
			WantSignal(t, ch, "a new watch after another ended")
		}},
		{"ended_context_is_refused", func(t *testing.T, s metastore.Store) {
			w := watcher(t, s)
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			ch, err := w.Watch(ctx, "p/")
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Watch with a cancelled context = %v, %v; want an error wrapping context.Canceled", ch, err)
			}
		}},
		{"writes_through_another_handle_signal", func(t *testing.T, s metastore.Store) {
			w := watcher(t, s)
			if k.h.Reopen == nil {
				t.Skip("Harness.Reopen is nil: no second handle on the same storage")
			}
			ch := watch(t, w, "p/")
			other := k.h.Reopen(t, s)
			put(t, other, "p/a", "x", metastore.NoVersion)
			timer := time.NewTimer(watchWait)
			defer timer.Stop()
			select {
			case _, ok := <-ch:
				if !ok {
					t.Skip("Reopen closed the watched store (one handle at a time): nothing to test")
				}
			case <-timer.C:
				t.Fatalf("a put through another handle: no signal within %v", watchWait)
			}
		}},
	}
}
