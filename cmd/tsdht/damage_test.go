package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
)

// Damage to a node's files that must never be silent (issue 31): a damaged
// write-ahead log, a lost identity file. Each case runs real node processes.

// startBound is how long a node may take to refuse to start, or to start, on one of
// these damaged directories.
const startBound = 15 * time.Second

// putSeries writes n points one per 100 ms from half an hour ago to key through node
// i, and returns the range they cover.
func putSeries(c *e2eCluster, i int, key string, n int) (from, to int64) {
	c.t.Helper()
	from = (time.Now().Add(-30*time.Minute).Unix() / 10) * 10 * int64(time.Second)
	var b strings.Builder
	for k := range n {
		fmt.Fprintf(&b, "%d,%d.5\n", from+int64(k)*int64(100*time.Millisecond), k)
	}
	if _, errOut, code := c.Run(b.String(), "put", "--cluster", c.Nodes[i].RPC, "--series", key); code != 0 {
		c.t.Fatalf("put: exit %d: %s", code, errOut)
	}
	return from, from + int64(n)*int64(100*time.Millisecond)
}

// flipNewestWAL flips 64 bytes at 30 % of node i's newest write-ahead log, as issue 31
// did, and returns the log's name.
func flipNewestWAL(c *e2eCluster, i int) string {
	c.t.Helper()
	logs, _ := filepath.Glob(filepath.Join(c.Nodes[i].Data, "store", "*.log"))
	if len(logs) == 0 {
		c.t.Fatal("no write-ahead log in the node's store")
	}
	sort.Strings(logs)
	wal := logs[len(logs)-1]
	b, err := os.ReadFile(wal)
	if err != nil {
		c.t.Fatal(err)
	}
	at := len(b) * 3 / 10
	for k := at; k < at+64 && k < len(b); k++ {
		b[k] ^= 0x5a
	}
	if err := os.WriteFile(wal, b, 0o644); err != nil {
		c.t.Fatal(err)
	}
	return filepath.Base(wal)
}

// countPoints returns how many points get reads for key through node i.
func countPoints(c *e2eCluster, i int, key string, from, to int64) (int, string, int) {
	c.t.Helper()
	out, errOut, code := c.Run("", "get", "--cluster", c.Nodes[i].RPC, "--series", key,
		"--from", strconv.FormatInt(from, 10), "--to", strconv.FormatInt(to, 10))
	return strings.Count(out, "\n"), errOut, code
}

// TestWALDamageRF1RefusesToStart is issue 31's case: rf 1, --sync always, 600 points
// acknowledged, SIGKILL, 64 bytes flipped at 30 % of the newest WAL. The node must
// refuse to start, naming the log, the offset and --accept-wal-loss, within
// startBound and without touching the log (a second start refuses again, fsck reports
// it); with --accept-wal-loss it starts, logs the loss at ERROR, and status and
// /metrics show it.
func TestWALDamageRF1RefusesToStart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills real node processes")
	}
	httpAddr := testutil.FreeAddr(t)
	c := newE2ECluster(t, 1, "--rf", "1", "--sync", "always", "--http", httpAddr)
	c.StartAll()
	c.WaitAlive(1, time.Minute)
	const key, n = "damage/wal", 600
	from, to := putSeries(c, 0, key, n)
	c.Kill(0)
	wal := flipNewestWAL(c, 0)

	for round := range 2 {
		start := time.Now()
		c.Start(0)
		if code := c.waitExit(0, startBound); code == 0 {
			t.Fatalf("round %d: the node started on a WAL that drops acknowledged writes", round)
		}
		took := time.Since(start)
		log := c.Nodes[0].Log()
		log = log[strings.LastIndex(log, "---- start"):]
		for _, want := range []string{wal, "damaged at offset", "--accept-wal-loss", "--rf 1"} {
			if !strings.Contains(log, want) {
				t.Fatalf("round %d: the refusal does not say %q:\n%s", round, want, log)
			}
		}
		t.Logf("round %d: refused in %v", round, took.Round(time.Millisecond))
	}
	out, _, code := c.Run("", "fsck", "--data", c.Nodes[0].Data)
	if code == 0 || !strings.Contains(out, "DAMAGED") || !strings.Contains(out, wal) {
		t.Fatalf("fsck: exit %d:\n%s", code, out)
	}

	c.Nodes[0].Args = []string{"--accept-wal-loss"}
	start := time.Now()
	c.Start(0)
	c.WaitAlive(1, startBound)
	t.Logf("started with --accept-wal-loss in %v", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(c.Nodes[0].Log(), "level=ERROR") {
		t.Fatalf("no ERROR in the log of a node that lost acknowledged writes:\n%s", c.Nodes[0].Log())
	}
	got, errOut, code := countPoints(c, 0, key, from, to)
	t.Logf("%d of %d points back after accepting the loss (get: exit %d %s)", got, n, code, errOut)
	if got >= n {
		t.Fatal("the flip lost nothing: the test damaged nothing replay reads")
	}
	st := c.statusOf(0)[c.Nodes[0].RPC]
	if st.WALBytesDropped <= 0 {
		t.Fatalf("status --json: wal_bytes_dropped %d", st.WALBytesDropped)
	}
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "tsdht_store_wal_lost_bytes "+strconv.FormatInt(st.WALBytesDropped, 10)) {
		t.Fatalf("/metrics does not show the %d bytes lost", st.WALBytesDropped)
	}
}

// TestIdentityLostRefusesToStart: a data directory that lost identity.key is an error
// naming the file and --new-identity, not a new node; --new-identity starts one.
func TestIdentityLostRefusesToStart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real node processes")
	}
	c := startE2ECluster(t, 1, "--rf", "1")
	first := c.nodeIDs()
	c.Kill(0)
	idFile := filepath.Join(c.Nodes[0].Data, "identity.key")
	if err := os.Remove(idFile); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c.Start(0)
	if code := c.waitExit(0, startBound); code == 0 {
		t.Fatal("the node started without its identity file")
	}
	t.Logf("refused in %v", time.Since(start).Round(time.Millisecond))
	log := c.Nodes[0].Log()
	log = log[strings.LastIndex(log, "---- start"):]
	for _, want := range []string{idFile, "--new-identity", "identity.key back"} {
		if !strings.Contains(log, want) {
			t.Fatalf("the refusal does not say %q:\n%s", want, log)
		}
	}
	if _, err := os.Stat(idFile); err == nil {
		t.Fatal("the refusal wrote a new identity file")
	}
	c.Nodes[0].Args = []string{"--new-identity"}
	c.Start(0)
	c.WaitAlive(1, startBound)
	if now := c.nodeIDs(); len(now) != 1 || now[0] == first[0] {
		t.Fatalf("node IDs %v after --new-identity, were %v: want a new one", now, first)
	}
}

// TestWALDamageRF3Refills: at rf 3 a replica whose WAL lost acknowledged writes starts
// (its peers hold copies), says so at ERROR, reports itself refilling in status until
// its peers' repair passes have pushed it what it lost, and then holds every point
// again; reads through it stay complete meanwhile.
func TestWALDamageRF3Refills(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills real node processes")
	}
	const refillBound = 30 * time.Second
	c := startE2ECluster(t, 3, "--rf", "3", "--sync", "always")
	const key, n = "damage/wal3", 600
	from, to := putSeries(c, 0, key, n)
	const victim = 2
	held := func() int64 { return c.statusOf(0)[c.Nodes[victim].RPC].Points }
	if p := held(); p != n {
		t.Fatalf("node %d holds %d points before the damage, want %d", victim, p, n)
	}
	c.Kill(victim)
	wal := flipNewestWAL(c, victim)
	start := time.Now()
	c.Start(victim)
	c.WaitAlive(3, time.Minute)
	if got, errOut, code := countPoints(c, victim, key, from, to); code != 0 || got != n {
		t.Fatalf("read through the damaged node: %d of %d points, exit %d: %s", got, n, code, errOut)
	}
	var st statusJSON
	took := testutil.WaitFor(t, refillBound, func() bool {
		st = c.statusOf(victim)[c.Nodes[victim].RPC]
		return !st.Refilling && st.Points == n
	}, "node %d to be refilled", victim)
	t.Logf("refilled %d points within %v of the restart (%v after it answered status)", st.Points, time.Since(start).Round(time.Millisecond), took.Round(time.Millisecond))
	if st.WALBytesDropped <= 0 {
		t.Fatalf("status --json: wal_bytes_dropped %d: the damage was not reported", st.WALBytesDropped)
	}
	pushed := int64(0)
	for addr, s := range c.statusOf(victim) {
		if addr != c.Nodes[victim].RPC {
			pushed += s.PushedPairs
		}
	}
	if pushed == 0 {
		t.Fatal("the peers pushed no pair: the damage lost nothing the refill had to bring back")
	}
	log := c.Nodes[victim].Log()
	for _, want := range []string{"level=ERROR", wal, "refilled after the write-ahead log loss"} {
		if !strings.Contains(log, want) {
			t.Fatalf("the damaged node's log does not say %q:\n%s", want, log)
		}
	}
}
