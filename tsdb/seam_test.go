package tsdb

import (
	"context"
	"github.com/tsdht/tsdht/tsdb/repair"
	"log/slog"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/replica"

	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// fixedPlacement places every ID on the same owners, with no gossip.
type fixedPlacement struct {
	self   dht.Peer
	owners []dht.Peer
}

func (f *fixedPlacement) Self() dht.Peer { return f.self }
func (f *fixedPlacement) Locate(_ context.Context, _ quanta.ID, rf int) ([]dht.Peer, error) {
	return f.owners[:min(rf, len(f.owners))], nil
}
func (f *fixedPlacement) Live() []dht.Peer           { return append([]dht.Peer{f.self}, f.owners...) }
func (f *fixedPlacement) Version() uint64            { return 1 }
func (f *fixedPlacement) Subscribe() <-chan struct{} { return nil }

// replicaMap resolves peers by ID to replicas the test built.
type replicaMap map[string]cluster.Replica

func (m replicaMap) For(p dht.Peer) cluster.Replica { return m[p.ID] }
func (m replicaMap) Local() cluster.Local           { return nil }

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

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A replica that times out on writes, injected through the replica seam with no gossip
// and no network: the write succeeds at quorum 2 of 3, the coordinator keeps a hint,
// and a repair pass delivers it once the replica answers again, then hands it off.
func TestWriteQuorumWithStalledReplicaLeavesHint(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RF, cfg.WriteQuorum, cfg.ReadQuorum = 3, 2, 2
	cfg.CallTimeout = 300 * time.Millisecond
	logger := slog.New(slog.DiscardHandler)
	local := func(st store.Store) *replica.Local {
		return replica.New(replica.Config{Store: st, Quantum: cfg.DHT.Quantum, Format: cfg.DHT.Format, Stats: func() wire.NodeStats { return wire.NodeStats{} }})
	}
	selfStore, aStore, bStore, cStore := store.NewMem(), store.NewMem(), store.NewMem(), store.NewMem()
	peer := func(id string) dht.Peer { return dht.Peer{ID: id, RPCAddr: id + ":1"} }
	self, a, b, c := peer("self"), peer("a"), peer("b"), peer("c")
	stalled := &stallingReplica{Replica: local(cStore), stalled: make(chan struct{})}
	replicas := replicaMap{self.ID: local(selfStore), a.ID: local(aStore), b.ID: local(bStore), c.ID: stalled}
	place := &fixedPlacement{self: self, owners: []dht.Peer{a, b, c}}

	types := newRegistry(place, replicas, &cfg, logger)
	rep := repair.NewRepairer(cfg.repairConfig(), place, replicas, selfStore, selfStore, types, logger)
	h := rep.Hints()
	coord := newCoordinator(&cfg, place, replicas, types, h, logger)

	ctx := context.Background()
	q := cfg.DHT.Quantum
	start := q.Start(base())
	pts := sixtyHz(q.BeginNanos(start), 300)
	began := time.Now()
	stored, err := coord.Put(ctx, "pmu/stall", pts, PutOptions{})
	if err != nil || stored != 300 {
		t.Fatalf("put with one stalled replica of 3: stored %d, %v; want 300 at quorum 2", stored, err)
	}
	if took := time.Since(began); took >= cfg.CallTimeout {
		t.Errorf("the put took %v: it waited for the stalled replica (call timeout %v)", took, cfg.CallTimeout)
	}
	waitFor(t, 10*time.Second, "a hint for the stalled replica", func() bool { return h.Points() == 300 })
	ref := cluster.ShardRef(cfg.DHT.Format, "pmu/stall", start)
	readAll := func(st store.Store) series.Points {
		p, _, err := st.Read(ref, "pmu/stall", q.BeginNanos(start), q.EndNanos(start))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	requireSame(t, pts, readAll(selfStore)) // the hint
	requireSame(t, pts, readAll(aStore))
	requireSame(t, pts, readAll(bStore))
	if p := readAll(cStore); p.Len() != 0 {
		n := p.Len()
		t.Fatalf("the stalled replica holds %d points", n)
	}
	res, err := coord.Get(ctx, "pmu/stall", q.BeginNanos(start), q.EndNanos(start), GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	requireSame(t, pts, res.Points)
	// The read found the stalled replica empty and tried to repair it; that write stalls
	// too, and must be over before the replica recovers, or it would deliver the points.
	waitFor(t, 10*time.Second, "the read repair to give up", func() bool { return len(coord.repairSlots) == 0 })
	if p := readAll(cStore); p.Len() != 0 {
		t.Fatalf("the stalled replica holds %d points", p.Len())
	}

	// The replica answers again: one pass delivers the hint and hands it off.
	close(stalled.stalled)
	if err := rep.Pass(ctx, repair.PassFull); err != nil {
		t.Fatal(err)
	}
	requireSame(t, pts, readAll(cStore))
	if p := readAll(selfStore); p.Len() != 0 {
		n := p.Len()
		t.Fatalf("the coordinator still holds %d hinted points after the owners confirmed them", n)
	}
	if s := rep.Stats(); s.PushedPoints != 300 || s.DroppedPairs != 1 || s.HintedPoints != 0 {
		t.Fatalf("repair stats %+v: want 300 points pushed, 1 pair handed off, none hinted", s)
	}
}
