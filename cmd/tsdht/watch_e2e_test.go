package main

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
	"github.com/tsdht/tsdht/tsdb/client"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// watchLines is what a running `tsdht watch` printed, each line with when the test
// read it.
type watchLines struct {
	mu    sync.Mutex
	lines []string
	at    []time.Time
}

func (w *watchLines) snapshot() ([]string, []time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.lines), slices.Clone(w.at)
}

// startWatch runs `tsdht watch` with args and collects its lines.
func startWatch(t *testing.T, c *e2eCluster, args ...string) (*exec.Cmd, *watchLines, *testutil.SyncBuffer) {
	t.Helper()
	cmd := exec.Command(c.Bin, append([]string{"watch"}, args...)...)
	stderr := &testutil.SyncBuffer{}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &watchLines{}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			w.mu.Lock()
			w.lines = append(w.lines, sc.Text())
			w.at = append(w.at, time.Now())
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("watch stderr:\n%s", stderr.String())
		}
	})
	return cmd, w, stderr
}

// TestWatchSurvivesNodes: 3 nodes at rf 3, a 60 Hz writer on node 0, and a `tsdht
// watch --from -30s` on node 2 started mid-stream. Node 1 is SIGKILLed, then node 2,
// so that the watch moves to node 0. Afterwards the watch has printed every point the
// writer wrote, each once, in order. Write quorum 1: two of the three nodes end dead.
func TestWatchSurvivesNodes(t *testing.T) {
	began := time.Now()
	c := startE2ECluster(t, 3, "--rf", "3", "--write-quorum", "1", "--read-quorum", "1")
	step := func(what string) { t.Logf("%6.2fs %s", time.Since(began).Seconds(), what) }
	step("cluster up")
	cl, err := client.New([]string{c.Nodes[0].RPC}, client.Config{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const key = "watch/pmu1"

	// The writer: one point a tick at 60 Hz, retried until stored (writes are
	// idempotent), each with the time its write was acknowledged.
	var wmu sync.Mutex
	var written []int64
	acked := map[int64]time.Time{}
	var writeLat []time.Duration
	ctx, stop := context.WithCancel(context.Background())
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		tick := time.NewTicker(time.Second / 60)
		defer tick.Stop()
		for i := 0; ctx.Err() == nil; i++ {
			<-tick.C
			ts := time.Now().UnixNano()
			pts := series.Points{Type: series.Float, T: []int64{ts}, F: []float64{float64(i)}}
			for {
				start := time.Now()
				_, err := cl.Put(context.Background(), key, pts, wire.PutOptions{})
				if err == nil {
					wmu.Lock()
					written = append(written, ts)
					acked[ts] = time.Now()
					writeLat = append(writeLat, time.Since(start))
					wmu.Unlock()
					break
				}
				t.Logf("write %d: %v (retrying)", i, err)
			}
		}
	}()
	nWritten := func() int {
		wmu.Lock()
		defer wmu.Unlock()
		return len(written)
	}
	testutil.WaitFor(t, 10*time.Second, func() bool { return nWritten() >= 60 }, "the writer to write a second of points")

	_, lines, stderr := startWatch(t, c, "--cluster", c.Nodes[2].RPC, "--series", key, "--from", "-30s")
	printed := func() int { l, _ := lines.snapshot(); return len(l) }
	testutil.WaitFor(t, 10*time.Second, func() bool { return printed() >= 90 }, "the watch to print history and live points")
	step("watch printing")
	live := time.Now() // latencies are measured from here to the first kill

	testutil.WaitFor(t, 10*time.Second, func() bool { return time.Since(live) > 2*time.Second }, "two seconds of steady state")
	c.Kill(1)
	killed := time.Now()
	step("node 1 killed")
	n := nWritten()
	testutil.WaitFor(t, 20*time.Second, func() bool { return nWritten() >= n+60 && printed() >= n+60 }, "writes and the watch to go on with node 1 dead")

	c.Kill(2)
	step("node 2 killed")
	testutil.WaitFor(t, 20*time.Second, func() bool { return strings.Contains(stderr.String(), "served by "+c.Nodes[0].RPC) },
		"the watch to move to node 0")
	step("watch moved")
	n = nWritten()
	testutil.WaitFor(t, 20*time.Second, func() bool { return nWritten() >= n+60 }, "a second more of writes")
	stop()
	<-writerDone
	wmu.Lock()
	want := slices.Clone(written)
	wmu.Unlock()
	testutil.WaitFor(t, 10*time.Second, func() bool { return printed() >= len(want) }, "the watch to print the writer's last point")

	got, at := lines.snapshot()
	var gotT []int64
	var lat []time.Duration
	for i, l := range got {
		f := strings.Split(l, ",")
		if len(f) != 3 || f[0] != key {
			t.Fatalf("line %d %q: want %s,timestamp,value", i, l, key)
		}
		ts, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			t.Fatalf("line %d %q: %v", i, l, err)
		}
		gotT = append(gotT, ts)
		if a, ok := acked[ts]; ok && a.After(live) && a.Before(killed) {
			lat = append(lat, at[i].Sub(a))
		}
	}
	if !slices.Equal(gotT, want) {
		t.Fatalf("the watch printed %d points, the writer wrote %d: %s", len(gotT), len(want), firstDiff(gotT, want))
	}
	step("checked")
	t.Logf("%d points, each printed once, in order; write acknowledged → line printed: %s; the write's own latency: %s",
		len(want), quantiles(lat), quantiles(writeLat))
	if len(lat) < 60 {
		t.Errorf("only %d points had a latency measured in the two seconds of steady state", len(lat))
	}
}

// firstDiff says where two sequences of timestamps first differ.
func firstDiff(got, want []int64) string {
	for i := 0; i < min(len(got), len(want)); i++ {
		if got[i] != want[i] {
			return fmt.Sprintf("first difference at %d: printed %d, written %d", i, got[i], want[i])
		}
	}
	return fmt.Sprintf("the shorter is a prefix of the longer (printed %d, written %d)", len(got), len(want))
}

// TestWatchBadFlags: bad flag values of watch exit 2 naming the flag; a cluster that
// never answers exits 1 once --timeout has passed.
func TestWatchBadFlags(t *testing.T) {
	bin := testutil.Binary(t)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--series", "x", "--from", "last-tuesday"}, exitUsage, "--from"},
		{[]string{"--series", "x", "--format", "xml"}, exitUsage, "--format"},
		{[]string{}, exitUsage, "--series"},
		{[]string{"--series", "x", "--prefix", "y"}, exitUsage, "--series"},
		{[]string{"--series", "x", "--timeout", "1s"}, exitFailure, "no node of the cluster serves the subscription"},
	} {
		args := append([]string{"watch", "--cluster", "127.0.0.1:1"}, tc.args...)
		_, errOut, code := testutil.RunCmd(t, exec.Command(bin, args...), "")
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d naming %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
}
