package tsdb

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/cluster/clustertest"

	"github.com/tsdht/tsdht/tsdb/client"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// BenchmarkWriteDuringSeal measures what a seal costs the writers of a node with one
// core (GOMAXPROCS 1, as on a BeagleBone): a node on a disk store holds a quantum of
// 2,000 pairs of 600 points each, and a client over TCP writes one point every 2 ms
// while the node seals them all. It reports the seal's mean time, and of the writes
// during the seals the worst run's median latency and the slowest. The store yields to the network poller between two
// pairs (store.sealYield); without that, every write during the seal waited for it to
// end or for the runtime's 10 ms poll.
//
//	go test -run XXX -bench WriteDuringSeal -benchtime 3x ./tsdb
func BenchmarkWriteDuringSeal(b *testing.B) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	ctx := context.Background()
	var st *store.Pebble
	lc, err := StartLocal(ctx, 1, b.TempDir(), func(i int, cfg *Config) {
		cfg.RF, cfg.WriteQuorum, cfg.ReadQuorum = 1, 1, 1
		s, err := store.OpenPebble(filepath.Join(cfg.DHT.DataDir, "store"), store.PebbleOptions{Sync: store.SyncNone, SealInterval: -1})
		if err != nil {
			b.Fatal(err)
		}
		st, cfg.Store = s, s
	})
	if err != nil {
		b.Fatal(err)
	}
	defer lc.Close()
	cli, err := client.New([]string{lc.Nodes[0].RPCAddr()}, client.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	c := lc.Nodes[0].Coordinator()
	var sealTime time.Duration
	var p50s, maxes []time.Duration
	for i := range b.N {
		b.StopTimer()
		t0 := time.Now().Add(-time.Hour).Truncate(10*time.Second).UnixNano() - int64(i)*10e9
		for s := range 2000 {
			if _, err := c.Put(ctx, fmt.Sprintf("s%d", s), clustertest.SixtyHz(t0, 600), PutOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		var mu sync.Mutex
		var during []time.Duration
		sealing, stop, done := true, make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
				}
				var p series.Points
				p.AppendFloat(time.Now().UnixNano(), 1)
				t1 := time.Now()
				if _, err := cli.Put(ctx, "writer", p, wire.PutOptions{}); err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				if sealing {
					during = append(during, time.Since(t1))
				}
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		}()
		s0 := time.Now()
		n, err := st.SealNow(time.Now())
		sealTime += time.Since(s0)
		mu.Lock()
		sealing = false
		mu.Unlock()
		close(stop)
		<-done
		if err != nil || n != 2000 {
			b.Fatalf("sealed %d pairs, want 2000: %v", n, err)
		}
		if len(during) == 0 {
			b.Fatal("no write finished during the seal")
		}
		slices.Sort(during)
		p50s, maxes = append(p50s, during[len(during)/2]), append(maxes, during[len(during)-1])
	}
	b.ReportMetric(float64(sealTime.Milliseconds())/float64(b.N), "seal-ms/op")
	b.ReportMetric(float64(slices.Max(p50s).Microseconds())/1000, "write-p50-ms")
	b.ReportMetric(float64(slices.Max(maxes).Microseconds())/1000, "write-max-ms")
}
