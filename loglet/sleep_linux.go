//go:build linux

package loglet

import (
	"syscall"
	"time"
)

// preciseSleep sleeps d in nanosleep, which wakes within the kernel's
// timer slack (tens of microseconds), where the runtime's timers wake on
// its poller's millisecond ticks.
func preciseSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for {
		var left syscall.Timespec
		if err := syscall.Nanosleep(&ts, &left); err != syscall.EINTR {
			return
		}
		ts = left // a signal (the runtime's preemption) cut it short
	}
}
