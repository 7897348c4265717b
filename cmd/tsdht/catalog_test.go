package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// catalogCluster starts n node processes whose data directories and addresses
// survive a kill, so that a node can come back as itself.
func catalogCluster(t *testing.T, n int, extra ...string) (*e2eCluster, func(i int)) {
	t.Helper()
	c := &e2eCluster{t: t, bin: tsdhtBinary(t)}
	dir := t.TempDir()
	for range n {
		c.nodes = append(c.nodes, &proc{rpc: freeAddr(t), gossip: freeAddr(t)})
	}
	logs := make([]*syncWriter, n)
	start := func(i int) {
		p := c.nodes[i]
		if logs[i] == nil {
			p.log = &bytes.Buffer{}
			logs[i] = &syncWriter{w: p.log}
		}
		args := []string{"node", "--rpc", p.rpc, "--gossip", p.gossip, "--data", filepath.Join(dir, "n"+strconv.Itoa(i))}
		if i > 0 {
			args = append(args, "--join", c.nodes[0].gossip)
		}
		p.cmd = exec.Command(c.bin, append(args, extra...)...)
		p.cmd.Stderr = logs[i]
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for i, p := range c.nodes {
			if p.cmd != nil && p.cmd.ProcessState == nil {
				p.cmd.Process.Signal(syscall.SIGTERM)
				p.cmd.Wait()
			}
			if t.Failed() {
				logs[i].mu.Lock()
				t.Logf("node %d log:\n%s", i, p.log.String())
				logs[i].mu.Unlock()
			}
		}
	})
	// The seed first, answering, then the others: a node exits if its seed is not there.
	start(0)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, _, code := c.run("", "status", "--cluster", c.nodes[0].rpc, "--timeout", "2s"); code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("node 0 does not answer status")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := 1; i < n; i++ {
		start(i)
	}
	c.waitAlive(n, 60*time.Second)
	return c, start
}

// nodePoints returns the points each member holds, by RPC address, from status --json.
func (c *e2eCluster) nodePoints(via string) map[string]int64 {
	c.t.Helper()
	out, errOut, code := c.run("", "status", "--cluster", via, "--json")
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
	addr := func(i int) string { return c.nodes[i].rpc }
	t0 := time.Now().Add(-time.Hour).Truncate(10*time.Second).UnixNano() + 1
	pts := pmuPoints(t0, 600) // 10 s at 60 Hz
	keys := []string{"pmu1/bus1/freq", "pmu1/bus2/freq", "pmu2/bus1/freq"}
	for _, k := range keys {
		if _, errOut, code := c.run(csvOf(pts), "put", "--cluster", addr(0), "--series", k); code != 0 {
			t.Fatalf("put %s: %s", k, errOut)
		}
	}
	for i, k := range keys {
		out, errOut, code := c.run("", "meta", "--cluster", addr(1), "--series", k, "--unit", "Hz",
			"--tag", fmt.Sprintf("bus=%d", 1+i%2), "--tag", "kind=freq")
		if code != 0 || !strings.Contains(out, `"unit":"Hz"`) {
			t.Fatalf("meta %s: exit %d %s %s", k, code, out, errOut)
		}
	}
	series := func(args ...string) []string {
		t.Helper()
		out, errOut, code := c.run("", append([]string{"series", "--cluster", addr(2)}, args...)...)
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
	if _, errOut, code := c.run("", "series", "--cluster", addr(0), "--match", "bus"); code == 0 || !strings.Contains(errOut, "key=value") {
		t.Fatalf("a bad --match: exit %d: %s", code, errOut)
	}

	// get --format json: the entry with the points, one request.
	from, to := strconv.FormatInt(t0, 10), strconv.FormatInt(t0+int64(10*time.Second), 10)
	out, errOut, code := c.run("", "get", "--cluster", addr(2), "--series", keys[0], "--from", from, "--to", to, "--format", "json")
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
	out, errOut, code = c.run("", "get", "--cluster", addr(1), "--match", "bus=1", "--from", from, "--to", to)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 1200 || !strings.HasPrefix(lines[0], "pmu1/bus1/freq,"+from+",") || !strings.HasPrefix(lines[1199], "pmu2/bus1/freq,") {
		t.Fatalf("get --match csv: exit %d, %d lines, %s", code, len(lines), errOut)
	}
	out, _, code = c.run("", "get", "--cluster", addr(1), "--match", "kind=freq", "--from", from, "--to", to, "--format", "json")
	var many []struct {
		Series string `json:"series"`
		Count  int    `json:"count"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &many) != nil || len(many) != 3 || many[2].Series != keys[2] || many[2].Count != 600 {
		t.Fatalf("get --match json: %d series %+v", len(many), many)
	}

	// agg --match: one series' windows after another, the key first; json an array.
	out, errOut, code = c.run("", "agg", "--cluster", addr(2), "--match", "bus=1", "--from", from, "--to", to, "--every", "5s", "--fn", "count,min")
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 5 || lines[0] != "key,time,count,min" || !strings.HasPrefix(lines[1], "pmu1/bus1/freq,") ||
		!strings.HasPrefix(lines[4], "pmu2/bus1/freq,") || strings.Split(lines[1], ",")[2] != "300" {
		t.Fatalf("agg --match csv: exit %d %s\n%s", code, errOut, out)
	}
	out, _, code = c.run("", "agg", "--cluster", addr(0), "--prefix", "pmu1/", "--from", from, "--to", to, "--every", "10s", "--format", "json")
	var aggs []struct {
		Series  string           `json:"series"`
		Windows []map[string]any `json:"windows"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &aggs) != nil || len(aggs) != 2 || aggs[1].Series != keys[1] || len(aggs[1].Windows) != 1 || aggs[1].Windows[0]["count"] != 600.0 {
		t.Fatalf("agg --prefix json: exit %d %+v\n%s", code, aggs, out)
	}

	// delete a range, then the whole series; the key is free afterwards.
	mid := strconv.FormatInt(t0+int64(5*time.Second), 10)
	if _, errOut, code := c.run("", "delete", "--cluster", addr(0), "--series", keys[1], "--from", from, "--to", mid); code != 0 {
		t.Fatalf("delete range: %s", errOut)
	}
	out, _, _ = c.run("", "get", "--cluster", addr(2), "--series", keys[1], "--from", from, "--to", to)
	if got := parseCSV(t, out); len(got) != 300 || got[0].t < t0+int64(5*time.Second) {
		t.Fatalf("after deleting the first half: %d points", len(got))
	}
	if _, errOut, code := c.run("", "delete", "--cluster", addr(0), "--series", keys[2]); code != 0 {
		t.Fatalf("delete series: %s", errOut)
	}
	if got := series("--prefix", "pmu2/"); len(got) != 1 || got[0] != "" {
		t.Fatalf("a deleted series is listed: %v", got)
	}
	if _, errOut, code := c.run(fmt.Sprintf("%d,closed\n", t0), "put", "--cluster", addr(1), "--series", keys[2], "--type", "string"); code != 0 {
		t.Fatalf("a string series under the freed key: %s", errOut)
	}
	if got := series("--prefix", "pmu2/"); len(got) != 1 || got[0] != keys[2]+",string," {
		t.Fatalf("the re-created series: %v", got)
	}
	if _, errOut, code := c.run("", "delete", "--cluster", addr(0), "--series", "no/such"); code == 0 || !strings.Contains(errOut, "unknown series") {
		t.Fatalf("delete of an unknown series: exit %d %s", code, errOut)
	}
	if _, errOut, code := c.run("", "delete", "--cluster", addr(0), "--series", keys[0], "--from", from); code == 0 || !strings.Contains(errOut, "both --from and --to") {
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
	c, start := catalogCluster(t, 3, "--rf", "3", "--repair-interval", "2s", "--sync", "always")
	t0 := time.Now().Add(-time.Hour).Truncate(10*time.Second).UnixNano() + 1
	const key = "pmu9/va/mag"
	if _, errOut, code := c.run(csvOf(pmuPoints(t0, 1200)), "put", "--cluster", c.nodes[0].rpc, "--series", key); code != 0 {
		t.Fatalf("put: %s", errOut)
	}
	c.kill(2)
	c.waitAlive(2, 60*time.Second)
	from, to := t0, t0+int64(10*time.Second)
	if _, errOut, code := c.run("", "delete", "--cluster", c.nodes[0].rpc, "--series", key,
		"--from", strconv.FormatInt(from, 10), "--to", strconv.FormatInt(to, 10)); code != 0 {
		t.Fatalf("delete with a replica down: %s", errOut)
	}
	start(2)
	c.waitAlive(3, 60*time.Second)
	// The returned replica held all 1200 points; repair must bring it to 600.
	deadline := time.Now().Add(60 * time.Second)
	for {
		pts := c.nodePoints(c.nodes[0].rpc)
		if pts[c.nodes[2].rpc] == 600 && pts[c.nodes[0].rpc] == 600 && pts[c.nodes[1].rpc] == 600 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("points held per node after repair: %v; want 600 each", pts)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for i := range c.nodes {
		out, errOut, code := c.run("", "get", "--cluster", c.nodes[i].rpc, "--series", key,
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
