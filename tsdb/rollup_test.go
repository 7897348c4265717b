package tsdb

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
)

// rollupCluster starts n nodes with rollups on (pulls only when the test says, by
// rollUp), on disk stores so that quanta can be sealed.
func rollupCluster(t *testing.T, n int, f quanta.Format) *LocalCluster {
	t.Helper()
	return startCluster(t, n, func(i int, cfg *Config) {
		cfg.DHT.Format = f
		cfg.DHT.Quantum = 60 // a day is 1440 quanta
		cfg.CallTimeout = 30 * time.Second
		cfg.Rollups = RollupConfig{Enabled: true, Horizon: 3 * time.Minute, PullInterval: time.Hour}
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
			s := n.Coordinator().RollupStats()
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
			t0 := dayStart(3)
			pts := everyPoint(t0, t0+2*day, int64(7*time.Minute), r)
			if _, err := c.Put(ctx, "roll/late", pts, PutOptions{}); err != nil {
				t.Fatal(err)
			}
			sealAll(t, lc)
			repairAll(t, lc)
			t.Logf("written, sealed and repaired")
			widths := []int64{int64(time.Minute), int64(time.Hour), day}
			check := func() {
				for i, every := range widths {
					checkAgg(t, lc.Nodes[1+i].Coordinator(), "roll/late", t0, t0+2*day, every)
				}
			}
			check() // the homes start keeping the series
			t.Logf("checked")
			rollUp(t, lc)
			t.Logf("rolled up")
			h0, m0 := rollupHits(lc)
			check()
			h1, m1 := rollupHits(lc)
			if want := int64(2*1440 + 48 + 2); h1-h0 != want || m1 != m0 {
				t.Fatalf("rolled up: %d windows from rollups (want %d), %d from raw shards (want 0)", h1-h0, want, m1-m0)
			}
			// A late point: a new maximum and a new count in one minute, one hour, one day.
			late := t0 + day + 5*int64(time.Hour) + 7*int64(time.Minute) + 3
			var one series.Points
			one.AppendFloat(late, 1e6)
			if _, err := lc.Nodes[4].Coordinator().Put(ctx, "roll/late", one, PutOptions{}); err != nil {
				t.Fatal(err)
			}
			sealAll(t, lc)
			check() // the dirty windows come from the raw shards
			h2, m2 := rollupHits(lc)
			if m2-m1 != 3 || h2-h1 != int64(2*1440+48+2)-3 {
				t.Fatalf("after a late point: %d windows from rollups, %d from raw shards (want 3)", h2-h1, m2-m1)
			}
			for _, every := range widths {
				res, err := c.Aggregate(ctx, "roll/late", t0, t0+2*day, every, GetOptions{})
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
		})
	}
}
