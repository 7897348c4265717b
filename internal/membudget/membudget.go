// Package membudget says how much memory this process may use: the least of the
// machine's memory (MemTotal), the memory limits of its cgroup and the cgroups above it
// (memory.max under cgroup v2, memory.limit_in_bytes under v1: a systemd unit's
// MemoryMax, a container's limit) and the Go soft limit (GOMEMLIMIT). A node sizes what
// it may cache from it, so that a BeagleBone under its systemd unit and a server with
// gigabytes to spare each get a cache that fits.
package membudget

import (
	"math"
	"os"
	"path"
	"runtime/debug"
	"strconv"
	"strings"
)

// Files are where Available reads the machine's and the cgroups' memory; a test points
// them elsewhere.
type Files struct {
	// Meminfo is /proc/meminfo: its MemTotal line, in kB.
	Meminfo string
	// Cgroup is /proc/self/cgroup: the process' cgroup, "0::PATH" under v2 and
	// "N:memory:PATH" under v1.
	Cgroup string
	// Root is where the cgroup file systems are mounted: v2 at Root, v1's memory
	// controller at Root/memory.
	Root string
}

// System are the files of this machine.
var System = Files{Meminfo: "/proc/meminfo", Cgroup: "/proc/self/cgroup", Root: "/sys/fs/cgroup"}

// Available returns the bytes this process may use: the least of what System says and
// the Go soft limit, or 0 when none of them is known (not Linux, no /proc).
func Available() int64 { return System.Available(goLimit()) }

// goLimit is the Go soft memory limit, or 0 when none is set (math.MaxInt64).
func goLimit() int64 {
	if l := debug.SetMemoryLimit(-1); l < math.MaxInt64 {
		return l
	}
	return 0
}

// Available returns the least of f's MemTotal, the limits of the process' cgroup and
// its ancestors, and soft (each ignored where it is unknown or 0), or 0 when none is
// known.
func (f Files) Available(soft int64) int64 {
	least := int64(0)
	take := func(n int64) {
		if n > 0 && (least == 0 || n < least) {
			least = n
		}
	}
	take(memTotal(f.Meminfo))
	for _, p := range f.limitFiles() {
		take(limit(p))
	}
	take(soft)
	return least
}

// limitFiles returns the memory limit files of the process' cgroup and of every
// cgroup above it, v2's and v1's; a container that sees its own cgroup as the root
// finds its limit at the root.
func (f Files) limitFiles() []string {
	b, err := os.ReadFile(f.Cgroup)
	if err != nil {
		return nil
	}
	var files []string
	for line := range strings.Lines(string(b)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		var dir, name string
		switch {
		case parts[0] == "0" && parts[1] == "": // v2
			dir, name = f.Root, "memory.max"
		case strings.Contains(","+parts[1]+",", ",memory,"): // v1
			dir, name = path.Join(f.Root, "memory"), "memory.limit_in_bytes"
		default:
			continue
		}
		for p := path.Clean("/" + parts[2]); ; p = path.Dir(p) {
			files = append(files, path.Join(dir, p, name))
			if p == "/" {
				break
			}
		}
	}
	return files
}

// memTotal returns MemTotal in bytes from a meminfo file, or 0.
func memTotal(file string) int64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
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
func limit(file string) int64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n <= 0 || n >= math.MaxInt64/2 {
		return 0 // "max", or v1's page-rounded maximum
	}
	return n
}
