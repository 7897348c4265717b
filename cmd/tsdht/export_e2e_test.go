package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
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

// influxInspect returns an influx_inspect binary: the one on $PATH, else one built from
// InfluxDB 1.x's source through the Go module proxy (Debian's influxdb package does not
// ship it) into the user's cache, where later runs find it. The test is skipped, saying
// why, when neither works.
func influxInspect(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("influx_inspect"); err == nil {
		return p
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Skipf("no influx_inspect on $PATH and no cache directory to build it into: %v", err)
	}
	bin := filepath.Join(cache, "tsdht-test-tools")
	p := filepath.Join(bin, "influx_inspect")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	cmd := exec.Command("go", "install", "github.com/influxdata/influxdb/cmd/influx_inspect@v1.8.3")
	cmd.Dir = os.TempDir() // outside this module: its go.mod is not touched
	cmd.Env = append(os.Environ(), "GOBIN="+bin, "GOFLAGS=-mod=mod", "GOOS="+runtime.GOOS, "GOARCH="+runtime.GOARCH)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("influx_inspect is not on $PATH and building it from InfluxDB 1.8.3's source failed: %v\n%s", err, out)
	}
	return p
}

// exportLines is a few thousand points of two measurements in three databases' worth
// of shapes: tags, float, integer, string and boolean fields, one point per second.
func exportLines(base time.Time) string {
	var b strings.Builder
	for i := 0; i < 1200; i++ {
		t := base.Add(time.Duration(i) * time.Second).UnixNano()
		host := fmt.Sprintf("h%d", i%3)
		fmt.Fprintf(&b, "cpu,host=%s,region=eu\\ west usage=%v,procs=%di,state=\"s%d\",up=%t %d\n",
			host, 50+40*math.Sin(float64(i)/7), i%17, i%5, i%4 != 0, t)
		if i%2 == 0 {
			fmt.Fprintf(&b, "temp,room=r%d v=%v %d\n", i%2+i%6, 20+float64(i%11)/3, t)
		}
	}
	return b.String()
}

// TestExportFromInfluxDB moves a real InfluxDB 1.x database into tsdht as a user
// would: influx_inspect export of InfluxDB's files, tsdht import of its output as it
// comes; then the same InfluxQL answers from both. Then every format round-trips:
// export from that node, import into a fresh one, export again: equal.
func TestExportFromInfluxDB(t *testing.T) {
	inspect := influxInspect(t)
	influx, idir := testutil.StartInfluxdDir(t)
	base := time.Now().Add(-2 * time.Hour).Truncate(time.Minute)
	lines := exportLines(base)
	if code, body := httpPost(t, "http://"+influx+"/query?q=CREATE+DATABASE+src", ""); code != 200 {
		t.Fatalf("create database: %d %s", code, body)
	}
	if code, body := httpPost(t, "http://"+influx+"/write?db=src", lines); code != 204 {
		t.Fatalf("influxdb /write: %d %s", code, body)
	}
	dump := filepath.Join(t.TempDir(), "src.lp")
	out, errOut, code := testutil.RunCmd(t, exec.Command(inspect, "export", "-compress=false", "-database", "src",
		"-datadir", filepath.Join(idir, "data"), "-waldir", filepath.Join(idir, "wal"), "-out", dump), "")
	if code != 0 {
		t.Fatalf("influx_inspect export: exit %d\n%s%s", code, out, errOut)
	}
	raw, err := os.ReadFile(dump)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# DDL", "# DML", "# CONTEXT-DATABASE:src", "CREATE DATABASE src"} {
		if !strings.Contains(string(raw), want) {
			t.Fatalf("influx_inspect's output lacks %q: the test no longer feeds import what it means to:\n%.400s", want, raw)
		}
	}

	c, tsd := startHTTPNode(t)
	rpc := c.Nodes[0].RPC
	out, errOut, code = c.Run("", "import", "--cluster", rpc, dump)
	if code != 0 {
		t.Fatalf("tsdht import: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("%s", strings.TrimSpace(errOut))
	wantPoints := 1200*4 + 600
	if !strings.Contains(errOut, fmt.Sprintf(" %d points ", wantPoints)) {
		t.Errorf("import stored other than %d points: %s", wantPoints, errOut)
	}

	// influx_inspect export -compress writes gzip, which import recognises; importing the
	// same points again changes nothing.
	out, errOut, code = testutil.RunCmd(t, exec.Command(inspect, "export", "-compress", "-database", "src",
		"-datadir", filepath.Join(idir, "data"), "-waldir", filepath.Join(idir, "wal"), "-out", dump+".gz"), "")
	if code != 0 {
		t.Fatalf("influx_inspect export -compress: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := c.Run("", "import", "--cluster", rpc, dump+".gz"); code != 0 || !strings.Contains(errOut, fmt.Sprintf(" %d points ", wantPoints)) {
		t.Fatalf("tsdht import of gzip: exit %d: %s", code, errOut)
	}

	from, to := base.Format(time.RFC3339), base.Add(20*time.Minute).Format(time.RFC3339)
	where := fmt.Sprintf("WHERE time >= '%s' AND time < '%s'", from, to)
	for _, q := range []string{
		// count(*) over cpu would meet its string field, which /query does not count yet.
		"SELECT count(*) FROM temp " + where,
		"SELECT count(usage), count(procs), count(up) FROM cpu " + where,
		"SELECT mean(usage), max(procs) FROM cpu " + where + " AND host = 'h1' AND region = 'eu west' GROUP BY time(1m)",
		"SELECT mean(v) FROM temp " + where + " AND room = 'r2' GROUP BY time(5m)",
		"SELECT usage, procs, state FROM cpu " + where + " AND host = 'h2' AND region = 'eu west' LIMIT 50",
	} {
		var ans [2]any
		var bodies [2][]byte
		for i, addr := range []string{influx, tsd} {
			code, b := httpQuery(t, addr, "src", q)
			if code != 200 || !strings.Contains(string(b), `"series":[{`) || strings.Contains(string(b), `"error"`) {
				t.Fatalf("%s: %q: %d %s", addr, q, code, b)
			}
			bodies[i] = b
			if err := json.Unmarshal(b, &ans[i]); err != nil {
				t.Fatalf("%s: %q: %v", addr, q, err)
			}
		}
		if !testutil.SameJSON(ans[0], ans[1]) {
			t.Errorf("%s\ninfluxdb: %s\n   tsdht: %s", q, bodies[0], bodies[1])
		}
	}

	// Every format round-trips into a fresh node: keys, types, points and (lp, jsonl) tags.
	fresh := startE2ECluster(t, 1, "--rf", "1")
	span := []string{"--from", base.Add(-time.Minute).Format(time.RFC3339), "--to", "now"}
	for _, f := range []string{"lp", "csv", "jsonl"} {
		args := append([]string{"export", "--cluster", rpc, "--prefix", "src/", "--format", f, "--time-unit", "ns"}, span...)
		first, errOut, code := c.Run("", args...)
		if code != 0 {
			t.Fatalf("export --format %s: exit %d: %s", f, code, errOut)
		}
		if !strings.Contains(errOut, fmt.Sprintf(" %d points of 15 series", wantPoints)) {
			t.Errorf("export --format %s: %s", f, errOut)
		}
		path := filepath.Join(t.TempDir(), "out."+f)
		if err := os.WriteFile(path, []byte(first), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, errOut, code := fresh.Run("", "import", "--cluster", fresh.Nodes[0].RPC, "--time-unit", "ns", path); code != 0 {
			t.Fatalf("import --format %s: exit %d: %s", f, code, errOut)
		}
		args[2] = fresh.Nodes[0].RPC
		again, errOut, code := fresh.Run("", args...)
		if code != 0 {
			t.Fatalf("export --format %s from the fresh node: exit %d: %s", f, code, errOut)
		}
		if again != first {
			t.Errorf("--format %s does not round-trip: %d bytes exported, %d after import and export again", f, len(first), len(again))
		}
	}
	series1, _, _ := c.Run("", "series", "--cluster", rpc, "--prefix", "src/")
	series2, _, _ := fresh.Run("", "series", "--cluster", fresh.Nodes[0].RPC, "--prefix", "src/")
	if series1 != series2 || strings.Count(series1, "\n") != 15 {
		t.Errorf("catalogs differ after the round trips:\n%s\n%s", series1, series2)
	}
}

// TestHTTPExportImport moves series between two nodes through /api/v1/export and
// /api/v1/import (VictoriaMetrics' JSON lines), selected by a match[] selector that
// names a /write field as VictoriaMetrics does (measurement_field).
func TestHTTPExportImport(t *testing.T) {
	a, addrA := startHTTPNode(t)
	b, addrB := startHTTPNode(t)
	base := time.Now().Add(-time.Hour).Truncate(time.Minute)
	if code, body := httpPost(t, "http://"+addrA+"/write?db=d", diffLines(base)); code != 204 {
		t.Fatalf("/write: %d %s", code, body)
	}
	start := strconv.FormatInt(base.Add(-time.Minute).Unix(), 10)
	resp, err := http.Get("http://" + addrA + "/api/v1/export?" + url.Values{"match[]": {`cpu_usage{host="a"}`, "temp_v"}, "start": {start}}.Encode())
	if err != nil {
		t.Fatal(err)
	}
	lines, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || bytes.Count(lines, []byte("\n")) != 2 || !bytes.Contains(lines, []byte(`"__name__":"cpu_usage"`)) {
		t.Fatalf("/api/v1/export: %d\n%s", resp.StatusCode, lines)
	}
	if code, body := httpPost(t, "http://"+addrB+"/api/v1/import", string(lines)); code != 204 {
		t.Fatalf("/api/v1/import: %d %s", code, body)
	}
	span := []string{"--from", base.Add(-time.Minute).Format(time.RFC3339), "--to", "now", "--format", "jsonl"}
	want, _, _ := a.Run("", append([]string{"export", "--cluster", a.Nodes[0].RPC, "--match", "__db=d", "--prefix", "d/"}, span...)...)
	got, errOut, code := b.Run("", append([]string{"export", "--cluster", b.Nodes[0].RPC, "--prefix", "d/"}, span...)...)
	if code != 0 || got == "" {
		t.Fatalf("export from the importing node: %d %s", code, errOut)
	}
	// Node b holds cpu's usage and temp's v, not cpu's n: the lines of a that b has.
	var kept []string
	for _, l := range strings.SplitAfter(want, "\n") {
		if strings.Contains(l, `"key":"d/cpu,host=a,region=eu#usage"`) || strings.Contains(l, `"key":"d/temp#v"`) {
			kept = append(kept, l)
		}
	}
	if strings.Join(kept, "") != got {
		t.Errorf("imported through HTTP:\n%s\nwant\n%s", got, strings.Join(kept, ""))
	}
	code, body := httpPost(t, "http://"+addrB+"/api/v1/import", "{\"metric\":{\"__name__\":\"x\"},\"values\":[1],\"timestamps\":[]}\n")
	if code != 400 || !strings.Contains(body, "line 1") {
		t.Errorf("a bad line: %d %s", code, body)
	}
}
