package membudget

import (
	"os"
	"path/filepath"
	"testing"
)

func write(t *testing.T, file, text string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// The least of MemTotal, the limits of the process' cgroup and its ancestors (v2 and
// v1) and the soft limit applies; "max", v1's "no limit", a missing file and a zero
// soft limit are no limit.
func TestAvailableTakesTheLeast(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "cgroup")
	meminfo := write(t, filepath.Join(dir, "meminfo"), "MemTotal:         497664 kB\nMemFree:          100000 kB\n")
	board := int64(497664) * 1024
	write(t, filepath.Join(root, "memory.max"), "max\n")
	write(t, filepath.Join(root, "system.slice/memory.max"), "max\n")
	write(t, filepath.Join(root, "system.slice/tsdht.service/memory.max"), "209715200\n") // MemoryMax=200M
	write(t, filepath.Join(root, "limited.slice/memory.max"), "104857600\n")
	write(t, filepath.Join(root, "limited.slice/app.service/memory.max"), "max\n")
	write(t, filepath.Join(root, "memory/memory.limit_in_bytes"), "9223372036854771712\n")
	write(t, filepath.Join(root, "memory/docker/abc/memory.limit_in_bytes"), "314572800\n")
	cgroup := func(name, text string) string { return write(t, filepath.Join(dir, name), text) }
	unit := cgroup("unit", "0::/system.slice/tsdht.service\n")
	underSlice := cgroup("slice", "0::/limited.slice/app.service\n")
	v1 := cgroup("v1", "5:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n0::/\n")
	top := cgroup("top", "0::/\n")
	missing := filepath.Join(dir, "absent")
	files := func(cg string) Files { return Files{Meminfo: meminfo, Cgroup: cg, Root: root} }
	for _, c := range []struct {
		name   string
		f      Files
		soft   int64
		expect int64
	}{
		{"MemTotal alone", files(top), 0, board},
		{"a systemd unit's MemoryMax", files(unit), 0, 200 << 20},
		{"a slice's limit above the unit", files(underSlice), 0, 100 << 20},
		{"a v1 memory cgroup", files(v1), 0, 300 << 20},
		{"soft limit below the cgroup's", files(unit), 150 << 20, 150 << 20},
		{"soft limit above MemTotal", files(top), 1 << 40, board},
		{"no cgroup file", files(missing), 0, board},
		{"nothing known", Files{Meminfo: missing, Cgroup: missing, Root: root}, 0, 0},
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
