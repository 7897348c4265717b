//go:build unix

package store

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user + system) this process has used so far: the
// engine's background flushes and compactions count with the appends, whatever else
// the machine runs.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
