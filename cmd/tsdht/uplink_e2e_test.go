package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
	"github.com/tsdht/tsdht/tsdb/client"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// TestUplinkThroughOutageAndKill is issue #32's demonstration, shortened to seconds
// (scripts/uplink-soak runs it for 10 minutes with 1-minute windows): three nodes at
// rf 3 forward a 60 Hz writer's series raw to a real InfluxDB 1.x and as 5-second
// mean/min/max/count to a real Prometheus (remote-write receiver). InfluxDB is stopped
// for part of the run and the node forwarding the first series is SIGKILLed in the
// middle. Afterwards InfluxDB holds exactly the points written and Prometheus exactly
// the windows `tsdht agg` answers, and the lag is back under 5 s.
func TestUplinkThroughOutageAndKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts InfluxDB, Prometheus and three nodes")
	}
	// The timeline: seconds by default; TSDHT_UPLINK_SOAK=1 (scripts/uplink-soak) runs
	// the 10 minutes with 1-minute windows, the centre away from minute 3 to 7
	// and the forwarder killed at minute 5.
	every, outageAfter, outage, killAfter, total := 5*time.Second, time.Duration(0), 10*time.Second, time.Duration(0), time.Duration(0)
	if os.Getenv("TSDHT_UPLINK_SOAK") == "1" {
		every, outageAfter, outage, killAfter, total = time.Minute, 3*time.Minute, 4*time.Minute, 2*time.Minute, 10*time.Minute
	}
	sleepUntil := func(at time.Time) { time.Sleep(time.Until(at)) } // the scenario's clock, not a wait for a condition
	influx := testutil.NewInfluxd(t)
	promAddr := startPromReceiver(t)
	influxQuery(t, influx.Addr, "", "CREATE DATABASE central")

	c := newE2ECluster(t, 3, "--rf", "3",
		"--uplink", "influx+http://"+influx.Addr+"/central",
		"--uplink", "prom+http://"+promAddr+"/api/v1/write",
		"--uplink-prefix", "edge/", "--uplink-every", "0", "--uplink-every", every.String())
	httpAddrs := make([]string, 3)
	for i, p := range c.Nodes {
		httpAddrs[i] = testutil.FreeAddr(t)
		p.Args = append(p.Args, "--http", httpAddrs[i])
	}
	c.StartAll()
	c.WaitAlive(3, time.Minute)

	keys := []string{"edge/pmu1/freq", "edge/pmu2/freq", "edge/pmu3/freq"}
	cli, err := client.New(strings.Split(c.addrs(), ","), client.Config{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	// The writer: 60 Hz per series, 6 points every 100 ms, each put retried until it is
	// acknowledged (a retry stores the same points again), so that every point sent is
	// written.
	var mu sync.Mutex
	written := map[string]map[int64]float64{}
	for _, k := range keys {
		written[k] = map[int64]float64{}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		n := 0
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			now := time.Now().Truncate(100 * time.Millisecond).UnixNano()
			for ki, k := range keys {
				var p series.Points
				for i := range 6 {
					p.AppendFloat(now+int64(i)*int64(time.Second)/60, 50+float64((n*6+i)%97)/1000+float64(ki))
				}
				for {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					_, err := cli.Put(ctx, k, p, wire.PutOptions{})
					cancel()
					if err == nil {
						break
					}
					select {
					case <-stop:
					default:
					}
					time.Sleep(50 * time.Millisecond)
				}
				mu.Lock()
				for i, ts := range p.T {
					written[k][ts] = p.F[i]
				}
				mu.Unlock()
			}
			n++
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()

	// Forwarding starts: InfluxDB receives points.
	start := time.Now()
	testutil.WaitFor(t, 30*time.Second, func() bool { return influxCount(t, influx.Addr, keys[0]) > 0 }, "InfluxDB to receive %s", keys[0])
	sleepUntil(start.Add(outageAfter))
	influx.Stop()
	away := time.Now()
	// The node forwarding keys[0] dies while InfluxDB is away.
	sleepUntil(away.Add(killAfter))
	testutil.WaitFor(t, 20*time.Second, func() bool { return c.forwarderOf(keys[0]) >= 0 }, "a node to forward %s", keys[0])
	victim := c.forwarderOf(keys[0])
	c.Kill(victim)
	t.Logf("InfluxDB stopped; node %d (forwarding %s) SIGKILLed", victim, keys[0])
	live := (victim + 1) % 3
	testutil.WaitFor(t, 30*time.Second, func() bool {
		f := c.forwarderOf(keys[0])
		return f >= 0 && f != victim
	}, "another node to take %s over", keys[0])
	// The centre stays away a while more, then returns; the lag is back under 5 s
	// within a minute, while the writer goes on.
	sleepUntil(away.Add(outage))
	influx.Start(t)
	back := time.Now()
	testutil.WaitFor(t, time.Minute, func() bool {
		lag, ok := c.uplinkLag(live, "influx+")
		return ok && lag < 5
	}, "the InfluxDB uplink's lag to fall under 5 s")
	lagBack := time.Since(back)
	t.Logf("InfluxDB away %v; lag under 5 s %v after it returned", back.Sub(away).Round(100*time.Millisecond), lagBack.Round(100*time.Millisecond))
	sleepUntil(start.Add(total))
	close(stop)
	wg.Wait()
	rec := uplinkSoakRecord{Seconds: time.Since(start).Seconds(), AwaySeconds: back.Sub(away).Seconds(),
		LagUnder5sAfter: lagBack.Seconds(), Every: every.String(), GoMemLimit: os.Getenv("GOMEMLIMIT"), Killed: victim}
	for i, p := range c.Nodes {
		if !p.Running() {
			continue
		}
		rss, hwm := procRSS(p.Cmd.Process.Pid)
		t.Logf("node %d: peak RSS %.1f MiB, now %.1f MiB", i, hwm, rss)
		if hwm > uplinkRSSBudgetMiB {
			t.Errorf("node %d: peak RSS %.1f MiB, over the %d MiB a node may use (GOMEMLIMIT in docs/deployment.md)", i, hwm, uplinkRSSBudgetMiB)
		}
		rec.Nodes = append(rec.Nodes, uplinkSoakNode{Node: i, PeakRSSMiB: hwm})
	}

	// Raw: InfluxDB holds exactly the points written.
	for _, k := range keys {
		want := written[k]
		testutil.WaitFor(t, 60*time.Second, func() bool { return influxCount(t, influx.Addr, k) == len(want) }, "InfluxDB to hold the %d points of %s", len(want), k)
		got := influxPoints(t, influx.Addr, k)
		if len(got) != len(want) {
			t.Fatalf("%s: InfluxDB holds %d points, %d written", k, len(got), len(want))
		}
		for ts, v := range want {
			if g, ok := got[ts]; !ok || g != v {
				t.Fatalf("%s at %d: InfluxDB holds %v (present %v), written %v", k, ts, g, ok, v)
			}
		}
	}

	// Windows: Prometheus holds exactly what tsdht agg answers.
	for _, k := range keys {
		var lo, hi int64 = 1<<63 - 1, 0
		for ts := range written[k] {
			lo, hi = min(lo, ts), max(hi, ts)
		}
		from := lo / int64(every) * int64(every)
		to := (hi/int64(every) + 1) * int64(every)
		out, errOut, code := c.Run("", "agg", "--cluster", c.Nodes[live].RPC, "--series", k, "--from", strconv.FormatInt(from, 10),
			"--to", strconv.FormatInt(to, 10), "--every", every.String())
		if code != 0 {
			t.Fatalf("agg: %s", errOut)
		}
		want := strings.Split(strings.TrimSpace(out), "\n")[1:] // time,mean,min,max,count
		name := strings.NewReplacer("/", "_").Replace(k)
		testutil.WaitFor(t, 60*time.Second, func() bool { return len(promSamples(t, promAddr, name+"_count")) == len(want) },
			"Prometheus to hold the %d windows of %s", len(want), k)
		cols := map[string]map[int64]string{}
		for _, fn := range []string{"mean", "min", "max", "count"} {
			cols[fn] = promSamples(t, promAddr, name+"_"+fn)
		}
		for _, line := range want {
			f := strings.Split(line, ",")
			ts, _ := strconv.ParseInt(f[0], 10, 64)
			for i, fn := range []string{"mean", "min", "max", "count"} {
				if g := cols[fn][ts/1e6]; g != f[i+1] {
					t.Errorf("%s %s at %d: Prometheus %q, tsdht agg %q", k, fn, ts, g, f[i+1])
				}
			}
		}
	}
	// The store is the queue: beside the points written, a live node holds the uplinks'
	// cursors and nothing more — not a copy of what waited for the centre, which alone
	// would be every point written while it was away.
	var during int
	for _, k := range keys {
		rec.PointsWritten += len(written[k])
		for ts := range written[k] {
			if ts >= away.UnixNano() && ts < back.UnixNano() {
				during++
			}
		}
	}
	rec.PointsWhileAway = during
	for j := range rec.Nodes {
		n := &rec.Nodes[j]
		for _, s := range c.statusJSON(n.Node) {
			if s.RPC == c.Nodes[n.Node].RPC {
				n.Points, n.HintedPoints, n.DiskBytes = s.Points, s.HintedPoints, s.DiskBytes
			}
		}
		beyond := n.Points - int64(rec.PointsWritten)
		t.Logf("node %d: %d points held (%d beyond those written, %d written while InfluxDB was away), %d hinted, %d disk bytes",
			n.Node, n.Points, beyond, during, n.HintedPoints, n.DiskBytes)
		if beyond < 0 || beyond >= int64(during) {
			t.Errorf("node %d holds %d points, %d written: the uplink's cursors alone should be beyond them, far fewer than the %d written while InfluxDB was away",
				n.Node, n.Points, rec.PointsWritten, during)
		}
	}
	if f := os.Getenv("TSDHT_UPLINK_SOAK_JSON"); f != "" {
		b, _ := json.Marshal(rec)
		if err := os.WriteFile(f, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, _, _ := c.Run("", "status", "--cluster", c.Nodes[live].RPC)
	t.Logf("status:\n%s", out)
	resp, err := http.Get("http://" + httpAddrs[live] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{"tsdht_uplink_lag_seconds{", "tsdht_uplink_sent_points_total{", "tsdht_uplink_sent_bytes_total{", "tsdht_uplink_retries_total{", "tsdht_uplink_series{"} {
		if !strings.Contains(string(metrics), m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
}

// uplinkRSSBudgetMiB is the RSS a node forwarding to the centre may reach: the
// GOMEMLIMIT the Ansible role sets (docs/deployment.md).
const uplinkRSSBudgetMiB = 150

// uplinkSoakRecord is what scripts/uplink-soak --save keeps of a run
// (TSDHT_UPLINK_SOAK_JSON names the file the test writes it to).
type uplinkSoakRecord struct {
	Seconds         float64          `json:"seconds"`
	Every           string           `json:"every"`        // the windowed uplink's interval
	AwaySeconds     float64          `json:"away_seconds"` // InfluxDB stopped this long
	Killed          int              `json:"killed_node"`  // the forwarder SIGKILLed meanwhile
	LagUnder5sAfter float64          `json:"lag_under_5s_after_seconds"`
	PointsWritten   int              `json:"points_written"` // all exactly in InfluxDB, else the test failed
	PointsWhileAway int              `json:"points_written_while_away"`
	GoMemLimit      string           `json:"gomemlimit"`
	Nodes           []uplinkSoakNode `json:"nodes"` // the nodes alive at the end
}

type uplinkSoakNode struct {
	Node         int     `json:"node"`
	PeakRSSMiB   float64 `json:"peak_rss_mib"` // VmHWM
	Points       int64   `json:"points"`       // held in its store: the data and the uplinks' cursors
	HintedPoints int64   `json:"hinted_points"`
	DiskBytes    int64   `json:"disk_bytes"`
}

// forwarderOf returns the index of the node that says it forwards key on its first
// uplink, or -1.
func (c *e2eCluster) forwarderOf(key string) int {
	for i, p := range c.Nodes {
		if !p.Running() {
			continue
		}
		for _, s := range c.statusJSON(i) {
			if s.RPC != p.RPC {
				continue
			}
			for _, u := range s.Uplinks {
				if slices.Contains(u.Forwarding, key) {
					return i
				}
			}
		}
	}
	return -1
}

// uplinkLag returns the largest lag any node reports for the uplinks whose URL
// begins with prefix.
func (c *e2eCluster) uplinkLag(via int, prefix string) (float64, bool) {
	lag, seen := 0.0, false
	for _, s := range c.statusJSON(via) {
		for _, u := range s.Uplinks {
			if strings.HasPrefix(u.URL, prefix) {
				lag, seen = max(lag, u.LagSeconds), true
			}
		}
	}
	return lag, seen
}

func (c *e2eCluster) statusJSON(via int) []statusJSON {
	out, _, code := c.Run("", "status", "--cluster", c.Nodes[via].RPC, "--json", "--timeout", "3s")
	if code != 0 {
		return nil
	}
	var all []statusJSON
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var s statusJSON
		if json.Unmarshal(sc.Bytes(), &s) == nil {
			all = append(all, s)
		}
	}
	return all
}

// startPromReceiver runs Prometheus with its remote-write receiver and an
// out-of-order window (what an edge that re-sends after a takeover needs), and returns
// its address.
func startPromReceiver(t *testing.T) string {
	addr := testutil.FreeAddr(t)
	startPrometheus(t, testutil.NeedTool(t, "prometheus", "prometheus"), t.TempDir(), addr,
		"global: {}\nstorage:\n  tsdb:\n    out_of_order_time_window: 1h\n", "--web.enable-remote-write-receiver")
	return addr
}

func influxQuery(t *testing.T, addr, db, q string) []byte {
	t.Helper()
	v := url.Values{"q": {q}, "epoch": {"ns"}}
	if db != "" {
		v.Set("db", db)
	}
	resp, err := http.PostForm("http://"+addr+"/query", v)
	if err != nil {
		t.Fatalf("influx query %q: %v", q, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("influx query %q: %s: %s", q, resp.Status, b)
	}
	return b
}

type influxResult struct {
	Results []struct {
		Series []struct {
			Values [][]json.Number `json:"values"`
		} `json:"series"`
	} `json:"results"`
}

func influxRows(t *testing.T, addr, q string) [][]json.Number {
	var r influxResult
	d := json.NewDecoder(strings.NewReader(string(influxQuery(t, addr, "central", q))))
	d.UseNumber()
	if err := d.Decode(&r); err != nil {
		t.Fatal(err)
	}
	if len(r.Results) == 0 || len(r.Results[0].Series) == 0 {
		return nil
	}
	return r.Results[0].Series[0].Values
}

func influxCount(t *testing.T, addr, key string) int {
	rows := influxRows(t, addr, fmt.Sprintf(`SELECT count(value) FROM %q`, key))
	if len(rows) == 0 {
		return 0
	}
	n, _ := rows[0][1].Int64()
	return int(n)
}

func influxPoints(t *testing.T, addr, key string) map[int64]float64 {
	out := map[int64]float64{}
	for _, r := range influxRows(t, addr, fmt.Sprintf(`SELECT value FROM %q`, key)) {
		ts, _ := r[0].Int64()
		v, _ := r[1].Float64()
		out[ts] = v
	}
	return out
}

// promSamples returns every sample of the last hour of metric, by ms timestamp, the
// values as Prometheus prints them.
func promSamples(t *testing.T, addr, metric string) map[int64]string {
	resp, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(metric+"[1h]"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Result []struct {
				Values [][2]any `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	out := map[int64]string{}
	for _, s := range r.Data.Result {
		for _, v := range s.Values {
			ts := int64(v[0].(float64) * 1000)
			out[ts] = v[1].(string)
		}
	}
	return out
}

// TestUplinkFlagsRefused: a bad uplink flag is a usage error (exit 2) naming it, and
// the node does not start.
func TestUplinkFlagsRefused(t *testing.T) {
	bin := testutil.Binary(t)
	base := []string{"node", "--rpc", "127.0.0.1:1", "--gossip", "127.0.0.1:2", "--data", t.TempDir()}
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--uplink", "ftp://h:1/x"}, "unknown scheme"},
		{[]string{"--uplink", "influx+http://h:8086/"}, "one database"},
		{[]string{"--uplink-every", "1m"}, "--uplink-every without --uplink"},
		{[]string{"--uplink", "tsdht://a:1", "--uplink-every", "1.5s"}, "whole number of seconds"},
		{[]string{"--uplink", "tsdht://a:1", "--uplink-every", "soon"}, "--uplink-every"},
		{[]string{"--uplink", "tsdht://a:1", "--uplink", "tsdht://b:1", "--uplink-every", "0", "--uplink-every", "0", "--uplink-every", "0"}, "once per --uplink"},
		{[]string{"--uplink", "tsdht://a:1", "--uplink-prefix", "a/", "--uplink-match", "k=v"}, "give one"},
		{[]string{"--uplink", "tsdht://a:1", "--uplink-match", "novalue"}, "--uplink-match"},
		{[]string{"--uplink", "tsdht://a:1", "--uplink", "tsdht://a:1"}, "given twice"},
		{[]string{"--uplink", "tsdht://a:1?key=/nonexistent/central.key"}, "key=/nonexistent/central.key"},
		{[]string{"--uplink", "tsdht://a:1?keyfile=/k"}, "the one parameter is key=FILE"},
	} {
		_, errOut, code := testutil.RunCmd(t, exec.Command(bin, append(slices.Clone(base), c.args...)...), "")
		if code != 2 || !strings.Contains(errOut, c.msg) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, errOut, c.msg)
		}
	}
}
