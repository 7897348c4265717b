package tsdb

import (
	"context"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
)

// Latest settles a live series' newest quanta from a read quorum of replicas that
// agree. A newer point held by two replicas of three — acknowledged at quorum (its
// quantum Newest at a quorum of registry replicas), the third copy not there yet — is the latest whichever coordinator asks, whichever two
// replicas it asks first: where those differ, it asks the third.
func TestLatestSettlesByQuorum(t *testing.T) {
	for _, f := range []quanta.Format{quanta.KFI, quanta.QFI} {
		t.Run(f.String(), func(t *testing.T) {
			lc := startCluster(t, 5, func(_ int, cfg *Config) { cfg.DHT.Format = f })
			key := "pmu/quorum"
			ctx := context.Background()
			now := time.Now().UnixNano()
			put1(t, lc.Nodes[0].Coordinator(), key, now-int64(2*time.Second), 1)
			for _, n := range lc.Nodes {
				wantLatest(t, n.Coordinator(), key, now-int64(2*time.Second), 1)
			}
			byID := map[string]*Node{}
			for _, n := range lc.Nodes {
				byID[n.DHT().Self().ID] = n
			}
			cfg := lc.Nodes[0].cfg
			for k, skip := range []int{0, 1, 2} { // the replica that lacks the point
				at := now - int64(time.Second) + int64(k)*int64(time.Millisecond)
				if k == 2 { // a quantum no coordinator's speculation expects
					at += 2 * cfg.DHT.Quantum.Duration().Nanoseconds()
				}
				ref := cluster.ShardRef(cfg.DHT.Format, key, cfg.DHT.Quantum.Start(at))
				reps := lc.Nodes[0].DHT().ReplicaSet(ref.ID, 3)
				var one series.Points
				one.AppendFloat(at, float64(10+k))
				// The write's registry part as a coordinator does it (bounds, Newest), its
				// points by hand at two replicas of three.
				c0 := lc.Nodes[0].Coordinator()
				if err := c0.noteWrite(ctx, key, catalog.Entry{Key: key, Type: series.Float}, at, at, 2); err != nil {
					t.Fatal(err)
				}
				if err := c0.reportNewest(ctx, key, at, 2); err != nil {
					t.Fatal(err)
				}
				for j, p := range reps {
					if j != skip {
						if err := byID[p.ID].Store().Append(ref, key, one); err != nil {
							t.Fatal(err)
						}
					}
				}
				for _, n := range lc.Nodes {
					wantLatest(t, n.Coordinator(), key, at, float64(10+k))
				}
			}
		})
	}
}
