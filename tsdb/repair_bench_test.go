package tsdb

import (
	"context"
	"flag"
	"fmt"
	"github.com/tsdht/tsdht/tsdb/repair"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/series"
)

// BenchmarkRepairPass measures a repair pass on one node of an idle 3-node rf 3 cluster
// (pebble stores, the default 10 s quantum) holding 40 channels over 1 h, 6 h and 1 day
// at one point per channel per second, all sealed. ns/op is a periodic pass between
// full ones (nothing changed: flat whatever is held); full-pass-ms is RepairNow's pass
// (every pair's set hash compared with its owners, and every point read: a scrub);
// compare-all-ms a pass comparing every pair's set hash without reading points (after a
// failed pass; after a membership change in kademlia routing); change-pass-ms the pass
// every node runs after a membership change that moved none of its pairs (the walk and
// each pair's owners computed twice; a moved pair costs what it costs compare-all-ms);
// pairs is what the node holds. A week (held=168h0m0s: 2.4 M pairs, several minutes
// of loading) runs only when named:
//
//	go test -run '^$' -bench RepairPass -benchtime 20x -timeout 60m ./tsdb
//	go test -run '^$' -bench 'RepairPass/held=168h' -benchtime 5x -timeout 60m ./tsdb
func BenchmarkRepairPass(b *testing.B) {
	spans := []time.Duration{time.Hour, 6 * time.Hour, 24 * time.Hour}
	if strings.Contains(benchFlag(), "168h") {
		spans = append(spans, 7*24*time.Hour)
	}
	for _, span := range spans {
		b.Run(fmt.Sprintf("held=%v", span), func(b *testing.B) { benchRepairPass(b, span) })
	}
}

func benchRepairPass(b *testing.B, span time.Duration) {
	lc := pebbleCluster(b, 3, func(i int, cfg *Config) {
		cfg.CallTimeout = time.Minute // a loaded machine must not fail the set-up writes
	})
	ctx := context.Background()
	const channels = 40
	secs := int(span / time.Second)
	t0 := time.Now().Add(-span - 2*time.Hour).Truncate(time.Hour).UnixNano()
	for c := range channels {
		key := fmt.Sprintf("pmu%d/ch%d", c/4, c%4)
		var pts series.Points
		for s := range secs {
			pts.AppendFloat(t0+int64(s)*int64(time.Second), 60+float64(s%100)/1000)
		}
		for lo := 0; lo < secs; lo += 3600 {
			if _, err := lc.Nodes[0].Coordinator().Put(ctx, key, pts.Slice(lo, min(lo+3600, secs)), PutOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	sealAll(b, lc)
	n := lc.Nodes[0]
	held := n.Store().Stats().Shards
	began := time.Now()
	if _, err := n.RepairNow(ctx); err != nil {
		b.Fatal(err)
	}
	full := time.Since(began)
	r := n.repair
	// A pass that compares every pair held with its owners without reading them: what
	// a failed pass brings, and a membership change under a placement that cannot say
	// which pairs it moved (kademlia routing).
	r.DueFull()
	began = time.Now()
	if err := r.Pass(ctx, repair.PassAuto); err != nil {
		b.Fatal(err)
	}
	compareAll := time.Since(began)
	// What every node's pass after a membership change costs for the pairs it did not
	// move: the placement version moved, the owners did not (a change elsewhere in a
	// larger cluster). Pairs it moved cost what compareAll's do, each.
	r.PlacementMoved(true)
	c0 := r.Counters().Compared
	began = time.Now()
	if err := r.Pass(ctx, repair.PassAuto); err != nil {
		b.Fatal(err)
	}
	change := time.Since(began)
	if n := r.Counters().Compared - c0; n != 0 {
		b.Fatalf("a membership change that moved nothing compared %d pairs", n)
	}
	b.ResetTimer()
	var compared int64
	for b.Loop() {
		before := r.Counters().Compared
		if err := r.Pass(ctx, repair.PassAuto); err != nil {
			b.Fatal(err)
		}
		compared += r.Counters().Compared - before
	}
	b.ReportMetric(float64(full.Milliseconds()), "full-pass-ms")
	b.ReportMetric(float64(compareAll.Milliseconds()), "compare-all-ms")
	b.ReportMetric(float64(change.Milliseconds()), "change-pass-ms")
	b.ReportMetric(float64(held), "pairs")
	b.ReportMetric(float64(compared)/float64(b.N), "compared/op")
}

// benchFlag is the -test.bench pattern this run was given.
func benchFlag() string {
	if f := flag.Lookup("test.bench"); f != nil {
		return f.Value.String()
	}
	return ""
}
