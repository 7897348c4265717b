package coord

import (
	"testing"

	"github.com/tsdht/tsdht/tsdb/cluster/clustertest"

	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// forwardable forwards a shard's packed answer only when there is nothing to merge,
// drop or repair, in a form the asker decodes.
func TestForwardableOnlyWhenNothingToMerge(t *testing.T) {
	pts := clustertest.Float32Readings(0, 600)
	v2 := series.AppendPackedFor(nil, &pts, 2)
	data := func() replicaAnswer {
		return replicaAnswer{asked: true, ok: true, isData: true,
			res: wire.ShardResult{Held: true, Count: pts.Len(), Hash: 7, Points: pts, Packed: v2}}
	}
	digest := func() replicaAnswer {
		return replicaAnswer{asked: true, ok: true, res: wire.ShardResult{Held: true, Count: pts.Len(), Hash: 7}}
	}
	cases := []struct {
		what string
		ans  func() []replicaAnswer
		v    int
		want bool
	}{
		{"replicas agree", func() []replicaAnswer { return []replicaAnswer{data(), digest(), digest()} }, 2, true},
		{"one replica failed", func() []replicaAnswer { return []replicaAnswer{data(), digest(), {asked: true}} }, 2, true},
		{"asker decodes version 1 only", func() []replicaAnswer { return []replicaAnswer{data(), digest()} }, 1, false},
		{"a digest differs", func() []replicaAnswer {
			d := digest()
			d.res.Hash = 8
			return []replicaAnswer{data(), d}
		}, 2, false},
		{"a replica holds nothing yet", func() []replicaAnswer {
			return []replicaAnswer{data(), {asked: true, ok: true, res: wire.ShardResult{Held: false}}}
		}, 2, false},
		{"a tombstone", func() []replicaAnswer {
			d := digest()
			d.res.Deleted = []wire.Range{{From: 1, To: 2}}
			return []replicaAnswer{data(), d}
		}, 2, false},
		{"two replicas sent points", func() []replicaAnswer { return []replicaAnswer{data(), data()} }, 2, false},
		{"points not packed (this node's own)", func() []replicaAnswer {
			d := data()
			d.res.Packed = nil
			return []replicaAnswer{d, digest()}
		}, 2, false},
		{"decoded count differs from the count sent", func() []replicaAnswer {
			d := data()
			d.res.Points = pts.Slice(0, 10)
			return []replicaAnswer{d, digest()}
		}, 2, false},
		{"no replica sent points", func() []replicaAnswer { return []replicaAnswer{digest(), digest()} }, 2, false},
	}
	for _, c := range cases {
		p, n, ok := forwardable(c.ans(), c.v)
		if ok != c.want {
			t.Errorf("%s: forwardable = %v; want %v", c.what, ok, c.want)
		}
		if ok && (n != pts.Len() || &p[0] != &v2[0]) {
			t.Errorf("%s: forwarded %d points of other bytes than the replica's", c.what, n)
		}
	}
}
