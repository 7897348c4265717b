package dht

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/clusterkey"
	"github.com/tsdht/tsdht/internal/testutil"
)

func testKey(t *testing.T) clusterkey.Key {
	t.Helper()
	r, err := clusterkey.Parse([]byte(clusterkey.Generate()))
	if err != nil {
		t.Fatal(err)
	}
	return r[0]
}

func withKey(ring clusterkey.Ring) func(*Config) {
	return func(c *Config) { c.ClusterKey = ring }
}

// TestClusterKeyJoin: a node without the cluster's key, or with another key,
// cannot join (real memberlist over UDP and TCP): its Start fails saying
// "cluster key", and the cluster does not count it. One with the key joins.
func TestClusterKeyJoin(t *testing.T) {
	k1, k2 := testKey(t), testKey(t)
	seed, err := startNode(t, t.TempDir(), nil, withKey(clusterkey.Ring{k1}))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		ring clusterkey.Ring
	}{{"no key", nil}, {"wrong key", clusterkey.Ring{k2}}} {
		t.Run(tc.name, func(t *testing.T) {
			tn, err := startNode(t, t.TempDir(), []string{seed.GossipAddr()}, withKey(tc.ring))
			if err == nil || !strings.Contains(err.Error(), "cluster key") {
				t.Fatalf("Start: %v, want an error that says cluster key", err)
			}
			t.Logf("refused: %v", err)
			tn.kill()
			if got := len(seed.Live()); got != 1 {
				t.Errorf("the seed counts %d live members, want itself alone", got)
			}
		})
	}
	// A keyed node does not join a cluster without a key either.
	open, err := startNode(t, t.TempDir(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := startNode(t, t.TempDir(), []string{open.GossipAddr()}, withKey(clusterkey.Ring{k1})); err == nil || !strings.Contains(err.Error(), "cluster key") {
		t.Errorf("a keyed node joining an open cluster: %v, want an error that says cluster key", err)
	}

	member, err := startNode(t, t.TempDir(), []string{seed.GossipAddr()}, withKey(clusterkey.Ring{k1, k2}))
	if err != nil {
		t.Fatalf("a node holding the key: %v", err)
	}
	testutil.WaitFor(t, 10*time.Second, func() bool { return len(seed.Live()) == 2 && len(member.Live()) == 2 }, "2 live members on both")
}

// TestClusterKeyRotation rotates the key of a running 3-node cluster as
// docs/security.md says, restarting one node at a time: every node gets
// [k1, k2], then [k2, k1], then [k2]. After each restart all three are live
// everywhere and reach each other over rpc, so the cluster never splits.
func TestClusterKeyRotation(t *testing.T) {
	k1, k2 := testKey(t), testKey(t)
	first := clusterkey.Ring{k1}
	seed, err := startNode(t, t.TempDir(), nil, withKey(first))
	if err != nil {
		t.Fatal(err)
	}
	nodes := []*testNode{seed}
	for range 2 {
		tn, err := startNode(t, t.TempDir(), []string{seed.GossipAddr()}, withKey(first))
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, tn)
	}
	allTalk := func(what string) {
		t.Helper()
		testutil.WaitFor(t, 30*time.Second, func() bool {
			for _, tn := range nodes {
				if len(tn.Live()) != 3 {
					return false
				}
			}
			return true
		}, "%s: 3 live members everywhere", what)
		for _, a := range nodes {
			for _, b := range nodes {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := a.Ping(ctx, b.Self().RPCAddr)
				cancel()
				if err != nil {
					t.Fatalf("%s: rpc from %s to %s: %v", what, a.Self().ID, b.Self().ID, err)
				}
			}
		}
	}
	allTalk("with k1")
	for _, stage := range []clusterkey.Ring{{k1, k2}, {k2, k1}, {k2}} {
		for i := range nodes {
			others := []string{}
			for j, tn := range nodes {
				if j != i {
					others = append(others, tn.GossipAddr())
				}
			}
			old := nodes[i]
			if err := old.Leave(time.Second); err != nil {
				t.Logf("leave: %v", err)
			}
			old.kill()
			tn, err := startNode(t, old.dir, others, withKey(stage))
			if err != nil {
				t.Fatalf("restart of node %d with keys %s: %v", i, stage.IDs(), err)
			}
			nodes[i] = tn
			allTalk("node " + string(rune('0'+i)) + " restarted with " + stage.Primary().ID().String() + " first")
		}
	}
	// The old key is gone everywhere: a node that holds only it is refused.
	if _, err := startNode(t, t.TempDir(), []string{seed.GossipAddr(), nodes[0].GossipAddr()}, withKey(first)); err == nil || !strings.Contains(err.Error(), "cluster key") {
		t.Errorf("a node with the retired key: %v, want refused with cluster key", err)
	}
}
