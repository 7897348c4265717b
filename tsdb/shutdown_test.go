package tsdb

import (
	"testing"
	"time"
)

// TestEveryStopEndsBackgroundWork: Close, Leave and Kill all stop the node's
// background work (its rollup pulls among it), so that none of it calls out on a
// closed network or a closed store.
func TestEveryStopEndsBackgroundWork(t *testing.T) {
	for _, stop := range []struct {
		name string
		do   func(*Node) error
	}{
		{"Close", (*Node).Close},
		{"Leave", (*Node).Leave},
		{"Kill", (*Node).Kill},
	} {
		t.Run(stop.name, func(t *testing.T) {
			lc := rollupCluster(t, 1, 0)
			n := lc.Nodes[0]
			done := n.rollup.done
			if err := stop.do(n); err != nil {
				t.Fatal(err)
			}
			lc.Nodes[0] = nil
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("%s returned with the rollup loop still running", stop.name)
			}
		})
	}
}
