package tsdb

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/client"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// TestWatchPrefixAcrossNodes: a prefix subscription at node 2 receives the history
// and the new points of every series under the prefix written through node 0, and a
// series created under it later.
func TestWatchPrefixAcrossNodes(t *testing.T) {
	lc := startCluster(t, 3, func(_ int, cfg *Config) { cfg.RF = 3 })
	w, err := client.New([]string{lc.Nodes[0].RPCAddr()}, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	put := func(key string, ts int64) {
		t.Helper()
		if _, err := w.Put(context.Background(), key, series.Points{Type: series.Float, T: []int64{ts}, F: []float64{float64(ts)}}, wire.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Now().UnixNano()
	for i := range 5 {
		put(fmt.Sprintf("p/%d", i), t0)
	}
	r, err := client.New([]string{lc.Nodes[2].RPCAddr()}, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runs, sub := r.Subscribe(ctx, client.Selector{Prefix: "p/"}, t0)
	got := map[string][]int64{}
	want := func(n int) {
		t.Helper()
		for total := 0; total < n; {
			select {
			case run, ok := <-runs:
				if !ok {
					t.Fatalf("subscription ended: %v (got %v)", sub.Err(), got)
				}
				got[run.Key] = append(got[run.Key], run.Points.T...)
				total += run.Points.Len()
			case <-ctx.Done():
				t.Fatalf("got %v, want %d points", got, n)
			}
		}
	}
	want(5)
	for i := range 5 {
		put(fmt.Sprintf("p/%d", i), t0+1)
	}
	want(5)
	put("p/new", t0+2) // found by the next re-selection
	want(1)
	for i := range 5 {
		if k := fmt.Sprintf("p/%d", i); len(got[k]) != 2 || got[k][0] != t0 || got[k][1] != t0+1 {
			t.Errorf("%s: got %v, want [%d %d]", k, got[k], t0, t0+1)
		}
	}
	if len(got["p/new"]) != 1 {
		t.Errorf("p/new: got %v", got["p/new"])
	}
}
