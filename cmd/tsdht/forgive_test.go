package main

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
)

// The CLI's forgiving behaviours (issue 13), each against the real binary.

func TestUsageErrors(t *testing.T) {
	bin := testutil.Binary(t)
	cases := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"unknown command", []string{"gett"}, exitUsage, []string{`unknown command "gett"`, `did you mean "get"?`, "tsdht --help"}},
		{"unknown flag", []string{"get", "--serie", "x"}, exitUsage, []string{"unknown flag --serie", "did you mean --series?", "tsdht get --help"}},
		{"missing flags", []string{"get", "--series", "x"}, exitUsage, []string{"missing --cluster, --from, --to"}},
		{"bad flag value", []string{"get", "--cluster", "127.0.0.1:1", "--series", "x", "--from", "0", "--to", "1", "--time-format", "unix"}, exitUsage, []string{"--time-format \"unix\""}},
		{"bad time unit", []string{"put", "--cluster", "127.0.0.1:1", "--series", "x", "--time-unit", "min"}, exitUsage, []string{"--time-unit \"min\""}},
		// Values parsed by the commands themselves are usage errors too, not runtime failures.
		{"bad window", []string{"agg", "--cluster", "127.0.0.1:1", "--series", "x", "--from", "0", "--to", "1", "--every", "zz"}, exitUsage, []string{"--every", "tsdht agg --help"}},
		{"bad timestamp", []string{"get", "--cluster", "127.0.0.1:1", "--series", "x", "--from", "yesterdays", "--to", "now"}, exitUsage, []string{"--from", "tsdht get --help"}},
		{"bad id format", []string{"node", "--rpc", "127.0.0.1:1", "--gossip", "127.0.0.1:2", "--data", t.TempDir(), "--id-format", "xyz"}, exitUsage, []string{"--id-format", "tsdht node --help"}},
		{"bad lookback", []string{"latest", "--cluster", "127.0.0.1:1", "--series", "x", "--lookback", "soon"}, exitUsage, []string{"--lookback", "tsdht latest --help"}},
		{"backup: two directories", []string{"backup", "--cluster", "127.0.0.1:1", "--to", "a", "--to", "b"}, exitUsage, []string{"one must name the directory", "--until"}},
		{"backup: bad rate", []string{"backup", "--cluster", "127.0.0.1:1", "--to", "a", "--rate", "-1"}, exitUsage, []string{"--rate"}},
		{"backup: reversed range", []string{"backup", "--cluster", "127.0.0.1:1", "--to", "a", "--from", "now", "--until", "-1h"}, exitUsage, []string{"--from"}},
		{"restore: no cluster", []string{"restore", "--from", "a"}, exitUsage, []string{"--cluster", "--verify"}},
		{"restore --verify: no backup", []string{"restore", "--from", "/nonexistent", "--verify"}, exitFailure, []string{"no backup here"}},
		{"runtime failure", []string{"get", "--cluster", "127.0.0.1:1", "--series", "x", "--from", "-5m", "--to", "now"}, exitFailure, []string{"unreachable"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := testutil.RunCmd(t, exec.Command(bin, tc.args...), "")
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %q", code, tc.code, errOut)
			}
			if out != "" {
				t.Errorf("stdout %q, want nothing (no help dump)", out)
			}
			if n := strings.Count(strings.TrimRight(errOut, "\n"), "\n"); n != 0 {
				t.Errorf("stderr has %d lines, want 1: %q", n+1, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q lacks %q", errOut, w)
				}
			}
		})
	}
}

func TestVersion(t *testing.T) {
	bin := testutil.Binary(t)
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, errOut, code := testutil.RunCmd(t, exec.Command(bin, args...), "")
		if code != 0 || !strings.HasPrefix(out, "tsdht ") || !strings.Contains(out, "go1.") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	// A stamped build reports the stamp.
	stamped := filepath.Join(t.TempDir(), "tsdht")
	testutil.Build(t, stamped, "-ldflags", "-X main.version=v9.8.7-test")
	out, _, _ := testutil.RunCmd(t, exec.Command(stamped, "version"), "")
	if !strings.HasPrefix(out, "tsdht v9.8.7-test ") {
		t.Errorf("stamped version: %q", out)
	}
}

func TestForgivingPutGetStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 2-node cluster of real processes; skipped with -short")
	}
	c := startE2ECluster(t, 2) // rf 3 with 2 nodes: status must say so
	addr := c.Nodes[0].RPC
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	secs := base.Unix()

	// Epoch seconds read as ns land in 1970: refused, naming the line and the unit.
	_, errOut, code := c.Run(fmt.Sprintf("%d,1\n", secs), "put", "--cluster", addr, "--series", "u/s", "--write-quorum", "1")
	if code != exitFailure || !strings.Contains(errOut, "line 1") || !strings.Contains(errOut, "--time-unit s") || !strings.Contains(errOut, "1970") {
		t.Fatalf("epoch seconds as ns: exit %d, stderr %q", code, errOut)
	}
	// Milliseconds given as seconds land far in the future: refused, suggesting ms.
	_, errOut, code = c.Run(fmt.Sprintf("%d,1\n", base.UnixMilli()), "put", "--cluster", addr, "--series", "u/s", "--time-unit", "s", "--write-quorum", "1")
	if code != exitFailure || !strings.Contains(errOut, "--time-unit ms") {
		t.Fatalf("ms as s: exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = c.Run(fmt.Sprintf("%d,1\n%d,2\n", secs, secs+1), "put", "--cluster", addr, "--series", "u/s", "--time-unit", "s", "--write-quorum", "1")
	if code != 0 || !strings.Contains(errOut, "stored 2 points") {
		t.Fatalf("--time-unit s: exit %d, stderr %q", code, errOut)
	}
	out, errOut, code := c.Run("", "get", "--cluster", addr, "--series", "u/s", "--from", "-2h", "--to", "now", "--time-format", "rfc3339")
	want := fmt.Sprintf("%s,1\n%s,2\n", base.UTC().Format(time.RFC3339Nano), base.Add(time.Second).UTC().Format(time.RFC3339Nano))
	if code != 0 || out != want {
		t.Fatalf("get --time-format rfc3339: exit %d, got %q want %q; %s", code, out, want, errOut)
	}

	// From the epoch to now: one series is read only between its bounds (its two points).
	out, errOut, code = c.Run("", "get", "--cluster", addr, "--series", "u/s", "--from", "0", "--to", "now", "--time-format", "rfc3339")
	if code != 0 || out != want {
		t.Fatalf("get --from 0 --to now: exit %d, got %q want %q; %s", code, out, want, errOut)
	}
	// Several series have no bounds to narrow to: a range no read may cover is refused at
	// once, not read window by window for minutes.
	start := time.Now()
	_, errOut, code = c.Run("", "get", "--cluster", addr, "--prefix", "u/", "--from", "0", "--to", "now")
	if code != exitUsage || !strings.Contains(errOut, " years; one read covers at most 1048576 quanta") || !strings.Contains(errOut, "121 days with this cluster's 10 s quanta") {
		t.Fatalf("get --from 0 --to now: exit %d after %v, stderr %q", code, time.Since(start), errOut)
	}

	// A wide CSV with a header: one series per column, empty cells skipped.
	wide := fmt.Sprintf("time,va,vb,vc\n%d,1,10,\n%d,2,20,200\n", secs, secs+1)
	_, errOut, code = c.Run(wide, "put", "--cluster", addr, "--series-prefix", "pmu1/", "--time-unit", "s", "--write-quorum", "1")
	if code != 0 || !strings.Contains(errOut, "stored 5 points in 3 series") {
		t.Fatalf("wide put: exit %d, stderr %q", code, errOut)
	}
	for col, want := range map[string]string{"va": "1\n2\n", "vb": "10\n20\n", "vc": "200\n"} {
		out, errOut, code := c.Run("", "get", "--cluster", addr, "--series", "pmu1/"+col, "--from", "-2h", "--to", "now")
		var vals strings.Builder
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if _, v, ok := strings.Cut(line, ","); ok {
				vals.WriteString(v + "\n")
			}
		}
		if code != 0 || vals.String() != want {
			t.Errorf("column %s: exit %d, values %q want %q; %s", col, code, vals.String(), want, errOut)
		}
	}
	// --columns without a header.
	_, errOut, code = c.Run(fmt.Sprintf("%d,7,8\n", secs+2), "put", "--cluster", addr, "--columns", "x,y", "--series-prefix", "c/", "--time-unit", "s", "--write-quorum", "1")
	if code != 0 || !strings.Contains(errOut, "stored 2 points in 2 series") {
		t.Fatalf("--columns: exit %d, stderr %q", code, errOut)
	}

	// Honest status: 2 live members, rf 3: every pair is under-replicated and a line says why.
	out, errOut, code = c.Run("", "status", "--cluster", addr)
	if code != 0 || !strings.Contains(out, "2 members alive, fewer than rf 3") {
		t.Fatalf("status: exit %d: %s %s", code, out, errOut)
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 6 && f[2] == "alive" && f[3] != f[6] {
			t.Errorf("UNDER %s != SHARDS %s with fewer live nodes than rf: %q", f[6], f[3], line)
		}
	}

	// A second node on a data dir in use names the holder's pid.
	cmd := exec.Command(c.Bin, "node", "--rpc", testutil.FreeAddr(t), "--gossip", testutil.FreeAddr(t), "--data", c.Nodes[0].Data)
	_, errOut, code = testutil.RunCmd(t, cmd, "")
	if code != exitFailure || !strings.Contains(errOut, fmt.Sprintf("in use by another tsdht node (pid %d)", c.Nodes[0].Cmd.Process.Pid)) {
		t.Fatalf("data dir in use: exit %d, stderr %q", code, errOut)
	}

	// A dead member shows "–", not zeros.
	c.Kill(1)
	if !testutil.Poll(30*time.Second, func() bool {
		out, _, _ = c.Run("", "status", "--cluster", addr, "--timeout", "3s")
		return deadLine(out) != ""
	}) {
		t.Fatalf("node 1 never reported dead:\n%s", out)
	}
	if f := strings.Fields(deadLine(out)); len(f) < 12 || f[3] != "–" || f[10] != "–" {
		t.Fatalf("dead member's line: %q", deadLine(out))
	}
}

func deadLine(status string) string {
	for _, line := range strings.Split(status, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && (f[2] == "dead" || f[2] == "suspect") && strings.Contains(line, "–") {
			return line
		}
	}
	return ""
}

// An RPC address given to --join, and a gossip address given to --cluster, are named as
// such on every side.
func TestPortMixups(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real node processes; skipped with -short")
	}
	c := startE2ECluster(t, 1, "--rf", "1")
	a := c.Nodes[0]

	_, errOut, code := c.Run("", "status", "--cluster", a.Gossip, "--timeout", "5s")
	want := a.Gossip + " does not speak tsdht RPC; it looks like a gossip port? --cluster wants the node's --rpc address"
	if code != exitFailure || !strings.Contains(errOut, want) {
		t.Fatalf("--cluster at a gossip port: exit %d, stderr %q", code, errOut)
	}

	// A node told to join an RPC port says so and exits 2, instead of retrying for ever.
	p := c.Add()
	p.Join = a.RPC
	c.Start(1)
	err := p.Cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitUsage ||
		!strings.Contains(p.Log(), "--join "+a.RPC+": a tsdht RPC port answers there (a node's --rpc); --join wants the seeds' --gossip addresses") {
		t.Fatalf("node --join at an RPC port: %v\n%s", err, p.Log())
	}
}

func waitLog(t *testing.T, p *proc, want string) {
	t.Helper()
	if !testutil.Poll(20*time.Second, func() bool { return strings.Contains(p.Log(), want) }) {
		t.Fatalf("log of %s never said %q:\n%s", p.RPC, want, p.Log())
	}
}
