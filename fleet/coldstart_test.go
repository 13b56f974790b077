package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// countHandler counts the records whose message is one of msgs, with
// their attributes, and passes every record on to next.
type countHandler struct {
	next  slog.Handler
	attrs []slog.Attr
	mu    *sync.Mutex
	seen  map[string][]string // message -> "k=v ..." of each record
}

func newCountHandler(next slog.Handler) countHandler {
	return countHandler{next: next, mu: &sync.Mutex{}, seen: map[string][]string{}}
}

func (h countHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h countHandler) Handle(ctx context.Context, r slog.Record) error {
	var b strings.Builder
	for _, a := range h.attrs {
		fmt.Fprintf(&b, "%s ", a)
	}
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, "%s ", a)
		return true
	})
	h.mu.Lock()
	h.seen[r.Message] = append(h.seen[r.Message], b.String())
	h.mu.Unlock()
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h countHandler) WithAttrs(as []slog.Attr) slog.Handler {
	h.next = h.next.WithAttrs(as)
	h.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return h
}

func (h countHandler) WithGroup(g string) slog.Handler {
	h.next = h.next.WithGroup(g)
	return h
}

func (h countHandler) records(msg string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.seen[msg]...)
}

// TestFleetColdStart: five members join back to back, each while the ones
// before it are still opening the stars placed on them alone. Each star
// that moves to a later member is handed over cleanly: the new owner waits
// for the opening member's claim, then its lead, to go. No open may depose
// a live owner (HandoffWait is far longer than the opens take), none is
// refused for a live owner's epoch, and no two members open a star
// against each other (a lost takeover). Without the claim, a run of this
// test saw both.
func TestFleetColdStart(t *testing.T) {
	c := newCluster(t, 32)
	h := newCountHandler(testLog(t).Handler())
	names := []string{"m0", "m1", "m2", "m3", "m4"}
	for _, name := range names {
		c.joinWith(name, c.eps, func(cfg *Config) {
			cfg.Logger = slog.New(h)
			cfg.HandoffWait = 30 * time.Second
		})
	}
	c.waitSettled("cold start", names...)
	for _, r := range h.records("fleet: opening star") {
		if strings.Contains(r, "may_depose=true") {
			t.Errorf("an open deposed a live owner in a cold start: %s", r)
		}
	}
	for _, msg := range []string{
		"fleet: another member opened the star first; will retry", // two opens against each other
		"fleet: star still held by a live member; will retry",     // an open begun before the old owner's close
		"fleet: open failed; will retry",
	} {
		if rs := h.records(msg); len(rs) > 0 {
			t.Errorf("%q %d times in a cold start, e.g. %s", msg, len(rs), rs[0])
		}
	}
	t.Logf("opens %d (for %d stars), found a claim or lead only at its own claim %d times",
		len(h.records("fleet: opening star")), len(c.stars),
		len(h.records("fleet: another member is opening or leading the star; will retry")))
}

// TestFleetKeepRouter: with Config.KeepRouter, a closed node's Router keeps
// following etcd (a host serving through its leave routes on a live
// table) until the host closes it.
func TestFleetKeepRouter(t *testing.T) {
	c := newCluster(t, 4)
	n := c.joinWith("m0", c.eps, func(cfg *Config) { cfg.KeepRouter = true })
	c.waitSettled("m0 alone", "m0")
	c.leave("m0")
	r := n.Router()
	defer r.Close()
	c.join("m1")
	deadline := time.After(time.Minute)
	for {
		changed := r.Changed()
		if m, _, ok := r.Leader("s00"); ok && m.Name == "m1" {
			break
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("the closed node's router did not follow m1's join: members %v, leads %v", r.Members(), r.Leads("s00"))
		}
	}
}
