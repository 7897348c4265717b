package tsdb

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"

	"github.com/tsdht/tsdht/tsdb/cluster/clustertest"

	"github.com/tsdht/tsdht/tsdb/coord"

	"github.com/tsdht/tsdht/tsdb/replica"

	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/client"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// registryNewest returns the Newest a node's copy of key's entry holds, if any.
func registryNewest(t *testing.T, n *Node, key string) (int64, bool) {
	t.Helper()
	e, ok, err := n.Store().(store.Catalog).Entry(key)
	if err != nil {
		t.Fatal(err)
	}
	return e.Newest, ok && e.HasNewest
}

// wantNewestAtQuorum fails unless at least w of key's registry replicas hold a Newest
// in at's quantum or later: what an acknowledged write of a point at at guarantees.
func wantNewestAtQuorum(t *testing.T, lc *LocalCluster, key string, at int64, w int) {
	t.Helper()
	ctx := context.Background()
	owners, err := lc.Nodes[0].dht.Locate(ctx, quanta.KeyID(key), 3)
	if err != nil {
		t.Fatal(err)
	}
	q := lc.Nodes[0].cfg.DHT.Quantum
	held := 0
	for _, n := range lc.Nodes {
		if n.dht == nil || !cluster.IsReplica(owners, n.dht.Self().ID) {
			continue
		}
		if nw, ok := registryNewest(t, n, key); ok && q.StartNanos(nw) >= q.StartNanos(at) {
			held++
		}
	}
	if held < w {
		t.Fatalf("a write at %d was acknowledged with its quantum as Newest at %d registry replicas, want >= %d", at, held, w)
	}
}

// mustCached returns the catalog entry c holds of key.
func mustCached(t *testing.T, c *Coordinator, key string) catalog.Entry {
	t.Helper()
	e, ok := c.CachedEntryForTest(key)
	if !ok {
		t.Fatalf("no cached entry of %s", key)
	}
	return e
}

func wantLatest(t *testing.T, c *Coordinator, key string, wantT int64, wantV float64) {
	t.Helper()
	got, err := c.Latest(context.Background(), key, math.MinInt64, math.MaxInt64)
	if err != nil || got.Len() != 1 || got.T[0] != wantT || got.F[0] != wantV {
		t.Fatalf("latest of %s: %v, %v; want %d=%v", key, got, err, wantT, wantV)
	}
}

func put1(t *testing.T, c *Coordinator, key string, ts int64, v float64) {
	t.Helper()
	var p series.Points
	p.AppendFloat(ts, v)
	if _, err := c.Put(context.Background(), key, p, PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Latest is exact: after a write (its quantum is Newest at quorum once acknowledged),
// after a late point, an overwrite, writes through coordinators whose view of the newest
// quantum lags, out-of-order points, a point stamped in the future, a delete of the
// newest points, with a registry replica down, and after the whole series is deleted.
func TestLatestExact(t *testing.T) {
	lc := startCluster(t, 4, func(_ int, cfg *Config) { cfg.CallTimeout = 10 * time.Second })
	ctx := context.Background()
	key := "pmu/bounds"
	c0, c1 := lc.Nodes[0].Coordinator(), lc.Nodes[1].Coordinator()
	t0 := clustertest.Base()
	pts := clustertest.SixtyHz(t0, 600)
	if _, err := c0.Put(ctx, key, pts, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	last := pts.T[pts.Len()-1]
	owners, err := lc.Nodes[0].dht.Locate(ctx, quanta.KeyID(key), 3)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]*Node{}
	for _, n := range lc.Nodes {
		byID[n.dht.Self().ID] = n
	}
	// Acknowledged: its quantum is Newest at a write quorum, before any wait.
	wantNewestAtQuorum(t, lc, key, last, 2)
	if c0.NeedsNewestForTest(key, mustCached(t, c0, key), last+int64(time.Millisecond)) {
		t.Fatalf("a second write into the newest quantum would report it again")
	}
	wantLatest(t, c1, key, last, pts.F[pts.Len()-1])

	// A late point does not move it; an overwrite of the latest point changes its value.
	put1(t, c1, key, t0-int64(time.Minute), -1)
	wantLatest(t, c0, key, last, pts.F[pts.Len()-1])
	put1(t, c1, key, last, 42)
	// Replicas keep no version of a value: an overwrite is seen once no replica still
	// holds the old value (the write is acknowledged at quorum, the third copy may lag).
	ref := cluster.ShardRef(lc.Nodes[0].cfg.DHT.Format, key, lc.Nodes[0].cfg.DHT.Quantum.Start(last))
	shardOwners, err := lc.Nodes[0].dht.Locate(ctx, ref.ID, 3)
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() bool {
		for _, p := range shardOwners {
			got, _, err := byID[p.ID].Store().Read(ref, key, last, last+1)
			if err != nil || got.Len() != 1 || got.F[0] != 42 {
				return false
			}
		}
		return true
	}, "the overwrite to reach every replica")
	wantLatest(t, c0, key, last, 42)
	// (Replicas keep no version of a value, so a hint or repair still carrying the old
	// one may bring it back later: the rest of the test does not depend on it.)
	mid := last + int64(time.Minute)
	put1(t, c1, key, mid, 5)
	wantLatest(t, c0, key, mid, 5)

	// A write through a coordinator that has not seen the series' newest quantum, into
	// a later one, then a later quantum again through the first: each reports its
	// quantum before it is acknowledged, and a third coordinator, whose hint of where
	// the newest quantum is lags, finds them.
	c2 := lc.Nodes[2].Coordinator()
	wantLatest(t, c2, key, mid, 5) // c2's hint: mid's quantum
	later := last + int64(3*time.Minute)
	put1(t, c1, key, later, 6)
	wantNewestAtQuorum(t, lc, key, later, 2)
	wantLatest(t, c2, key, later, 6)
	silent := later + int64(time.Minute)
	put1(t, c0, key, silent, 7)
	wantNewestAtQuorum(t, lc, key, silent, 2)
	// Out of order: an older point into the newest quantum, one into an older quantum.
	put1(t, c1, key, silent-int64(time.Millisecond), 70)
	put1(t, c1, key, later-int64(time.Millisecond), 60)
	wantLatest(t, c2, key, silent, 7)
	wantLatest(t, c1, key, silent, 7)

	// A point stamped in the future (within MaxFuture) is the latest.
	future := time.Now().Add(5 * time.Minute).UnixNano()
	put1(t, c1, key, future, 8)
	wantLatest(t, c0, key, future, 8)
	// Points up to it, counting before.
	got, err := c0.Latest(ctx, key, math.MinInt64, future)
	if err != nil || got.Len() != 1 || got.T[0] != silent {
		t.Fatalf("latest before the future point: %v, %v", got, err)
	}

	// Deleting the newest points: the latest is the one before them, though Newest
	// points past it (Latest walks back).
	if _, err := c1.Delete(ctx, &wire.DelReq{Key: key, From: later - int64(time.Millisecond), To: future + 1}); err != nil {
		t.Fatal(err)
	}
	wantLatest(t, c0, key, mid, 5)

	// One registry replica down (not the coordinator): still exact, and a new write
	// (at quorum 2 of 3) is seen.
	victim := -1
	for i, n := range lc.Nodes {
		if i != 0 && cluster.IsReplica(owners, n.dht.Self().ID) {
			victim = i
			break
		}
	}
	if err := lc.Kill(victim); err != nil {
		t.Fatal(err)
	}
	if err := lc.WaitLive(ctx, 3, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	wantLatest(t, c0, key, mid, 5)
	put1(t, c0, key, mid+int64(time.Second), 9)
	wantLatest(t, c0, key, mid+int64(time.Second), 9)
	// A live point (inside what Latest's speculation covers), then one just before it
	// written late: the live one stays the latest.
	oi := 1 // a live coordinator that did not write it
	if victim == 1 {
		oi = 3
	}
	other := lc.Nodes[oi].Coordinator()
	live := time.Now().UnixNano()
	put1(t, c0, key, live, 10)
	wantLatest(t, other, key, live, 10)
	put1(t, c0, key, live-int64(time.Millisecond), 11)
	wantLatest(t, other, key, live, 10)

	// The whole series deleted: unknown.
	if _, err := c0.Delete(ctx, &wire.DelReq{Key: key, Whole: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c0.Latest(ctx, key, math.MinInt64, math.MaxInt64); clustertest.Code(err) != CodeUnknownSeries {
		t.Fatalf("latest of a deleted series: %v, want %s", err, CodeUnknownSeries)
	}
}

// A read or an aggregate over a range far wider than the series (from the epoch to
// now) narrows to the series' bounds and answers the same as over the series alone.
func TestWideRangeReadsOnlyTheBounds(t *testing.T) {
	lc := startCluster(t, 3, nil)
	ctx := context.Background()
	key := "pmu/wide"
	t0 := clustertest.Base()
	pts := clustertest.SixtyHz(t0, 60*90)
	var late series.Points
	late.AppendFloat(t0-int64(2*time.Hour), -5) // a late point two hours before the rest
	if _, err := lc.Nodes[0].Coordinator().Put(ctx, key, pts, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Nodes[1].Coordinator().Put(ctx, key, late, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	cli, err := client.New([]string{lc.Nodes[2].RPCAddr()}, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	first, lastT, found, err := cli.Bounds(ctx, key, 0, time.Now().UnixNano())
	if err != nil || !found || first > late.T[0] || lastT != pts.T[pts.Len()-1] {
		t.Fatalf("bounds: %d..%d found=%v err=%v; want ..%d..%d", first, lastT, found, err, late.T[0], pts.T[pts.Len()-1])
	}
	if _, _, found, err := cli.Bounds(ctx, key, 0, late.T[0]); err != nil || found {
		t.Fatalf("bounds before the first point: found=%v err=%v", found, err)
	}
	res, err := cli.Get(ctx, key, 0, time.Now().UnixNano(), wire.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clustertest.RequireSame(t, series.Concat(late, pts), res.Points)
	res, err = cli.Get(ctx, key, 0, late.T[0], wire.GetOptions{})
	if err != nil || res.Points.Len() != 0 || res.Points.Type != series.Float {
		t.Fatalf("get before the first point: %v, %v", res.Points, err)
	}
	minute := int64(time.Minute)
	tab, err := cli.Agg(ctx, key, 0, time.Now().UnixNano(), minute, []agg.Fn{agg.Count, agg.Mean}, wire.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	all := series.Concat(late, pts)
	want := agg.Windows(&all, all.T[0], all.T[all.Len()-1]+1, minute)
	if len(tab.Rows) != len(want) {
		t.Fatalf("agg from the epoch: %d windows, want %d", len(tab.Rows), len(want))
	}
	for i, w := range want {
		if tab.Rows[i].Start != w.Start || tab.Rows[i].Values[0] != w.Eval(agg.Count) {
			t.Fatalf("window %d: %+v, want start %d count %v", i, tab.Rows[i], w.Start, w.Eval(agg.Count))
		}
	}
	if _, err := cli.Get(ctx, "no/such", 0, time.Now().UnixNano(), wire.GetOptions{}); clustertest.Code(err) != CodeUnknownSeries {
		t.Fatalf("get of an unknown series over a wide range: %v", err)
	}
}

// A whole-series delete of a series spanning more quanta than one delete request may
// carry to one replica is sent in several.
func TestDeleteOfALongSeries(t *testing.T) {
	lc := startCluster(t, 3, nil)
	ctx := context.Background()
	c := lc.Nodes[0].Coordinator()
	t0 := clustertest.Base() - int64(3*time.Hour)
	var p series.Points
	for i := int64(0); i < 4; i++ { // bounds of 4+ hours: more than wire.MaxDeleteShards quanta
		p.AppendFloat(t0+i*int64(time.Hour), float64(i))
	}
	if _, err := c.Put(ctx, "long", p, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Delete(ctx, &wire.DelReq{Key: "long", Whole: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Latest(ctx, "long", math.MinInt64, math.MaxInt64); clustertest.Code(err) != CodeUnknownSeries {
		t.Fatalf("latest after the delete: %v", err)
	}
}

// PutMany, too, acknowledges a series only once its newest quantum is Newest at a write
// quorum, under either ID format: a coordinator that did not write finds each latest.
func TestPutManyReportsNewest(t *testing.T) {
	for _, f := range []quanta.Format{quanta.KFI, quanta.QFI} {
		t.Run(f.String(), func(t *testing.T) {
			lc := startCluster(t, 5, func(_ int, cfg *Config) { cfg.DHT.Format = f })
			c0, c3 := lc.Nodes[0].Coordinator(), lc.Nodes[3].Coordinator()
			t0 := clustertest.Base()
			for step := range 3 {
				var puts []SeriesPut
				var ats []int64
				for k := range 4 {
					var p series.Points
					// Each step moves every series a few quanta on, out of order within the batch.
					at := t0 + int64(step)*int64(time.Minute) + int64(k)*int64(time.Second)
					p.AppendFloat(at, float64(step))
					p.AppendFloat(at-int64(20*time.Second), -1)
					ats = append(ats, at)
					puts = append(puts, SeriesPut{Key: "many/" + string(rune('a'+k)), Points: p})
				}
				for i, r := range c0.PutMany(context.Background(), puts, PutOptions{}) {
					if r.Err != nil || r.Stored != 2 {
						t.Fatalf("put many: %+v", r)
					}
					wantNewestAtQuorum(t, lc, puts[i].Key, ats[i], 2)
					wantLatest(t, c3, puts[i].Key, ats[i], float64(step))
				}
			}
		})
	}
}

// newestFailing fails, while failing is set, every catalog merge that carries a Newest,
// as a registry replica that cannot be reached would.
type newestFailing struct {
	cluster.Replica
	failing atomic.Bool
	reports atomic.Int64 // catalog merges that carried a Newest
}

func (n *newestFailing) MergeEntries(ctx context.Context, es []catalog.Entry) ([]catalog.Entry, error) {
	for _, e := range es {
		if e.HasNewest {
			n.reports.Add(1)
			if n.failing.Load() {
				return nil, rpc.ErrUnreachable
			}
			break
		}
	}
	return n.Replica.MergeEntries(ctx, es)
}

// A PutMany reaching a new quantum for many series (whose entries already cover it)
// reports all their Newests in one
// request per registry replica, and acknowledges no series whose report missed the
// write quorum (each fails with CodeUnavailable, its points stored, as Put's would be);
// once a quorum takes the reports, every series is acknowledged and latest finds it.
func TestPutManyWaitsForNewest(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RF, cfg.WriteQuorum, cfg.ReadQuorum = 3, 2, 2
	cfg.CallTimeout = 2 * time.Second
	cfg.WriteRetry = 300 * time.Millisecond
	logger := slog.New(slog.DiscardHandler)
	reps := map[string]*newestFailing{}
	replicas := clustertest.ReplicaMap{}
	var owners []dht.Peer
	for _, id := range []string{"a", "b", "self"} {
		p := dht.Peer{ID: id, RPCAddr: id + ":1"}
		owners = append(owners, p)
		reps[id] = &newestFailing{Replica: replica.New(replica.Config{Store: store.NewMem(), Quantum: cfg.DHT.Quantum, Format: cfg.DHT.Format,
			Stats: func() wire.NodeStats { return wire.NodeStats{} }})}
		replicas[id] = reps[id]
	}
	place := &clustertest.FixedPlacement{Me: owners[2], Owners: owners}
	coord := coord.New(cfg.coordConfig(), place, replicas, coord.NewRegistry(place, replicas, cfg.coordConfig(), logger), nil, nil, logger)
	qn := cfg.DHT.Quantum.Duration().Nanoseconds()
	// Four quanta inside one hour of the entries' bounds: only the first write extends
	// them (and carries its Newest in that same request: catalog_coord.go noteWrite).
	hour := int64(time.Hour)
	t0 := clustertest.Base()/hour*hour + qn
	const n = 50
	putAll := func(at int64, v float64) []SeriesResult {
		puts := make([]SeriesPut, n)
		for k := range puts {
			var p series.Points
			p.AppendFloat(at+int64(k), v)
			puts[k] = SeriesPut{Key: fmt.Sprintf("many/newest%d", k), Points: p}
		}
		return coord.PutMany(context.Background(), puts, PutOptions{})
	}
	for k, r := range putAll(t0, 1) {
		if r.Err != nil || r.Stored != 1 {
			t.Fatalf("series %d: %+v", k, r)
		}
	}
	t0 += qn
	before := reps["a"].reports.Load()
	for k, r := range putAll(t0, 1) {
		if r.Err != nil || r.Stored != 1 {
			t.Fatalf("series %d: %+v", k, r)
		}
	}
	if got := reps["a"].reports.Load() - before; got != 1 {
		t.Errorf("registry replica a got %d requests carrying Newest for %d series in one PutMany; want 1", got, n)
	}
	// Two registry replicas of three refuse Newest: the next quantum is acknowledged
	// for no series.
	reps["a"].failing.Store(true)
	reps["b"].failing.Store(true)
	for k, r := range putAll(t0+qn, 2) {
		if clustertest.Code(r.Err) != CodeUnavailable || !strings.Contains(r.Err.Error(), "newest quantum") {
			t.Fatalf("series %d, newest quantum at one registry replica of three: %+v; want a %s error about the newest quantum", k, r, CodeUnavailable)
		}
	}
	// One refuses: a write quorum takes them, and latest finds every series' point.
	reps["b"].failing.Store(false)
	for k, r := range putAll(t0+2*qn, 3) {
		if r.Err != nil || r.Stored != 1 {
			t.Fatalf("series %d: %+v", k, r)
		}
	}
	for k := range n {
		wantLatest(t, coord, fmt.Sprintf("many/newest%d", k), t0+2*qn+int64(k), 3)
	}
}

// A write into a new quantum is acknowledged only once its quantum is Newest at a write
// quorum of registry replicas; a write into a quantum already reported sends nothing.
func TestWriteWaitsForNewest(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RF, cfg.WriteQuorum, cfg.ReadQuorum = 3, 2, 2
	cfg.CallTimeout = 2 * time.Second
	cfg.WriteRetry = 300 * time.Millisecond
	logger := slog.New(slog.DiscardHandler)
	reps := map[string]*newestFailing{}
	replicas := clustertest.ReplicaMap{}
	var owners []dht.Peer
	for _, id := range []string{"a", "b", "self"} {
		p := dht.Peer{ID: id, RPCAddr: id + ":1"}
		owners = append(owners, p)
		reps[id] = &newestFailing{Replica: replica.New(replica.Config{Store: store.NewMem(), Quantum: cfg.DHT.Quantum, Format: cfg.DHT.Format,
			Stats: func() wire.NodeStats { return wire.NodeStats{} }})}
		replicas[id] = reps[id]
	}
	place := &clustertest.FixedPlacement{Me: owners[2], Owners: owners}
	coord := coord.New(cfg.coordConfig(), place, replicas, coord.NewRegistry(place, replicas, cfg.coordConfig(), logger), nil, nil, logger)
	key := "pmu/newest"
	qn := cfg.DHT.Quantum.Duration().Nanoseconds()
	t0 := cfg.DHT.Quantum.BeginNanos(cfg.DHT.Quantum.Start(clustertest.Base()))

	put1(t, coord, key, t0, 1)
	wantLatest(t, coord, key, t0, 1)

	// Two registry replicas of three refuse Newest: a write in the same quantum needs
	// none and is acknowledged; one in the next quantum is not.
	reps["a"].failing.Store(true)
	reps["b"].failing.Store(true)
	put1(t, coord, key, t0+1, 2)
	var p series.Points
	p.AppendFloat(t0+qn, 3)
	if _, err := coord.Put(context.Background(), key, p, PutOptions{}); clustertest.Code(err) != CodeUnavailable || !strings.Contains(err.Error(), "newest quantum") {
		t.Fatalf("a write whose newest quantum reached one registry replica of three: %v; want a %s error about the newest quantum", err, CodeUnavailable)
	}
	// One refuses: a write quorum still stores it, and latest finds it.
	reps["b"].failing.Store(false)
	put1(t, coord, key, t0+qn+1, 4)
	wantLatest(t, coord, key, t0+qn+1, 4)
}
