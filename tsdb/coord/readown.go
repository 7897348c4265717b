package coord

import (
	"context"
	"slices"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// GetOwn reads the points of a series with from <= t < to from this node's own
// replica alone, asking no other node: what a task that runs on a series' replica
// (an uplink's forwarder) reads instead of Get, without a round of requests and
// digests to every replica for each shard.
//
// ok is false, and the caller reads with Get, when this node is not a replica of
// every shard of the range (placement spreads a series' shards over the cluster) or
// the range spans more than one page of quanta. With ok true the answer is this
// replica's, a shard it does not hold taken as empty: it lacks any point written at
// its quorum without this replica (this node was down or slow and its hint is not
// replayed yet, or it is a new owner not filled yet). A caller that must see such
// points compares counts with Aggregate, which asks every replica, as the uplink's
// late check does.
func (c *Coordinator) GetOwn(ctx context.Context, key string, from, to int64) (res wire.Result, ok bool, err error) {
	l := c.replicas.Local()
	if l == nil {
		return wire.Result{}, false, nil
	}
	if _, err := c.checkGet(key, from, to, wire.GetOptions{}); err != nil {
		return wire.Result{}, false, err
	}
	desc, err := c.types.lookup(ctx, key)
	if err != nil {
		return wire.Result{}, false, err
	}
	cover, err := coverQuanta(desc.Q, from, to)
	if err != nil || cover.n > ReadPageQuanta {
		return wire.Result{}, false, nil // Get says what is wrong, or pages a long read
	}
	spans, err := c.planRead(ctx, nil, key, desc.Q, cover.page(0, cover.n), from, to)
	if err != nil {
		return wire.Result{}, false, err
	}
	self := c.place.Self().ID
	req := &wire.ReadReq{Shards: make([]wire.ShardRead, len(spans))}
	for i, s := range spans {
		if !slices.ContainsFunc(s.replicas, func(p dht.Peer) bool { return p.ID == self }) {
			return wire.Result{}, false, nil
		}
		req.Shards[i] = wire.ShardRead{ID: s.ref.ID[:], Start: s.ref.Start, Q: c.wireQ(s.ref.Q), Key: key, From: s.from, To: s.to}
	}
	resp, err := l.ReadInto(ctx, req, nil, nil)
	if err != nil {
		return wire.Result{}, false, err
	}
	// The replica's points are without what its own tombstones cover: with no other
	// answer to merge, they are the shard's points as this replica knows them.
	runs := make([]series.Points, 0, len(resp.Shards))
	for i := range resp.Shards {
		if pts := resp.Shards[i].Points; pts.Len() > 0 {
			runs = append(runs, pts)
		}
	}
	switch len(runs) {
	case 0:
		res.Points = series.Points{Type: desc.Type}
	case 1: // a read within one quantum: no copy
		res.Points = runs[0]
	default:
		res.Points = series.Concat(runs...)
	}
	return res, true, nil
}
