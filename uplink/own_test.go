package uplink

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb"
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
	ctx := context.Background()
	lc, target, url := startRF3(t)

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

	owns := make([]*countingOwn, len(lc.Nodes))
	ups := runUplinks(t, lc, quickConfig(url), func(i int, n *tsdb.Node) Own {
		owns[i] = &countingOwn{Own: n.Coordinator()}
		return owns[i]
	})
	for _, u := range ups {
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

// fromOwn records the earliest time its Own was asked to read from.
type fromOwn struct {
	Own
	mu    sync.Mutex
	first int64
}

func (f *fromOwn) GetOwn(ctx context.Context, key string, from, to int64) (wire.Result, bool, error) {
	f.mu.Lock()
	f.first = min(f.first, from)
	f.mu.Unlock()
	return f.Own.GetOwn(ctx, key, from, to)
}

// TestStartsAtTheFirstPoint: a series without a cursor is forwarded from the window
// holding its first point, not from its first bound, which the catalog rounds out to
// the hour: the forwarder does not read the half hour of nothing before it.
func TestStartsAtTheFirstPoint(t *testing.T) {
	ctx := context.Background()
	lc, target, url := startOne(t)
	const key = "site/pmu1/freq"
	base := time.Now().Truncate(time.Hour).Add(-30 * time.Minute)
	var p series.Points
	for i := range 60 {
		p.AppendFloat(base.Add(time.Duration(i)*time.Second).UnixNano(), float64(i))
	}
	n := lc.Nodes[0]
	if _, err := n.Coordinator().Put(ctx, key, p, wire.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	own := &fromOwn{Own: n.Coordinator(), first: math.MaxInt64}
	u, err := New(quickConfig(url), n.Coordinator(), own, n.DHT(), nil)
	if err != nil {
		t.Fatal(err)
	}
	go u.Run()
	defer u.Close()
	waitFor(t, 20*time.Second, func() bool { return target.count(key) == 60 }, "the 60 points to be forwarded")
	own.mu.Lock()
	defer own.mu.Unlock()
	if earliest := base.Add(-time.Minute).UnixNano(); own.first < earliest {
		t.Errorf("the forwarder read from %v, %v before the first point", time.Unix(0, own.first).UTC(), base.Sub(time.Unix(0, own.first)))
	}
}
