package tsdb

import (
	"context"
	"time"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/rollup"
)

// RollupConfig configures rollups (Config.Rollups): see rollup.Config.
type RollupConfig = rollup.Config

// RollupStats counts a node's use of rollups: see rollup.Stats.
type RollupStats = rollup.Stats

// DefaultRollupConfig returns the defaults (rollups on) for quantum q.
func DefaultRollupConfig(q quanta.Quantum) RollupConfig { return rollup.DefaultConfig(q) }

// RollupNow runs one pull pass as a home: every series this node keeps rollups of up
// to the horizon, or 64 rounds of 8,640 quanta per series, whichever comes first (tests
// and benchmarks; a node runs a pass every Rollups.PullInterval anyway). It first waits
// for the quiet periods the homes promised coordinators to end (rollup.QuietPeriod at
// most), so that the pass pulls every series.
func (n *Node) RollupNow(ctx context.Context) error {
	if n.homes == nil {
		return nil
	}
	if d := time.Until(n.homes.QuietUntil()); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return n.homes.Pass(ctx)
}

// RollupStats returns the node's rollup counters, as a coordinator and as a home (zero
// when rollups are off).
func (n *Node) RollupStats() RollupStats {
	s := n.coord.RollupStats()
	if n.homes != nil {
		s = s.Plus(n.homes.Stats())
	}
	return s
}
