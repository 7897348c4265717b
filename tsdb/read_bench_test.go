package tsdb

import (
	"context"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/cluster/clustertest"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/store"
)

// BenchmarkReadSpans compares, in one run on an 18-node local cluster at rf 3, the read
// of the latest 10 s and of the latest 150 s of a 60 Hz series by another node's
// coordinator, as tsdht-bench read does (target: 150 s ≤ 3× 10 s), for reads that ask
// every replica (mode=all, the default) and a read quorum of each shard's replicas
// (mode=quorum, Config.ReadQuorumOnly). Each iteration times one of each, alternately,
// so that the ratio holds under a load that drifts; besides the wall time it reports the
// CPU time the process (all 18 nodes) spent per read (-cpu-ms), which a shared machine's
// load skews far less.
//
//	go test -run '^$' -bench BenchmarkReadSpans -benchtime 300x ./tsdb
func BenchmarkReadSpans(b *testing.B) {
	for _, mode := range []string{"all", "quorum"} {
		for _, f := range []quanta.Format{quanta.QFI, quanta.KFI} {
			b.Run("mode="+mode+"/id="+f.String(), func(b *testing.B) { benchReadSpans(b, f, mode == "quorum") })
		}
	}
}

func benchReadSpans(b *testing.B, f quanta.Format, quorumOnly bool) {
	ctx := context.Background()
	lc, err := StartLocal(ctx, 18, b.TempDir(), func(i int, cfg *Config) {
		cfg.DHT.Format = f
		cfg.ReadQuorumOnly = quorumOnly
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
	pts := clustertest.SixtyHz(time.Now().Add(-time.Hour).UnixNano(), 10000)
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
	var short, long, shortCPU, longCPU time.Duration
	for b.Loop() {
		for _, span := range []time.Duration{10 * time.Second, 150 * time.Second} {
			start, cpu := time.Now(), cpuTime()
			res, err := reader.Get(ctx, key, end-span.Nanoseconds(), end, GetOptions{})
			d, dc := time.Since(start), cpuTime()-cpu
			lo := end - span.Nanoseconds()
			want := pts.Len() - sort.Search(pts.Len(), func(i int) bool { return pts.T[i] >= lo })
			if err != nil || res.Points.Len() != want {
				b.Fatalf("read of %v: %d points, %v; want %d", span, res.Points.Len(), err, want)
			}
			if span == 10*time.Second {
				short, shortCPU = short+d, shortCPU+dc
			} else {
				long, longCPU = long+d, longCPU+dc
			}
		}
	}
	report(b, "10s", short, "150s", long)
	b.ReportMetric(shortCPU.Seconds()*1e3/float64(b.N), "10s-cpu-ms")
	b.ReportMetric(longCPU.Seconds()*1e3/float64(b.N), "150s-cpu-ms")
}

// cpuTime returns the CPU time (user and system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
