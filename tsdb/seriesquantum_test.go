package tsdb

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/client"
	"github.com/tsdht/tsdht/tsdb/cluster/clustertest"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// everyMinute is n points a minute apart from t0, valued by their index.
func everyMinute(t0 int64, n int) series.Points {
	var p series.Points
	for i := range n {
		p.AppendFloat(t0+int64(i)*int64(time.Minute), float64(i))
	}
	return p
}

// TestSeriesQuantumFitsItsRate: a series whose first write asks for quanta fitted to its
// rate (as every write through HTTP does) gets quanta of 6 hours for a point a minute,
// so two days of it are a handful of shards, not 17,280; every read path — raw reads,
// aggregates, latest, range deletes — finds its points from any node, and a later write
// proposing another quantum keeps the first.
func TestSeriesQuantumFitsItsRate(t *testing.T) {
	lc := startCluster(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c0, c2 := lc.Nodes[0].Coordinator(), lc.Nodes[2].Coordinator()
	const q = 6 * 3600
	t0 := (clustertest.Base()/(q*1e9) - 8) * q * 1e9 // two days before, at a quantum's start
	pts := everyMinute(t0+int64(time.Minute)/2, 2*24*60)
	half := pts.Len() / 2
	// Two writes: the second proposes quanta for points a second apart (10 minutes).
	first, second := pts.Slice(0, half), pts.Slice(half, pts.Len())
	res := c0.PutMany(ctx, []SeriesPut{{Key: "sparse/m", Points: first}, {Key: "dense/m", Points: clustertest.SixtyHz(t0, 120)}}, PutOptions{FitQuanta: true})
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	var tail series.Points
	for i := range 3 {
		tail.AppendFloat(second.T[0]+int64(i)*int64(time.Second), -1)
	}
	if _, err := c2.Put(ctx, "sparse/m", series.Merge(second, tail), PutOptions{FitQuanta: true}); err != nil {
		t.Fatal(err)
	}
	all := series.Merge(pts, tail)

	if got := c2.SeriesQuantumForTest(ctx, "sparse/m"); got != q {
		t.Fatalf("quantum of a series a point a minute: %v, want %v", got.Duration(), time.Duration(q)*time.Second)
	}
	if got := c2.SeriesQuantumForTest(ctx, "dense/m"); got != 10 {
		t.Fatalf("quantum of a 60 Hz series: %v, want the cluster's 10s", got.Duration())
	}
	// 8 quanta of the sparse series and 1 of the dense one, each on 3 replicas. A write
	// returns at its quorum (2 of 3): the third replica's append may still be on its way.
	shards := func() int {
		n := 0
		for _, node := range lc.Nodes {
			n += node.Stats().Shards
		}
		return n
	}
	testutil.WaitFor(t, 10*time.Second, func() bool { return shards() >= 9*3 }, "every replica to hold its pairs")
	if n := shards(); n != 9*3 {
		t.Errorf("the cluster holds %d pairs, want %d", n, 9*3)
	}

	from, to := t0, t0+2*24*int64(time.Hour)
	got, err := c2.Get(ctx, "sparse/m", from, to, GetOptions{ReadQuorum: 3})
	if err != nil {
		t.Fatal(err)
	}
	clustertest.RequireSame(t, all, got.Points)
	// A range inside one quantum, trimmed exactly.
	lo, hi := pts.T[100], pts.T[110]
	if got, err = c0.Get(ctx, "sparse/m", lo, hi, GetOptions{}); err != nil || got.Points.Len() != 10 {
		t.Fatalf("10 minutes inside a quantum: %d points, %v", got.Points.Len(), err)
	}

	hour := int64(time.Hour)
	a, err := c2.Aggregate(ctx, "sparse/m", from, to, hour, GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := agg.Windows(&all, from, to, hour)
	if len(a.Windows) != len(want) {
		t.Fatalf("%d hourly windows, want %d", len(a.Windows), len(want))
	}
	for i := range want {
		if a.Windows[i].Start != want[i].Start || a.Windows[i].Partial.Count != want[i].Partial.Count || a.Windows[i].Partial.Sum != want[i].Partial.Sum {
			t.Fatalf("window %d: %+v, want %+v", i, a.Windows[i], want[i])
		}
	}

	last, err := c0.Latest(ctx, "sparse/m", from, to)
	if err != nil || last.Len() != 1 || last.T[0] != all.T[all.Len()-1] {
		t.Fatalf("latest: %v, %v; want the point at %d", last, err, all.T[all.Len()-1])
	}

	// A delete of 90 minutes across a quantum boundary.
	dlo := t0 + q*1e9 - 45*int64(time.Minute)
	if _, err := c2.Delete(ctx, &wire.DelReq{Key: "sparse/m", From: dlo, To: dlo + 90*int64(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	got, err = c0.Get(ctx, "sparse/m", from, to, GetOptions{ReadQuorum: 3})
	if err != nil {
		t.Fatal(err)
	}
	if want := all.Len() - 90; got.Points.Len() != want {
		t.Fatalf("after deleting 90 minutes: %d points, want %d", got.Points.Len(), want)
	}
	for _, ts := range got.Points.T {
		if ts >= dlo && ts < dlo+90*int64(time.Minute) {
			t.Fatalf("a deleted point at %d is still read", ts)
		}
	}
}

// TestExplicitSeriesQuantum: PutOptions.Quantum fixes a new series' quantum, and a
// quantum out of range is refused at the replicas before anything is stored.
func TestExplicitSeriesQuantum(t *testing.T) {
	lc := startCluster(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := lc.Nodes[0].Coordinator()
	pts := everyMinute(clustertest.Base(), 5)
	if _, err := c.Put(ctx, "explicit/day", pts, PutOptions{Quantum: 24 * 3600}); err != nil {
		t.Fatal(err)
	}
	if got := c.SeriesQuantumForTest(ctx, "explicit/day"); got != 24*3600 {
		t.Fatalf("quantum %v, want 24h", got.Duration())
	}
	for _, bad := range []quanta.Quantum{-1, quanta.MaxQuantum + 1} {
		key := fmt.Sprintf("explicit/bad%d", bad)
		_, err := c.Put(ctx, key, pts, PutOptions{Quantum: bad})
		if clustertest.Code(err) != CodeBadInput {
			t.Errorf("quantum %d: %v, want %s", bad, err, CodeBadInput)
		}
	}
}

// TestSeriesQuantumMovesWithItsRegistry: nodes join, the registry replicas of most
// series change, and a coordinator that never saw the series still finds each one's
// quantum, and so its points.
func TestSeriesQuantumMovesWithItsRegistry(t *testing.T) {
	lc := startCluster(t, 1, func(i int, cfg *Config) {
		healConfig(i, cfg)
		cfg.RF, cfg.WriteQuorum, cfg.ReadQuorum = 1, 1, 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	want := map[string]series.Points{}
	for k := range 12 {
		key := fmt.Sprintf("moved/s%d", k)
		pts := everyMinute(clustertest.Base()-int64(24*time.Hour), 24*60)
		if _, err := lc.Nodes[0].Coordinator().Put(ctx, key, pts, PutOptions{Quantum: 6 * 3600}); err != nil {
			t.Fatal(err)
		}
		want[key] = pts
	}
	for range 3 {
		if _, err := lc.Add(func(i int, cfg *Config) {
			healConfig(i, cfg)
			cfg.RF, cfg.WriteQuorum, cfg.ReadQuorum = 1, 1, 1
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := lc.WaitLive(ctx, 4, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	waitHealed(t, lc, 1, 60*time.Second)
	c := lc.Nodes[3].Coordinator()
	for key, pts := range want {
		if q := c.SeriesQuantumForTest(ctx, key); q != 6*3600 {
			t.Errorf("%s: quantum %v after the registry moved, want 6h", key, q.Duration())
			continue
		}
		got, err := c.Get(ctx, key, pts.T[0], pts.T[pts.Len()-1]+1, GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		clustertest.RequireSame(t, pts, got.Points)
	}
}

// TestClientReadsASparseYear: the Go client reads a year of a series written every
// minute for its first and last day (empty between) whole, its windows growing while
// answers are small.
func TestClientReadsASparseYear(t *testing.T) {
	lc := startCluster(t, 1, func(_ int, cfg *Config) { cfg.RF, cfg.WriteQuorum, cfg.ReadQuorum = 1, 1, 1 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	end := clustertest.Base() / int64(time.Minute) * int64(time.Minute)
	year := 365 * 24 * int64(time.Hour)
	sparse := series.Merge(everyMinute(end-year, 24*60), everyMinute(end-24*int64(time.Hour), 23*60))
	c := lc.Nodes[0].Coordinator()
	if _, err := c.Put(ctx, "sparse/year", sparse, PutOptions{FitQuanta: true}); err != nil {
		t.Fatal(err)
	}
	cl, err := client.New([]string{lc.Nodes[0].RPCAddr()}, client.Config{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got, err := cl.Get(ctx, "sparse/year", end-year, end, GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clustertest.RequireSame(t, sparse, got.Points)
}
