// Package membudget says how much memory this process may use: the least of the
// machine's memory (MemTotal), the limit of its cgroup (memory.max under cgroup v2,
// memory.limit_in_bytes under v1) and the Go soft limit (GOMEMLIMIT). A node sizes what
// it may cache from it, so that a BeagleBone under its systemd unit and a server with
// gigabytes to spare each get a cache that fits.
package membudget

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// Files are where Available reads the machine's and the cgroup's memory; a test points
// them elsewhere.
type Files struct {
	// Meminfo is /proc/meminfo: its MemTotal line, in kB.
	Meminfo string
	// Limits are cgroup limit files, in bytes or "max" (no limit); the least applies.
	Limits []string
}

// System are the files of this machine: /proc/meminfo, and the cgroup v2 and v1 limits
// of the process' cgroup as a container or a systemd unit sees them mounted.
var System = Files{
	Meminfo: "/proc/meminfo",
	Limits:  []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"},
}

// Available returns the bytes this process may use: the least of what f says and the
// Go soft limit, or 0 when none of them is known (not Linux, no /proc).
func Available() int64 { return System.Available(goLimit()) }

// goLimit is the Go soft memory limit, or 0 when none is set (math.MaxInt64).
func goLimit() int64 {
	if l := debug.SetMemoryLimit(-1); l < math.MaxInt64 {
		return l
	}
	return 0
}

// Available returns the least of f's memory, f's limits and soft (each ignored where
// it is unknown or 0), or 0 when none is known.
func (f Files) Available(soft int64) int64 {
	least := int64(0)
	take := func(n int64) {
		if n > 0 && (least == 0 || n < least) {
			least = n
		}
	}
	take(memTotal(f.Meminfo))
	for _, p := range f.Limits {
		take(limit(p))
	}
	take(soft)
	return least
}

// memTotal returns MemTotal in bytes from a meminfo file, or 0.
func memTotal(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || kb <= 0 || kb > math.MaxInt64/1024 {
				return 0
			}
			return kb * 1024
		}
	}
	return 0
}

// limit returns a cgroup limit file's bytes, or 0 for "max", a missing file or
// cgroup v1's "no limit" (a number near the int64 maximum).
func limit(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	s := strings.TrimSpace(string(b))
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n >= math.MaxInt64/2 {
		return 0 // "max", or v1's page-rounded maximum
	}
	return n
}
