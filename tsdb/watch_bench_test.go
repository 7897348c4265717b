package tsdb

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/client"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// BenchmarkWatch measures, on 3 nodes at rf 3 (in one process, real TCP, memory
// stores), what live subscriptions cost a 60 Hz writer on node 0 and how long a point
// takes from its write's acknowledgement to a subscriber on node 2: b.N writes per
// case, each case reporting the writer's p50/p99 and, with subscribers, the delivery
// p50/p99. Run:
//
//	go test ./tsdb -run XXX -bench Watch -benchtime 600x
func BenchmarkWatch(b *testing.B) {
	lc, err := StartLocal(context.Background(), 3, b.TempDir(), func(_ int, cfg *Config) { cfg.RF = 3 })
	if err != nil {
		b.Fatal(err)
	}
	defer lc.Close()
	writer, err := client.New([]string{lc.Nodes[0].RPCAddr()}, client.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer writer.Close()
	many := make([]string, 1000)
	for i := range many {
		many[i] = fmt.Sprintf("bench/many/%03d", i)
	}
	one := []string{"bench/one"}
	// Every series exists before the cases, so that their first writes are not timed.
	for _, k := range append(slices.Clone(many), one...) {
		if _, err := writer.Put(context.Background(), k, series.Points{Type: series.Float, T: []int64{1}, F: []float64{1}}, wire.PutOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	cases := []struct {
		name string
		keys []string // written in turn
		subs []client.Selector
	}{
		{"one-series/unsubscribed", one, nil},
		{"one-series/1000-subscribers", one, slices.Repeat([]client.Selector{{Series: one[0]}}, 1000)},
		{"1000-series/unsubscribed", many, nil},
		{"1000-series/1-subscriber", many, []client.Selector{{Prefix: "bench/many/"}}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) { benchWatchCase(b, lc, writer, tc.keys, tc.subs) })
	}
}

func benchWatchCase(b *testing.B, lc *LocalCluster, writer *client.Client, keys []string, subs []client.Selector) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// One connection runs at most rpc.Config.MaxInflightPerConn (64) requests at
	// once, and each subscription keeps a poll in flight: the subscribers share
	// clients, at most 50 subscriptions each.
	var readers []*client.Client
	for range (len(subs) + 49) / 50 {
		r, err := client.New([]string{lc.Nodes[2].RPCAddr()}, client.Config{})
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close()
		readers = append(readers, r)
	}
	open0 := lc.Nodes[2].Watch().Subscriptions()
	// The first subscriber's arrivals, by point time; the others only drain theirs.
	var amu sync.Mutex
	arrived := map[int64]time.Time{}
	var wg sync.WaitGroup
	start := time.Now().UnixNano()
	for i, sel := range subs {
		runs, _ := readers[i/50].Subscribe(ctx, sel, start)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range runs {
				if i != 0 {
					continue
				}
				now := time.Now()
				amu.Lock()
				for _, t := range r.Points.T {
					arrived[t] = now
				}
				amu.Unlock()
			}
		}()
	}
	if len(subs) > 0 {
		deadline := time.Now().Add(30 * time.Second)
		for lc.Nodes[2].Watch().Subscriptions() < open0+len(subs) {
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d subscriptions open after 30s", lc.Nodes[2].Watch().Subscriptions()-open0, len(subs))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	acked := make(map[int64]time.Time, b.N)
	lat := make([]time.Duration, 0, b.N)
	tick := time.NewTicker(time.Second / 60)
	defer tick.Stop()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		<-tick.C
		t := time.Now().UnixNano()
		w := time.Now()
		if _, err := writer.Put(ctx, keys[i%len(keys)], series.Points{Type: series.Float, T: []int64{t}, F: []float64{float64(i)}}, wire.PutOptions{}); err != nil {
			b.Fatal(err)
		}
		acked[t] = time.Now()
		lat = append(lat, time.Since(w))
	}
	b.StopTimer()
	b.ReportMetric(float64(pct(lat, 0.5).Microseconds()), "write-p50-µs")
	b.ReportMetric(float64(pct(lat, 0.99).Microseconds()), "write-p99-µs")
	if len(subs) == 0 {
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	var deliv []time.Duration
	for {
		amu.Lock()
		deliv = deliv[:0]
		for t, a := range acked {
			if at, ok := arrived[t]; ok {
				deliv = append(deliv, max(0, at.Sub(a)))
			}
		}
		amu.Unlock()
		if len(deliv) == len(acked) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(deliv) < len(acked) {
		b.Errorf("%d of %d points reached the first subscriber", len(deliv), len(acked))
	}
	b.ReportMetric(float64(pct(deliv, 0.5).Microseconds()), "deliver-p50-µs")
	b.ReportMetric(float64(pct(deliv, 0.99).Microseconds()), "deliver-p99-µs")
	cancel()
	wg.Wait()
}

// pct returns the q-quantile of ds.
func pct(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}
