package tsdb

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/agg/aggtest"
	"github.com/tsdht/tsdht/tsdb/series"
)

// checkAgg compares a coordinated aggregate with the brute force over a coordinated
// read of the same range: same windows, every function equal.
func checkAgg(t *testing.T, c *Coordinator, key string, from, to, every int64) {
	t.Helper()
	ctx := context.Background()
	res, err := c.Aggregate(ctx, key, from, to, every, GetOptions{})
	if err != nil {
		t.Fatalf("aggregate every %d: %v", every, err)
	}
	got, err := c.Get(ctx, key, from, to, GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pts := got.Points
	var starts []int64
	groups := map[int64]*series.Points{}
	for i, ts := range pts.T {
		w := agg.WindowStart(ts, every)
		if groups[w] == nil {
			groups[w] = &series.Points{Type: pts.Type}
			starts = append(starts, w)
		}
		groups[w].AppendFrom(&pts, i)
	}
	if len(res.Windows) != len(starts) {
		t.Fatalf("every %d over [%d, %d): %d windows, want %d", every, from, to, len(res.Windows), len(starts))
	}
	for i, w := range res.Windows {
		if w.Start != starts[i] {
			t.Fatalf("every %d: window %d at %d, want %d", every, i, w.Start, starts[i])
		}
		for _, fn := range aggtest.AllFns {
			if err := aggtest.Check(groups[w.Start], fn, w.Eval(fn)); err != nil {
				t.Fatalf("every %d, window %d: %v", every, w.Start, err)
			}
		}
	}
}

// Aggregates over a real cluster equal the brute force over a read, at widths below,
// at and above a quantum, after late and overwriting writes.
func TestAggregateEqualsBruteForceOverRead(t *testing.T) {
	lc := startCluster(t, 4, func(_ int, cfg *Config) { cfg.DHT.Format = quanta.KFI })
	ctx := context.Background()
	c := lc.Nodes[0].Coordinator()
	t0 := base()
	r := rand.New(rand.NewPCG(1, 2))
	pts := sixtyHz(t0, 60*90) // 90 s
	if _, err := c.Put(ctx, "agg/a", pts, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// Late points, overwrites with new values, and a repeated batch.
	var late series.Points
	for i := 0; i < 200; i++ {
		late.AppendFloat(t0+r.Int64N(int64(90*time.Second)), r.NormFloat64()*100)
	}
	late.Normalize()
	for range 2 {
		if _, err := c.Put(ctx, "agg/a", late, PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sec := int64(time.Second)
	for _, every := range []int64{sec / 100, sec, 3 * sec, 10 * sec, 20 * sec, 60 * sec, 3600 * sec, 86400 * sec} {
		checkAgg(t, lc.Nodes[2].Coordinator(), "agg/a", t0-sec, t0+100*sec, every)
		checkAgg(t, lc.Nodes[1].Coordinator(), "agg/a", t0+7*sec+3, t0+61*sec, every)
	}
}

// Replicas that hold different versions of a shard — a point only a farther replica
// holds, a value changed on one replica — are reconciled from their points: the
// aggregate sees what a read sees.
func TestAggregateReconcilesDifferingReplicas(t *testing.T) {
	lc := startCluster(t, 4, nil)
	ctx := context.Background()
	t0 := base()
	pts := sixtyHz(t0, 600)
	c := lc.Nodes[0].Coordinator()
	if _, err := c.Put(ctx, "s", pts, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	byID := map[string]*Node{}
	for _, n := range lc.Nodes {
		byID[n.DHT().Self().ID] = n
	}
	q := quanta.Quantum(10)
	plant := func(replica int, at int64, v float64) {
		ref := cluster.ShardRef(lc.Nodes[0].cfg.DHT.Format, "s", q.Start(at))
		reps := lc.Nodes[0].DHT().ReplicaSet(ref.ID, 3)
		var one series.Points
		one.AppendFloat(at, v)
		if err := byID[reps[replica].ID].Store().Append(ref, "s", one); err != nil {
			t.Fatal(err)
		}
	}
	plant(2, t0+1, 1e6)                        // a new point, far replica: a new max
	plant(1, t0+int64(20*time.Second)+5, -1e6) // another quantum, middle replica
	minute := int64(time.Minute)
	res, err := lc.Nodes[3].Coordinator().Aggregate(ctx, "s", t0-minute, t0+minute, minute, GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var mx, mn float64
	var count int64
	for _, w := range res.Windows {
		mx, mn, count = max(mx, w.Max), min(mn, w.Min), count+w.Count
	}
	if mx != 1e6 || mn != -1e6 || count != 602 {
		t.Fatalf("aggregate over differing replicas: max %v min %v count %d; want 1e6, -1e6, 602", mx, mn, count)
	}
	checkAgg(t, lc.Nodes[1].Coordinator(), "s", t0-minute, t0+minute, 10*int64(time.Second))
}

// A shard no replica can serve fails the aggregate (or, asked so, marks it partial).
func TestAggregateNeverSilentlyShort(t *testing.T) {
	lc := startCluster(t, 3, func(_ int, cfg *Config) {
		cfg.RF = 1
		cfg.CallTimeout = time.Second
		cfg.DHT.ProbeInterval = time.Hour
		cfg.DHT.ProbeTimeout = time.Minute
	})
	ctx := context.Background()
	t0 := base()
	pts := sixtyHz(t0, 60*60)
	if _, err := lc.Nodes[0].Coordinator().Put(ctx, "s", pts, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	victim := -1
	for i := 1; i < 3 && victim < 0; i++ {
		if lc.Nodes[i].Store().Stats().Shards > 0 {
			victim = i
		}
	}
	if victim < 0 {
		t.Skip("nodes 1 and 2 own no shard of this series: placement left nothing to kill")
	}
	if err := lc.Kill(victim); err != nil {
		t.Fatal(err)
	}
	minute := int64(time.Minute)
	_, err := lc.Nodes[0].Coordinator().Aggregate(ctx, "s", t0, t0+minute, minute, GetOptions{})
	if code(err) != CodePartial {
		t.Fatalf("aggregate with an unreachable shard: err = %v, want code %q", err, CodePartial)
	}
	res, err := lc.Nodes[0].Coordinator().Aggregate(ctx, "s", t0, t0+minute, minute, GetOptions{AllowPartial: true})
	if err != nil || !res.Partial || res.Missing == 0 {
		t.Fatalf("partial aggregate: partial=%v missing=%d err=%v", res.Partial, res.Missing, err)
	}
}

func TestLatest(t *testing.T) {
	lc := startCluster(t, 3, nil)
	ctx := context.Background()
	c := lc.Nodes[0].Coordinator()
	now := time.Now().UnixNano()
	// An older point two days back, the latest three hours back: several steps.
	var p series.Points
	p.AppendFloat(now-int64(48*time.Hour), 1)
	p.AppendFloat(now-int64(3*time.Hour), 2)
	p.AppendFloat(now-int64(3*time.Hour)+5, 3)
	if _, err := c.Put(ctx, "l", p, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := lc.Nodes[1].Coordinator().Latest(ctx, "l", now-int64(DefaultLatestLookback), now)
	if err != nil || got.Len() != 1 || got.T[0] != now-int64(3*time.Hour)+5 || got.F[0] != 3 {
		t.Fatalf("latest: %v, %v", got, err)
	}
	got, err = lc.Nodes[1].Coordinator().Latest(ctx, "l", now-int64(DefaultLatestLookback), now-int64(4*time.Hour))
	if err != nil || got.Len() != 1 || got.F[0] != 1 {
		t.Fatalf("latest before 4 h ago: %v, %v", got, err)
	}
	got, err = lc.Nodes[1].Coordinator().Latest(ctx, "l", now-int64(time.Hour), now)
	if err != nil || got.Len() != 0 {
		t.Fatalf("latest within the last hour: %v, %v; want none", got, err)
	}
}
