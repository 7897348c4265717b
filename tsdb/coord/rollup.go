package coord

import (
	"context"
	"math"
	"time"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/cluster"
	"github.com/tsdht/tsdht/tsdb/rollup"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// The coordinator's side of rollups (package rollup owns both sides; docs/rollups.md):
// late writes and deletes mark their windows at the series' homes, and Aggregate asks
// the homes for the windows they agree on (rollup.Client). The home side
// (rollup.Homes) reads the cluster through rollupSource.

// homes returns the rollup homes of a series: its registry replicas.
func (c *Coordinator) Homes(ctx context.Context, key string) ([]dht.Peer, error) {
	peers, err := c.place.Locate(ctx, quanta.KeyID(key), c.cfg.RF)
	if err != nil {
		return nil, rpc.Errorf(wire.CodeUnavailable, "series %q: no rollup home: %v", key, err)
	}
	return peers, nil
}

// markLate marks at the series' homes the finest windows of pts (sorted) old enough
// that a home may have pulled them, once the points reached their replicas. It fails
// when fewer than a write quorum of homes acknowledged; the points are stored then,
// and a retry of the write marks them again.
func (c *Coordinator) markLate(ctx context.Context, key string, pts *series.Points) error {
	if c.rollup == nil || pts.Len() == 0 {
		return nil
	}
	req := c.rollup.LateMarks(key, pts, time.Now())
	if req == nil {
		return nil
	}
	return c.markHomes(ctx, key, req)
}

// keepsRollups reports whether the homes may hold rollups of the series: not when it
// has quanta of its own (its aggregates never ask the homes, rollupAggregate), so that
// a bulk load of such series does not send every batch of every series to the homes.
// A series whose description is not cached is marked, as before.
func (c *Coordinator) keepsRollups(key string) bool {
	d, ok := c.types.cached(key)
	return !ok || d.Q == c.cfg.Quantum
}

// markDeleted marks a deleted range (or, whole, the series) at the series' homes.
func (c *Coordinator) markDeleted(ctx context.Context, key string, from, to int64, whole bool) error {
	if c.rollup == nil {
		return nil
	}
	if whole {
		from, to = math.MinInt64, math.MaxInt64
	}
	return c.markHomes(ctx, key, &wire.RollupMarkReq{Key: key, From: from, To: to, Reset: whole})
}

func (c *Coordinator) markHomes(ctx context.Context, key string, req *wire.RollupMarkReq) error {
	homes, err := c.Homes(ctx, key)
	if err != nil {
		return err
	}
	return c.rollup.Mark(ctx, homes, req, c.cfg.WriteQuorum)
}

// rollupAggregate answers an aggregate from the rollup homes where they agree, and
// from the raw shards (aggregate) elsewhere (rollup.Client.Aggregate). handled is
// false when rollups cannot help (off, no level divides every, or no whole window of
// a level older than the horizon): the caller aggregates the raw shards then.
func (c *Coordinator) rollupAggregate(ctx context.Context, key string, from, to, every int64, opt wire.GetOptions) (res wire.AggResult, handled bool, err error) {
	if c.rollup == nil {
		return res, false, nil
	}
	plan, ok := c.rollup.Plan(from, to, every, time.Now())
	if !ok {
		return res, false, nil
	}
	rq, err := c.checkGet(key, from, to, opt)
	if err != nil {
		return res, true, err
	}
	if err := agg.CheckWidth(every); err != nil {
		return res, true, rpc.Errorf(wire.CodeBadInput, "%v", err)
	}
	desc, err := c.types.lookup(ctx, key)
	if err != nil {
		return res, true, err
	}
	if desc.Q != c.cfg.Quantum {
		// Rollup cells are made of whole quanta of the cluster's length; a series with
		// quanta of its own has none (its replicas answer windows from few, long pairs).
		return res, false, nil
	}
	homes, err := c.Homes(ctx, key)
	if err != nil {
		return res, true, err
	}
	res, err = c.rollup.Aggregate(ctx, key, homes, plan, rq, func(lo, hi int64) (wire.AggResult, error) {
		return c.aggregate(ctx, key, lo, hi, every, opt, false)
	})
	if err != nil {
		return wire.AggResult{}, true, err
	}
	res.Type = desc.Type
	if len(res.Windows) > MaxAggWindows {
		return wire.AggResult{}, true, rpc.Errorf(wire.CodeTooLarge, "aggregate of %q: %d windows, at most %d per request: ask for a shorter range or wider windows",
			key, len(res.Windows), MaxAggWindows)
	}
	return res, true, nil
}

// rollupSource is what the rollup homes read of the cluster (rollup.Source), through
// this node's coordinator.
type rollupSource struct{ c *Coordinator }

func (s rollupSource) Homes(ctx context.Context, key string) ([]dht.Peer, error) {
	return s.c.Homes(ctx, key)
}

func (s rollupSource) Entry(ctx context.Context, key string) (catalog.Entry, error) {
	return s.c.Entry(ctx, key)
}

// maxPullShardsPerRequest bounds the shards of one request to a replica. A
// whole-quantum answer is one window (about 100 bytes), so a request stays well
// inside a frame.
const maxPullShardsPerRequest = 1024

// QuantumStats asks every replica of each quantum for its whole-quantum statistics
// (MethodAgg, the digests replicas compare), at most maxPullShardsPerRequest shards
// per request.
func (s rollupSource) QuantumStats(ctx context.Context, key string, starts []int64) ([][]rollup.Answer, error) {
	c := s.c
	desc, err := c.types.lookup(ctx, key)
	if err != nil {
		return nil, err
	}
	if desc.Q != c.cfg.Quantum {
		return nil, rpc.Errorf(wire.CodeBadInput, "series %q has quanta of %v, not the cluster's: it keeps no rollups", key, desc.Q.Duration())
	}
	qn := c.cfg.Quantum.Duration().Nanoseconds()
	spans, err := c.planRead(ctx, nil, key, c.cfg.Quantum, starts, math.MinInt64, math.MaxInt64)
	if err != nil {
		return nil, err
	}
	type item struct{ shard, replica int }
	answers := make([][]rollup.Answer, len(spans))
	batches := cluster.GroupByPeer(func(yield func(dht.Peer, item) bool) {
		for i := range spans {
			answers[i] = make([]rollup.Answer, len(spans[i].replicas))
			for j, p := range spans[i].replicas {
				if !yield(p, item{i, j}) {
					return
				}
			}
		}
	}, maxPullShardsPerRequest, nil)
	results := cluster.FanOut(ctx, batches, c.cfg.ReadConcurrency, c.cfg.CallTimeout,
		func(ctx context.Context, b *cluster.PeerBatch[item]) (*wire.AggResp, error) {
			req := &wire.AggReq{Every: qn, Shards: make([]wire.ShardAgg, len(b.Items))}
			for k, it := range b.Items {
				s := &spans[it.shard]
				req.Shards[k] = wire.ShardAgg{ID: s.ref.ID[:], Start: s.ref.Start, Key: key, From: s.from, To: s.to}
			}
			return c.replicas.For(b.Peer).Agg(ctx, req)
		})
	for range batches {
		res := <-results
		if res.Err != nil {
			continue // that replica did not answer: its quanta may stay unsettled
		}
		for k, it := range res.Batch.Items {
			answers[it.shard][it.replica] = rollup.Answer{OK: true, Res: res.Resp.Shards[k]}
		}
	}
	return answers, nil
}
