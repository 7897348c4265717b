package coord

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/internal/testutil"
	"github.com/tsdht/tsdht/tsdb/cluster"
	"github.com/tsdht/tsdht/tsdb/cluster/clustertest"
	"github.com/tsdht/tsdht/tsdb/replica"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// A batch of many series on a node that is one of their 3 replicas, at quorum 2, whose
// own store is slow: the write returns once the two other replicas have stored it, not
// after its own store, which stores it in the background all the same.
func TestPutManyQuorumWithoutOwnStore(t *testing.T) {
	cfg := testConfig()
	cfg.RF, cfg.WriteQuorum, cfg.ReadQuorum = 3, 2, 2
	cfg.CallTimeout = 3 * time.Second
	cfg.LocalBatches = true
	logger := slog.New(slog.DiscardHandler)
	local := func(st store.Store) *replica.Local {
		return replica.New(replica.Config{Store: st, Quantum: cfg.Quantum, Format: cfg.Format, MaxFuture: cfg.MaxFuture})
	}
	selfStore := store.NewMem()
	peer := func(id string) dht.Peer { return dht.Peer{ID: id, RPCAddr: id + ":1"} }
	self, a, b := peer("self"), peer("a"), peer("b")
	slow := &stallingReplica{Replica: local(selfStore), stalled: make(chan struct{})}
	replicas := clustertest.ReplicaMap{self.ID: slow, a.ID: local(store.NewMem()), b.ID: local(store.NewMem())}
	place := &clustertest.FixedPlacement{Me: self, Owners: []dht.Peer{self, a, b}}
	c := New(cfg, place, replicas, NewRegistry(place, replicas, cfg, logger), nil, nil, logger)

	ctx := context.Background()
	t0 := cfg.Quantum.BeginNanos(cfg.Quantum.Start(clustertest.Base()))
	puts := make([]SeriesPut, 2*localAsideShards)
	for i := range puts {
		puts[i] = SeriesPut{Key: fmt.Sprintf("aside/s%03d", i), Points: series.Points{Type: series.Float, T: []int64{t0}, F: []float64{float64(i)}}}
	}
	began := time.Now()
	for i, r := range c.PutMany(ctx, puts, wire.PutOptions{}) {
		if r.Err != nil || r.Stored != 1 {
			t.Fatalf("series %d: stored %d, %v; want 1 at quorum 2 of 3", i, r.Stored, r.Err)
		}
	}
	if took := time.Since(began); took >= cfg.CallTimeout {
		t.Errorf("the write took %v: it waited for its own slow store (call timeout %v) though two replicas had answered", took, cfg.CallTimeout)
	}
	close(slow.stalled)
	ref := cluster.ShardRef(cfg.Format, puts[0].Key, cfg.Quantum.Start(t0))
	testutil.WaitFor(t, 10*time.Second, func() bool {
		p, _, err := selfStore.Read(ref, puts[0].Key, t0, t0+1)
		return err == nil && p.Len() == 1
	}, "the node's own store to hold the points written beside the write")
}
