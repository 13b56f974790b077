//go:build linux

package loglet

import (
	"runtime"
	"syscall"
	"time"
)

// prSetTimerSlack is prctl's PR_SET_TIMERSLACK.
const prSetTimerSlack = 29

// preciseSleep sleeps d in nanosleep, which wakes within the thread's
// timer slack, where the runtime's timers wake on its poller's millisecond
// ticks. The slack (50 µs by default) is set to 1 ns on the sleeping
// thread first, which halves the overshoot measured here (about 95 µs ->
// 45-50 µs p50 for a 1 ms sleep and its hand-off; the rest is the vCPU's
// wake-up). The thread keeps the setting: it only makes the runtime's own
// waits on it as precise.
//
// Where time.Now is not the kernel's clock (see fakeClock) it sleeps on
// the runtime's timer instead, which follows time.Now's clock.
func preciseSleep(d time.Duration) {
	if fakeClock() {
		time.Sleep(d)
		return
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, 1, 0) // best effort
	ts := syscall.NsecToTimespec(int64(d))
	for {
		var left syscall.Timespec
		if err := syscall.Nanosleep(&ts, &left); err != syscall.EINTR {
			return
		}
		ts = left // a signal (the runtime's preemption) cut it short
	}
}

// fakeClock reports whether time.Now reads a clock other than the
// kernel's: on Linux its reading carries the kernel's monotonic clock
// everywhere but in a testing/synctest bubble, whose clock is fake and
// carries none. There a sleep in nanosleep would spend real time while
// the bubble's clock stands still (a goroutine in a system call is not
// durably blocked, so the clock cannot advance past it): the wake-up it
// was sent out for would never come due, and the lane would send one out
// again and again, so a chain could not run in a bubble at all. The
// runtime's timers follow the bubble's clock.
func fakeClock() bool {
	now := time.Now()
	return now == now.Round(0) // Round(0) strips a monotonic reading; == compares it
}
