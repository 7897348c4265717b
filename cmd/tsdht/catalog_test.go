package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
)

// nodePoints returns the points each member holds, by RPC address, from status --json.
func (c *e2eCluster) nodePoints(via string) map[string]int64 {
	c.t.Helper()
	out, errOut, code := c.Run("", "status", "--cluster", via, "--json")
	if code != 0 {
		c.t.Fatalf("status: %s", errOut)
	}
	m := map[string]int64{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var s statusJSON
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			c.t.Fatalf("status line %q: %v", line, err)
		}
		m[s.RPC] = s.Points
	}
	return m
}

// TestCatalogCommands drives series, meta, get --format json, get --match and delete
// through real node processes.
func TestCatalogCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real node processes")
	}
	c := startE2ECluster(t, 3, "--rf", "2")
	addr := func(i int) string { return c.Nodes[i].RPC }
	t0 := time.Now().Add(-time.Hour).Truncate(10*time.Second).UnixNano() + 1
	pts := pmuPoints(t0, 600) // 10 s at 60 Hz
	keys := []string{"pmu1/bus1/freq", "pmu1/bus2/freq", "pmu2/bus1/freq"}
	for _, k := range keys {
		if _, errOut, code := c.Run(csvOf(pts), "put", "--cluster", addr(0), "--series", k); code != 0 {
			t.Fatalf("put %s: %s", k, errOut)
		}
	}
	for i, k := range keys {
		out, errOut, code := c.Run("", "meta", "--cluster", addr(1), "--series", k, "--unit", "Hz",
			"--tag", fmt.Sprintf("bus=%d", 1+i%2), "--tag", "kind=freq")
		if code != 0 || !strings.Contains(out, `"unit":"Hz"`) {
			t.Fatalf("meta %s: exit %d %s %s", k, code, out, errOut)
		}
	}
	series := func(args ...string) []string {
		t.Helper()
		out, errOut, code := c.Run("", append([]string{"series", "--cluster", addr(2)}, args...)...)
		if code != 0 {
			t.Fatalf("series %v: %s", args, errOut)
		}
		return strings.Split(strings.TrimSpace(out), "\n")
	}
	if got := series("--match", "bus=1"); len(got) != 2 || got[0] != `pmu1/bus1/freq,float,"bus=1,kind=freq"` || !strings.HasPrefix(got[1], "pmu2/bus1/freq,") {
		t.Fatalf("series --match bus=1:\n%s", strings.Join(got, "\n"))
	}
	if got := series("--match", "bus=1,kind=freq", "--prefix", "pmu1/"); len(got) != 1 || !strings.HasPrefix(got[0], "pmu1/bus1/freq,") {
		t.Fatalf("series --match --prefix: %v", got)
	}
	if got := series(); len(got) != 3 {
		t.Fatalf("series lists %d, want 3: %v", len(got), got)
	}
	if _, errOut, code := c.Run("", "series", "--cluster", addr(0), "--match", "bus"); code == 0 || !strings.Contains(errOut, "key=value") {
		t.Fatalf("a bad --match: exit %d: %s", code, errOut)
	}

	// get --format json: the entry with the points, one request.
	from, to := strconv.FormatInt(t0, 10), strconv.FormatInt(t0+int64(10*time.Second), 10)
	out, errOut, code := c.Run("", "get", "--cluster", addr(2), "--series", keys[0], "--from", from, "--to", to, "--format", "json")
	var one struct {
		Series string `json:"series"`
		Count  int    `json:"count"`
		Entry  struct {
			Unit string            `json:"unit"`
			Tags map[string]string `json:"tags"`
			Type string            `json:"type"`
		} `json:"entry"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &one) != nil || one.Count != 600 || one.Entry.Unit != "Hz" || one.Entry.Tags["bus"] != "1" || one.Entry.Type != "float" {
		t.Fatalf("get --format json: exit %d %+v %s", code, one, errOut)
	}
	// get --match: csv with the key first, json as an array.
	out, errOut, code = c.Run("", "get", "--cluster", addr(1), "--match", "bus=1", "--from", from, "--to", to)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 1200 || !strings.HasPrefix(lines[0], "pmu1/bus1/freq,"+from+",") || !strings.HasPrefix(lines[1199], "pmu2/bus1/freq,") {
		t.Fatalf("get --match csv: exit %d, %d lines, %s", code, len(lines), errOut)
	}
	out, _, code = c.Run("", "get", "--cluster", addr(1), "--match", "kind=freq", "--from", from, "--to", to, "--format", "json")
	var many []struct {
		Series string `json:"series"`
		Count  int    `json:"count"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &many) != nil || len(many) != 3 || many[2].Series != keys[2] || many[2].Count != 600 {
		t.Fatalf("get --match json: %d series %+v", len(many), many)
	}

	// agg --match: one series' windows after another, the key first; json an array.
	out, errOut, code = c.Run("", "agg", "--cluster", addr(2), "--match", "bus=1", "--from", from, "--to", to, "--every", "5s", "--fn", "count,min")
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 5 || lines[0] != "key,time,count,min" || !strings.HasPrefix(lines[1], "pmu1/bus1/freq,") ||
		!strings.HasPrefix(lines[4], "pmu2/bus1/freq,") || strings.Split(lines[1], ",")[2] != "300" {
		t.Fatalf("agg --match csv: exit %d %s\n%s", code, errOut, out)
	}
	out, _, code = c.Run("", "agg", "--cluster", addr(0), "--prefix", "pmu1/", "--from", from, "--to", to, "--every", "10s", "--format", "json")
	var aggs []struct {
		Series  string           `json:"series"`
		Windows []map[string]any `json:"windows"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &aggs) != nil || len(aggs) != 2 || aggs[1].Series != keys[1] || len(aggs[1].Windows) != 1 || aggs[1].Windows[0]["count"] != 600.0 {
		t.Fatalf("agg --prefix json: exit %d %+v\n%s", code, aggs, out)
	}

	// delete a range, then the whole series; the key is free afterwards.
	mid := strconv.FormatInt(t0+int64(5*time.Second), 10)
	if _, errOut, code := c.Run("", "delete", "--cluster", addr(0), "--series", keys[1], "--from", from, "--to", mid); code != 0 {
		t.Fatalf("delete range: %s", errOut)
	}
	out, _, _ = c.Run("", "get", "--cluster", addr(2), "--series", keys[1], "--from", from, "--to", to)
	if got := parseCSV(t, out); len(got) != 300 || got[0].t < t0+int64(5*time.Second) {
		t.Fatalf("after deleting the first half: %d points", len(got))
	}
	if _, errOut, code := c.Run("", "delete", "--cluster", addr(0), "--series", keys[2]); code != 0 {
		t.Fatalf("delete series: %s", errOut)
	}
	if got := series("--prefix", "pmu2/"); len(got) != 1 || got[0] != "" {
		t.Fatalf("a deleted series is listed: %v", got)
	}
	if _, errOut, code := c.Run(fmt.Sprintf("%d,closed\n", t0), "put", "--cluster", addr(1), "--series", keys[2], "--type", "string"); code != 0 {
		t.Fatalf("a string series under the freed key: %s", errOut)
	}
	if got := series("--prefix", "pmu2/"); len(got) != 1 || got[0] != keys[2]+",string," {
		t.Fatalf("the re-created series: %v", got)
	}
	if _, errOut, code := c.Run("", "delete", "--cluster", addr(0), "--series", "no/such"); code == 0 || !strings.Contains(errOut, "unknown series") {
		t.Fatalf("delete of an unknown series: exit %d %s", code, errOut)
	}
	if _, errOut, code := c.Run("", "delete", "--cluster", addr(0), "--series", keys[0], "--from", from); code == 0 || !strings.Contains(errOut, "both --from and --to") {
		t.Fatalf("delete with --from alone: exit %d %s", code, errOut)
	}
}

// TestDeleteWhileReplicaDown: a delete issued while one replica is down; it comes back
// on the same data directory, repair runs, and the deleted range stays deleted —
// in reads through every node, and on the returned replica's disk.
func TestDeleteWhileReplicaDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts, kills and restarts real node processes")
	}
	c := startE2ECluster(t, 3, "--rf", "3", "--repair-interval", "2s", "--sync", "always")
	t0 := time.Now().Add(-time.Hour).Truncate(10*time.Second).UnixNano() + 1
	const key = "pmu9/va/mag"
	if _, errOut, code := c.Run(csvOf(pmuPoints(t0, 1200)), "put", "--cluster", c.Nodes[0].RPC, "--series", key); code != 0 {
		t.Fatalf("put: %s", errOut)
	}
	c.Kill(2)
	c.WaitAlive(2, 60*time.Second)
	from, to := t0, t0+int64(10*time.Second)
	if _, errOut, code := c.Run("", "delete", "--cluster", c.Nodes[0].RPC, "--series", key,
		"--from", strconv.FormatInt(from, 10), "--to", strconv.FormatInt(to, 10)); code != 0 {
		t.Fatalf("delete with a replica down: %s", errOut)
	}
	c.Start(2)
	c.WaitAlive(3, 60*time.Second)
	// The returned replica held all 1200 points; repair must bring it to 600.
	var pts map[string]int64
	if !testutil.Poll(60*time.Second, func() bool {
		pts = c.nodePoints(c.Nodes[0].RPC)
		return pts[c.Nodes[2].RPC] == 600 && pts[c.Nodes[0].RPC] == 600 && pts[c.Nodes[1].RPC] == 600
	}) {
		t.Fatalf("points held per node after repair: %v; want 600 each", pts)
	}
	for i := range c.Nodes {
		out, errOut, code := c.Run("", "get", "--cluster", c.Nodes[i].RPC, "--series", key,
			"--from", strconv.FormatInt(t0, 10), "--to", strconv.FormatInt(t0+int64(time.Minute), 10))
		got := parseCSV(t, out)
		if code != 0 || len(got) != 600 {
			t.Fatalf("read via node %d: exit %d, %d points: %s", i, code, len(got), errOut)
		}
		for _, p := range got {
			if p.t >= from && p.t < to {
				t.Fatalf("read via node %d: deleted point %d is back", i, p.t)
			}
		}
	}
}
