package main

import (
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
)

// statusOf returns `status --json` through node i, by node ID.
func (c *e2eCluster) statusOf(i int) map[string]statusJSON {
	c.t.Helper()
	out, errOut, code := c.Run("", "status", "--cluster", c.Nodes[i].RPC, "--json")
	if code != 0 {
		c.t.Fatalf("status: exit %d: %s", code, errOut)
	}
	m := map[string]statusJSON{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var s statusJSON
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			c.t.Fatalf("status line %q: %v", line, err)
		}
		m[s.RPC] = s
	}
	return m
}

// waitExit waits for node i's process to end and returns its exit code.
func (c *e2eCluster) waitExit(i int, within time.Duration) int {
	c.t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.Nodes[i].Cmd.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		if err != nil {
			c.t.Fatal(err)
		}
		return 0
	case <-time.After(within):
		c.t.Fatalf("node %d did not exit within %v", i, within)
		return -1
	}
}

// waitKnows waits until node i's status lists n members, as a kademlia node's
// table fills.
func (c *e2eCluster) waitKnows(i, n int) {
	c.t.Helper()
	var out string
	if !testutil.Poll(time.Minute, func() bool {
		var code int
		out, _, code = c.Run("", "status", "--cluster", c.Nodes[i].RPC, "--json", "--timeout", "5s")
		return code == 0 && len(statusRows(out)) == n
	}) {
		c.t.Fatalf("node %d does not list %d members; status:\n%s", i, n, out)
	}
}

// TestStopKeepsDataDecommissionEmpties: SIGTERM stops a node with its data kept (the
// others call it "stopped" and go on writing), a restart serves it again, and `tsdht
// decommission` hands a node's shards off, empties it, and makes it exit — with every
// point still readable.
func TestStopKeepsDataDecommissionEmpties(t *testing.T) {
	c := startE2ECluster(t, 4, "--rf", "3")
	key := "stop/decom"
	t0 := time.Now().Add(-time.Hour).Truncate(time.Minute).UnixNano()
	all := pmuPoints(t0, 7200)
	if _, errOut, code := c.Run(csvOf(all[:3600]), "put", "--cluster", c.Nodes[0].RPC, "--series", key); code != 0 {
		t.Fatalf("put: %s", errOut)
	}

	// A stop keeps the data.
	stopped := c.Nodes[3]
	stoppedDir := stopped.Data
	stopped.Cmd.Process.Signal(syscall.SIGTERM)
	if code := c.waitExit(3, 20*time.Second); code != 0 {
		t.Fatalf("SIGTERM: exit %d; log:\n%s", code, stopped.Log())
	}
	if !strings.Contains(stopped.Log(), "data kept") {
		t.Errorf("the stopping node does not say it keeps its data; log:\n%s", stopped.Log())
	}
	out, errOut, code := c.Run("", "fsck", "--data", stoppedDir)
	if code != 0 || strings.Contains(out, "pairs: 0 read") {
		t.Fatalf("fsck of the stopped node: exit %d, %s%s (want its pairs kept)", code, out, errOut)
	}
	if !testutil.Poll(10*time.Second, func() bool { return c.statusOf(0)[stopped.RPC].State == "stopped" }) {
		t.Fatalf("status does not show the node stopped: %+v", c.statusOf(0)[stopped.RPC])
	}
	// Writes go on meanwhile.
	if _, errOut, code := c.Run(csvOf(all[3600:]), "put", "--cluster", c.Nodes[0].RPC, "--series", key); code != 0 {
		t.Fatalf("put while a node is stopped: %s", errOut)
	}
	// Back on its data.
	c.Start(3)
	c.WaitAlive(4, 30*time.Second)
	c.checkRead(3, key, all, all[0].t, all[len(all)-1].t+1)

	// A decommission empties the node and makes it exit.
	leaver := c.Nodes[1]
	id := c.statusOf(0)[leaver.RPC].NodeID
	out, errOut, code = c.Run("", "decommission", "--cluster", c.Nodes[0].RPC, "--node", id)
	if code != 0 {
		t.Fatalf("decommission: exit %d: %s%s; node log:\n%s", code, out, errOut, leaver.Log())
	}
	t.Log(strings.TrimSpace(out))
	if code := c.waitExit(1, 20*time.Second); code != 0 {
		t.Fatalf("decommissioned node exited %d; log:\n%s", code, leaver.Log())
	}
	out, _, code = c.Run("", "fsck", "--data", leaver.Data)
	if code != 0 || !strings.Contains(out, "pairs: 0 read") {
		t.Fatalf("the decommissioned node's store is not empty: exit %d\n%s", code, out)
	}
	for _, i := range []int{0, 2, 3} {
		c.checkRead(i, key, all, all[0].t, all[len(all)-1].t+1)
	}
	// A wrong ID is refused with a message.
	_, errOut, code = c.Run("", "decommission", "--cluster", c.Nodes[0].RPC, "--node", strings.Repeat("ab", 20))
	if code == 0 || !strings.Contains(errOut, "no member") {
		t.Fatalf("decommission of an unknown ID: exit %d: %s", code, errOut)
	}
}

// TestKademliaStopKeepsData is the stop of TestStopKeepsDataDecommissionEmpties in
// kademlia mode, where no gossip says "stopped": the others call the stopped node
// stopped (it told their tables), keep it as an owner — the writes meant for it
// leave hints instead of going to the next-closest node — and deliver the hints once
// it is back.
func TestKademliaStopKeepsData(t *testing.T) {
	c := startProcs(t, 4, "--routing", "kademlia", "--rf", "3", "--repair-interval", "3s")
	c.waitKnows(0, 4)
	key := "stop/kademlia"
	t0 := time.Now().Add(-time.Hour).Truncate(time.Minute).UnixNano()
	all := pmuPoints(t0, 7200)
	if _, errOut, code := c.Run(csvOf(all[:3600]), "put", "--cluster", c.Nodes[0].RPC, "--series", key); code != 0 {
		t.Fatalf("put: %s", errOut)
	}
	// held sums points and hinted points over what node 0's status lists.
	held := func() (pts, hinted int64) {
		for _, s := range c.statusOf(0) {
			pts += s.Points
			hinted += s.HintedPoints
		}
		return pts, hinted
	}
	stopped := c.Nodes[3]
	before := c.statusOf(0)[stopped.RPC].Points
	stopped.Cmd.Process.Signal(syscall.SIGTERM)
	if code := c.waitExit(3, 20*time.Second); code != 0 {
		t.Fatalf("SIGTERM: exit %d; log:\n%s", code, stopped.Log())
	}
	if st := c.statusOf(0)[stopped.RPC].State; st != "stopped" {
		t.Fatalf("status through node 0 shows the stopped node as %q, want stopped", st)
	}
	pts0, _ := held() // the stopped node reports nothing now
	if _, errOut, code := c.Run(csvOf(all[3600:]), "put", "--cluster", c.Nodes[0].RPC, "--series", key); code != 0 {
		t.Fatalf("put while a node is stopped: %s", errOut)
	}
	// Had the stopped node been dropped, every new point would have 3 copies among
	// the 3 others; it owns about 3 in 4 of the shards, so its copies are missing
	// (or held as hints by a coordinator that is no owner).
	pts1, hinted := held()
	if owned := pts1 - hinted - pts0; owned >= 3*3600 {
		t.Fatalf("the live nodes own %d copies of the 3,600 points written while a node was stopped: "+
			"its shards went to the next-closest nodes (hinted %d)", owned, hinted)
	}
	c.Start(3)
	// Back: repair gives it what it missed, and the hints go.
	if !testutil.Poll(60*time.Second, func() bool {
		pts, hinted := held()
		st := c.statusOf(0)[stopped.RPC]
		return pts == 3*7200 && hinted == 0 && st.State == "alive" && st.Points > before
	}) {
		pts, hinted := held()
		t.Fatalf("the restarted node did not get what it missed within 60 s: %d points held (want %d), %d hinted; status %+v",
			pts, 3*7200, hinted, c.statusOf(0))
	}
	c.checkRead(3, key, all, all[0].t, all[len(all)-1].t+1)
}

// TestRollingRestartMovesOnlyWhatWasWritten restarts the 6 nodes of a cluster holding
// data one after another, as the rolling-upgrade playbook does (SIGTERM, writes go on
// while the node is down, restart, wait until it has what it missed). The repair
// pushes of the whole restart must be about what was written while nodes were down —
// not what they held.
func TestRollingRestartMovesOnlyWhatWasWritten(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts 6 node processes one by one")
	}
	const (
		nodes, rf = 6, 3
		series    = 4
		held      = 36000 // points per series before the restart: 10 minutes at 60 Hz
		meanwhile = 600   // points per series written while each node is down: 10 s
	)
	c := startE2ECluster(t, nodes, "--rf", "3", "--repair-interval", "2s")
	t0 := time.Now().Add(-time.Hour).Truncate(time.Minute).UnixNano()
	all := pmuPoints(t0, held+nodes*meanwhile)
	key := func(s int) string { return "rolling/ch" + strconv.Itoa(s) }
	for s := range series {
		if _, errOut, code := c.Run(csvOf(all[:held]), "put", "--cluster", c.Nodes[s%nodes].RPC, "--series", key(s)); code != 0 {
			t.Fatalf("put: %s", errOut)
		}
	}
	total := func(i int) (pts, hinted, pushedPts, pushedBytes int64) {
		for _, s := range c.statusOf(i) {
			pts += s.Points
			hinted += s.HintedPoints
			pushedPts += s.PushedPoints
			pushedBytes += s.PushedBytes
		}
		return
	}
	written := int64(series * held)
	// A node's counters start again at its restart: count each node's pushes up to its
	// stop, and all of them at the end.
	_, _, pushed, pushedBytes := total(0)
	pushed, pushedBytes = -pushed, -pushedBytes
	for i := range nodes {
		via := (i + 1) % nodes
		p := c.Nodes[i]
		st := c.statusOf(via)[p.RPC]
		pushed, pushedBytes = pushed+st.PushedPoints, pushedBytes+st.PushedBytes
		p.Cmd.Process.Signal(syscall.SIGTERM)
		if code := c.waitExit(i, 20*time.Second); code != 0 {
			t.Fatalf("node %d: SIGTERM: exit %d; log:\n%s", i, code, p.Log())
		}
		chunk := all[held+i*meanwhile : held+(i+1)*meanwhile]
		for s := range series {
			if _, errOut, code := c.Run(csvOf(chunk), "put", "--cluster", c.Nodes[via].RPC, "--series", key(s)); code != 0 {
				t.Fatalf("put while node %d is down: %s", i, errOut)
			}
		}
		written += series * meanwhile
		if p.Join == "" { // the first node joined through nobody
			p.Join = c.Nodes[via].Gossip
		}
		c.Start(i)
		c.WaitAlive(nodes, 60*time.Second)
		if !testutil.Poll(60*time.Second, func() bool {
			pts, hinted, _, _ := total(via)
			return pts == rf*written && hinted == 0
		}) {
			pts, hinted, _, _ := total(via)
			t.Fatalf("after restarting node %d: %d copies held (want %d), %d hinted", i, pts, rf*written, hinted)
		}
	}
	_, _, pushedEnd, bytesEnd := total(0)
	pushed, pushedBytes = pushed+pushedEnd, pushedBytes+bytesEnd
	t.Logf("rolling restart of %d nodes holding %d points (%d copies): %d points (%d bytes on the wire) pushed; %d written while nodes were down",
		nodes, written, rf*written, pushed, pushedBytes, series*nodes*meanwhile)
	if pushed == 0 {
		t.Fatal("nothing pushed: the restarted nodes cannot have what was written while they were down")
	}
	// Each point written while a node was down is missing on at most that node: at most its
	// two other owners and a coordinator's hint push it there.
	if limit := int64(rf * series * nodes * meanwhile); pushed > limit {
		t.Fatalf("%d points pushed, more than %d: the restart moved data the nodes already held", pushed, limit)
	}
	for s := range series {
		c.checkRead(s%nodes, key(s), all, all[0].t, all[len(all)-1].t+1)
	}
}

// TestKademliaDecommission is the decommission of TestStopKeepsDataDecommissionEmpties
// in kademlia mode, where no gossip says "left": the leaver tells its routing table,
// which drops it at once (no failed call needed) and does not take it back from
// other nodes' answers; its shards end with 3 copies among the others, with no hints
// waiting for it, and the writes that follow store every copy on the live nodes.
func TestKademliaDecommission(t *testing.T) {
	c := startProcs(t, 4, "--routing", "kademlia", "--rf", "3", "--repair-interval", "3s")
	c.waitKnows(0, 4)
	key := "decom/kademlia"
	t0 := time.Now().Add(-time.Hour).Truncate(time.Minute).UnixNano()
	all := pmuPoints(t0, 7200)
	if _, errOut, code := c.Run(csvOf(all[:3600]), "put", "--cluster", c.Nodes[0].RPC, "--series", key); code != 0 {
		t.Fatalf("put: %s", errOut)
	}
	leaver := c.Nodes[1]
	id := c.statusOf(0)[leaver.RPC].NodeID
	out, errOut, code := c.Run("", "decommission", "--cluster", c.Nodes[0].RPC, "--node", id)
	if code != 0 {
		t.Fatalf("decommission: exit %d: %s%s; node log:\n%s", code, out, errOut, leaver.Log())
	}
	if code := c.waitExit(1, 30*time.Second); code != 0 {
		t.Fatalf("decommissioned node exited %d; log:\n%s", code, leaver.Log())
	}
	out, _, code = c.Run("", "fsck", "--data", leaver.Data)
	if code != 0 || !strings.Contains(out, "pairs: 0 read") {
		t.Fatalf("the decommissioned node's store is not empty: exit %d\n%s", code, out)
	}
	// Every live node has dropped it without calling it first.
	for _, i := range []int{0, 2, 3} {
		if st, ok := c.statusOf(i)[leaver.RPC]; ok {
			t.Fatalf("node %d still lists the decommissioned node (%s) right after it left", i, st.State)
		}
	}
	// What follows is written to the live nodes only: 3 copies of each point, no hints.
	if _, errOut, code := c.Run(csvOf(all[3600:]), "put", "--cluster", c.Nodes[2].RPC, "--series", key); code != 0 {
		t.Fatalf("put after the decommission: %s", errOut)
	}
	var pts, hinted int64
	for _, s := range c.statusOf(0) {
		pts += s.Points
		hinted += s.HintedPoints
	}
	if pts != 3*7200 || hinted != 0 {
		t.Fatalf("the 3 live nodes hold %d copies (want %d) and %d hinted points (want 0): %+v",
			pts, 3*7200, hinted, c.statusOf(0))
	}
	for _, i := range []int{0, 2, 3} {
		c.checkRead(i, key, all, all[0].t, all[len(all)-1].t+1)
	}
}
