package loglet

import (
	"context"
	"log/slog"
	"strings"
	"testing"
)

// logged is what the buffer holds, read under its lock.
func (b *lockedBuffer) logged() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestExclusiveOpenTakesChainsAtOnce: after a crash (no clean seal), an
// Open whose host keeps rivals out (ExclusiveOpen) takes both chains over
// at once, each fenced, and serves every record acked before; one without
// it takes them one after the other; after a clean close, RefuseLiveOwner's
// check finding both sealed cleanly takes them at once too, each from the
// check's own read of it.
func TestExclusiveOpenTakesChainsAtOnce(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		clean     bool
		tweak     func(*Config)
		wantAtOne bool
	}{
		{"crash, exclusive", false, func(c *Config) { c.ExclusiveOpen = true }, true},
		{"crash, not exclusive", false, nil, false},
		{"clean close, refusing live owners", true, func(c *Config) { c.RefuseLiveOwner = true }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			p1, err := w.open("p1", nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p1.star.Append(ctx, "a", Batch{Records: []Record{{Body: []byte("one")}}}); err != nil {
				t.Fatal(err)
			}
			if tc.clean {
				if err := p1.star.Close(ctx); err != nil {
					t.Fatal(err)
				}
			} else {
				p1.kill()
			}
			var logs lockedBuffer
			p2, err := w.open("p2", func(c *Config) {
				c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
				if tc.tweak != nil {
					tc.tweak(c)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(logs.logged(), "taking every chain over at once"); got != tc.wantAtOne {
				t.Fatalf("every chain taken over at once: %v, want %v; logs:\n%s", got, tc.wantAtOne, logs.logged())
			}
			if got := strings.Count(logs.logged(), `msg="took over"`); got < 2 {
				t.Fatalf("%d chains took over, want 2; logs:\n%s", got, logs.logged())
			}
			// After the live-owner check, each chain's opening starts from
			// what the check read (Config.Found): no read of its own.
			if got := strings.Contains(logs.logged(), "read_epoch="); got == tc.clean {
				t.Fatalf("a chain's opening read the epoch record itself: %v, want %v; logs:\n%s", got, !tc.clean, logs.logged())
			}
			if ack, err := p2.star.Append(ctx, "a", Batch{Records: []Record{{Body: []byte("two")}}}); err != nil || ack.Start != 1 {
				t.Fatalf("append after the takeover: %+v %v, want it at 1", ack, err)
			}
		})
	}
}
