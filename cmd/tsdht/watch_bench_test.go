package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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

// BenchmarkWatch measures, on 3 node processes at rf 3, what live subscriptions cost
// a 60 Hz writer (this process) on node 0 and how long a point takes from its write's
// acknowledgement to a subscriber of node 2 (the subscribers in a process of their
// own, TestWatchFleet): b.N writes per case, each case reporting the writer's p50/p99
// and, with subscribers, the delivery p50/p99 (to the first subscriber). Run:
//
//	go test ./cmd/tsdht -run XXX -bench Watch -benchtime 600x
//
// or scripts/bench-watch [--arm] [--linger D] [--save], which records the figures in
// docs/bench/watch.jsonl. Each case also reports node 2's CPU and its read and write
// system calls (its messages) per write. With $TSDHT_WATCH_LINGER set to a duration
// (scripts/bench-watch --linger D), the subscribers' clients ask for that linger
// (client.Config.WatchLinger).
//
// With $TSDHT_WATCH_PROFILE set to a directory (scripts/bench-watch --profile DIR),
// node 2 serves Go's profiles on an HTTP port of its own and each case writes node
// 2's CPU profile over its timed writes there, as <case>.pprof. The nodes then
// also sample blocking and mutex contention, which costs CPU of its own.
func BenchmarkWatch(b *testing.B) {
	profDir := os.Getenv("TSDHT_WATCH_PROFILE")
	c := testutil.NewCluster(b, 3, "--rf", "3")
	if profDir != "" {
		os.Setenv("TSDHT_HTTP_PPROF", "1") // the nodes inherit it
		c.Nodes[2].Args = append(c.Nodes[2].Args, "--http", testutil.FreeAddr(b))
	}
	c.StartAll()
	c.WaitAlive(3, time.Minute)
	writer, err := client.New([]string{c.Nodes[0].RPC}, client.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer writer.Close()
	many := make([]string, 1000)
	for i := range many {
		many[i] = fmt.Sprintf("bench/many/%03d", i)
	}
	one := []string{"bench/one"}
	// Every series exists before the cases, so that their first writes are not timed.
	for _, k := range append(slices.Clone(many), one...) {
		if _, err := writer.Put(context.Background(), k, series.Points{Type: series.Float, T: []int64{1}, F: []float64{1}}, wire.PutOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	cases := []struct {
		name string
		keys []string // written in turn
		subs []client.Selector
	}{
		{"one-series/unsubscribed", one, nil},
		{"one-series/1000-subscribers", one, slices.Repeat([]client.Selector{{Series: one[0]}}, 1000)},
		{"1000-series/unsubscribed", many, nil},
		{"1000-series/1-subscriber", many, []client.Selector{{Prefix: "bench/many/"}}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			stop := watchProfile(b, c.Nodes[2], profDir, strings.ReplaceAll(tc.name, "/", "-"))
			benchWatchCase(b, c, writer, tc.keys, tc.subs, stop)
		})
	}
}

// subsPerClient is how many subscriptions of BenchmarkWatch share a client: each
// client polls all of its subscriptions at once.
const subsPerClient = 100

// benchWatchCase writes b.N points at 60 Hz with the subscribers subs watching from
// another process (TestWatchFleet), so that their goroutines do not queue beside the
// writer's in this one.
// profiled, when not nil, starts node 2's CPU profile at the first timed write and
// returns what stops it.
func benchWatchCase(b *testing.B, c *testutil.Cluster, writer *client.Client, keys []string, subs []client.Selector, profiled func() func()) {
	subAddr := c.Nodes[2].RPC
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var pids []int // the node processes', then the subscribers'
	for _, n := range c.Nodes {
		pids = append(pids, n.Cmd.Process.Pid)
	}
	var amu sync.Mutex
	arrived := map[int64]time.Time{} // the first subscriber's arrivals, by point time
	logFrom := len(c.Nodes[2].Log()) // node 2's log before the subscriptions open
	subscribed := time.Now()
	if len(subs) > 0 {
		sel := subs[0]
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestWatchFleet$")
		cmd.Env = append(os.Environ(), "TSDHT_WATCH_FLEET="+subAddr, fmt.Sprintf("TSDHT_WATCH_FLEET_N=%d", len(subs)),
			"TSDHT_WATCH_FLEET_SERIES="+sel.Series, "TSDHT_WATCH_FLEET_PREFIX="+sel.Prefix,
			fmt.Sprintf("TSDHT_WATCH_FLEET_FROM=%d", time.Now().UnixNano()))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		defer func() {
			cancel() // kills the subscribers
			cmd.Wait()
		}()
		pids = append(pids, cmd.Process.Pid)
		ready := make(chan struct{})
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				var t, at int64
				if sc.Text() == "ready" {
					close(ready)
				} else if _, err := fmt.Sscan(sc.Text(), &t, &at); err == nil {
					amu.Lock()
					arrived[t] = time.Unix(0, at)
					amu.Unlock()
				}
			}
		}()
		select {
		case <-ready:
		case <-time.After(60 * time.Second):
			b.Fatalf("%d subscriptions not open after 60s", len(subs))
		}
	}
	acked := make(map[int64]time.Time, b.N)
	lat := make([]time.Duration, 0, b.N)
	tick := time.NewTicker(time.Second / 60)
	defer tick.Stop()
	stopProfile := func() {}
	if profiled != nil {
		stopProfile = profiled()
	}
	cpu0 := cpuOf(pids)
	rw0 := readsWrites(pids[2])
	start := time.Now()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		<-tick.C
		t := time.Now().UnixNano()
		w := time.Now()
		if _, err := writer.Put(ctx, keys[i%len(keys)], series.Points{Type: series.Float, T: []int64{t}, F: []float64{float64(i)}}, wire.PutOptions{}); err != nil {
			b.Fatal(err)
		}
		acked[t] = time.Now()
		lat = append(lat, time.Since(w))
	}
	b.StopTimer()
	stopProfile()
	cpu1 := cpuOf(pids)
	rw1 := readsWrites(pids[2])
	b.Log(cpuOver(pids, cpu0, cpu1, time.Since(start)))
	b.ReportMetric(float64((cpu1[2]-cpu0[2]).Microseconds())/float64(b.N), "node2-cpu-µs/write")
	if rw0 >= 0 && rw1 >= 0 {
		b.ReportMetric(float64(rw1-rw0)/float64(b.N), "node2-rw-syscalls/write")
	}
	b.ReportMetric(float64(pct(lat, 0.5).Microseconds()), "write-p50-µs")
	b.ReportMetric(float64(pct(lat, 0.99).Microseconds()), "write-p99-µs")
	if len(subs) == 0 {
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	var deliv []time.Duration
	for {
		amu.Lock()
		deliv = deliv[:0]
		for t, a := range acked {
			if at, ok := arrived[t]; ok {
				deliv = append(deliv, max(0, at.Sub(a)))
			}
		}
		amu.Unlock()
		if len(deliv) == len(acked) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(deliv) < len(acked) {
		b.Errorf("%d of %d points reached the first subscriber", len(deliv), len(acked))
	}
	b.ReportMetric(float64(pct(deliv, 0.5).Microseconds()), "deliver-p50-µs")
	b.ReportMetric(float64(pct(deliv, 0.99).Microseconds()), "deliver-p99-µs")
	live := liveAt(b, c.Nodes[2], logFrom, len(subs))
	amu.Lock()
	defer amu.Unlock()
	var after []time.Duration // of the writes acknowledged once every subscription was live
	for t, a := range acked {
		if at, ok := arrived[t]; ok && a.After(live) {
			after = append(after, max(0, at.Sub(a)))
		}
	}
	b.ReportMetric(float64(live.Sub(subscribed).Milliseconds()), "live-ms")
	b.ReportMetric(float64(len(after)), "live-writes")
	b.ReportMetric(float64(pct(after, 0.5).Microseconds()), "deliver-live-p50-µs")
	b.ReportMetric(float64(pct(after, 0.99).Microseconds()), "deliver-live-p99-µs")
	b.Log(deliveryOverTime(start, acked, arrived, deliverySlice))
}

// liveAt waits (up to 30 s) until node n has logged n subscriptions live since the
// first from bytes of its log (package watch says so once every series a subscription
// opened with is past its history) and returns when the last of them did.
func liveAt(b *testing.B, n *testutil.Proc, from, subs int) time.Time {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var last time.Time
		said := 0
		for _, line := range strings.Split(n.Log()[from:], "\n") {
			if !strings.Contains(line, `msg="watch: subscription live"`) {
				continue
			}
			f := strings.Fields(line)
			if len(f) == 0 || !strings.HasPrefix(f[0], "time=") {
				continue
			}
			at, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(f[0], "time="))
			if err != nil {
				b.Fatalf("node log: %q: %v", line, err)
			}
			said++
			if at.After(last) {
				last = at
			}
		}
		if said >= subs {
			return last
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d subscriptions said live in the node's log after 30s", said, subs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// deliverySlice is the part of a case's writes deliveryOverTime sums up together.
const deliverySlice = 2 * time.Second

// deliveryOverTime says, for each slice of width w of a case's writes (by when they
// were acknowledged, from start), how many reached the first subscriber and the
// delivery p50/p99 of those: a tail of the first seconds only (the subscription still
// reading its history) tells apart from one all along.
func deliveryOverTime(start time.Time, acked, arrived map[int64]time.Time, w time.Duration) string {
	var parts [][]time.Duration
	for t, a := range acked {
		i := int(a.Sub(start) / w)
		for len(parts) <= i {
			parts = append(parts, nil)
		}
		if at, ok := arrived[t]; ok {
			parts[i] = append(parts[i], max(0, at.Sub(a)))
		}
	}
	out := "delivery by time of write (slice: points p50 p99):"
	for i, ds := range parts {
		out += fmt.Sprintf(" %v: %d %v %v;", time.Duration(i)*w, len(ds), pct(ds, 0.5).Round(100*time.Microsecond), pct(ds, 0.99).Round(100*time.Microsecond))
	}
	return out
}

// TestWatchFleet is BenchmarkWatch's subscribers, run as a process of their own: it
// opens $TSDHT_WATCH_FLEET_N subscriptions at node $TSDHT_WATCH_FLEET, prints "ready"
// once all are open and then, for the first one, "t arrival" (ns) per point, until
// it is killed.
func TestWatchFleet(t *testing.T) {
	addr := os.Getenv("TSDHT_WATCH_FLEET")
	if addr == "" {
		t.Skip("BenchmarkWatch's subscriber process; it runs only under BenchmarkWatch")
	}
	n, _ := strconv.Atoi(os.Getenv("TSDHT_WATCH_FLEET_N"))
	from, _ := strconv.ParseInt(os.Getenv("TSDHT_WATCH_FLEET_FROM"), 10, 64)
	sel := client.Selector{Series: os.Getenv("TSDHT_WATCH_FLEET_SERIES"), Prefix: os.Getenv("TSDHT_WATCH_FLEET_PREFIX")}
	var mu sync.Mutex
	w := bufio.NewWriter(os.Stdout)
	var clients []*client.Client
	var opened sync.WaitGroup
	for i := range n {
		if i%subsPerClient == 0 {
			var linger time.Duration // scripts/bench-watch --linger
			if v := os.Getenv("TSDHT_WATCH_LINGER"); v != "" {
				var err error
				if linger, err = time.ParseDuration(v); err != nil {
					t.Fatalf("TSDHT_WATCH_LINGER=%s: %v", v, err)
				}
			}
			c, err := client.New([]string{addr}, client.Config{WatchLinger: linger})
			if err != nil {
				t.Fatal(err)
			}
			clients = append(clients, c)
		}
		runs, sub := clients[i/subsPerClient].Subscribe(context.Background(), sel, from)
		opened.Add(1)
		go func() {
			<-sub.Moved()
			opened.Done()
		}()
		go func() {
			for r := range runs {
				if i != 0 {
					continue
				}
				at := time.Now().UnixNano()
				mu.Lock()
				for _, t := range r.Points.T {
					fmt.Fprintf(w, "%d %d\n", t, at)
				}
				w.Flush()
				mu.Unlock()
			}
		}()
	}
	opened.Wait()
	mu.Lock()
	fmt.Fprintln(w, "ready")
	w.Flush()
	mu.Unlock()
	select {}
}

// watchProfile returns, when dir is not empty, what starts node n's CPU profile
// (served by --http with TSDHT_HTTP_PPROF=1) and returns what stops it and writes it
// to dir/name.pprof; nil when dir is empty.
func watchProfile(b *testing.B, n *testutil.Proc, dir, name string) func() func() {
	if dir == "" {
		return nil
	}
	addr := ""
	for i, a := range n.Args {
		if a == "--http" && i+1 < len(n.Args) {
			addr = n.Args[i+1]
		}
	}
	return func() func() {
		// The profile runs for a whole number of seconds: as many as the writes take.
		secs := max(1, (b.N+59)/60)
		got := make(chan error, 1)
		go func() {
			resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs))
			if err != nil {
				got <- err
				return
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("%s: %s", resp.Status, body)
			}
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, name+".pprof"), body, 0o644)
			}
			got <- err
		}()
		return func() {
			if err := <-got; err != nil {
				b.Errorf("node 2's CPU profile: %v", err)
			}
		}
	}
}

// cpuOf returns the CPU time (user + system) each process of pids has used so far,
// from /proc (0 where it cannot be read).
func cpuOf(pids []int) []time.Duration {
	out := make([]time.Duration, len(pids))
	for i, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// After the command name, in parentheses: field 3 on; utime and stime are
		// fields 14 and 15, in clock ticks (USER_HZ, 100 on Linux).
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		out[i] = time.Duration(u+s) * 10 * time.Millisecond
	}
	return out
}

// readsWrites returns how many read and write system calls (syscr + syscw of
// /proc/PID/io: reads, writes and their vector forms) process pid has made so far, or
// -1 where it cannot be read: a node's messages sent and received, counted rather
// than timed, so that a machine's load does not blur them.
func readsWrites(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return -1
	}
	var n int64
	found := 0
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ": ")
		if ok && (k == "syscr" || k == "syscw") {
			x, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return -1
			}
			n += x
			found++
		}
	}
	if found != 2 {
		return -1
	}
	return n
}

// cpuOver says how many cores each process of pids (the nodes, then the subscribers)
// and this one (the writer) kept busy over the wall time since cpu0: where a
// writer's tail comes from a core the others took.
func cpuOver(pids []int, cpu0, cpu1 []time.Duration, wall time.Duration) string {
	out := "cores busy over the case:"
	for i := range pids {
		name := fmt.Sprintf("node %d", i)
		if i >= 3 {
			name = "subscribers"
		}
		out += fmt.Sprintf(" %s %.2f;", name, float64(cpu1[i]-cpu0[i])/float64(wall))
	}
	return out + fmt.Sprintf(" load average %s", loadAvg())
}

// pct returns the q-quantile of ds.
func pct(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}
