package tsdb

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/cluster/clustertest"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/client"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// benchCluster starts an 18-node local cluster on disk stores and a thin client of
// node 0 over TCP.
func benchCluster(b *testing.B, f quanta.Format) (*LocalCluster, *client.Client) {
	lc, err := StartLocal(context.Background(), 18, b.TempDir(), func(i int, cfg *Config) {
		cfg.DHT.Format = f
		cfg.CallTimeout = 30 * time.Second // a loaded machine must not fail the set-up writes
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
	cli, err := client.New([]string{lc.Nodes[0].RPCAddr()}, client.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cli.Close() })
	return lc, cli
}

// BenchmarkLatest compares, in one run on an 18-node local cluster, a thin client's
// single-point write with its latest of a live series (target: latest ≤ 2× the write),
// and a one-hour read of a one-hour 60 Hz series with the same read asked from the
// epoch to now (target ≤ 2×).
//
//	go test -run '^$' -bench BenchmarkLatest -benchtime 300x ./tsdb
func BenchmarkLatest(b *testing.B) {
	for _, f := range []quanta.Format{quanta.KFI, quanta.QFI} {
		b.Run("id="+f.String(), func(b *testing.B) {
			ctx := context.Background()
			_, cli := benchCluster(b, f)
			key := "pmu/live"
			t := time.Now().Add(-time.Minute).UnixNano()
			// Each iteration times one of each, alternately, so that the ratio holds
			// under a load that drifts during the run.
			b.Run("write-vs-latest", func(b *testing.B) {
				var write, latest time.Duration
				for b.Loop() {
					t += int64(time.Millisecond)
					var p series.Points
					p.AppendFloat(t, 1)
					start := time.Now()
					if _, err := cli.Put(ctx, key, p, wire.PutOptions{}); err != nil {
						b.Fatal(err)
					}
					write += time.Since(start)
					start = time.Now()
					got, err := cli.Latest(ctx, []string{key}, 0, time.Now().Add(time.Hour).UnixNano())
					latest += time.Since(start)
					if p := got[key]; err != nil || p.Len() != 1 || p.T[0] != t {
						b.Fatalf("latest: %v, %v; want %d", got[key], err, t)
					}
				}
				report(b, "write", write, "latest", latest)
			})

			// One hour of 60 Hz starting mid-hour, ending an hour ago.
			t0 := time.Now().Add(-2 * time.Hour).Truncate(time.Hour).Add(17*time.Minute + 3*time.Second).UnixNano()
			pts := clustertest.SixtyHz(t0, 3600*60)
			if _, err := cli.Put(ctx, "pmu/hour", pts, wire.PutOptions{}); err != nil {
				b.Fatal(err)
			}
			b.Run("get-hour-vs-epoch-to-now", func(b *testing.B) {
				var hour, wide time.Duration
				for b.Loop() {
					for _, r := range [][2]int64{{t0, pts.T[pts.Len()-1] + 1}, {0, time.Now().UnixNano()}} {
						start := time.Now()
						res, err := cli.Get(ctx, "pmu/hour", r[0], r[1], wire.GetOptions{})
						if r[0] == 0 {
							wide += time.Since(start)
						} else {
							hour += time.Since(start)
						}
						if err != nil || res.Points.Len() != pts.Len() {
							b.Fatalf("get: %d points, %v", res.Points.Len(), err)
						}
					}
				}
				report(b, "hour", hour, "epoch-to-now", wide)
			})
		})
	}
}

// report prints two summed durations as ms per iteration and their ratio.
func report(b *testing.B, a string, da time.Duration, c string, dc time.Duration) {
	n := float64(b.N)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(da.Seconds()*1e3/n, a+"-ms")
	b.ReportMetric(dc.Seconds()*1e3/n, c+"-ms")
	b.ReportMetric(dc.Seconds()/da.Seconds(), c+"/"+a)
}
