package tsdb

import (
	"context"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/store"
)

// BenchmarkReadSpans compares, in one run on an 18-node local cluster at rf 3 whose
// reads ask a read quorum of each shard's replicas (Config.ReadQuorumOnly), the read of
// the latest 10 s and of the latest 150 s of a 60 Hz series by another node's
// coordinator, as tsdht bench read does (target: 150 s ≤ 3× 10 s). Each iteration times
// one of each, alternately, so that the ratio holds under a load that drifts.
//
//	go test -run '^$' -bench BenchmarkReadSpans -benchtime 300x ./tsdb
func BenchmarkReadSpans(b *testing.B) {
	for _, f := range []quanta.Format{quanta.QFI, quanta.KFI} {
		b.Run("id="+f.String(), func(b *testing.B) {
			ctx := context.Background()
			lc, err := StartLocal(ctx, 18, b.TempDir(), func(i int, cfg *Config) {
				cfg.DHT.Format = f
				cfg.ReadQuorumOnly = true
				cfg.CallTimeout = 30 * time.Second
				st, err := store.OpenPebble(filepath.Join(cfg.DHT.DataDir, "store"), store.PebbleOptions{Sync: store.SyncNone, SealInterval: -1})
				if err != nil {
					b.Fatal(err)
				}
				cfg.Store = st
			})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { lc.Close() })
			key := "pmu/spans"
			pts := sixtyHz(time.Now().Add(-time.Hour).UnixNano(), 10000)
			if _, err := lc.Nodes[0].Coordinator().Put(ctx, key, pts, PutOptions{}); err != nil {
				b.Fatal(err)
			}
			end := pts.T[pts.Len()-1] + 1
			reader := lc.Nodes[len(lc.Nodes)-1].Coordinator()
			// Warm: connections to every node open, the shards in the stores' caches.
			for range 20 {
				for _, span := range []int64{10e9, 150e9} {
					if _, err := reader.Get(ctx, key, end-span, end, GetOptions{}); err != nil {
						b.Fatal(err)
					}
				}
			}
			var short, long time.Duration
			for b.Loop() {
				for _, span := range []time.Duration{10 * time.Second, 150 * time.Second} {
					start := time.Now()
					res, err := reader.Get(ctx, key, end-span.Nanoseconds(), end, GetOptions{})
					d := time.Since(start)
					lo := end - span.Nanoseconds()
					want := pts.Len() - sort.Search(pts.Len(), func(i int) bool { return pts.T[i] >= lo })
					if err != nil || res.Points.Len() != want {
						b.Fatalf("read of %v: %d points, %v; want %d", span, res.Points.Len(), err, want)
					}
					if span == 10*time.Second {
						short += d
					} else {
						long += d
					}
				}
			}
			report(b, "10s", short, "150s", long)
		})
	}
}
