package dht

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
)

// simulation is a Kademlia network of Routers in one process over an
// in-memory rpc network, with no gossip: the routing tables hold only what
// Kademlia's own traffic taught them.
type simulation struct {
	net   *rpc.MemNetwork
	rng   io.Reader // identities
	rcfg  rpc.Config
	cfg   Config // of every router: zero means DefaultLANConfig's
	nodes []*Router
	all   []Peer // every node, for the true answers
}

// newSimulation starts n routers on one MemNetwork, each with its own
// transport, server and client, not yet knowing each other. Identities come
// from seed, so every run builds the same network.
func newSimulation(tb testing.TB, n int, seed uint64) *simulation {
	tb.Helper()
	s := &simulation{
		net: rpc.NewMemNetwork(),
		rng: rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)}),
	}
	s.rcfg = rpc.DefaultConfig()
	// The simulation plays hours of a network's traffic in seconds: scale
	// the idle timeout (2 minutes on a board) down with it, or every node
	// keeps a connection, and its goroutines, to every peer it ever asked.
	s.rcfg.IdleTimeout = 500 * time.Millisecond
	// Under -race on a loaded CI machine a live router can take over a second to
	// answer, and a lookup whose candidates all time out comes back short; down
	// nodes fail at once on the in-memory network whatever the timeout.
	s.cfg.QueryTimeout = 5 * time.Second
	for range n {
		s.addRouter(tb)
	}
	return s
}

// addRouter starts one more router, not yet knowing any other, and returns
// it. It is not safe to call concurrently.
func (s *simulation) addRouter(tb testing.TB) *Router {
	tb.Helper()
	sk, _, err := crypto.GenerateEd25519Key(s.rng)
	if err != nil {
		tb.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(sk)
	if err != nil {
		tb.Fatal(err)
	}
	self := NewPeer(id, fmt.Sprintf("node-%05d", len(s.all)))
	tr := s.net.Transport()
	srv := rpc.NewServer(tr, s.rcfg)
	cli := rpc.NewClient(tr, s.rcfg)
	r, err := NewRouter(self, s.cfg, srv, cli)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := srv.Listen(self.RPCAddr); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		cli.Close()
		srv.Close()
		r.Close()
	})
	s.nodes = append(s.nodes, r)
	s.all = append(s.all, self)
	return r
}

// join makes every node after the first join through the first, one after
// another, by Kademlia's join (a ping, then a lookup of its own ID), then,
// with refresh, gives each node one pass of bucket refresh (a lookup in the
// range of each bucket: about ten per node).
func (s *simulation) join(tb testing.TB, refresh bool) {
	tb.Helper()
	ctx := context.Background()
	for _, r := range s.nodes[1:] {
		// On a loaded machine the first node may miss a ping's deadline; a
		// joining node retries its seed, as a real one does.
		var err error
		for range 3 {
			if err = r.Bootstrap(ctx, []string{s.nodes[0].Self().RPCAddr}); err == nil {
				break
			}
		}
		if err != nil {
			tb.Fatalf("%s: join: %v", r.Self(), err)
		}
	}
	if refresh {
		for _, r := range s.nodes {
			if err := r.Refresh(ctx); err != nil {
				tb.Fatalf("%s: refresh: %v", r.Self(), err)
			}
		}
	}
}

// closest returns the true count closest nodes to target among peers, by
// sorting every ID: the answer a lookup must find.
func closest(peers []Peer, target quanta.ID, count int) []Peer {
	ps := slices.Clone(peers)
	sortByDistance(ps, target)
	return ps[:min(count, len(ps))]
}

// sameIDs reports whether a and b list the same peers in the same order.
func sameIDs(a, b []Peer) bool {
	return slices.EqualFunc(a, b, func(x, y Peer) bool { return x.ID == y.ID })
}

func randomKey(rng *rand.Rand) quanta.ID {
	var id quanta.ID
	for i := range id {
		id[i] = byte(rng.Uint32())
	}
	return id
}

// TestLookupSimulation1000 builds a Kademlia network of simNodes nodes (1,000;
// fewer under the race detector, see race_test.go) that learn each other
// only from the traffic of their joins, then checks that iterative lookups
// from random nodes find the true closest nodes of random targets, and the
// replica sets of the local fast path. There is no bucket refresh pass: it
// would multiply the build time by ten (ten lookups per node) and is not
// needed to pass; TestRefresh tests it.
func TestLookupSimulation1000(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 1,000-node network")
	}
	start := time.Now()
	s := newSimulation(t, simNodes, 1)
	s.join(t, false)
	tableSizes := 0
	for _, r := range s.nodes {
		tableSizes += r.TableSize()
	}
	t.Logf("%d nodes, bucket size %d, alpha %d: %d sequential joins in %v, mean table %.1f peers",
		len(s.nodes), DefaultLANConfig().BucketSize, DefaultLANConfig().Alpha, len(s.nodes)-1,
		time.Since(start).Round(time.Millisecond), float64(tableSizes)/float64(len(s.nodes)))

	t.Run("Accuracy", func(t *testing.T) {
		const (
			queries = simLookups
			k       = 20
			rf      = 3
		)
		rng := rand.New(rand.NewPCG(1, 2))
		var top3, top20, hops, maxHops, msgs, maxMsgs int
		start := time.Now()
		for range queries {
			target := randomKey(rng)
			from := s.nodes[rng.IntN(len(s.nodes))]
			got, st, err := from.LookupWithStats(context.Background(), target, k)
			if err != nil {
				t.Fatal(err)
			}
			want := closest(s.all, target, k)
			if len(got) >= rf && sameIDs(got[:rf], want[:rf]) {
				top3++
			}
			if sameIDs(got, want) {
				top20++
			}
			hops += st.Hops
			maxHops = max(maxHops, st.Hops)
			msgs += st.Messages
			maxMsgs = max(maxMsgs, st.Messages)
		}
		t.Logf("%d lookups (k=%d) in %v: top-%d exact %.2f%%, top-%d exact %.2f%%, hops mean %.2f max %d, messages mean %.1f max %d",
			queries, k, time.Since(start).Round(time.Millisecond),
			rf, 100*float64(top3)/queries, k, 100*float64(top20)/queries,
			float64(hops)/queries, maxHops, float64(msgs)/queries, maxMsgs)
		if top3*100 < 99*queries {
			t.Errorf("top-%d replica sets exact in %d of %d lookups, want at least 99%%", rf, top3, queries)
		}
	})

	// The local fast path (ClosestPeers over the full member list, as
	// Node.ReplicaSet computes it) and the iterative lookup agree on the
	// replica sets, for every replication factor.
	t.Run("AgreesWithReplicaSet", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		const perRF = 50
		agree := 0
		for rf := 1; rf <= 7; rf++ {
			for range perRF {
				target := randomKey(rng)
				fast := ClosestPeers(s.all, target, rf)
				if !sameIDs(fast, closest(s.all, target, rf)) {
					t.Fatalf("ClosestPeers disagrees with the 160-bit XOR order for %s", target)
				}
				got, err := s.nodes[rng.IntN(len(s.nodes))].Lookup(context.Background(), target, DefaultLANConfig().BucketSize)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) >= rf && sameIDs(got[:rf], fast) {
					agree++
				}
			}
		}
		t.Logf("lookup and fast path agree on %d of %d replica sets (rf 1..7)", agree, 7*perRF)
		if agree*100 < 99*7*perRF {
			t.Errorf("lookup and fast path agree on %d of %d replica sets, want at least 99%%", agree, 7*perRF)
		}
	})
}

// TestRefresh checks bucket refresh: after it, every bucket whose range
// holds at least a bucketful of nodes is full, whatever the join left there.
func TestRefresh(t *testing.T) {
	s := newSimulation(t, 150, 4)
	s.join(t, false)
	for _, r := range s.nodes[:5] {
		if err := r.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
		self := kb.ConvertPeerID(r.Self().PeerID())
		inRange := make(map[int]int) // nodes per bucket range
		for _, p := range s.all {
			if p.ID != r.Self().ID {
				inRange[kb.CommonPrefixLen(self, kb.ConvertPeerID(p.PeerID()))]++
			}
		}
		bucketSize := DefaultLANConfig().BucketSize
		for cpl := 0; inRange[cpl] >= bucketSize; cpl++ {
			if got := r.table.NPeersForCpl(uint(cpl)); got != bucketSize {
				t.Errorf("%s: bucket %d holds %d peers after refresh, want %d of the %d in its range",
					r.Self(), cpl, got, bucketSize, inRange[cpl])
			}
		}
	}
}

// TestLookupSkipsDeadNodes takes nodes of a simulated network down: lookups
// must still return only live nodes, and the true closest live ones.
func TestLookupSkipsDeadNodes(t *testing.T) {
	s := newSimulation(t, 150, 3)
	s.join(t, false)
	rng := rand.New(rand.NewPCG(5, 6))
	dead := make(map[string]bool)
	for _, i := range rng.Perm(len(s.nodes) - 1)[:15] {
		p := s.nodes[i+1].Self() // the first node asks
		dead[p.ID] = true
		s.net.SetDown(p.RPCAddr, true)
	}
	var live []Peer
	for _, p := range s.all {
		if !dead[p.ID] {
			live = append(live, p)
		}
	}
	failures, exact := 0, 0
	const queries = 100
	for range queries {
		target := randomKey(rng)
		got, st, err := s.nodes[0].LookupWithStats(context.Background(), target, 20)
		if err != nil {
			t.Fatal(err)
		}
		failures += st.Failures
		for _, p := range got {
			if dead[p.ID] {
				t.Fatalf("lookup returned dead node %s", p)
			}
		}
		if sameIDs(got[:3], closest(live, target, 3)) {
			exact++
		}
	}
	if failures == 0 {
		t.Error("no lookup met a dead node: the test proves nothing")
	}
	t.Logf("15 of 150 nodes down: %d failed requests over %d lookups, top-3 exact %d%%", failures, queries, exact*100/queries)
	if exact*100 < 95*queries {
		t.Errorf("top-3 exact in %d of %d lookups with dead nodes, want at least 95%%", exact, queries)
	}
}

// BenchmarkLookup measures iterative lookups (k = 20) in the network of
// TestLookupSimulation1000 and reports hops and messages per lookup.
func BenchmarkLookup(b *testing.B) {
	s := newSimulation(b, simNodes, 1)
	s.join(b, false)
	rng := rand.New(rand.NewPCG(7, 8))
	var hops, msgs int
	b.ResetTimer()
	for b.Loop() {
		_, st, err := s.nodes[rng.IntN(len(s.nodes))].LookupWithStats(context.Background(), randomKey(rng), 20)
		if err != nil {
			b.Fatal(err)
		}
		hops += st.Hops
		msgs += st.Messages
	}
	b.ReportMetric(float64(hops)/float64(b.N), "hops/op")
	b.ReportMetric(float64(msgs)/float64(b.N), "msgs/op")
}

// BenchmarkReplicaSet measures the local fast path over clusters of the
// paper's size (18 boards) and larger.
func BenchmarkReplicaSet(b *testing.B) {
	for _, n := range []int{18, 50} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			peers := testPeers(b, n, 9)
			rng := rand.New(rand.NewPCG(9, 9))
			for b.Loop() {
				ClosestPeers(peers, randomKey(rng), 3)
			}
		})
	}
}
