package dht

import (
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
)

// TestStopKeepsOwnership stops a node on purpose (a restart, an upgrade): the others
// report it "stopped", leave it out of Live, and keep it in replica sets for their
// DownGrace; after that it goes, as a dead or departed node does at once. A node that
// restarts within the grace is alive again with no change of placement.
func TestStopKeepsOwnership(t *testing.T) {
	const grace = 3 * time.Second
	seed, err := startNode(t, t.TempDir(), nil, func(c *Config) { c.DownGrace = grace })
	if err != nil {
		t.Fatal(err)
	}
	nodes := []*testNode{seed}
	for range 3 {
		tn, err := startNode(t, t.TempDir(), []string{seed.GossipAddr()}, func(c *Config) { c.DownGrace = grace })
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, tn)
	}
	testutil.WaitFor(t, 10*time.Second, func() bool {
		for _, tn := range nodes {
			if len(tn.Live()) != 4 {
				return false
			}
		}
		return true
	}, "4 live members everywhere")
	stopper, others := nodes[3], nodes[:3]
	id := stopper.Self().ID
	target := stopper.Self().Key // the stopper is the closest node to its own key
	if err := stopper.Stop(time.Second); err != nil {
		t.Fatal(err)
	}
	stoppedAt := time.Now()
	testutil.WaitFor(t, 5*time.Second, func() bool {
		for _, tn := range others {
			if stateOf(tn, id) != StateStopped {
				return false
			}
		}
		return true
	}, "the others to see the stop")
	for _, tn := range others {
		if has(tn.Live(), id) {
			t.Errorf("%s counts the stopped node live", tn.Self())
		}
		if rs := tn.ReplicaSet(target, 3); len(rs) != 3 || rs[0].ID != id {
			t.Errorf("%s: replica set of the stopped node's own key %v: the stopped node should still be first", tn.Self(), rs)
		}
	}
	if time.Since(stoppedAt) >= grace {
		t.Fatalf("the test machine is too slow: %v passed before the first check, the grace is %v", time.Since(stoppedAt), grace)
	}
	testutil.WaitFor(t, grace+10*time.Second, func() bool {
		for _, tn := range others {
			if has(tn.ReplicaSet(target, 3), id) {
				return false
			}
		}
		return true
	}, "the grace to run out")
	if d := time.Since(stoppedAt); d < grace {
		t.Fatalf("the stopped node left the replica sets after %v, before the grace of %v", d, grace)
	}
}
