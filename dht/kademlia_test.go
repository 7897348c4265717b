package dht

import (
	"context"
	"errors"
	"fmt"

	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
	"github.com/tsdht/tsdht/quanta"
)

// kademliaMode sets a node to kademlia mode with buckets of size bucket, so
// that tables hold a few peers and lookups take several hops.
func kademliaMode(bucket int) func(*Config) {
	return func(c *Config) {
		c.Routing = RoutingKademlia
		c.BucketSize = bucket
		c.RefreshInterval = time.Second
		c.QueryTimeout = 2 * time.Second
	}
}

// startKademlia starts n kademlia-mode nodes, each in its own directory,
// joining through the first one's gossip address one after another.
func startKademlia(t *testing.T, dirs []string, bucket int) []*testNode {
	t.Helper()
	seed, err := startNode(t, dirs[0], nil, kademliaMode(bucket))
	if err != nil {
		t.Fatal(err)
	}
	nodes := []*testNode{seed}
	for _, d := range dirs[1:] {
		tn, err := startNode(t, d, []string{seed.GossipAddr()}, kademliaMode(bucket))
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, tn)
	}
	return nodes
}

// replicaSetEventually asks tn for the replica set of id as tsdb does: a
// member that fails a call is reported and the set asked again.
func replicaSetEventually(tn *testNode, id quanta.ID, rf int, dead map[string]bool) []Peer {
	for range 10 {
		rs := tn.ReplicaSet(id, rf)
		failed := false
		for _, p := range rs {
			if dead[p.ID] {
				tn.ReportFailure(p)
				failed = true
			}
		}
		if !failed {
			return rs
		}
	}
	return nil
}

// TestKademliaModeAgreesWithFullMode starts nodes in kademlia mode with
// buckets of 2, so that no table holds every node and lookups take several
// hops, and checks that every node finds the true XOR-closest replica sets;
// then kills two nodes and checks again among the living, with failed calls
// reported as tsdb reports them; then restarts the same identities in full
// mode and checks that both modes gave the same replica sets.
func TestKademliaModeAgreesWithFullMode(t *testing.T) {
	const (
		n  = 12
		rf = 3
	)
	dirs := make([]string, n)
	for i := range dirs {
		dirs[i] = t.TempDir()
	}
	nodes := startKademlia(t, dirs, 2)
	var all []Peer
	for _, tn := range nodes {
		all = append(all, tn.Self())
	}
	rng := rand.New(rand.NewPCG(17, 17))
	ids := make([]quanta.ID, 100)
	for i := range ids {
		ids[i] = randomKey(rng)
	}
	kadSets := make(map[quanta.ID][]Peer)
	hops, maxTable := 0, 0
	for i, id := range ids {
		tn := nodes[i%n]
		got := tn.ReplicaSet(id, rf)
		want := ClosestPeers(all, id, rf)
		if !sameIDs(got, want) {
			t.Fatalf("node %d: kademlia replica set of %s = %v, want %v", i%n, id, got, want)
		}
		kadSets[id] = got
		_, st, err := tn.LookupWithStats(context.Background(), id, rf)
		if err != nil {
			t.Fatal(err)
		}
		hops += st.Hops
		maxTable = max(maxTable, tn.TableSize())
	}
	t.Logf("%d nodes, buckets of 2: largest table %d peers, %.1f lookup rounds on average", n, maxTable, float64(hops)/float64(len(ids)))
	if maxTable >= n-1 {
		t.Errorf("a table holds %d peers, every other node: the test would not exercise lookups", maxTable)
	}

	// Two nodes die without a word.
	dead := map[string]bool{}
	for _, tn := range nodes[n-2:] {
		dead[tn.Self().ID] = true
		tn.kill()
	}
	var live []Peer
	for _, p := range all {
		if !dead[p.ID] {
			live = append(live, p)
		}
	}
	for i, id := range ids {
		tn := nodes[i%(n-2)]
		got := replicaSetEventually(tn, id, rf, dead)
		if want := ClosestPeers(live, id, rf); !sameIDs(got, want) {
			t.Fatalf("after two deaths, node %d: replica set of %s = %v, want %v", i%(n-2), id, got, want)
		}
	}

	// The same identities in full mode give the same replica sets as the
	// kademlia mode gave for the same live nodes.
	for _, tn := range nodes[:n-2] {
		tn.kill()
	}
	full := []*testNode{}
	seed, err := startNode(t, dirs[0], nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	full = append(full, seed)
	for _, d := range dirs[1:] {
		tn, err := startNode(t, d, []string{seed.GossipAddr()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		full = append(full, tn)
	}
	// Memberlist on a loaded machine may flap a member for a moment: wait
	// for a view of all n in which every node places every ID as kademlia
	// mode did.
	disagreement := ""
	testutil.WaitFor(t, 30*time.Second, func() bool {
		for i, id := range ids {
			tn := full[i%n]
			if len(tn.Live()) != n {
				disagreement = fmt.Sprintf("%s sees %d live members", tn.Self(), len(tn.Live()))
				return false
			}
			if got := tn.ReplicaSet(id, rf); !sameIDs(got, kadSets[id]) {
				disagreement = fmt.Sprintf("full mode places %s on %v, kademlia mode on %v", id, got, kadSets[id])
				t.Log(disagreement)
				return false
			}
		}
		return true
	}, "full mode to place every ID as kademlia mode did")
}

// TestKademliaStatusIsTheTable: in kademlia mode Live and Members report the
// node's table and itself, not a global view.
func TestKademliaStatusIsTheTable(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()}
	nodes := startKademlia(t, dirs, 1)
	for _, tn := range nodes {
		if got, want := len(tn.Live()), tn.TableSize()+1; got != want {
			t.Errorf("%s: Live lists %d, want its table (%d) and itself", tn.Self(), got, tn.TableSize())
		}
		if got := len(tn.Members()); got != len(tn.Live()) {
			t.Errorf("%s: Members lists %d, Live %d", tn.Self(), got, len(tn.Live()))
		}
	}
}

func TestKademliaJoinRefusedOnMismatch(t *testing.T) {
	kseed, err := startNode(t, t.TempDir(), nil, kademliaMode(4))
	if err != nil {
		t.Fatal(err)
	}
	fseed, err := startNode(t, t.TempDir(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		seed     *testNode
		edit     func(*Config)
		want     []string
		incompat bool
	}{
		{"quantum", kseed, func(c *Config) { kademliaMode(4)(c); c.Quantum = 5 }, []string{"quantum", "10s", "5s"}, true},
		{"format", kseed, func(c *Config) { kademliaMode(4)(c); c.Format = quanta.HFI }, []string{"ID format", "hfi"}, true},
		{"full joins kademlia", kseed, nil, []string{"routing", "full", "kademlia"}, true},
		// A memberlist seed cannot say why; the error names the likely cause.
		{"kademlia joins full", fseed, kademliaMode(4), []string{"--routing full"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := startNode(t, t.TempDir(), []string{tc.seed.GossipAddr()}, tc.edit)
			if err == nil {
				t.Fatal("a node of another configuration joined")
			}
			if errors.Is(err, ErrIncompatible) != tc.incompat {
				t.Errorf("errors.Is(err, ErrIncompatible) = %v, want %v: %v", !tc.incompat, tc.incompat, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("join error %q does not mention %q", err, w)
				}
			}
			t.Logf("refused: %v", err)
		})
	}
	if got := kseed.TableSize(); got != 0 {
		t.Errorf("the kademlia seed's table holds %d peers, want none of the refused", got)
	}
}

// TestKademliaRejoinsWhenSeedComesBack: a node whose seeds are all down keeps
// trying, and joins once one is up.
func TestKademliaRejoinsWhenSeedComesBack(t *testing.T) {
	dir := t.TempDir()
	seed, err := startNode(t, dir, nil, kademliaMode(4))
	if err != nil {
		t.Fatal(err)
	}
	addr := seed.GossipAddr()
	seed.kill()
	tn, err := startNode(t, t.TempDir(), []string{addr}, func(c *Config) { kademliaMode(4)(c); c.RejoinInterval = 100 * time.Millisecond })
	if err == nil || errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("join through a dead seed: %v, want an error naming it", err)
	}
	back, err := startNode(t, dir, nil, func(c *Config) { kademliaMode(4)(c); c.GossipAddr = addr })
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() bool {
		return tn.TableSize() == 1 && back.TableSize() == 1
	}, "the node to bootstrap through the restarted seed")
}

func TestLocateTrace(t *testing.T) {
	dirs := make([]string, 10)
	for i := range dirs {
		dirs[i] = t.TempDir()
	}
	nodes := startKademlia(t, dirs, 2)
	var all []Peer
	for _, tn := range nodes {
		all = append(all, tn.Self())
	}
	id := randomKey(rand.New(rand.NewPCG(3, 3)))
	got, hops, err := nodes[9].LocateTrace(context.Background(), id, 3)
	if err != nil {
		t.Fatal(err)
	}
	if want := ClosestPeers(all, id, 3); !sameIDs(got, want) {
		t.Fatalf("LocateTrace = %v, want %v", got, want)
	}
	if len(hops) == 0 || hops[0].Round != 1 {
		t.Fatalf("trace %+v: want hops from round 1", hops)
	}
	for i, h := range hops {
		if h.Distance != Distance(id, h.Peer.Key) || i > 0 && h.Round < hops[i-1].Round {
			t.Errorf("hop %d: %+v", i, h)
		}
		t.Logf("round %d %s distance %s returned %d %s", h.Round, h.Peer, h.Distance, h.Returned, h.Err)
	}
}
