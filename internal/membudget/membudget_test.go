package membudget

import (
	"os"
	"path/filepath"
	"testing"
)

func write(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// The least of MemTotal, the cgroup limits and the soft limit applies; "max", v1's
// "no limit", a missing file and a zero soft limit are no limit.
func TestAvailableTakesTheLeast(t *testing.T) {
	dir := t.TempDir()
	meminfo := write(t, dir, "meminfo", "MemTotal:         497664 kB\nMemFree:          100000 kB\n")
	v2max := write(t, dir, "memory.max", "max\n")
	v2 := write(t, dir, "memory.max.200M", "209715200\n")
	v1none := write(t, dir, "limit_in_bytes", "9223372036854771712\n")
	missing := filepath.Join(dir, "absent")
	board := int64(497664) * 1024
	for _, c := range []struct {
		name   string
		f      Files
		soft   int64
		expect int64
	}{
		{"MemTotal alone", Files{Meminfo: meminfo, Limits: []string{v2max, v1none, missing}}, 0, board},
		{"cgroup below MemTotal", Files{Meminfo: meminfo, Limits: []string{v2, v1none}}, 0, 200 << 20},
		{"soft limit below both", Files{Meminfo: meminfo, Limits: []string{v2}}, 150 << 20, 150 << 20},
		{"soft limit above MemTotal", Files{Meminfo: meminfo}, 1 << 40, board},
		{"nothing known", Files{Meminfo: missing, Limits: []string{missing}}, 0, 0},
		{"a cgroup limit alone", Files{Meminfo: missing, Limits: []string{v2}}, 0, 200 << 20},
	} {
		if got := c.f.Available(c.soft); got != c.expect {
			t.Errorf("%s: %d bytes, want %d", c.name, got, c.expect)
		}
	}
}

// This machine's budget is known on Linux and at most its MemTotal.
func TestAvailableOnThisMachine(t *testing.T) {
	if _, err := os.Stat(System.Meminfo); err != nil {
		t.Skipf("no %s here: %v", System.Meminfo, err)
	}
	total := memTotal(System.Meminfo)
	if got := Available(); got <= 0 || got > total {
		t.Errorf("Available() = %d, want within (0, MemTotal %d]", got, total)
	}
}
