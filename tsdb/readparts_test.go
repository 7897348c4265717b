package tsdb

import (
	"context"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// forwardable forwards a shard's packed answer only when there is nothing to merge,
// drop or repair, in a form the asker decodes.
func TestForwardableOnlyWhenNothingToMerge(t *testing.T) {
	pts := float32Readings(0, 600)
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

// A thin client's read gets the shards' packed runs (GetReq.Parts) in time order,
// one per quantum holding points, and the same points as a read without them; where a
// replica holds a point the others lack, the coordinator merges that shard and the
// point is in the answer.
func TestGetPartsMatchPoints(t *testing.T) {
	lc := startCluster(t, 4, nil)
	ctx := context.Background()
	q := quanta.Quantum(10)
	t0 := q.BeginNanos(q.Start(base()))
	pts := float32Readings(t0, 600*6) // six whole quanta
	if _, err := lc.Nodes[0].Coordinator().Put(ctx, "s", pts, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	to := pts.T[pts.Len()-1] + 1
	cli := rpc.NewClient(rpc.NewTCPTransport(), rpc.Config{})
	defer cli.Close()
	reader := lc.Nodes[3]
	get := func(parts bool) wire.GetResp {
		t.Helper()
		var resp wire.GetResp
		req := &wire.GetReq{Key: "s", From: t0 + 1, To: to, Packed: true, PackedVersion: series.PackedVersion, Parts: parts}
		if err := rpc.Invoke(ctx, cli, reader.RPCAddr(), wire.MethodGet, req, &resp); err != nil {
			t.Fatal(err)
		}
		return resp
	}
	whole, parted := get(false), get(true)
	if len(whole.Parts) != 0 || len(whole.Packed) == 0 {
		t.Fatalf("a get without Parts answered %d parts, %d packed bytes; want the points packed in one", len(whole.Parts), len(whole.Packed))
	}
	if len(parted.Parts) != 6 {
		t.Fatalf("a get with Parts of six quanta answered %d parts", len(parted.Parts))
	}
	for i, b := range parted.Parts {
		p, err := series.DecodePacked(b)
		if err != nil {
			t.Fatal(err)
		}
		lo := max(t0+1, q.BeginNanos(q.Start(t0)+int64(i)*int64(q)))
		requireSame(t, pts.Trim(lo, q.EndNanos(q.Start(t0)+int64(i)*int64(q))), p)
	}
	if err := whole.Unpack(); err != nil {
		t.Fatal(err)
	}
	if err := parted.Unpack(); err != nil {
		t.Fatal(err)
	}
	requireSame(t, pts.Trim(t0+1, to), whole.Points)
	requireSame(t, whole.Points, parted.Points)

	// A point only the farthest replica of the third quantum holds.
	byID := map[string]*Node{}
	for _, n := range lc.Nodes {
		byID[n.DHT().Self().ID] = n
	}
	extra := q.BeginNanos(q.Start(t0)+2*int64(q)) + 5
	ref := cluster.ShardRef(reader.cfg.DHT.Format, "s", q.Start(extra))
	replicas := reader.DHT().ReplicaSet(ref.ID, 3)
	var one series.Points
	one.AppendFloat(extra, 42)
	if err := byID[replicas[2].ID].Store().Append(ref, "s", one); err != nil {
		t.Fatal(err)
	}
	c, err := NewClient([]string{reader.RPCAddr()}, DefaultClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := c.Get(cctx, "s", t0+1, to, GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	requireSame(t, series.Merge(pts.Trim(t0+1, to), one), res.Points)
}
