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
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
)

// End-to-end tests of `tsdht node --http` with clients no one here wrote: the influx
// CLI, the npm influx package, a Prometheus server, and InfluxDB 1.x itself as the
// reference. Each installs what it drives; they are skipped with -short.

// startHTTPNode starts one `tsdht node --http` and waits until /ready answers 200.
func startHTTPNode(t *testing.T, args ...string) (*e2eCluster, string) {
	t.Helper()
	addr := testutil.FreeAddr(t)
	c := startE2ECluster(t, 1, append([]string{"--http", addr, "--rf", "1"}, args...)...)
	testutil.WaitHTTP(t, "http://"+addr+"/ready", 30*time.Second)
	return c, addr
}

func httpPost(t *testing.T, u, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(u, "text/plain", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func httpQuery(t *testing.T, addr, db, q string) (int, []byte) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/query?" + url.Values{"db": {db}, "q": {q}}.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// diffLines is line protocol shared by the differential tests: two measurements,
// floats and integers, a gap of empty windows, values that are not round.
func diffLines(base time.Time) string {
	var b strings.Builder
	for i := 0; i < 120; i++ {
		if i >= 40 && i < 62 {
			continue
		}
		t := base.Add(time.Duration(i) * time.Second).UnixNano()
		fmt.Fprintf(&b, "cpu,host=a,region=eu usage=%v,n=%di %d\n", 50+40*math.Sin(float64(i)/7), i*3%17, t)
		if i%3 == 0 {
			fmt.Fprintf(&b, "temp v=%v %d\n", 20+float64(i%11)/3, t)
		}
	}
	return b.String()
}

func diffQueries(base time.Time) []string {
	from, to := base.Format(time.RFC3339), base.Add(2*time.Minute).Format(time.RFC3339)
	cpu := fmt.Sprintf("FROM cpu WHERE host = 'a' AND region = 'eu' AND time >= '%s' AND time < '%s'", from, to)
	tmp := fmt.Sprintf("FROM temp WHERE time >= '%s' AND time < '%s'", from, to)
	qs := []string{
		"SELECT usage " + cpu,
		"SELECT usage, n " + cpu,
		"SELECT v " + tmp + " ORDER BY time DESC LIMIT 5",
		"SELECT usage " + cpu + " LIMIT 3 OFFSET 2",
	}
	for _, fn := range []string{"mean", "min", "max", "count", "sum", "first", "last", "stddev", "spread", "median"} {
		qs = append(qs, fmt.Sprintf("SELECT %s(usage) %s GROUP BY time(10s)", fn, cpu),
			fmt.Sprintf("SELECT %s(n) %s GROUP BY time(15s)", fn, cpu),
			fmt.Sprintf("SELECT %s(v) %s", fn, tmp))
	}
	qs = append(qs,
		"SELECT percentile(usage, 90) "+cpu+" GROUP BY time(20s)",
		"SELECT mean(usage), max(usage), count(n) "+cpu+" GROUP BY time(10s)",
		"SELECT mean(usage) "+cpu+" GROUP BY time(10s) fill(none)",
		"SELECT mean(usage) "+cpu+" GROUP BY time(10s) fill(0)",
		"SELECT mean(usage) "+cpu+" GROUP BY time(10s) fill(-1.5)",
		"SELECT mean(usage) "+cpu+" GROUP BY time(10s) fill(previous)",
		"SELECT mean(usage) "+cpu+" GROUP BY time(10s) fill(linear)",
		"SELECT max(usage) "+cpu+" GROUP BY time(10s) ORDER BY time DESC LIMIT 4",
		"SELECT mean(usage) "+cpu+" GROUP BY time(30s), host",
		"SELECT mean(v), min(v), max(v) "+tmp,
		"SELECT percentile(usage, 75) "+cpu,
		// Not percentile(n, …): n repeats values, and which of equal points InfluxDB's
		// unstable sort selects (so the time it reports) is unspecified.
		"SELECT max(n) "+cpu,
		"SELECT first(v), last(v) "+tmp,
		"SELECT * "+cpu+" LIMIT 10",
		"SELECT *::field "+cpu+" ORDER BY time DESC LIMIT 5",
		"SELECT * "+tmp,
		"SELECT /^u/ "+cpu+" LIMIT 5",
		"SELECT mean(*) "+cpu+" GROUP BY time(20s)",
		// Conditions on field values (TSBS' high-cpu shape, and before aggregating).
		"SELECT * "+cpu+" AND usage > 70.0",
		"SELECT max(usage), count(n) "+cpu+" AND n < 8 GROUP BY time(20s)",
	)
	return qs
}

// TestHTTPDifferentialInfluxDB loads the same line protocol into tsdht and InfluxDB
// 1.x and runs the same InfluxQL on both: the answers must be equal.
func TestHTTPDifferentialInfluxDB(t *testing.T) {
	influx := testutil.StartInfluxd(t)
	_, tsd := startHTTPNode(t)
	base := time.Now().Add(-2 * time.Hour).Truncate(time.Hour)
	lines := diffLines(base)
	for _, addr := range []string{influx, tsd} {
		if code, b := httpQuery(t, addr, "", "CREATE DATABASE diff"); code != 200 {
			t.Fatalf("%s: CREATE DATABASE: %d %s", addr, code, b)
		}
		if code, b := httpPost(t, "http://"+addr+"/write?db=diff", lines); code != http.StatusNoContent {
			t.Fatalf("%s: write: %d %s", addr, code, b)
		}
	}
	failed := 0
	for _, q := range diffQueries(base) {
		var ans [2]any
		for i, addr := range []string{influx, tsd} {
			code, b := httpQuery(t, addr, "diff", q)
			if code != 200 {
				t.Errorf("%s: %q: %d %s", addr, q, code, b)
			}
			if err := json.Unmarshal(b, &ans[i]); err != nil {
				t.Fatalf("%s: %q: %v: %s", addr, q, err, b)
			}
			// Every query of the set has an answer: equal empty answers would prove nothing.
			if !bytes.Contains(b, []byte(`"series":[{`)) || bytes.Contains(b, []byte(`"error"`)) {
				t.Errorf("%s: %q: no series in %s", addr, q, b)
			}
		}
		if !testutil.SameJSON(ans[0], ans[1]) {
			failed++
			a, _ := json.Marshal(ans[0])
			b, _ := json.Marshal(ans[1])
			t.Errorf("%s\ninfluxdb: %s\n   tsdht: %s", q, a, b)
		}
	}
	t.Logf("%d queries, %d differ", len(diffQueries(base)), failed)
}

// TestHTTPInfluxCLI drives a node with Debian's influx command-line client: -import
// writes line protocol through /write, -execute runs SELECT … GROUP BY time().
func TestHTTPInfluxCLI(t *testing.T) {
	cli := testutil.NeedTool(t, "influx", "influxdb-client")
	_, addr := startHTTPNode(t)
	host, port, _ := strings.Cut(addr, ":")
	base := time.Now().Add(-time.Hour).Truncate(time.Minute)
	var imp strings.Builder
	imp.WriteString("# DML\n# CONTEXT-DATABASE: clidb\n")
	var sums [3]float64
	for i := 0; i < 180; i++ {
		v := float64(i%13) * 1.25
		sums[i/60] += v
		fmt.Fprintf(&imp, "m,host=a v=%v %d\n", v, base.Add(time.Duration(i)*time.Second).Unix())
	}
	file := filepath.Join(t.TempDir(), "import.txt")
	if err := os.WriteFile(file, []byte(imp.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := testutil.RunCmd(t, exec.Command(cli, "-host", host, "-port", port, "-import", "-path", file, "-precision", "s"), "")
	if code != 0 || !strings.Contains(out+errOut, "Processed 180 inserts") || !strings.Contains(out+errOut, "Failed 0 inserts") {
		t.Fatalf("influx -import: exit %d\n%s%s", code, out, errOut)
	}
	q := fmt.Sprintf("SELECT mean(v) FROM m WHERE host = 'a' AND time >= '%s' AND time < '%s' GROUP BY time(1m)",
		base.Format(time.RFC3339), base.Add(3*time.Minute).Format(time.RFC3339))
	out, errOut, code = testutil.RunCmd(t, exec.Command(cli, "-host", host, "-port", port, "-database", "clidb", "-format", "json", "-execute", q), "")
	if code != 0 {
		t.Fatalf("influx -execute: exit %d\n%s%s", code, out, errOut)
	}
	var r struct {
		Results []struct {
			Series []struct {
				Columns []string `json:"columns"`
				Values  [][]any  `json:"values"`
			} `json:"series"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Results) != 1 || len(r.Results[0].Series) != 1 {
		t.Fatalf("influx output %q: %v", out, err)
	}
	rows := r.Results[0].Series[0].Values
	if len(rows) != 3 {
		t.Fatalf("rows %v", rows)
	}
	for i, row := range rows {
		want := sums[i] / 60
		if got := row[1].(float64); math.Abs(got-want) > 1e-9*want {
			t.Errorf("minute %d: mean %v, want %v", i, got, want)
		}
		// The CLI asks for epoch=ns unless told otherwise.
		if got := int64(row[0].(float64)); got != base.Add(time.Duration(i)*time.Minute).UnixNano() {
			t.Errorf("minute %d at %d", i, got)
		}
	}
	// SHOW answers from the series catalog.
	out, errOut, _ = testutil.RunCmd(t, exec.Command(cli, "-host", host, "-port", port, "-database", "clidb", "-execute", "SHOW MEASUREMENTS"), "")
	if lines := strings.Fields(out); len(lines) == 0 || lines[len(lines)-1] != "m" {
		t.Errorf("SHOW MEASUREMENTS: %s%s", out, errOut)
	}
}

// TestHTTPNodeInflux drives a node with the npm influx package (node-influx): it
// writes points with writePoints and reads them back with query.
func TestHTTPNodeInflux(t *testing.T) {
	node := testutil.NeedTool(t, "node", "nodejs")
	npm := testutil.NeedTool(t, "npm", "npm")
	dir := t.TempDir()
	if out, err := exec.Command(npm, "install", "--prefix", dir, "--no-audit", "--no-fund", "influx@5").CombinedOutput(); err != nil {
		t.Fatalf("npm install influx: %v\n%s", err, out)
	}
	_, addr := startHTTPNode(t)
	host, port, _ := strings.Cut(addr, ":")
	base := time.Now().Add(-time.Hour).Truncate(time.Minute)
	script := fmt.Sprintf(`
const Influx = require('influx');
const influx = new Influx.InfluxDB({host: %q, port: %s, database: 'npmdb'});
const base = %d;
(async () => {
  await influx.createDatabase('npmdb');
  const pts = [];
  for (let i = 0; i < 40; i++) {
    pts.push({measurement: 'sensor', tags: {room: 'kitchen'}, fields: {temp: 20 + i / 4, door: i %% 2 == 0},
              timestamp: new Date(base + i * 1000)});
  }
  await influx.writePoints(pts);
  const from = new Date(base).toISOString(), to = new Date(base + 60000).toISOString();
  const raw = await influx.query("SELECT temp, door FROM sensor WHERE room = 'kitchen' AND time >= '" + from + "' AND time < '" + to + "'");
  const agg = await influx.query("SELECT mean(temp), sum(door) FROM sensor WHERE room = 'kitchen' AND time >= '" + from + "' AND time < '" + to + "' GROUP BY time(20s)");
  console.log(JSON.stringify({
    raw: raw.map(r => [r.time.getNanoTime(), r.temp, r.door]),
    agg: agg.map(r => [r.time.getNanoTime(), r.mean, r.sum]),
  }));
})().catch(e => { console.error(e); process.exit(1); });
`, host, port, base.UnixMilli())
	file := filepath.Join(dir, "t.js")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, file)
	cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(dir, "node_modules"))
	out, errOut, code := testutil.RunCmd(t, cmd, "")
	if code != 0 {
		t.Fatalf("node script: exit %d\n%s%s", code, out, errOut)
	}
	var got struct {
		Raw [][3]any `json:"raw"`
		Agg [][3]any `json:"agg"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("script output %q: %v", out, err)
	}
	// The range holds three 20 s windows; the last is empty and, as in InfluxDB, null.
	if len(got.Raw) != 40 || len(got.Agg) != 3 || got.Agg[2][1] != nil || got.Agg[2][2] != nil {
		t.Fatalf("raw %d rows, agg %d rows: %s", len(got.Raw), len(got.Agg), out)
	}
	for i, r := range got.Raw {
		door := 0.0
		if i%2 == 0 {
			door = 1 // booleans are stored as 1 and 0
		}
		if r[0] != fmt.Sprint(base.Add(time.Duration(i)*time.Second).UnixNano()) || r[1] != 20+float64(i)/4 || r[2] != door {
			t.Fatalf("row %d: %v", i, r)
		}
	}
	for w, r := range got.Agg[:2] {
		mean := 0.0
		for i := w * 20; i < w*20+20; i++ {
			mean += (20 + float64(i)/4) / 20
		}
		if r[0] != fmt.Sprint(base.Add(time.Duration(w)*20*time.Second).UnixNano()) || math.Abs(r[1].(float64)-mean) > 1e-9 || r[2] != 10.0 {
			t.Fatalf("window %d: %v (mean want %v)", w, r, mean)
		}
	}
}

// TestHTTPPrometheus runs Debian's Prometheus server against a node: it scrapes the
// node's /metrics every second and remote-writes what it scraped into the node. The
// series Prometheus holds must read back from tsdht, sample for sample.
func TestHTTPPrometheus(t *testing.T) {
	prom := testutil.NeedTool(t, "prometheus", "prometheus")
	c, addr := startHTTPNode(t)
	dir := t.TempDir()
	webAddr := testutil.FreeAddr(t)
	conf := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: tsdht
    static_configs:
      - targets: [%q]
remote_write:
  - url: http://%s/api/v1/write
    queue_config:
      batch_send_deadline: 1s
`, addr, addr)
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	testutil.StartLogged(t, "prometheus", exec.Command(prom, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+webAddr))
	key := fmt.Sprintf(`up{instance=%q,job="tsdht"}`, addr)
	read := func(series string) []point {
		out, errOut, code := c.Run("", "get", "--cluster", c.Nodes[0].RPC, "--series", series,
			"--from", fmt.Sprint(start.Add(-time.Minute).UnixNano()), "--to", fmt.Sprint(time.Now().Add(time.Minute).UnixNano()))
		if code != 0 {
			if strings.Contains(errOut, "unknown series") {
				return nil
			}
			t.Fatalf("get %s: exit %d: %s", series, code, errOut)
		}
		return parseCSV(t, out)
	}
	// Thirty seconds of scrapes, remote-written as they come.
	if !testutil.Poll(90*time.Second, func() bool { return len(read(key)) >= 30 }) {
		t.Fatalf("after 90 s tsdht holds %d samples of %s", len(read(key)), key)
	}
	// What Prometheus stored of up over the last minutes, against what tsdht holds.
	resp, err := http.Get("http://" + webAddr + "/api/v1/query?" + url.Values{"query": {"up[5m]"}}.Encode())
	if err != nil {
		t.Fatal(err)
	}
	var pr struct {
		Data struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Values [][2]any          `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	err = json.NewDecoder(resp.Body).Decode(&pr)
	resp.Body.Close()
	if err != nil || len(pr.Data.Result) != 1 {
		t.Fatalf("prometheus query: %v %+v", err, pr)
	}
	got := read(key)
	held := map[int64]float64{}
	for _, p := range got {
		held[p.t] = p.v
	}
	last := got[len(got)-1].t
	compared := 0
	for _, v := range pr.Data.Result[0].Values {
		ms := int64(math.Round(v[0].(float64) * 1000))
		tns := ms * 1e6
		if tns > last {
			continue // not remote-written yet
		}
		compared++
		if hv, ok := held[tns]; !ok || hv != 1 || v[1] != "1" {
			t.Errorf("sample at %d: prometheus %v, tsdht %v (held: %v)", ms, v[1], hv, ok)
		}
	}
	if compared < 30 {
		t.Fatalf("compared only %d samples", compared)
	}
	// The node's own metrics made the round trip too.
	if pts := read(fmt.Sprintf(`tsdht_cluster_live_members{instance=%q,job="tsdht"}`, addr)); len(pts) == 0 || pts[len(pts)-1].v != 1 {
		t.Errorf("tsdht_cluster_live_members read back as %v", pts)
	}
	t.Logf("%d samples of up compared, %d held by tsdht", compared, len(got))
}
