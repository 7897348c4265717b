package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
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
	// putRefused waits until a put is refused as "disk full" (the store trusts a
	// measurement of free space for a moment while plenty was left, so a write just
	// after another program filled the disk may still be stored); each answer must come
	// within writeBound.
	putRefused := func(what string) {
		t.Helper()
		var errOut string
		took := testutil.WaitFor(t, writeBound, func() bool {
			start := time.Now()
			var code int
			_, errOut, code = c.Run(late, "put", "--cluster", c.Nodes[0].RPC, "--series", key)
			if d := time.Since(start); d > writeBound {
				t.Fatalf("%s: a put on a full disk took %v (bound %v): %s", what, d, writeBound, errOut)
			}
			return code != 0 && strings.Contains(errOut, "disk full")
		}, "%s: a put refused as disk full", what)
		t.Logf("%s: put refused within %v: %s", what, took.Round(time.Millisecond), strings.TrimSpace(errOut))
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

// TestStopTimeoutOnStuckDisk: a node whose filesystem stops taking writes (frozen with
// fsfreeze, as a stuck disk would) cannot finish its stop; --stop-timeout must end the
// wait and say so within its bound instead of hanging until the service manager's
// SIGKILL. A thread the kernel holds in the frozen filesystem keeps the process from
// ending until the thaw; the log line is the node's part. Needs root, a loop device
// and fsfreeze (skipped without them).
func TestStopTimeoutOnStuckDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real node processes on a loop-mounted ext4")
	}
	const stopTimeout = 3 * time.Second
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "fs.img"), filepath.Join(dir, "mnt")
	for _, cmd := range [][]string{{"truncate", "-s", "64M", img}, {"mkfs.ext4", "-q", img}, {"mkdir", mnt}, {"mount", "-o", "loop", img, mnt}} {
		if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
			t.Skipf("cannot make a loop-mounted ext4 to freeze (needs root and a loop device): %s: %v %s", cmd[0], err, out)
		}
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	if _, err := exec.LookPath("fsfreeze"); err != nil {
		t.Skip("no fsfreeze (util-linux)")
	}
	thaw := func() { exec.Command("fsfreeze", "-u", mnt).Run() }
	t.Cleanup(thaw) // before the unmount, and before the cluster's cleanup waits for the node

	c := newE2ECluster(t, 1, "--rf", "1", "--sync", "always", "--disk-reserve", "4MiB", "--stop-timeout", stopTimeout.String())
	c.Nodes[0].Data = filepath.Join(mnt, "n0")
	c.StartAll()
	c.WaitAlive(1, time.Minute)
	const key, n = "disk/frozen", 600
	from, to := putSeries(c, 0, key, n)

	if out, err := exec.Command("fsfreeze", "-f", mnt).CombinedOutput(); err != nil {
		t.Skipf("fsfreeze -f: %v %s", err, out)
	}
	start := time.Now()
	if err := c.Nodes[0].Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	const said = "stop did not finish within --stop-timeout"
	testutil.WaitFor(t, stopTimeout+5*time.Second, func() bool { return strings.Contains(c.Nodes[0].Log(), said) },
		"the node to give up its stop")
	t.Logf("SIGTERM on a frozen filesystem: gave up the stop after %v (--stop-timeout %v)", time.Since(start).Round(time.Millisecond), stopTimeout)
	thaw()
	c.waitExit(0, 10*time.Second)
	c.Start(0)
	c.WaitAlive(1, 15*time.Second)
	if got, errOut, code := countPoints(c, 0, key, from, to); code != 0 || got != n {
		t.Fatalf("after the thaw and a restart: %d of %d points, exit %d: %s", got, n, code, errOut)
	}
}
