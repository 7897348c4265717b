package tsdb

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// rollupCluster starts n nodes with rollups on (pulls only when the test says, by
// rollUp), on disk stores so that quanta can be sealed.
func rollupCluster(t *testing.T, n int, f quanta.Format) *LocalCluster {
	t.Helper()
	return startCluster(t, n, func(i int, cfg *Config) {
		cfg.DHT.Format = f
		cfg.DHT.Quantum = 60 // a day is 1440 quanta
		cfg.CallTimeout = 30 * time.Second
		cfg.LongReadShare = 1 // the checks read whole days of raw data, again and again
		cfg.Rollups = RollupConfig{Horizon: 3 * time.Minute, PullInterval: time.Hour}
		st, err := store.OpenPebble(filepath.Join(cfg.DHT.DataDir, "store"), store.PebbleOptions{Sync: store.SyncNone, SealInterval: -1, Quantum: 60})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Store = st
	})
}

// rollUp has every live node pull what it keeps rollups of.
func rollUp(t *testing.T, lc *LocalCluster) {
	t.Helper()
	for _, n := range lc.Nodes {
		if n != nil {
			if err := n.RollupNow(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// repairAll runs a full repair pass on every live node: replicas a loaded machine left
// short of a write hold it after.
func repairAll(t *testing.T, lc *LocalCluster) {
	t.Helper()
	for _, n := range lc.Nodes {
		if n != nil {
			if _, err := n.RepairNow(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// rollupHits sums the rollup windows the live nodes' coordinators answered from homes.
func rollupHits(lc *LocalCluster) (hits, misses int64) {
	for _, n := range lc.Nodes {
		if n != nil {
			s := n.RollupStats()
			hits, misses = hits+s.Hits, misses+s.Misses
		}
	}
	return hits, misses
}

// dayStart returns the start of the UTC day d days before today.
func dayStart(d int) int64 {
	day := int64(24 * time.Hour)
	return agg.WindowStart(time.Now().UnixNano(), day) - int64(d)*day
}

// everyPoint returns a float point every step from t0 to t1, values from r.
func everyPoint(t0, t1, step int64, r *rand.Rand) series.Points {
	var p series.Points
	for t := t0; t < t1; t += step {
		p.AppendFloat(t, r.NormFloat64()*10+50)
	}
	return p
}

// A late point into a sealed quantum that the homes rolled up changes the answer of
// every level — 1 minute, 1 hour and 1 day — correctly: at once (the homes' windows are
// dirty, the raw shards answer them) and after the homes pulled again (from the
// rollups).
func TestRollupLatePointChangesEveryLevel(t *testing.T) {
	for _, f := range []quanta.Format{quanta.KFI, quanta.QFI} {
		t.Run(f.String(), func(t *testing.T) {
			lc := rollupCluster(t, 5, f)
			ctx := context.Background()
			c := lc.Nodes[0].Coordinator()
			r := rand.New(rand.NewPCG(3, 4))
			day := int64(24 * time.Hour)
			t0 := dayStart(2)
			pts := everyPoint(t0, t0+day, int64(7*time.Minute), r)
			if _, err := c.Put(ctx, "roll/late", pts, PutOptions{}); err != nil {
				t.Fatal(err)
			}
			sealAll(t, lc)
			repairAll(t, lc)
			widths := []int64{int64(time.Minute), int64(time.Hour), day}
			check := func() {
				for i, every := range widths {
					checkAgg(t, lc.Nodes[1+i].Coordinator(), "roll/late", t0, t0+day, every)
				}
			}
			check() // the homes start keeping the series
			rollUp(t, lc)
			h0, m0 := rollupHits(lc)
			check()
			h1, m1 := rollupHits(lc)
			if want := int64(1440 + 24 + 1); h1-h0 != want || m1 != m0 {
				t.Fatalf("rolled up: %d windows from rollups (want %d), %d from raw shards (want 0)", h1-h0, want, m1-m0)
			}
			// A late point: a new maximum and a new count in one minute, one hour, one day.
			late := t0 + 5*int64(time.Hour) + 7*int64(time.Minute) + 3
			var one series.Points
			one.AppendFloat(late, 1e6)
			if _, err := lc.Nodes[4].Coordinator().Put(ctx, "roll/late", one, PutOptions{}); err != nil {
				t.Fatal(err)
			}
			sealAll(t, lc)
			check() // the dirty windows come from the raw shards
			h2, m2 := rollupHits(lc)
			// Its minute comes from the raw shards in each of the three queries; the
			// hour and the day around it from the finer levels: 1,439 minutes, then 23
			// hours and 59 minutes twice.
			if m2-m1 != 3 || h2-h1 != 1439+2*(23+59) {
				t.Fatalf("after a late point: %d windows from rollups, %d from raw shards (want 3)", h2-h1, m2-m1)
			}
			for _, every := range widths {
				res, err := c.Aggregate(ctx, "roll/late", t0, t0+day, every, GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				found := false
				for _, w := range res.Windows {
					if w.Start == agg.WindowStart(late, every) {
						found = w.Max == 1e6 && w.MaxT == late
					}
				}
				if !found {
					t.Fatalf("every %v: the late point is not the window's max", time.Duration(every))
				}
			}
			rollUp(t, lc)
			_, m3 := rollupHits(lc)
			check()
			if _, m4 := rollupHits(lc); m4 != m3 {
				t.Fatalf("after the homes pulled again, %d windows still from raw shards", m4-m3)
			}
			// A late point through PutMany (the HTTP API's write) marks its windows too.
			late2 := t0 + 17*int64(time.Hour) + 3*int64(time.Minute) + 5
			var two series.Points
			two.AppendFloat(late2, -1e6)
			if r := lc.Nodes[3].Coordinator().PutMany(ctx, []SeriesPut{{Key: "roll/late", Points: two}}, PutOptions{}); r[0].Err != nil || r[0].Stored != 1 {
				t.Fatalf("PutMany of a late point: stored %d: %v", r[0].Stored, r[0].Err)
			}
			sealAll(t, lc)
			_, m5 := rollupHits(lc)
			check()
			if _, m6 := rollupHits(lc); m6-m5 != 3 {
				t.Fatalf("after a late point through PutMany: %d windows from raw shards, want 3 (its minute, hour and day)", m6-m5)
			}
			rollUp(t, lc)
			check()
			// Deletes invalidate rollups: a range, then the whole series written anew.
			hour := int64(time.Hour)
			if _, err := c.Delete(ctx, &wire.DelReq{Key: "roll/late", From: t0 + 2*hour, To: t0 + 6*hour}); err != nil {
				t.Fatal(err)
			}
			check()
			rollUp(t, lc)
			check()
			if _, err := c.Delete(ctx, &wire.DelReq{Key: "roll/late", Whole: true}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Put(ctx, "roll/late", everyPoint(t0, t0+day, int64(47*time.Minute), r), PutOptions{}); err != nil {
				t.Fatal(err)
			}
			check()
			rollUp(t, lc)
			check()
		})
	}
}

// Every aggregate through the rollup path equals the brute force over a read, with
// random late, overlapping and repeated writes, at widths from below a quantum to
// above a day, before and after the homes pulled what the late writes changed.
func TestRollupPropertyVsBruteForce(t *testing.T) {
	lc := rollupCluster(t, 5, quanta.QFI)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(7, 8))
	day := int64(24 * time.Hour)
	t0 := dayStart(2) - int64(3*time.Hour) + int64(17*time.Minute) // not aligned to any level
	t1 := t0 + day + int64(6*time.Hour)
	put := func(p series.Points) {
		t.Helper()
		if _, err := lc.Nodes[r.IntN(len(lc.Nodes))].Coordinator().Put(ctx, "roll/prop", p, PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	put(everyPoint(t0, t1, int64(13*time.Minute), r))
	sec := int64(time.Second)
	widths := []int64{sec, 10 * sec, 60 * sec, 120 * sec, 3600 * sec, 3 * 3600 * sec, day, 2 * day}
	checkAll := func() {
		t.Helper()
		for range 5 {
			every := widths[r.IntN(len(widths))]
			from := t0 - int64(time.Hour) + r.Int64N(day/2)
			to := from + r.Int64N(t1-from+int64(time.Hour))
			if r.IntN(3) == 0 { // aligned ranges, so that the coarse levels answer
				from, to = agg.WindowStart(from, every), agg.WindowStart(to, every)+every
			}
			checkAgg(t, lc.Nodes[r.IntN(len(lc.Nodes))].Coordinator(), "roll/prop", from, to, every)
		}
		checkAgg(t, lc.Nodes[0].Coordinator(), "roll/prop", dayStart(2), dayStart(1), 60*sec)
		checkAgg(t, lc.Nodes[1].Coordinator(), "roll/prop", dayStart(2), dayStart(1), day)
	}
	lateBatch := func() {
		var late series.Points
		for range 20 {
			late.AppendFloat(t0+r.Int64N(t1-t0), r.NormFloat64()*1000)
		}
		late.Normalize()
		put(late)
		if r.IntN(2) == 0 {
			put(late) // repeated
		}
	}
	checkAll() // the homes start keeping the series
	sealAll(t, lc)
	repairAll(t, lc)
	rollUp(t, lc)
	h0, _ := rollupHits(lc)
	for round := range 2 {
		checkAll()
		lateBatch()
		checkAll() // dirty windows from the raw shards
		if round%2 == 0 {
			sealAll(t, lc)
		}
		repairAll(t, lc)
		rollUp(t, lc)
	}
	checkAll()
	if h, m := rollupHits(lc); h == h0 {
		t.Fatalf("no window came from the rollups (%d from raw shards)", m)
	}
}

// A producer down, a home down, and a late write marking a window while a home is
// pulling it never yield a wrong answer: the coordinator falls back to the raw shards
// where the homes cannot vouch for a window.
func TestRollupFailuresNeverWrong(t *testing.T) {
	lc := rollupCluster(t, 6, quanta.QFI) // QFI: the raw replicas are mostly not the homes
	ctx := context.Background()
	r := rand.New(rand.NewPCG(9, 10))
	day := int64(24 * time.Hour)
	t0 := dayStart(2)
	key := "roll/fail"
	c := lc.Nodes[0].Coordinator()
	if _, err := c.Put(ctx, key, everyPoint(t0, t0+day, int64(5*time.Minute), r), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	sealAll(t, lc)
	repairAll(t, lc)
	minute, hour := int64(time.Minute), int64(time.Hour)
	check := func() {
		t.Helper()
		for _, every := range []int64{minute, hour, day} {
			for _, n := range lc.Nodes {
				if n != nil {
					checkAgg(t, n.Coordinator(), key, t0, t0+day, every)
					break
				}
			}
		}
	}
	check()
	rollUp(t, lc)
	check()
	homes, err := c.Homes(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	isHome := map[string]bool{}
	for _, h := range homes {
		isHome[h.ID] = true
	}
	lateAt := func(at int64, v float64) {
		t.Helper()
		var one series.Points
		one.AppendFloat(at, v)
		for _, n := range lc.Nodes {
			if n != nil {
				if _, err := n.Coordinator().Put(ctx, key, one, PutOptions{}); err != nil {
					t.Fatal(err)
				}
				return
			}
		}
	}

	// A late write marks a window; while the first home re-pulls it, another late write
	// lands in the same window. That home must not settle the window from its pull.
	w := t0 + 3*hour + 10*minute
	lateAt(w+1, 1e6)
	var once bool
	for _, n := range lc.Nodes {
		if isHome[n.DHT().Self().ID] {
			f := func() {
				if !once {
					once = true
					lateAt(w+2, -1e6)
				}
			}
			n.homes.AfterPull(f)
		}
	}
	rollUp(t, lc)
	for _, n := range lc.Nodes {
		n.homes.AfterPull(nil)
	}
	if !once {
		t.Fatal("no home pulled the marked window")
	}
	_, m0 := rollupHits(lc)
	check()
	if _, m1 := rollupHits(lc); m1 == m0 {
		t.Fatal("a window marked during a pull was answered from the rollups")
	}
	res, err := c.Aggregate(ctx, key, t0, t0+day, day, GetOptions{})
	if err != nil || len(res.Windows) != 1 || res.Windows[0].Max != 1e6 || res.Windows[0].Min != -1e6 {
		t.Fatalf("day window after racing late writes: %+v, %v", res.Windows, err)
	}
	rollUp(t, lc)
	check()

	// A producer down (a raw replica that is not a home), then a home down.
	producer := ""
	q := lc.Nodes[0].cfg.DHT.Quantum
	for s := q.Start(t0); s < q.Start(t0+day) && producer == ""; s += int64(q) {
		for _, p := range lc.Nodes[0].DHT().ReplicaSet(cluster.ShardRef(quanta.QFI, key, s).ID, 3) {
			if !isHome[p.ID] {
				producer = p.ID
				break
			}
		}
	}
	if producer == "" {
		t.Fatal("every raw replica is a home: no producer-only node to stop")
	}
	for i, n := range lc.Nodes {
		if n.DHT().Self().ID == producer {
			if err := lc.Kill(i); err != nil {
				t.Fatal(err)
			}
		}
	}
	lateAt(t0+5*hour+1, 3e6)
	check()
	rollUp(t, lc)
	check()
	// Before a second node goes, the first one's shards get their third copy back: the
	// raw reads that check the answers need a read quorum of each shard's replicas.
	if err := lc.WaitLive(ctx, len(lc.Nodes)-1, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	repairAll(t, lc)
	for i, n := range lc.Nodes {
		if n != nil && isHome[n.DHT().Self().ID] && i != 0 {
			if err := lc.Kill(i); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	check()
	lateAt(t0+7*hour+1, -3e6)
	check()
	rollUp(t, lc)
	check()
	if h, _ := rollupHits(lc); h == 0 {
		t.Fatal("no window came from the rollups")
	}
}
