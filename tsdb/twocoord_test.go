package tsdb

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/series"
)

// TestOneSeriesThroughTwoCoordinators: two coordinators writing the same series at once,
// each a different stretch of old data (as two loader workers behind two HTTP nodes
// do), both succeed and every point is read back.
func TestOneSeriesThroughTwoCoordinators(t *testing.T) {
	lc := startCluster(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t0 := time.Date(2016, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	const nSeries, rounds, per = 20, 30, 10
	var wg sync.WaitGroup
	errs := make(chan error, 2*rounds*nSeries)
	for w := range 2 {
		c := lc.Nodes[w].Coordinator()
		wg.Go(func() {
			for r := range rounds {
				var puts []SeriesPut
				for s := range nSeries {
					var p series.Points
					for i := range per {
						// Worker w writes the even (w=0) or odd (w=1) stretches of 10 points.
						at := t0 + int64((2*r+w)*per+i)*int64(10*time.Second)
						p.AppendFloat(at, float64(i))
					}
					puts = append(puts, SeriesPut{Key: fmt.Sprintf("two/s%d", s), Points: p})
				}
				for i, res := range c.PutMany(ctx, puts, PutOptions{FitQuanta: true}) {
					if res.Err != nil {
						errs <- fmt.Errorf("worker %d round %d %s: %w", w, r, puts[i].Key, res.Err)
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for s := range nSeries {
		got, err := lc.Nodes[2].Coordinator().Get(ctx, fmt.Sprintf("two/s%d", s), t0, t0+int64(2*rounds*per)*int64(10*time.Second), GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Points.Len() != 2*rounds*per {
			t.Fatalf("two/s%d: %d points, want %d", s, got.Points.Len(), 2*rounds*per)
		}
	}
}
