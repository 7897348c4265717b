package tsdb

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/cluster/clustertest"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// TestGetOwn: a node that is a replica of every shard of a range reads it from its own
// replica (coord.GetOwn) as Get reads it from all — deleted points left out; a node that
// is not a replica of one of them says so (ok false) instead of answering short.
func TestGetOwn(t *testing.T) {
	lc := startCluster(t, 3, func(_ int, cfg *Config) {
		cfg.RF, cfg.WriteQuorum, cfg.ReadQuorum = 2, 2, 1
		cfg.RepairInterval = time.Hour
	})
	ctx := context.Background()
	const key = "site/pmu1/freq"
	t0 := clustertest.Base()
	pts := series.Points{Type: series.Float}
	for i := range 600 { // 10 quanta of 10 s, 6 Hz
		pts.AppendFloat(t0+int64(i)*int64(time.Second)/6, float64(i))
	}
	if _, err := lc.Nodes[0].Coordinator().Put(ctx, key, pts, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	from, to := t0, t0+int64(100*time.Second)
	if _, err := lc.Nodes[0].Coordinator().Delete(ctx, &wire.DelReq{Key: key, From: t0 + int64(20*time.Second), To: t0 + int64(25*time.Second)}); err != nil {
		t.Fatal(err)
	}
	want, err := lc.Nodes[0].Coordinator().Get(ctx, key, from, to, wire.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want.Points.Len() != 570 {
		t.Fatalf("Get read %d points, want 570 (600 written, 30 deleted)", want.Points.Len())
	}
	// Within one quantum every node that holds it reads it alone; over ten quanta at rf 2
	// of 3 some node is not a replica of one of them.
	var owned, declined int
	for i, n := range lc.Nodes {
		for _, r := range [][2]int64{{from, to}, {t0 + int64(30*time.Second), t0 + int64(35*time.Second)}} {
			got, ok, err := n.Coordinator().GetOwn(ctx, key, r[0], r[1])
			if err != nil {
				t.Fatalf("node %d: GetOwn: %v", i, err)
			}
			if !ok {
				declined++
				continue
			}
			owned++
			w, err := n.Coordinator().Get(ctx, key, r[0], r[1], wire.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Points.T, w.Points.T) || !reflect.DeepEqual(got.Points.F, w.Points.F) {
				t.Errorf("node %d, [%d, %d): GetOwn read %d points, Get %d", i, r[0], r[1], got.Points.Len(), w.Points.Len())
			}
		}
	}
	if owned < 2 || declined == 0 {
		t.Errorf("%d reads answered by the node's own replica, %d declined: want the quantum's two replicas to answer and some node to decline the ten quanta", owned, declined)
	}
	if _, _, err := lc.Nodes[0].Coordinator().GetOwn(ctx, key, to, from); err == nil {
		t.Error("GetOwn of a range that ends before it begins: no error")
	}
}
