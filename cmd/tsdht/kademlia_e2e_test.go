package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
	"github.com/tsdht/tsdht/quanta"
)

// TestEndToEndKademlia is TestEndToEnd's scenario in kademlia routing mode, with 30 real
// node processes whose buckets hold 3 peers, so that no node knows every other and a
// lookup takes several hops: every node finds the true replica sets; put and get are
// exact; two nodes that own the same shards die without a word; reads through the
// others stay complete and writes into those shards go on.
func TestEndToEndKademlia(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 30 node processes")
	}
	const (
		n      = 30
		format = "hfi"
	)
	start := time.Now()
	c := startProcs(t, n, "--routing", "kademlia", "--bucket-size", "3", "--rf", "3", "--id-format", format,
		"--cache-mb", "2", "--hot-mb", "1", "--repair-interval", "1m")
	keys := c.waitKnown(90 * time.Second)
	t.Logf("%d nodes up and bootstrapped in %v", n, time.Since(start).Round(time.Millisecond))

	key := "pmu17/bus3/vang"
	base := (time.Now().Add(-time.Hour).Unix()/10)*10*int64(time.Second) + 3_300_000_000
	// Every node finds the same, true, replica set of a few shards: the tables are
	// partial, so this is the lookups at work.
	var probes []int64
	for i := int64(0); i < 4; i++ {
		probes = append(probes, base+i*40*int64(time.Second))
	}
	settled := c.waitReplicaSets(key, format, probes, keys, 90*time.Second)
	t.Logf("every node found the true replica sets within %v", settled.Round(time.Millisecond))

	// locate --trace shows the lookup's hops; with buckets of 3 among 30 nodes some take
	// more than one round.
	maxRounds := 0
	for i, at := range probes {
		out, trace, code := c.Run("", "locate", "--cluster", c.Nodes[5+i].RPC, "--series", key,
			"--at", strconv.FormatInt(at, 10), "--id-format", format, "--trace")
		var rounds, reqs int
		if code != 0 || !strings.Contains(trace, "iterative lookup") || strings.Count(out, "\n") != 4 {
			t.Fatalf("locate --trace: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, trace)
		}
		if _, err := fmt.Sscanf(trace[strings.Index(trace, "lookup, ")+len("lookup, "):], "%d requests in %d rounds", &reqs, &rounds); err != nil {
			t.Fatalf("locate --trace: %v in\n%s", err, trace)
		}
		maxRounds = max(maxRounds, rounds)
		if i == 0 {
			t.Logf("locate --trace:\n%s%s", out, trace)
		}
	}
	if maxRounds < 2 {
		t.Errorf("every traced lookup took one round: the tables are not partial enough to show hops")
	}
	if _, errOut, code := c.Run("", "status", "--cluster", c.Nodes[3].RPC); code != 0 || !strings.Contains(errOut, "routing kademlia: the") {
		t.Errorf("status in kademlia mode: exit %d, stderr %q: want it to say it lists the node's table", code, errOut)
	}

	all := pmuPoints(base, 9000)
	_, errOut, code := c.Run(csvOf(all), "put", "--cluster", c.Nodes[0].RPC, "--series", key)
	if code != 0 || !strings.Contains(errOut, "stored 9000 points") {
		t.Fatalf("put: exit %d: %s", code, errOut)
	}
	ranges := [][2]int64{
		{base, base + 150*int64(time.Second)},
		{base + 1_234_567_891, base + 8_765_432_109},
		{base + 7_500_000_000, base + 97_250_000_000},
		{base - 5*int64(time.Second), base + 2*int64(time.Second)},
		{base + 149*int64(time.Second), base + 400*int64(time.Second)},
		{base + 16_666_666, base + 16_666_667},
	}
	for i, r := range ranges {
		c.checkRead(1+i*5, key, all, r[0], r[1])
	}

	// Kill the two closest owners of the shard the next write starts in, neither of them
	// node 0, which writes it.
	next := base + 150*int64(time.Second)
	owners := c.locate(0, key, format, next)
	for owners[0] == c.Nodes[0].RPC || owners[1] == c.Nodes[0].RPC {
		next += 10 * int64(time.Second) // node 0 owns it: the next quantum (it may own that too)
		owners = c.locate(0, key, format, next)
	}
	var victims []int
	for _, o := range owners[:2] {
		victims = append(victims, slices.IndexFunc(c.Nodes, func(p *proc) bool { return p.RPC == o }))
	}
	for _, v := range victims {
		c.Kill(v)
	}
	t.Logf("killed nodes %v, two owners of the quantum at %d", victims, next)
	var readers []int
	for i := range c.Nodes {
		if !slices.Contains(victims, i) && len(readers) < 3 && i%7 == 2 {
			readers = append(readers, i)
		}
	}
	for _, i := range readers {
		for _, r := range ranges {
			c.checkRead(i, key, all, r[0], r[1])
		}
	}
	// Node 0 located that shard before the kill: its cached replica set holds the two
	// dead nodes, so the write must find out and look again.
	more := pmuPoints(next, 600)
	writer := 0
	_, errOut, code = c.Run(csvOf(more), "put", "--cluster", c.Nodes[writer].RPC, "--series", key)
	if code != 0 || !strings.Contains(errOut, "stored 600 points") {
		t.Fatalf("put after kills: exit %d: %s", code, errOut)
	}
	all = append(all, more...)
	c.checkRead(readers[len(readers)-1], key, all, base, base+200*int64(time.Second))
}

// waitKnown waits until every node answers status and knows at least one peer, and
// returns the 160-bit ID (hex) of every node, by RPC address, from its own status row.
// It fails if some node's table holds every other node: the test would not exercise
// lookups.
func (c *e2eCluster) waitKnown(within time.Duration) map[string]string {
	c.t.Helper()
	keys := map[string]string{}
	deadline := time.Now().Add(within)
	largest := 0
	for _, p := range c.Nodes {
		var out string
		var rows []statusJSON
		if !testutil.Poll(time.Until(deadline), func() bool {
			var code int
			out, _, code = c.Run("", "status", "--cluster", p.RPC, "--json", "--timeout", "5s")
			rows = statusRows(out)
			return code == 0 && len(rows) >= 2
		}) {
			c.t.Fatalf("node %s: not bootstrapped; status:\n%s", p.RPC, out)
		}
		for _, r := range rows {
			if r.RPC == p.RPC {
				keys[p.RPC] = r.NodeID
			}
		}
		largest = max(largest, len(rows))
	}
	if len(keys) != len(c.Nodes) {
		c.t.Fatalf("found the IDs of %d of %d nodes", len(keys), len(c.Nodes))
	}
	if largest >= len(c.Nodes) {
		c.t.Fatalf("a node's status lists %d nodes: every node, so lookups are not exercised", largest)
	}
	c.t.Logf("largest table: %d peers of %d", largest-1, len(c.Nodes)-1)
	return keys
}

func statusRows(out string) []statusJSON {
	var rows []statusJSON
	dec := json.NewDecoder(bytes.NewReader([]byte(out)))
	for {
		var r statusJSON
		if dec.Decode(&r) != nil {
			return rows
		}
		rows = append(rows, r)
	}
}

// locate returns the RPC addresses of the replica set node i finds for key at t.
func (c *e2eCluster) locate(i int, key, format string, at int64) []string {
	c.t.Helper()
	out, errOut, code := c.Run("", "locate", "--cluster", c.Nodes[i].RPC, "--series", key,
		"--at", strconv.FormatInt(at, 10), "--id-format", format)
	if code != 0 {
		c.t.Fatalf("locate via node %d: exit %d: %s", i, code, errOut)
	}
	var addrs []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		if f := strings.Fields(line); len(f) == 2 {
			addrs = append(addrs, f[1])
		}
	}
	return addrs
}

// waitReplicaSets waits until every live node's replica set of key at each of the
// times is the 3 nodes XOR-closest to the shard ID among all nodes' IDs (keys), and
// returns how long it took from the cluster's start.
func (c *e2eCluster) waitReplicaSets(key, format string, times []int64, keys map[string]string, within time.Duration) time.Duration {
	c.t.Helper()
	f, err := quanta.ParseFormat(format)
	if err != nil {
		c.t.Fatal(err)
	}
	truth := func(at int64) []string {
		id := quanta.ShardID(f, key, quanta.Quantum(10).Start(at))
		addrs := make([]string, 0, len(keys))
		for a := range keys {
			addrs = append(addrs, a)
		}
		dist := func(a string) []byte {
			k, err := hex.DecodeString(keys[a])
			if err != nil || len(k) != quanta.IDLen {
				c.t.Fatalf("node ID %q: want 40 hex digits", keys[a])
			}
			for i := range k {
				k[i] ^= id[i]
			}
			return k
		}
		slices.SortFunc(addrs, func(a, b string) int { return bytes.Compare(dist(a), dist(b)) })
		return addrs[:3]
	}
	start := time.Now()
	deadline := start.Add(within)
	for i := range c.Nodes {
		for _, at := range times {
			want := truth(at)
			var got []string
			if !testutil.Poll(time.Until(deadline), func() bool {
				got = c.locate(i, key, format, at)
				return slices.Equal(got, want)
			}) {
				c.t.Fatalf("node %d places %s at %d on %v, want %v", i, key, at, got, want)
			}
		}
	}
	return time.Since(start)
}
