package tsdb

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/client"
	"github.com/tsdht/tsdht/tsdb/series"
)

// TestClientWaitsForNewSeriesBudget: through a node that takes 4 new series a second
// (a bucket 4 deep), the Go client's Put of 12 new series one after another stores every
// one: a put refused with slow_down goes again once the budget refilled, so a restore or
// an import goes at the node's rate instead of failing. It takes about two seconds.
func TestClientWaitsForNewSeriesBudget(t *testing.T) {
	lc, err := StartLocal(context.Background(), 1, "", func(_ int, cfg *Config) {
		cfg.RF, cfg.NewSeriesPerRequest, cfg.NewSeriesPerSecond = 1, 4, 4
	})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	cl, err := client.New([]string{lc.Nodes[0].RPCAddr()}, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	for i := range 12 {
		var p series.Points
		p.AppendFloat(time.Now().UnixNano(), float64(i))
		if n, err := cl.Put(ctx, fmt.Sprintf("budget/%d", i), p, PutOptions{}); err != nil || n != 1 {
			t.Fatalf("series %d: stored %d: %v", i, n, err)
		}
	}
	took := time.Since(start)
	t.Logf("12 new series at 4 a second: %v", took.Round(time.Millisecond))
	if took < 1500*time.Millisecond {
		t.Errorf("12 new series at 4 a second (4 at once) took %v: the budget did not hold", took)
	}
}
