package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
)

// netnsHarness drives scripts/netns-cluster: real node processes, each in its own network
// namespace, which the kernel can partition. It needs root.
type netnsHarness struct {
	t      *testing.T
	script string
	env    []string
}

func newNetnsHarness(t *testing.T) *netnsHarness {
	t.Helper()
	if testing.Short() {
		t.Skip("starts node processes in network namespaces")
	}
	_, file, _, _ := runtime.Caller(0)
	h := &netnsHarness{
		t:      t,
		script: filepath.Join(filepath.Dir(file), "..", "..", "scripts", "netns-cluster"),
		// Its own namespace names, so that a benchmark cluster can run beside it.
		env: append(os.Environ(), "TSDHT_BIN="+testutil.Binary(t), "TSDHT_NETNS_PREFIX=tsdt"+strconv.Itoa(os.Getpid()%100000)),
	}
	if os.Getenv("TSDHT_NETNS_STATE") == "" { // keep the nodes' logs only when asked to
		h.env = append(h.env, "TSDHT_NETNS_STATE="+filepath.Join(t.TempDir(), "netns"))
	}
	cmd := exec.Command(h.script, "check")
	cmd.Env = h.env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("network namespaces unavailable (needs root): %s", strings.TrimSpace(string(out)))
	}
	return h
}

func (h *netnsHarness) run(args ...string) string {
	h.t.Helper()
	cmd := exec.Command(h.script, args...)
	cmd.Env = h.env
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		h.t.Fatalf("netns-cluster %v: %v\n%s%s", args, err, out, stderr)
	}
	return string(out)
}

// tsdht runs the CLI in the client namespace and returns stdout, stderr and exit code.
func (h *netnsHarness) tsdht(stdin string, args ...string) (string, string, int) {
	h.t.Helper()
	cmd := exec.Command(h.script, append([]string{"exec", "c", testutil.Binary(h.t)}, args...)...)
	cmd.Env = h.env
	return testutil.RunCmd(h.t, cmd, stdin)
}

func (h *netnsHarness) addr(i int) string {
	return strings.TrimSpace(h.run("addr", strconv.Itoa(i)))
}

// waitStatus polls `tsdht status` through node i until ok accepts it.
func (h *netnsHarness) waitStatus(i int, within time.Duration, what string, ok func(rows [][]string) bool) {
	h.t.Helper()
	var out string
	if !testutil.Poll(within, func() bool {
		var code int
		out, _, code = h.tsdht("", "status", "--cluster", h.addr(i), "--timeout", "3s")
		var rows [][]string
		for _, line := range strings.Split(out, "\n")[1:] {
			if f := strings.Fields(line); len(f) >= 10 {
				rows = append(rows, f)
			}
		}
		return code == 0 && ok(rows)
	}) {
		h.t.Fatalf("node %d: %s not reached within %v; status:\n%s", i, what, within, out)
	}
}

func aliveRows(rows [][]string) int {
	n := 0
	for _, r := range rows {
		if r[2] == "alive" {
			n++
		}
	}
	return n
}

// Six nodes split 3/3 keep taking writes on both sides with write quorum 1; once the
// partition heals, every point from both sides is readable and rf is restored.
func TestPartitionHeals(t *testing.T) {
	h := newNetnsHarness(t)
	h.run("up", "6", "--rf", "3", "--write-quorum", "1")
	t.Cleanup(func() {
		if !t.Failed() || os.Getenv("TSDHT_NETNS_STATE") == "" {
			h.run("down")
		}
	})
	key := "pmu9/vang"
	base := (time.Now().Add(-time.Hour).Unix()/10)*10*int64(time.Second) + 1_700_000_000
	before := pmuPoints(base, 1200)
	if _, errOut, code := h.tsdht(csvOf(before), "put", "--cluster", h.addr(0), "--series", key); code != 0 {
		t.Fatalf("put before the partition: %s", errOut)
	}

	h.run("partition", "0,1,2", "3,4,5")
	for _, i := range []int{0, 3} {
		h.waitStatus(i, 30*time.Second, "its side alone alive", func(rows [][]string) bool { return aliveRows(rows) == 3 })
	}
	sideA := pmuPoints(base+20*int64(time.Second), 1200)
	sideB := pmuPoints(base+40*int64(time.Second), 1200)
	for _, w := range []struct {
		node int
		pts  []point
	}{{0, sideA}, {3, sideB}} {
		_, errOut, code := h.tsdht(csvOf(w.pts), "put", "--cluster", h.addr(w.node), "--series", key, "--write-quorum", "1")
		if code != 0 || !strings.Contains(errOut, "stored 1200 points") {
			t.Fatalf("put on the side of node %d: exit %d: %s", w.node, code, errOut)
		}
	}

	h.run("heal")
	h.waitStatus(0, 60*time.Second, "all six alive", func(rows [][]string) bool { return aliveRows(rows) == 6 })
	all := append(append(append([]point{}, before...), sideA...), sideB...)
	from, to := base, base+60*int64(time.Second)
	healStart := time.Now()
	for _, i := range []int{1, 4} {
		var out, errOut string
		var code int
		if !testutil.Poll(90*time.Second, func() bool {
			out, errOut, code = h.tsdht("", "get", "--cluster", h.addr(i), "--series", key,
				"--from", strconv.FormatInt(from, 10), "--to", strconv.FormatInt(to, 10))
			return code == 0 && len(parseCSV(t, out)) == len(inRange(all, from, to))
		}) {
			t.Fatalf("via node %d after heal: exit %d, %d points, want %d: %s", i, code, len(parseCSV(t, out)), len(inRange(all, from, to)), errOut)
		}
		got := parseCSV(t, out)
		for k, p := range inRange(all, from, to) {
			if got[k] != p {
				t.Fatalf("via node %d: point %d = %v, want %v", i, k, got[k], p)
			}
		}
	}
	readable := time.Since(healStart)
	// rf restored: no node reports an under-replicated pair after a pass that saw all six.
	h.waitStatus(0, 120*time.Second, "no under-replicated shards", func(rows [][]string) bool {
		if len(rows) != 6 || aliveRows(rows) != 6 {
			return false
		}
		for _, r := range rows {
			if r[6] != "0" {
				return false
			}
		}
		return true
	})
	t.Logf("after heal: both sides' points readable in %v, rf restored in %v", readable.Round(time.Millisecond), time.Since(healStart).Round(time.Millisecond))
}
