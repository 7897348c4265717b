package tsdb

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/replica"

	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// TestAggSeriesMatchesAgg asks a replica over TCP for one series' shards — whole
// quanta, a cut quantum, a digest, an absent shard — packed (wire.MethodAggSeries),
// and the same through an older node's only method (a server that knows MethodAgg
// alone, which the coordinator's replica falls back to): both answers equal what the
// replica computes in process; so do Latest's requests (wire.MethodLatestPart, or
// the entry and the windows asked apart of an older node). A packed request naming a time that starts no quantum
// is refused.
func TestAggSeriesMatchesAgg(t *testing.T) {
	ctx := context.Background()
	lc, err := StartLocal(ctx, 1, "", func(_ int, cfg *Config) { cfg.RF, cfg.WriteQuorum, cfg.ReadQuorum = 1, 1, 1 })
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	n := lc.Nodes[0]
	q := n.cfg.DHT.Quantum
	t0 := q.BeginNanos(q.Start(time.Now().Add(-time.Hour).UnixNano()))
	if _, err := n.Coordinator().Put(ctx, "pmu/f", sixtyHz(t0, 60*35), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	qn := q.Duration().Nanoseconds()
	start := t0 / 1e9
	ids := quanta.NewSeriesIDs(n.cfg.DHT.Format, "pmu/f")
	shard := func(k int64, from, to int64, digest bool) wire.ShardAgg {
		s := start + k*int64(q)
		id := ids.At(s)
		return wire.ShardAgg{ID: id[:], Start: s, Key: "pmu/f", From: from, To: to, Digest: digest}
	}
	req := &wire.AggReq{Every: 5e9, Shards: []wire.ShardAgg{
		shard(0, t0, t0+qn, false),
		shard(1, t0+qn, t0+2*qn, true),
		shard(2, t0+2*qn+3e9, t0+2*qn+7e9, false), // cut: from the points
		shard(3, t0+3*qn, t0+4*qn, false),
		shard(9, t0+9*qn, t0+10*qn, false), // nothing there
	}}
	want, err := n.local.Agg(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !want.Shards[0].Held || len(want.Shards[0].Windows) != 2 || len(want.Shards[1].Windows) != 0 || want.Shards[4].Held {
		t.Fatalf("in process: %+v", want.Shards)
	}
	cli := rpc.NewClient(rpc.NewTCPTransport(), rpc.Config{})
	defer cli.Close()
	same := func(name string, got *wire.AggResp) {
		t.Helper()
		for i := range want.Shards {
			w, g := want.Shards[i], got.Shards[i]
			if len(w.Windows) == 0 {
				w.Windows = nil
			}
			if len(g.Windows) == 0 {
				g.Windows = nil
			}
			if !reflect.DeepEqual(w, g) {
				t.Fatalf("%s, shard %d: got %+v, want %+v", name, i, g, w)
			}
		}
	}
	remote := cluster.NewReplicas("self", nil, cli, 10*time.Second, nil).For(dht.Peer{ID: "peer", RPCAddr: n.RPCAddr()})
	got, err := remote.Agg(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	same("packed", got)

	// latest's one request (MethodLatestPart) answers the entry and the same windows.
	latest := func(name string, rep cluster.Replica) {
		t.Helper()
		a, err := rep.LatestPart(ctx, "pmu/f", true, req.Every, req.Shards)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !a.Held || a.Entry.Key != "pmu/f" || !a.Entry.Live() {
			t.Fatalf("%s: entry %+v held %v", name, a.Entry, a.Held)
		}
		same(name, &wire.AggResp{Shards: a.Shards})
	}
	latest("latest part, in process", n.local)
	latest("latest part", remote)

	// An older node: it serves MethodAgg and the catalog only.
	old := rpc.NewServer(rpc.NewTCPTransport(), rpc.Config{})
	defer old.Close()
	replica.RegisterCatalog(old, n.local)
	cluster.Handle(old, wire.MethodAgg, func(ctx context.Context, req *wire.AggReq) (*wire.AggResp, error) {
		resp, err := n.local.Agg(ctx, req)
		if err == nil {
			for i := range resp.Shards {
				resp.Shards[i].Pack()
			}
		}
		return resp, err
	})
	addr, err := old.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	remote = cluster.NewReplicas("self", nil, cli, 10*time.Second, nil).For(dht.Peer{ID: "peer", RPCAddr: addr.String()})
	if got, err = remote.Agg(ctx, req); err != nil {
		t.Fatalf("from an older node: %v", err)
	}
	same("older node", got)
	latest("latest part from an older node", remote)

	bad := &wire.AggSeriesReq{Key: "pmu/f", Every: 5e9, Shards: wire.AppendAggSpans(nil, []wire.ShardAgg{{Start: start + 1, From: t0, To: t0 + 1}})}
	err = rpc.Invoke(ctx, cli, n.RPCAddr(), wire.MethodAggSeries, bad, &wire.AggSeriesResp{})
	var re *rpc.RemoteError
	if !errors.As(err, &re) || re.Code != CodeBadInput {
		t.Fatalf("a start inside a quantum: %v, want %s", err, CodeBadInput)
	}
}
