//go:build unix

package loglet

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user and system) this process has used: on
// a busy machine a benchmark's CPU per op varies less than its wall time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
