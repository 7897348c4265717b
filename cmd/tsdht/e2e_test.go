package main

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
)

// The end-to-end tests run real `tsdht node` processes, from one build of the binary
// (or $TSDHT_TEST_BINARY), that talk over TCP and gossip on 127.0.0.1.

func TestMain(m *testing.M) { testutil.Main(m) }

type proc = testutil.Proc

// e2eCluster is a cluster of node processes with the checks these tests make on it.
type e2eCluster struct {
	*testutil.Cluster
	t *testing.T
}

// startE2ECluster starts n nodes and waits until every one sees n alive.
func startE2ECluster(t *testing.T, n int, args ...string) *e2eCluster {
	t.Helper()
	return &e2eCluster{testutil.StartCluster(t, n, args...), t}
}

// startProcs starts n node processes, every one after the first joining through the
// first once it answers, and does not wait for them to see each other.
func startProcs(t *testing.T, n int, args ...string) *e2eCluster {
	t.Helper()
	c := newE2ECluster(t, n, args...)
	c.StartAll()
	return c
}

// newE2ECluster gives n nodes their addresses and data directories, which survive a
// kill so that a node can come back as itself, and starts none.
func newE2ECluster(t *testing.T, n int, args ...string) *e2eCluster {
	t.Helper()
	return &e2eCluster{testutil.NewCluster(t, n, args...), t}
}

type point struct {
	t int64
	v float64
}

func csvOf(pts []point) string {
	var b strings.Builder
	for _, p := range pts {
		b.WriteString(strconv.FormatInt(p.t, 10))
		b.WriteByte(',')
		b.WriteString(strconv.FormatFloat(p.v, 'g', -1, 64))
		b.WriteByte('\n')
	}
	return b.String()
}

func parseCSV(t *testing.T, s string) []point {
	t.Helper()
	var out []point
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		if line == "" {
			continue
		}
		ts, vs, ok := strings.Cut(line, ",")
		if !ok {
			t.Fatalf("bad output line %q", line)
		}
		tt, err1 := strconv.ParseInt(ts, 10, 64)
		v, err2 := strconv.ParseFloat(vs, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("bad output line %q", line)
		}
		out = append(out, point{tt, v})
	}
	return out
}

func inRange(pts []point, from, to int64) []point {
	var out []point
	for _, p := range pts {
		if p.t >= from && p.t < to {
			out = append(out, p)
		}
	}
	return out
}

// checkRead reads [from, to) through node i and compares it point by point.
func (c *e2eCluster) checkRead(i int, key string, all []point, from, to int64) {
	c.t.Helper()
	out, errOut, code := c.Run("", "get", "--cluster", c.Nodes[i].RPC, "--series", key,
		"--from", strconv.FormatInt(from, 10), "--to", strconv.FormatInt(to, 10))
	if code != 0 {
		c.t.Fatalf("get [%d,%d) via node %d: exit %d: %s", from, to, i, code, errOut)
	}
	got, want := parseCSV(c.t, out), inRange(all, from, to)
	if len(got) != len(want) {
		c.t.Fatalf("get [%d,%d) via node %d: %d points, want %d", from, to, i, len(got), len(want))
	}
	for k := range want {
		if got[k] != want[k] {
			c.t.Fatalf("get via node %d: point %d = %v, want %v", i, k, got[k], want[k])
		}
	}
}

func pmuPoints(t0 int64, n int) []point {
	pts := make([]point, n)
	for i := range pts {
		pts[i] = point{t0 + int64(i)*int64(time.Second)/60, 60 + 0.01*math.Sin(float64(i)/7) + float64(i%13)*1e-6}
	}
	return pts
}

func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real node processes")
	}
	for _, format := range []string{"qfi", "kfi"} {
		t.Run(format, func(t *testing.T) { testEndToEnd(t, format) })
	}
}

func testEndToEnd(t *testing.T, format string) {
	c := startE2ECluster(t, 5, "--rf", "3", "--id-format", format)
	key := "pmu17/bus3/vang"
	// 9,000 points at 60 Hz (150 s) starting 3.3 s into a quantum, an hour ago.
	base := (time.Now().Add(-time.Hour).Unix()/10)*10*int64(time.Second) + 3_300_000_000
	all := pmuPoints(base, 9000)
	_, errOut, code := c.Run(csvOf(all), "put", "--cluster", c.Nodes[0].RPC, "--series", key)
	if code != 0 || !strings.Contains(errOut, "stored 9000 points") {
		t.Fatalf("put: exit %d: %s", code, errOut)
	}
	ranges := [][2]int64{
		{base, base + 150*int64(time.Second)},                          // everything
		{base + 1_234_567_891, base + 8_765_432_109},                   // inside one quantum
		{base + 7_500_000_000, base + 97_250_000_000},                  // across ten quanta, both ends inside
		{base - 5*int64(time.Second), base + 2*int64(time.Second)},     // starts before the data
		{base + 149*int64(time.Second), base + 400*int64(time.Second)}, // ends after it
		{base + 50_000_000_000, base + 50_000_000_000},                 // empty range
		{base + 16_666_666, base + 16_666_667},                         // exactly one point
	}
	for i, r := range ranges {
		c.checkRead(1+i%4, key, all, r[0], r[1])
	}

	// Two nodes die without a word; after failure detection every read is still complete.
	c.Kill(1)
	c.Kill(3)
	c.WaitAlive(3, 30*time.Second)
	for _, i := range []int{0, 2, 4} {
		for _, r := range ranges {
			c.checkRead(i, key, all, r[0], r[1])
		}
	}
	// And the cluster accepts new writes.
	more := pmuPoints(base+150*int64(time.Second), 600)
	_, errOut, code = c.Run(csvOf(more), "put", "--cluster", c.Nodes[2].RPC, "--series", key)
	if code != 0 || !strings.Contains(errOut, "stored 600 points") {
		t.Fatalf("put after kills: exit %d: %s", code, errOut)
	}
	all = append(all, more...)
	c.checkRead(4, key, all, base, base+200*int64(time.Second))
}

func TestEndToEndBadInput(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real node processes")
	}
	c := startE2ECluster(t, 3, "--rf", "2")
	addr := c.Nodes[0].RPC
	base := time.Now().Add(-time.Hour).UnixNano()
	if _, errOut, code := c.Run(fmt.Sprintf("%d,1.5\n%d,2.5\n", base, base+1), "put", "--cluster", addr, "--series", "s/float"); code != 0 {
		t.Fatalf("put: %s", errOut)
	}
	// status --json: one object per member, numbers as numbers, for scripts.
	out, errOut, code := c.Run("", "status", "--cluster", addr, "--json")
	if code != 0 {
		t.Fatalf("status --json: exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var appended int64
	if len(lines) != 3 {
		t.Fatalf("status --json printed %d lines, want one per member (3):\n%s", len(lines), out)
	}
	for _, line := range lines {
		var m statusJSON
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("status --json line %q: %v", line, err)
		}
		if m.State != "alive" || !m.Reachable || m.RF != 2 || len(m.NodeID) != 40 || m.Error != "" {
			t.Fatalf("status --json member: %+v", m)
		}
		// Flash wear is counted: a node that stored points wrote their WAL records.
		if m.AppendedPoints > 0 && m.FlashBytesWritten <= 0 {
			t.Fatalf("status --json: %d points appended but no bytes written to flash: %+v", m.AppendedPoints, m)
		}
		appended += m.AppendedPoints
	}
	if appended < 2 || appended > 4 {
		t.Fatalf("status --json: %d points appended over the members; 2 points at rf 2 make 2 to 4", appended)
	}
	long := strings.Repeat("k", 257)
	cases := []struct {
		name  string
		stdin string
		args  []string
		want  []string // substrings of stderr
	}{
		{"malformed line", fmt.Sprintf("%d,1\n%d,2\nnot-a-line\n%d,4\n", base+10, base+11, base+12),
			[]string{"put", "--series", "s/bad"}, []string{"line 3", "stored 2 points"}},
		{"bad value", fmt.Sprintf("%d,1\n%d,x\n", base+20, base+21),
			[]string{"put", "--series", "s/badvalue"}, []string{"line 2", `"x" is not a number`, "--type string", "stored 1 point "}},
		{"typo in a new series' first value", fmt.Sprintf("%d,6O.1\n", base+22),
			[]string{"put", "--series", "s/typo"}, []string{"line 1", `"6O.1" is not a number`, "--type string", "stored 0 points"}},
		{"wrong type", fmt.Sprintf("%d,42\n", base+30),
			[]string{"put", "--series", "s/float", "--type", "int"}, []string{"holds float values", "stored 0 points"}},
		{"string into float series", fmt.Sprintf("%d,hello\n", base+31),
			[]string{"put", "--series", "s/float", "--type", "string"}, []string{"holds float values"}},
		{"timestamp out of range", "99999999999999999999,1\n",
			[]string{"put", "--series", "s/range"}, []string{"line 1", "out of range"}},
		{"far future", fmt.Sprintf("%d,1\n", time.Now().Add(48*time.Hour).UnixNano()),
			[]string{"put", "--series", "s/future", "--any-time"}, []string{"in the future"}},
		{"empty key", "", []string{"put", "--series", ""}, []string{"series key is empty"}},
		{"long key", "", []string{"get", "--series", long, "--from", "0", "--to", "1"}, []string{"257 bytes"}},
		{"from after to", "", []string{"get", "--series", "s/float", "--from", "5", "--to", "4"}, []string{"after --to"}},
		{"unknown series", "", []string{"get", "--series", "no/such", "--from", "0", "--to", "1"}, []string{"unknown series"}},
		{"bad format", "", []string{"get", "--series", "s/float", "--from", "0", "--to", "1", "--format", "xml"}, []string{"--format"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{tc.args[0], "--cluster", addr}, tc.args[1:]...)
			_, errOut, code := c.Run(tc.stdin, args...)
			if code == 0 {
				t.Fatalf("exit 0; want failure. stderr: %s", errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q does not mention %q", errOut, w)
				}
			}
		})
	}
	// What was acknowledged before the bad lines is there.
	out, errOut, code = c.Run("", "get", "--cluster", c.Nodes[1].RPC, "--series", "s/bad", "--from", strconv.FormatInt(base, 10), "--to", strconv.FormatInt(base+100, 10))
	if code != 0 || len(parseCSV(t, out)) != 2 {
		t.Fatalf("points before the malformed line: exit %d, got %q %s", code, out, errOut)
	}
	// The refused typo fixed no type: the series is still free, and takes floats.
	if _, errOut, code := c.Run("", "get", "--cluster", addr, "--series", "s/typo", "--from", "0", "--to", "1"); code == 0 || !strings.Contains(errOut, "unknown series") {
		t.Fatalf("s/typo after a refused first write: exit %d: %s", code, errOut)
	}
	if _, errOut, code := c.Run(fmt.Sprintf("%d,60.1\n", base+23), "put", "--cluster", addr, "--series", "s/typo"); code != 0 {
		t.Fatalf("s/typo as floats after the refused typo: %s", errOut)
	}
	// Strings are written with --type string.
	if _, errOut, code := c.Run(fmt.Sprintf("%d,open\n", base+24), "put", "--cluster", addr, "--series", "s/breaker", "--type", "string"); code != 0 {
		t.Fatalf("put --type string: %s", errOut)
	}
	// The float series is untouched by the refused writes.
	out, _, _ = c.Run("", "get", "--cluster", addr, "--series", "s/float", "--from", strconv.FormatInt(base, 10), "--to", strconv.FormatInt(base+100, 10))
	if got := parseCSV(t, out); len(got) != 2 || got[0].v != 1.5 || got[1].v != 2.5 {
		t.Fatalf("s/float after refused writes: %v", got)
	}
	// An unreachable cluster is named as such.
	dead := testutil.FreeAddr(t)
	_, errOut, code = c.Run("", "get", "--cluster", dead, "--series", "s/float", "--from", "0", "--to", "1", "--timeout", "3s")
	if code == 0 || !strings.Contains(errOut, "unreachable") {
		t.Fatalf("unreachable cluster: exit %d: %s", code, errOut)
	}
}
