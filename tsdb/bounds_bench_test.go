package tsdb

import (
	"context"
	"path/filepath"
	"testing"
	"time"

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
//	go test -run '^$' -bench Latest -benchtime 200x ./tsdb
func BenchmarkLatest(b *testing.B) {
	for _, f := range []quanta.Format{quanta.KFI, quanta.QFI} {
		b.Run("id="+f.String(), func(b *testing.B) {
			ctx := context.Background()
			_, cli := benchCluster(b, f)
			key := "pmu/live"
			t := time.Now().Add(-time.Minute).UnixNano()
			b.Run("write", func(b *testing.B) {
				for b.Loop() {
					t += int64(time.Millisecond)
					var p series.Points
					p.AppendFloat(t, 1)
					if _, err := cli.Put(ctx, key, p, wire.PutOptions{}); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("latest", func(b *testing.B) {
				for b.Loop() {
					got, err := cli.Latest(ctx, []string{key}, 0, time.Now().Add(time.Hour).UnixNano())
					if p := got[key]; err != nil || p.Len() != 1 || p.T[0] != t {
						b.Fatalf("latest: %v, %v; want %d", got[key], err, t)
					}
				}
			})

			// One hour of 60 Hz starting mid-hour, ending an hour ago.
			t0 := time.Now().Add(-2 * time.Hour).Truncate(time.Hour).Add(17*time.Minute + 3*time.Second).UnixNano()
			pts := sixtyHz(t0, 3600*60)
			if _, err := cli.Put(ctx, "pmu/hour", pts, wire.PutOptions{}); err != nil {
				b.Fatal(err)
			}
			for _, c := range []struct {
				name     string
				from, to int64
			}{{"hour", t0, pts.T[pts.Len()-1] + 1}, {"epoch-to-now", 0, time.Now().UnixNano()}} {
				b.Run("get="+c.name, func(b *testing.B) {
					for b.Loop() {
						res, err := cli.Get(ctx, "pmu/hour", c.from, c.to, wire.GetOptions{})
						if err != nil || res.Points.Len() != pts.Len() {
							b.Fatalf("get: %d points, %v", res.Points.Len(), err)
						}
					}
				})
			}
		})
	}
}
