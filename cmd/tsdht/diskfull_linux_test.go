package main

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDiskFullNode is issue 31's disk-full case with a real node on a small tmpfs
// (mounting it needs root, as CI has; elsewhere the test is skipped): another program
// fills the disk under a node holding acknowledged points. Then a write answers "disk
// full" within writeBound instead of timing out, SIGTERM ends the node within
// stopBound, a restart on the full disk serves every acknowledged point (read-only) and
// refuses writes with "disk full" at once, and once space is freed a restart takes
// writes again.
func TestDiskFullNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real node processes on a tmpfs")
	}
	const (
		writeBound = 3 * time.Second
		stopBound  = 10 * time.Second
	)
	mnt := t.TempDir()
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=48m"); err != nil {
		t.Skipf("cannot mount a 48 MiB tmpfs to fill (needs root): %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) }) // after the cluster's cleanup stopped the node
	c := newE2ECluster(t, 1, "--rf", "1", "--sync", "always", "--disk-reserve", "16MiB", "--stop-timeout", "5s")
	c.Nodes[0].Data = filepath.Join(mnt, "n0")
	c.StartAll()
	c.WaitAlive(1, time.Minute)
	const key, n = "disk/full", 600
	from, to := putSeries(c, 0, key, n)

	hog, err := os.Create(filepath.Join(mnt, "hog"))
	if err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, err = hog.Write(make([]byte, 256<<10))
	}
	hog.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the disk: %v", err)
	}

	late := strconv.FormatInt(time.Now().Add(-10*time.Minute).UnixNano(), 10) + ",1\n" // a point of no earlier quantum
	putRefused := func(what string) {
		t.Helper()
		start := time.Now()
		_, errOut, code := c.Run(late, "put", "--cluster", c.Nodes[0].RPC, "--series", key)
		took := time.Since(start)
		if code == 0 || !strings.Contains(errOut, "disk full") || took > writeBound {
			t.Fatalf("%s: put on a full disk: exit %d after %v (bound %v): %s", what, code, took, writeBound, errOut)
		}
		t.Logf("%s: put refused in %v: %s", what, took.Round(time.Millisecond), strings.TrimSpace(errOut))
	}
	putRefused("running node")

	stop := func() {
		t.Helper()
		start := time.Now()
		if err := c.Nodes[0].Cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		c.waitExit(0, stopBound)
		t.Logf("SIGTERM: exited in %v", time.Since(start).Round(time.Millisecond))
	}
	stop()

	start := time.Now()
	c.Start(0)
	c.WaitAlive(1, 15*time.Second)
	t.Logf("restarted on the full disk in %v", time.Since(start).Round(time.Millisecond))
	if got, errOut, code := countPoints(c, 0, key, from, to); code != 0 || got != n {
		t.Fatalf("read on the full disk: %d of %d points, exit %d: %s", got, n, code, errOut)
	}
	putRefused("restarted read-only")
	if !strings.Contains(c.Nodes[0].Log(), "opened read-only") {
		t.Fatalf("the node's log does not say it opened read-only:\n%s", c.Nodes[0].Log())
	}
	stop()

	if err := os.Remove(hog.Name()); err != nil {
		t.Fatal(err)
	}
	c.Start(0)
	c.WaitAlive(1, 15*time.Second)
	if _, errOut, code := c.Run(late, "put", "--cluster", c.Nodes[0].RPC, "--series", key); code != 0 {
		t.Fatalf("put after freeing space: %s", errOut)
	}
	if got, errOut, code := countPoints(c, 0, key, from, to); code != 0 || got != n {
		t.Fatalf("read after freeing space: %d of %d points, exit %d: %s", got, n, code, errOut)
	}
}
