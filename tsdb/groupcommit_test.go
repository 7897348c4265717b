package tsdb

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// Many writers storing single points at once through one coordinator, over real TCP
// (their writes to a replica grouped when they meet): every point of every series is
// stored on every replica and read back.
func TestConcurrentSinglePointWrites(t *testing.T) {
	lc := startCluster(t, 3, func(_ int, cfg *Config) { cfg.RF, cfg.WriteQuorum = 3, 3 })
	c := lc.Nodes[0].Coordinator()
	const writers, points = 16, 25
	t0 := base()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("pmu/group%d", w)
			all := sixtyHz(t0, points)
			for i := range points {
				if _, err := c.Put(context.Background(), key, all.Slice(i, i+1), PutOptions{}); err != nil {
					errs <- fmt.Errorf("%s point %d: %w", key, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for w := range writers {
		key := fmt.Sprintf("pmu/group%d", w)
		for _, n := range lc.Nodes {
			res, err := n.Coordinator().Get(context.Background(), key, t0, t0+int64(time.Hour), GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			requireSame(t, sixtyHz(t0, points), res.Points)
		}
	}
}
