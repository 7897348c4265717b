//go:build unix

package rpc

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user + system) this process has used so far: the
// clients, servers and kernel work of a loopback benchmark all count, whatever else
// the machine runs.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
