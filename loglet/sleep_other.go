//go:build !linux

package loglet

import "time"

// preciseSleep is time.Sleep where nanosleep's precision is not known.
func preciseSleep(d time.Duration) { time.Sleep(d) }
