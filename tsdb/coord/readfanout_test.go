package coord

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/cluster/clustertest"
	"github.com/tsdht/tsdht/tsdb/replica"

	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// spreadPlacement places each ID on rf of its peers chosen by the ID's first byte, so
// that a read of many quanta asks many nodes.
type spreadPlacement struct {
	clustertest.FixedPlacement
}

func (s *spreadPlacement) Locate(_ context.Context, id quanta.ID, rf int) ([]dht.Peer, error) {
	out := make([]dht.Peer, 0, rf)
	for k := range min(rf, len(s.Owners)) {
		out = append(out, s.Owners[(int(id[0])+k)%len(s.Owners)])
	}
	return out, nil
}

// barrierReplica holds every read until want reads are in flight at once across all
// the replicas sharing its barrier, or until the barrier's deadline passes, and
// records the most in flight.
type barrierReplica struct {
	cluster.Replica
	b *readBarrier
}

type readBarrier struct {
	mu       sync.Mutex
	inFlight int
	most     int
	want     int
	all      chan struct{} // closed once want reads were in flight at once
	deadline chan struct{} // closed when the test stops waiting for all
}

func (r *barrierReplica) Read(ctx context.Context, req *wire.ReadReq) (*wire.ReadResp, error) {
	b := r.b
	b.mu.Lock()
	b.inFlight++
	if b.inFlight > b.most {
		if b.most = b.inFlight; b.most == b.want {
			close(b.all)
		}
	}
	b.mu.Unlock()
	select {
	case <-b.all:
	case <-b.deadline:
	}
	b.mu.Lock()
	b.inFlight--
	b.mu.Unlock()
	return r.Replica.Read(ctx, req)
}

// A read sends its request to every node it asks at once, even when those are more
// than Config.ReadConcurrency: a second wave of requests would wait for the first's
// answers, a round trip more.
func TestReadAsksEveryNodeAtOnce(t *testing.T) {
	cfg := testConfig()
	cfg.RF, cfg.WriteQuorum, cfg.ReadQuorum = 3, 2, 2
	cfg.ReadConcurrency = 4
	logger := slog.New(slog.DiscardHandler)
	self := dht.Peer{ID: "self", RPCAddr: "self:1"}
	barrier := &readBarrier{all: make(chan struct{})}
	replicas := clustertest.ReplicaMap{}
	var peers []dht.Peer
	for i := range 24 {
		p := dht.Peer{ID: fmt.Sprintf("n%02d", i), RPCAddr: fmt.Sprintf("n%02d:1", i)}
		peers = append(peers, p)
		replicas[p.ID] = &barrierReplica{Replica: replica.New(replica.Config{Store: store.NewMem(), Quantum: cfg.Quantum, Format: cfg.Format,
			Stats: func() wire.NodeStats { return wire.NodeStats{} }}), b: barrier}
	}
	place := &spreadPlacement{clustertest.FixedPlacement{Me: self, Owners: peers}}
	coord := New(cfg, place, replicas, NewRegistry(place, replicas, cfg, logger), nil, nil, logger)
	ctx := context.Background()
	q := cfg.Quantum
	from := q.BeginNanos(q.Start(clustertest.Base()))
	pts := clustertest.SixtyHz(from, 15*int(q.Duration()/time.Second)*60) // 15 quanta
	if _, err := coord.Put(ctx, "s", pts, wire.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// The nodes the read asks: every replica of every quantum it covers.
	spans, err := coord.planRead(ctx, nil, "s", q, mustCover(t, q, from, pts.T[pts.Len()-1]+1), from, pts.T[pts.Len()-1]+1)
	if err != nil {
		t.Fatal(err)
	}
	asked := map[string]bool{}
	for _, s := range spans {
		for _, p := range s.replicas {
			asked[p.ID] = true
		}
	}
	if len(asked) <= cfg.ReadConcurrency {
		t.Fatalf("the read asks %d nodes; the test needs more than ReadConcurrency (%d)", len(asked), cfg.ReadConcurrency)
	}
	barrier.mu.Lock()
	barrier.want, barrier.most, barrier.deadline = len(asked), 0, make(chan struct{})
	barrier.mu.Unlock()
	stop := time.AfterFunc(5*time.Second, func() { close(barrier.deadline) })
	defer stop.Stop()
	res, err := coord.Get(ctx, "s", from, pts.T[pts.Len()-1]+1, wire.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clustertest.RequireSame(t, pts, res.Points)
	barrier.mu.Lock()
	defer barrier.mu.Unlock()
	if barrier.most != len(asked) {
		t.Fatalf("at most %d of the read's %d requests were in flight at once; want all (ReadConcurrency %d)", barrier.most, len(asked), cfg.ReadConcurrency)
	}
}

// mustCover returns the starts of the quanta [from, to) covers.
func mustCover(t *testing.T, q quanta.Quantum, from, to int64) []int64 {
	t.Helper()
	starts, err := q.Covering(from, to)
	if err != nil {
		t.Fatal(err)
	}
	return starts
}
