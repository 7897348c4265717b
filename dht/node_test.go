package dht

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
)

// testNode is a Node with real memberlist on 127.0.0.1 and a real rpc server
// and client over TCP.
type testNode struct {
	*Node
	srv *rpc.Server
	cli *rpc.Client
	dir string
}

// startNode creates a node whose identity lives in dir, lets edit change its
// configuration, and starts it. The node is stopped when the test ends.
func startNode(t *testing.T, dir string, join []string, edit func(*Config)) (*testNode, error) {
	t.Helper()
	cfg := DefaultLANConfig()
	cfg.DataDir = dir
	cfg.GossipAddr = "127.0.0.1:0"
	cfg.Join = join
	cfg.Logger = testLogger(t)
	if edit != nil {
		edit(&cfg)
	}
	tr := rpc.NewTCPTransport()
	rcfg := rpc.DefaultConfig()
	rcfg.ClusterKey = cfg.ClusterKey
	srv := rpc.NewServer(tr, rcfg)
	// Listening before New registers the handlers tells the port to
	// advertise; a call arriving in between would only find no handler.
	addr, err := srv.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cli := rpc.NewClient(tr, rcfg)
	cfg.RPCAddr = addr.String()
	n, err := New(cfg, "", srv, cli)
	if err != nil {
		t.Fatal(err)
	}
	tn := &testNode{Node: n, srv: srv, cli: cli, dir: dir}
	t.Cleanup(tn.kill)
	return tn, n.Start()
}

// kill stops the node without a word to the cluster, like a power cut.
func (tn *testNode) kill() {
	tn.Node.Close()
	tn.cli.Close()
	tn.srv.Close()
}

// startCluster starts n nodes that join through the first and waits until
// every node sees all of them live.
func startCluster(t *testing.T, n int) []*testNode {
	t.Helper()
	nodes := startNodes(t, n, nil)
	// The loop feeds the routing table a moment after memberlist's news.
	testutil.WaitFor(t, 10*time.Second, func() bool {
		for _, tn := range nodes {
			if len(tn.Live()) != n || tn.TableSize() != n-1 {
				return false
			}
		}
		return true
	}, "all %d nodes to see %d live members and route to them", n, n)
	return nodes
}

// startNodes starts n nodes with edit, each after the first joining through the first,
// and does not wait for them to see each other.
func startNodes(t *testing.T, n int, edit func(*Config)) []*testNode {
	t.Helper()
	seed, err := startNode(t, t.TempDir(), nil, edit)
	if err != nil {
		t.Fatal(err)
	}
	nodes := []*testNode{seed}
	for range n - 1 {
		tn, err := startNode(t, t.TempDir(), []string{seed.GossipAddr()}, edit)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, tn)
	}
	return nodes
}

// testLogger returns a Logger that writes to t.Log until the test ends:
// memberlist may log from its goroutines a moment after a node stopped.
func testLogger(t *testing.T) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(w.stop)
	return slog.New(slog.NewTextHandler(w, nil))
}

type testWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) stop() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

// has reports whether ps lists the peer with the given ID.
func has(ps []Peer, id string) bool {
	return slices.ContainsFunc(ps, func(p Peer) bool { return p.ID == id })
}

// stateOf returns the state in which tn's membership holds the peer id.
func stateOf(tn *testNode, id string) MemberState {
	for _, m := range tn.Members() {
		if m.ID == id {
			return m.State
		}
	}
	return "unknown"
}

func TestMembershipJoinAndReplicaSets(t *testing.T) {
	nodes := startCluster(t, 5)
	rng := rand.New(rand.NewPCG(1, 1))
	for range 1000 {
		id := randomKey(rng)
		want := nodes[0].ReplicaSet(id, 3)
		if len(want) != 3 {
			t.Fatalf("replica set of %d nodes, want 3", len(want))
		}
		for _, tn := range nodes[1:] {
			if got := tn.ReplicaSet(id, 3); !sameIDs(got, want) {
				t.Fatalf("%s: replica set of %s is %v, %s computes %v", tn.Self(), id, got, nodes[0].Self(), want)
			}
		}
	}
	// A stranger's request does not put it in a member's table: membership
	// decides who is in the cluster.
	stranger := testPeers(t, 1, 7)[0]
	var pong pingResponse
	if err := rpc.Invoke(context.Background(), nodes[1].cli, nodes[0].Self().RPCAddr, MethodPing,
		&pingRequest{From: toWire(stranger)}, &pong); err != nil {
		t.Fatal(err)
	}
	if got := nodes[0].TableSize(); got != 4 {
		t.Errorf("after a stranger's ping the table holds %d peers, want the 4 members", got)
	}

	// The iterative path, over real TCP, agrees with the local one.
	for range 20 {
		id := randomKey(rng)
		got, err := nodes[2].Lookup(context.Background(), id, 3)
		if err != nil {
			t.Fatal(err)
		}
		if want := nodes[2].ReplicaSet(id, 3); !sameIDs(got, want) {
			t.Fatalf("lookup of %s found %v, replica set is %v", id, got, want)
		}
	}
}

func TestMembershipKillAndLeave(t *testing.T) {
	nodes := startCluster(t, 6)
	watcher := nodes[0].Subscribe()
	for len(watcher) > 0 {
		<-watcher
	}

	// Killed nodes, one after the other: the survivors must declare each dead.
	for _, victim := range []*testNode{nodes[5], nodes[4]} {
		id := victim.Self().ID
		start := time.Now()
		victim.kill()
		survivors := slices.DeleteFunc(slices.Clone(nodes), func(tn *testNode) bool { return tn == victim })
		testutil.WaitFor(t, 20*time.Second, func() bool {
			for _, tn := range survivors {
				if has(tn.Live(), id) {
					return false
				}
			}
			return true
		}, "survivors to declare %s dead", victim.Self())
		t.Logf("killed node declared dead by every survivor after %v (probe %v, timeout %v, suspicion mult %d)",
			time.Since(start).Round(time.Millisecond), DefaultLANConfig().ProbeInterval, DefaultLANConfig().ProbeTimeout,
			DefaultLANConfig().SuspicionMult)
		nodes = survivors
		for _, tn := range nodes {
			if s := stateOf(tn, id); s != StateDead {
				t.Errorf("%s holds the killed node as %q, want %q", tn.Self(), s, StateDead)
			}
		}
	}
	select {
	case <-watcher:
	default:
		t.Error("subscriber not signalled of the deaths")
	}

	// A graceful leave.
	leaver := nodes[3]
	id := leaver.Self().ID
	start := time.Now()
	if err := leaver.Leave(time.Second); err != nil {
		t.Fatal(err)
	}
	nodes = nodes[:3]
	testutil.WaitFor(t, 5*time.Second, func() bool {
		for _, tn := range nodes {
			if stateOf(tn, id) != StateLeft {
				return false
			}
		}
		return true
	}, "the others to see the leave")
	t.Logf("departed node removed by every other after %v", time.Since(start).Round(time.Millisecond))

	// Replica sets and tables hold only the living.
	rng := rand.New(rand.NewPCG(2, 2))
	for range 500 {
		target := randomKey(rng)
		want := nodes[0].ReplicaSet(target, 3)
		for _, tn := range nodes {
			got := tn.ReplicaSet(target, 3)
			if !sameIDs(got, want) || len(got) != 3 {
				t.Fatalf("%s: replica set %v, want %v", tn.Self(), got, want)
			}
		}
	}
	testutil.WaitFor(t, 5*time.Second, func() bool {
		for _, tn := range nodes {
			if tn.TableSize() != 2 {
				return false
			}
		}
		return true
	}, "the tables to drop the dead and departed")
}

func TestMembershipRestartSameIdentity(t *testing.T) {
	nodes := startCluster(t, 3)
	victim := nodes[2]
	id, oldAddr := victim.Self().ID, victim.Self().RPCAddr

	// A power cut, and the board back at once on other ports, before the
	// others noticed: the same name at a new address is a conflict until
	// the old entry is dead and DeadNodeReclaimTime has passed.
	victim.kill()
	back, err := startNode(t, victim.dir, []string{nodes[0].GossipAddr()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if back.Self().ID != id {
		t.Fatalf("restarted node is %s, want the identity kept in its data dir", back.Self())
	}
	if back.Self().RPCAddr == oldAddr {
		t.Fatal("restarted node on the same RPC port: the test proves nothing")
	}
	nodes = []*testNode{nodes[0], nodes[1], back}
	elapsed := testutil.WaitFor(t, 30*time.Second, func() bool {
		for _, tn := range nodes {
			live := tn.Live()
			if len(live) != 3 || !slices.ContainsFunc(live, func(p Peer) bool { return p.ID == id && p.RPCAddr == back.Self().RPCAddr }) {
				return false
			}
		}
		return true
	}, "the restarted node to be live at its new address everywhere")
	t.Logf("node restarted with the same identity on new ports is live everywhere after %v", elapsed.Round(time.Millisecond))
	testutil.WaitFor(t, 5*time.Second, func() bool {
		for _, tn := range nodes[:2] {
			if got := tn.NearestPeers(back.Self().Key, 1); len(got) != 1 || got[0].RPCAddr != back.Self().RPCAddr {
				return false
			}
		}
		return true
	}, "the tables to route to the new address")
}

// TestRejoinLoop kills the only seed of a node; the seed comes back on its
// old gossip address, alone, and the node's background loop must join it
// again.
func TestRejoinLoop(t *testing.T) {
	fast := func(c *Config) { c.RejoinInterval = 100 * time.Millisecond }
	seed, err := startNode(t, t.TempDir(), nil, fast)
	if err != nil {
		t.Fatal(err)
	}
	seedAddr := seed.GossipAddr()
	other, err := startNode(t, t.TempDir(), []string{seedAddr}, fast)
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() bool { return len(other.Live()) == 2 }, "the join")

	seed.kill()
	testutil.WaitFor(t, 20*time.Second, func() bool { return len(other.Live()) == 1 }, "the seed's death")
	back, err := startNode(t, seed.dir, nil, func(c *Config) { fast(c); c.GossipAddr = seedAddr })
	if err != nil {
		t.Fatal(err)
	}
	elapsed := testutil.WaitFor(t, 20*time.Second, func() bool {
		return len(other.Live()) == 2 && len(back.Live()) == 2
	}, "the re-join")
	t.Logf("re-joined the restarted seed after %v", elapsed.Round(time.Millisecond))
}

func TestStartWithUnreachableSeed(t *testing.T) {
	_, err := startNode(t, t.TempDir(), []string{"127.0.0.1:1"}, nil)
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") || errors.Is(err, ErrIncompatible) {
		t.Fatalf("Start with an unreachable seed: %v, want an error naming the seed, not ErrIncompatible", err)
	}
}

func TestJoinRefusedOnMismatch(t *testing.T) {
	seed, err := startNode(t, t.TempDir(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want []string
	}{
		{"quantum", func(c *Config) { c.Quantum = 5 }, []string{"quantum", "10s", "5s"}},
		{"format", func(c *Config) { c.Format = quanta.KFI }, []string{"ID format", "qfi", "kfi"}},
		{"hfi", func(c *Config) { c.Format = quanta.HFI }, []string{"ID format", "qfi", "hfi"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := startNode(t, t.TempDir(), []string{seed.GossipAddr()}, tc.edit)
			if !errors.Is(err, ErrIncompatible) {
				t.Fatalf("a node of another configuration joined: %v, want ErrIncompatible", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("join error %q does not mention %q", err, w)
				}
			}
			t.Logf("refused: %v", err)
			if got := len(seed.Live()); got != 1 {
				t.Errorf("the seed counts %d live members, want itself alone", got)
			}
		})
	}
}
