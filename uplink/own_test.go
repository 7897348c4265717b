package uplink

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// countingOwn counts the reads its Own answered from the node's own replica.
type countingOwn struct {
	Own
	held atomic.Int64
}

func (c *countingOwn) GetOwn(ctx context.Context, key string, from, to int64) (wire.Result, bool, error) {
	res, ok, err := c.Own.GetOwn(ctx, key, from, to)
	if ok && err == nil {
		c.held.Add(1)
	}
	return res, ok, err
}

// TestForwardsPointsItsOwnReplicaLacks: the forwarder reads its own replica, which
// lacks points the other two replicas hold — acknowledged at their write quorum
// without the forwarder's replica, as when that node was down or slow and its hint not
// replayed yet. One is there before the forwarder reads its range, one arrives after
// the cursor passed it. The late check, counting every replica's points, finds their
// windows short and sends them again: the centre gets both, and nothing with another
// value.
func TestForwardsPointsItsOwnReplicaLacks(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	ctx := context.Background()
	lc, err := tsdb.StartLocal(ctx, 3, t.TempDir(), func(i int, cfg *tsdb.Config) { cfg.RF = 3 })
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	target := &lpTarget{pts: map[string]map[int64]string{}}
	srv := httptest.NewServer(target)
	defer srv.Close()

	const key = "site/pmu1/freq"
	base := time.Now().Truncate(time.Minute).Add(-10 * time.Minute)
	var p series.Points
	for i := range 240 {
		p.AppendFloat(base.Add(time.Duration(i)*time.Second).UnixNano(), float64(i)/8)
	}
	if _, err := lc.Nodes[0].Coordinator().Put(ctx, key, p, wire.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	fwd := -1 // the first registry replica: every node is alive, so the forwarder
	for i, n := range lc.Nodes {
		if homes, err := n.Coordinator().Homes(ctx, key); err == nil && len(homes) > 0 && homes[0].ID == n.DHT().Self().ID {
			fwd = i
		}
	}
	if fwd < 0 {
		t.Fatal("no node is the series' first registry replica")
	}
	q := lc.Nodes[fwd].Coordinator().SeriesQuantumForTest(ctx, key)
	if q == 0 {
		t.Fatal("the series' quantum is unknown")
	}
	ids := quanta.NewSeriesIDs(tsdb.DefaultConfig().DHT.Format, key)
	// writeAround stores a point at every replica but the forwarder's.
	writeAround := func(at time.Time, v float64) int64 {
		var pt series.Points
		pt.AppendFloat(at.UnixNano(), v)
		start := q.Start(at.UnixNano())
		ref := store.ShardRef{ID: ids.At(start), Start: start, Q: q}
		for i, n := range lc.Nodes {
			if i != fwd {
				if err := n.Store().Append(ref, key, pt); err != nil {
					t.Fatal(err)
				}
			}
		}
		return at.UnixNano()
	}
	before := writeAround(base.Add(150*time.Second+time.Millisecond), -1)

	cfg := Config{URL: "influx+" + srv.URL + "/db", Select: catalog.Query{Prefix: "site/"}, Interval: 20 * time.Millisecond,
		LateEvery: 50 * time.Millisecond, SaveEvery: time.Millisecond, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}
	ups := make([]*Uplink, 3)
	owns := make([]*countingOwn, 3)
	for i, n := range lc.Nodes {
		owns[i] = &countingOwn{Own: n.Coordinator()}
		u, err := New(cfg, n.Coordinator(), owns[i], n.DHT(), slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo})).With("n", i))
		if err != nil {
			t.Fatal(err)
		}
		ups[i] = u
		go u.Run()
		defer u.Close()
	}
	const measurement = key
	waitFor(t, 20*time.Second, func() bool { return target.count(measurement) == 241 },
		"the 240 points and the one the forwarder's replica lacked when it read them to be forwarded")
	if s := ups[fwd].Stats(); s.Series != 1 {
		t.Fatalf("node %d, the first registry replica, does not forward the series: %+v", fwd, s)
	}
	if owns[fwd].held.Load() == 0 {
		t.Errorf("the forwarder (node %d, a replica of every shard at rf 3) never read its own replica", fwd)
	}

	late := ups[fwd].Stats().Late
	after := writeAround(base.Add(200*time.Second+time.Millisecond), -2)
	waitFor(t, 20*time.Second, func() bool { return target.count(measurement) == 242 },
		"the point written behind the cursor at the replicas but the forwarder's to be forwarded")
	if s := ups[fwd].Stats(); s.Late == late {
		t.Errorf("the point reached the centre without the late check finding its window: %+v", s)
	}
	target.mu.Lock()
	defer target.mu.Unlock()
	for at, want := range map[int64]string{before: "value=-1", after: "value=-2"} {
		if got := target.pts[measurement][at]; got != want {
			t.Errorf("the centre holds %q at %d, want %q", got, at, want)
		}
	}
	if target.changed != 0 {
		t.Errorf("%d points were sent again with another value", target.changed)
	}
}
