package coord

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"

	"github.com/tsdht/tsdht/tsdb/cluster/clustertest"
	"github.com/tsdht/tsdht/tsdb/repair"

	"github.com/tsdht/tsdht/tsdb/replica"

	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// clustertest.FixedPlacement places every ID on the same owners, with no gossip.
// stallingReplica is a replica whose writes hang until their deadline while stalled is
// open, as a replica behind a dead link would.
type stallingReplica struct {
	cluster.Replica
	stalled chan struct{} // closed: writes go through
}

func (s *stallingReplica) Write(ctx context.Context, req *wire.WriteReq) (*wire.WriteResp, error) {
	select {
	case <-s.stalled:
		return s.Replica.Write(ctx, req)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// A replica that times out on writes, injected through the replica seam with no gossip
// and no network: the write succeeds at quorum 2 of 3, the coordinator keeps a hint,
// and a repair pass delivers it once the replica answers again, then hands it off.
func TestWriteQuorumWithStalledReplicaLeavesHint(t *testing.T) {
	cfg := testConfig()
	cfg.RF, cfg.WriteQuorum, cfg.ReadQuorum = 3, 2, 2
	cfg.CallTimeout = 300 * time.Millisecond
	logger := slog.New(slog.DiscardHandler)
	local := func(st store.Store) *replica.Local {
		return replica.New(replica.Config{Store: st, Quantum: cfg.Quantum, Format: cfg.Format, Stats: func() wire.NodeStats { return wire.NodeStats{} }})
	}
	selfStore, aStore, bStore, cStore := store.NewMem(), store.NewMem(), store.NewMem(), store.NewMem()
	peer := func(id string) dht.Peer { return dht.Peer{ID: id, RPCAddr: id + ":1"} }
	self, a, b, c := peer("self"), peer("a"), peer("b"), peer("c")
	stalled := &stallingReplica{Replica: local(cStore), stalled: make(chan struct{})}
	replicas := clustertest.ReplicaMap{self.ID: local(selfStore), a.ID: local(aStore), b.ID: local(bStore), c.ID: stalled}
	place := &clustertest.FixedPlacement{Me: self, Owners: []dht.Peer{a, b, c}}

	types := NewRegistry(place, replicas, cfg, logger)
	rep := repair.NewRepairer(repairConfig(cfg), place, replicas, selfStore, selfStore, types, logger)
	h := rep.Hints()
	coord := New(cfg, place, replicas, types, h, nil, logger)

	ctx := context.Background()
	q := cfg.Quantum
	start := q.Start(clustertest.Base())
	pts := clustertest.SixtyHz(q.BeginNanos(start), 300)
	began := time.Now()
	stored, err := coord.Put(ctx, "pmu/stall", pts, wire.PutOptions{})
	if err != nil || stored != 300 {
		t.Fatalf("put with one stalled replica of 3: stored %d, %v; want 300 at quorum 2", stored, err)
	}
	if took := time.Since(began); took >= cfg.CallTimeout {
		t.Errorf("the put took %v: it waited for the stalled replica (call timeout %v)", took, cfg.CallTimeout)
	}
	testutil.WaitFor(t, 10*time.Second, func() bool { return h.Points() == 300 }, "a hint for the stalled replica")
	ref := cluster.ShardRef(cfg.Format, "pmu/stall", start)
	readAll := func(st store.Store) series.Points {
		p, _, err := st.Read(ref, "pmu/stall", q.BeginNanos(start), q.EndNanos(start))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	clustertest.RequireSame(t, pts, readAll(selfStore)) // the hint
	clustertest.RequireSame(t, pts, readAll(aStore))
	clustertest.RequireSame(t, pts, readAll(bStore))
	if p := readAll(cStore); p.Len() != 0 {
		n := p.Len()
		t.Fatalf("the stalled replica holds %d points", n)
	}
	res, err := coord.Get(ctx, "pmu/stall", q.BeginNanos(start), q.EndNanos(start), wire.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clustertest.RequireSame(t, pts, res.Points)
	// The read found the stalled replica empty and tried to repair it; that write stalls
	// too, and must be over before the replica recovers, or it would deliver the points.
	testutil.WaitFor(t, 10*time.Second, func() bool { return len(coord.repairSlots) == 0 }, "the read repair to give up")
	if p := readAll(cStore); p.Len() != 0 {
		t.Fatalf("the stalled replica holds %d points", p.Len())
	}

	// The replica answers again: one pass delivers the hint and hands it off.
	close(stalled.stalled)
	if err := rep.Pass(ctx, repair.PassFull); err != nil {
		t.Fatal(err)
	}
	clustertest.RequireSame(t, pts, readAll(cStore))
	if p := readAll(selfStore); p.Len() != 0 {
		n := p.Len()
		t.Fatalf("the coordinator still holds %d hinted points after the owners confirmed them", n)
	}
	if s := rep.Stats(); s.PushedPoints != 300 || s.DroppedPairs != 1 || s.HintedPoints != 0 {
		t.Fatalf("repair stats %+v: want 300 points pushed, 1 pair handed off, none hinted", s)
	}
}
