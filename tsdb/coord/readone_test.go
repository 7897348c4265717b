package coord

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"math/rand"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"

	"github.com/tsdht/tsdht/tsdb/cluster/clustertest"
	"github.com/tsdht/tsdht/tsdb/replica"

	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// countingReplica counts the shards it is asked to read, and fails reads while failing
// is set, as a replica that cannot be reached would.
type countingReplica struct {
	cluster.Replica
	shards  atomic.Int64
	failing atomic.Bool
}

func (c *countingReplica) Read(ctx context.Context, req *wire.ReadReq) (*wire.ReadResp, error) {
	c.shards.Add(int64(len(req.Shards)))
	if c.failing.Load() {
		return nil, rpc.ErrUnreachable
	}
	return c.Replica.Read(ctx, req)
}

// With ReadQuorumOnly a read asks a read quorum of each shard's replicas — this node's
// own for the points when it is an owner, one other for a digest — and replaces one
// that fails by the next owner; an owner that holds nothing is repaired; a shard no
// replica can serve fails the read. By default every replica is asked.
func TestReadQuorumOfReplicas(t *testing.T) {
	cfg := testConfig()
	cfg.RF, cfg.WriteQuorum, cfg.ReadQuorum = 3, 3, 2
	cfg.ReadQuorumOnly = true
	cfg.CallTimeout = 2 * time.Second
	logger := slog.New(slog.DiscardHandler)
	peer := func(id string) dht.Peer { return dht.Peer{ID: id, RPCAddr: id + ":1"} }
	a, b, self := peer("a"), peer("b"), peer("self")
	stores := map[string]store.Store{}
	reps := map[string]*countingReplica{}
	replicas := clustertest.ReplicaMap{}
	for _, p := range []dht.Peer{a, b, self} {
		stores[p.ID] = store.NewMem()
		reps[p.ID] = &countingReplica{Replica: replica.New(replica.Config{Store: stores[p.ID], Quantum: cfg.Quantum, Format: cfg.Format,
			Stats: func() wire.NodeStats { return wire.NodeStats{} }})}
		replicas[p.ID] = reps[p.ID]
	}
	place := &clustertest.FixedPlacement{Me: self, Owners: []dht.Peer{a, b, self}}
	types := NewRegistry(place, replicas, cfg, logger)
	coord := New(cfg, place, replicas, types, nil, nil, logger)

	ctx := context.Background()
	q := cfg.Quantum
	start := q.Start(clustertest.Base())
	from := q.BeginNanos(start)
	pts := clustertest.SixtyHz(from, 3*60*int(q)) // three quanta
	to := pts.T[pts.Len()-1] + 1
	if _, err := coord.Put(ctx, "pmu/one", pts, wire.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	asked := func() (na, nb, ns int64) {
		na, nb, ns = reps["a"].shards.Swap(0), reps["b"].shards.Swap(0), reps["self"].shards.Swap(0)
		return
	}
	get := func(what string) {
		t.Helper()
		res, err := coord.Get(ctx, "pmu/one", from, to, wire.GetOptions{})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		clustertest.RequireSame(t, pts, res.Points)
	}

	get("all replicas healthy")
	if na, nb, ns := asked(); na != 3 || nb != 0 || ns != 3 {
		t.Fatalf("healthy read asked a %d, b %d, self %d shards; want 3 of self (points) and 3 of a (digests)", na, nb, ns)
	}
	coord.cfg.ReadQuorumOnly = false
	get("every replica asked")
	if na, nb, ns := asked(); na != 3 || nb != 3 || ns != 3 {
		t.Fatalf("a read of every replica asked a %d, b %d, self %d shards; want 3 of each", na, nb, ns)
	}
	coord.cfg.ReadQuorumOnly = true

	reps["self"].failing.Store(true)
	get("this node's replica failing")
	if na, nb, ns := asked(); na != 6 || nb != 3 || ns != 3 {
		t.Fatalf("with self failing the read asked a %d, b %d, self %d shards; want self's 3, a's 3 digests then points, b's 3 for the quorum", na, nb, ns)
	}
	reps["self"].failing.Store(false)

	// An owner that holds nothing (a new owner, say): the read asks the next, and
	// repairs the empty one from what that one sent.
	stores["self"] = store.NewMem()
	reps["self"] = &countingReplica{Replica: replica.New(replica.Config{Store: stores["self"], Quantum: cfg.Quantum, Format: cfg.Format,
		Stats: func() wire.NodeStats { return wire.NodeStats{} }})}
	replicas["self"] = reps["self"] // no call is under way: the writes all answered (w = rf)
	get("this node's replica empty")
	if na, nb, ns := asked(); na != 6 || ns != 3 || nb != 0 {
		t.Fatalf("with self empty the read asked a %d, b %d, self %d shards; want self's 3, a's 3 digests then points", na, nb, ns)
	}
	testutil.WaitFor(t, 10*time.Second, func() bool {
		got, _, err := stores["self"].Read(cluster.ShardRef(cfg.Format, "pmu/one", start), "pmu/one", from, to)
		return err == nil && got.Len() == 60*int(q)
	}, "read repair of the empty replica")

	// No replica answers: the read fails, never short.
	for _, r := range reps {
		r.failing.Store(true)
	}
	_, err := coord.Get(ctx, "pmu/one", from, to, wire.GetOptions{})
	var re *rpc.RemoteError
	if !errors.As(err, &re) || re.Code != wire.CodePartial {
		t.Fatalf("read with every replica failing: %v; want a %s error", err, wire.CodePartial)
	}
	if na, nb, ns := asked(); na != 3 || nb != 3 || ns != 3 {
		t.Fatalf("with every replica failing the read asked a %d, b %d, self %d shards; want every replica once", na, nb, ns)
	}
}

// chooseReplicas covers every shard with as few nodes as it can.
func TestChooseReplicasFewNodes(t *testing.T) {
	p := func(id string) dht.Peer { return dht.Peer{ID: id} }
	// Shards placed on overlapping sets: x is an owner of all four, but never the closest.
	sets := [][]dht.Peer{
		{p("a"), p("x"), p("b")},
		{p("b"), p("c"), p("x")},
		{p("c"), p("x"), p("d")},
		{p("d"), p("a"), p("x")},
	}
	spans := make([]shardSpan, len(sets))
	asked := make([][]bool, len(sets))
	need := make([]int, len(sets))
	for i, s := range sets {
		spans[i].replicas = s
		asked[i] = make([]bool, len(s))
		need[i] = 1
	}
	plan := chooseReplicas(spans, asked, need, "self", true)
	if len(plan) != 4 {
		t.Fatalf("plan %v: want one fetch per shard", plan)
	}
	for _, f := range plan {
		if id := spans[f.shard].replicas[f.replica].ID; id != "x" {
			t.Fatalf("shard %d read from %s: want every shard from x, the one node that holds them all", f.shard, id)
		}
	}
	// This node first when it is an owner; the rest still from one node.
	sets[1][2] = p("self")
	for i := range asked {
		clear(asked[i])
	}
	plan = chooseReplicas(spans, asked, need, "self", true)
	nodes := map[string]bool{}
	for _, f := range plan {
		nodes[spans[f.shard].replicas[f.replica].ID] = true
	}
	if len(plan) != 4 || !nodes["self"] || !nodes["x"] || len(nodes) != 2 {
		t.Fatalf("plan %v read from %v: want shard 1 from self, the others from x", plan, nodes)
	}
	// Two replicas wanted of a shard: two distinct ones, neither asked before.
	for i := range asked {
		clear(asked[i])
	}
	asked[0][0] = true
	need = []int{2, 0, 0, 0}
	plan = chooseReplicas(spans, asked, need, "self", true)
	if len(plan) != 2 || plan[0].replica == plan[1].replica || plan[0].replica == 0 || plan[1].replica == 0 {
		t.Fatalf("plan %v: want replicas 1 and 2 of shard 0", plan)
	}
}

// A read-quorum-only read's replica choice (readFew: one replica per shard for the
// points, then the others for digests, each greedily) asks nearly as few distinct nodes
// as the best choice, found by trying every set of nodes, on placements like QFI's
// (every shard on rf of 18 nodes at random): 16 shards (a 150 s read), rf 3, r 2. So a
// better cover cannot cut a QFI read's fan-out by much.
func TestChooseReplicasNearBest(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	const nodes, shards, rf, r, placements = 18, 16, 3, 2, 50
	var greedy, best int
	for range placements {
		spans := make([]shardSpan, shards)
		masks := make([]uint32, shards)
		for i := range spans {
			for _, n := range rng.Perm(nodes)[:rf] {
				spans[i].replicas = append(spans[i].replicas, dht.Peer{ID: fmt.Sprintf("n%d", n)})
				masks[i] |= 1 << n
			}
		}
		asked := make([][]bool, shards)
		ones, rest := make([]int, shards), make([]int, shards)
		for i := range asked {
			asked[i] = make([]bool, rf)
			ones[i], rest[i] = 1, r-1
		}
		plan := chooseReplicas(spans, asked, ones, "reader", true)
		plan = append(plan, chooseReplicas(spans, asked, rest, "reader", false)...)
		used := map[string]bool{}
		for _, f := range plan {
			used[spans[f.shard].replicas[f.replica].ID] = true
		}
		greedy += len(used)
		fewest := nodes
		for m := uint32(0); m < 1<<nodes; m++ {
			c := bits.OnesCount32(m)
			if c >= fewest {
				continue
			}
			covers := true
			for _, s := range masks {
				if bits.OnesCount32(s&m) < r {
					covers = false
					break
				}
			}
			if covers {
				fewest = c
			}
		}
		best += fewest
	}
	g, b := float64(greedy)/placements, float64(best)/placements
	t.Logf("distinct nodes a 150 s QFI read asks, mean of %d placements: %.2f chosen, %.2f at best", placements, g, b)
	if g > 1.15*b {
		t.Fatalf("the choice asks %.2f nodes where %.2f would do", g, b)
	}
}
