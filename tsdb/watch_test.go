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

// TestWatchLingerExact: a subscriber at node 2 whose client asks for a linger
// (client.Config.WatchLinger) gets every point written through node 0 in quick
// succession once, in order, after the history; a late point flagged; a duplicate
// dropped.
func TestWatchLingerExact(t *testing.T) {
	lc := startCluster(t, 3, func(_ int, cfg *Config) { cfg.RF = 3 })
	w, err := client.New([]string{lc.Nodes[0].RPCAddr()}, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	put := func(ts int64) {
		t.Helper()
		if _, err := w.Put(context.Background(), "l/a", series.Points{Type: series.Float, T: []int64{ts}, F: []float64{float64(ts)}}, wire.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Now().UnixNano()
	put(t0)
	r, err := client.New([]string{lc.Nodes[2].RPCAddr()}, client.Config{WatchLinger: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runs, sub := r.Subscribe(ctx, client.Selector{Series: "l/a"}, t0)
	type got struct {
		t    int64
		late bool
	}
	var all []got
	want := func(n int) {
		t.Helper()
		for len(all) < n {
			select {
			case run, ok := <-runs:
				if !ok {
					t.Fatalf("subscription ended: %v (got %v)", sub.Err(), all)
				}
				for _, x := range run.Points.T {
					all = append(all, got{x, run.Late})
				}
			case <-ctx.Done():
				t.Fatalf("got %d points %v, want %d", len(all), all, n)
			}
		}
	}
	want(1) // the history
	const n = 100
	for i := 1; i <= n; i++ {
		put(t0 + int64(i)*10)
	}
	put(t0 + 505)  // late
	put(t0 + n*10) // a duplicate of the last
	put(t0 + n*10 + 10)
	want(n + 3)
	exp := []got{{t0, false}}
	for i := 1; i <= n; i++ {
		exp = append(exp, got{t0 + int64(i)*10, false})
	}
	exp = append(exp, got{t0 + 505, true}, got{t0 + n*10 + 10, false})
	if fmt.Sprint(all) != fmt.Sprint(exp) {
		t.Fatalf("got %v\nwant %v", all, exp)
	}
}
