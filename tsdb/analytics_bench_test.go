package tsdb

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/cluster/clustertest"

	"github.com/tsdht/tsdht/internal/cputime"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/client"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// BenchmarkAggregate60Hz measures the mean, min and max per minute of 60 Hz data (one
// hour: 216,000 points; one day: 5,184,000) asked by a thin client over TCP of an
// 18-node local cluster on disk stores, sealed: "agg" computes at the replicas, "get"
// pulls every point to the client and reduces there (what a user had to do before).
// cpu-ms/op is the CPU the process (all 18 nodes and the client) spent per aggregate.
//
//	go test -run '^$' -bench Aggregate60Hz -benchtime 20x ./tsdb
func BenchmarkAggregate60Hz(b *testing.B) {
	for _, span := range []time.Duration{time.Hour, 24 * time.Hour} {
		for _, f := range []quanta.Format{quanta.KFI, quanta.QFI} {
			b.Run(fmt.Sprintf("span=%v/id=%s", span, f), func(b *testing.B) { benchAggregate(b, span, f) })
		}
	}
}

func benchAggregate(b *testing.B, span time.Duration, f quanta.Format) {
	ctx := context.Background()
	lc, err := StartLocal(ctx, 18, b.TempDir(), func(i int, cfg *Config) {
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
	defer lc.Close()
	minute := int64(time.Minute)
	t0 := agg.WindowStart(time.Now().Add(-span-time.Hour).UnixNano(), minute)
	n := int(span / time.Second * 60)
	pts := clustertest.SixtyHz(t0, n)
	for lo := 0; lo < n; lo += 60 * 600 {
		if _, err := lc.Nodes[0].Coordinator().Put(ctx, "pmu/freq", pts.Slice(lo, min(lo+60*600, n)), PutOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	for _, node := range lc.Nodes {
		if _, err := node.Store().(*store.Pebble).SealNow(time.Now().Add(time.Hour)); err != nil {
			b.Fatal(err)
		}
	}
	cli, err := client.New([]string{lc.Nodes[0].RPCAddr()}, client.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	from, to := t0, t0+int64(span)
	fns := []agg.Fn{agg.Mean, agg.Min, agg.Max}
	b.Run("agg", func(b *testing.B) {
		cpu := cputime.Process()
		for b.Loop() {
			tab, err := cli.Agg(ctx, "pmu/freq", from, to, minute, fns, wire.GetOptions{})
			if err != nil || len(tab.Rows) != int(span/time.Minute) {
				b.Fatalf("agg: %d rows, %v", len(tab.Rows), err)
			}
		}
		// The CPU the whole cluster spent per aggregate (background work included): a
		// figure a loaded machine changes less than the time.
		b.ReportMetric((cputime.Process()-cpu).Seconds()*1e3/float64(b.N), "cpu-ms/op")
	})
	b.Run("get", func(b *testing.B) {
		for b.Loop() {
			res, err := cli.Get(ctx, "pmu/freq", from, to, wire.GetOptions{})
			if err != nil || res.Points.Len() != n {
				b.Fatalf("get: %d points, %v", res.Points.Len(), err)
			}
			ws := agg.Windows(&res.Points, from, to, minute)
			if len(ws) != int(span/time.Minute) {
				b.Fatalf("get: %d windows", len(ws))
			}
		}
	})
}
