package tsdb

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/cluster/clustertest"

	"github.com/tsdht/tsdht/tsdb/store"
)

// BenchmarkRestoreRF measures how long a cluster takes to bring every pair back to rf
// copies after losing a node, as a function of the data the cluster holds. It reports
// the time from the loss being detected to the last copy landing, with repair passes
// run back to back (RepairRate 0: in production the rate limit bounds it instead).
//
//	go test -run '^$' -bench RestoreRF -benchtime 1x ./tsdb
func BenchmarkRestoreRF(b *testing.B) {
	for _, disk := range []bool{false, true} {
		for _, minutes := range []int{1, 10, 60} {
			name := fmt.Sprintf("store=memory/series=8/minutes=%d", minutes)
			if disk {
				name = fmt.Sprintf("store=disk/series=8/minutes=%d", minutes)
			}
			b.Run(name, func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					restoreOnce(b, minutes, disk)
				}
			})
		}
	}
}

func restoreOnce(b *testing.B, minutes int, disk bool) {
	const rf = 3
	ctx := context.Background()
	lc, err := StartLocal(ctx, 6, b.TempDir(), func(i int, cfg *Config) {
		healConfig(i, cfg)
		if disk {
			st, err := store.OpenPebble(filepath.Join(cfg.DHT.DataDir, "store"), store.PebbleOptions{Sync: store.SyncNone})
			if err != nil {
				b.Fatal(err)
			}
			cfg.Store = st
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	defer lc.Close()
	t0 := clustertest.Base() - int64(minutes)*int64(time.Minute)
	for k := 0; k < 8; k++ {
		if _, err := lc.Nodes[0].Coordinator().Put(ctx, fmt.Sprintf("pmu%d/freq", k), clustertest.SixtyHz(t0, 3600*minutes), PutOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	// Let the background third copies land, then lose the node holding the most.
	waitHealed(b, lc, rf, 5*time.Minute)
	victim, lost := 1, int64(0)
	for i := 1; i < len(lc.Nodes); i++ {
		if p := lc.Nodes[i].Store().Stats().Points; p > lost {
			victim, lost = i, p
		}
	}
	if err := lc.Kill(victim); err != nil {
		b.Fatal(err)
	}
	if err := lc.WaitLive(ctx, 5, 30*time.Second); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	took := waitHealed(b, lc, rf, 5*time.Minute)
	b.StopTimer()
	b.ReportMetric(float64(lost), "lost-points")
	b.ReportMetric(took.Seconds(), "restore-s")
	b.ReportMetric(float64(lost)/took.Seconds(), "points/s")
}
