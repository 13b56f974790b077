//go:build linux

package loglet

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestPreciseSleepFollowsTheBubblesClock: in a testing/synctest bubble the
// precise sleeper sleeps on the bubble's clock, not in nanosleep: a
// nanosleep spends real time while the bubble's clock stands still, so the
// 20 ms asked for would not have passed on the clock the chain reads.
func TestPreciseSleepFollowsTheBubblesClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		if !fakeClock() {
			t.Fatal("fakeClock: false in a synctest bubble")
		}
		const d = 20 * time.Millisecond
		start := time.Now()
		preciseSleep(d)
		if got := time.Since(start); got != d {
			t.Fatalf("preciseSleep(%v) in a bubble: %v passed on its clock", d, got)
		}
	})
}

// TestPreciseSleepOutsideABubble: outside a bubble time.Now is the kernel's
// clock, and the precise sleeper sleeps at least what it was asked for.
func TestPreciseSleepOutsideABubble(t *testing.T) {
	if fakeClock() {
		t.Fatal("fakeClock: true outside a bubble")
	}
	const d = time.Millisecond
	start := time.Now()
	preciseSleep(d)
	if got := time.Since(start); got < d {
		t.Fatalf("preciseSleep(%v) returned after %v", d, got)
	}
}
