package tsdb

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// TestReplicaRefusesWhatCoordinatorsRefuse sends replica writes straight to a node, as
// a confused or hostile peer could: a point further in the future than --max-future
// allows, and a point outside the shard's quantum, are refused with a message; a good
// write is stored.
func TestReplicaRefusesWhatCoordinatorsRefuse(t *testing.T) {
	lc, err := StartLocal(context.Background(), 1, "", func(_ int, cfg *Config) { cfg.MaxFuture = time.Minute })
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	n := lc.Nodes[0]
	cli := rpc.NewClient(rpc.NewTCPTransport(), rpc.Config{})
	defer cli.Close()
	q := n.cfg.DHT.Quantum
	write := func(t0 int64, start int64) error {
		var pts series.Points
		pts.AppendFloat(t0, 1)
		id := quanta.ShardID(n.cfg.DHT.Format, "k", start)
		req := &wire.WriteReq{Shards: []wire.ShardWrite{{ID: id[:], Start: start, Key: "k", Points: pts}}}
		return rpc.Invoke(context.Background(), cli, n.RPCAddr(), wire.MethodWrite, req, &wire.WriteResp{})
	}
	future := time.Now().Add(time.Hour).UnixNano()
	if err := write(future, q.Start(future)); err == nil || !strings.Contains(err.Error(), "in the future") {
		t.Fatalf("a point an hour ahead, max-future 1m: %v", err)
	}
	past := time.Now().Add(-time.Hour).UnixNano()
	if err := write(past, q.Start(past)-int64(q)); err == nil || !strings.Contains(err.Error(), "outside the shard's quantum") {
		t.Fatalf("a point filed under the previous quantum: %v", err)
	}
	if err := write(past, q.Start(past)); err != nil {
		t.Fatalf("a good write: %v", err)
	}
	if got := n.Store().Stats().Points; got != 1 {
		t.Fatalf("the store holds %d points, want the good one only", got)
	}
}
