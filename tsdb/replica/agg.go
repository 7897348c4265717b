package replica

import (
	"context"
	"fmt"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/cluster"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// Agg answers a replica's share of an aggregate from the local store.
func (l *Local) Agg(ctx context.Context, req *wire.AggReq) (*wire.AggResp, error) {
	if err := agg.CheckWidth(req.Every); err != nil {
		return nil, rpc.Errorf(wire.CodeBadInput, "%v", err)
	}
	refs := make([]store.ShardRef, len(req.Shards))
	var ids quanta.SeriesIDs // the IDs of the previous shard's series: shards of one series hash its key once
	idsKey := ""
	for i := range req.Shards {
		r := &req.Shards[i]
		if err := series.ValidateKey(r.Key); err != nil {
			return nil, rpc.Errorf(wire.CodeBadInput, "%v", err)
		}
		if i == 0 || r.Key != idsKey {
			ids, idsKey = quanta.NewSeriesIDs(l.format, r.Key), r.Key
		}
		refs[i] = store.ShardRef{ID: ids.At(r.Start), Start: r.Start, Q: l.quantumOf(r.Q)}
		if err := checkQuantum(refs[i].Q, r.Start); err != nil {
			return nil, rpc.Errorf(wire.CodeBadInput, "shard of series %q: %v", r.Key, err)
		}
		if len(r.ID) != quanta.IDLen || quanta.ID(r.ID) != refs[i].ID {
			return nil, rpc.Errorf(wire.CodeBadInput, "shard %x is not series %q at quantum %d", r.ID, r.Key, r.Start)
		}
	}
	return l.AggRefs(ctx, req.Every, req.Shards, refs, nil, nil)
}

// AggSeries answers a packed request (wire.MethodAggSeries): the shards' IDs are
// computed here from the series and their starts.
func (l *Local) AggSeries(ctx context.Context, req *wire.AggSeriesReq) (*wire.AggResp, error) {
	if err := agg.CheckWidth(req.Every); err != nil {
		return nil, rpc.Errorf(wire.CodeBadInput, "%v", err)
	}
	if err := series.ValidateKey(req.Key); err != nil {
		return nil, rpc.Errorf(wire.CodeBadInput, "%v", err)
	}
	shards, err := wire.DecodeAggSpans(req.Shards, req.Key)
	if err != nil {
		return nil, rpc.Errorf(wire.CodeBadInput, "%s: %v", wire.MethodAggSeries, err)
	}
	ids := quanta.NewSeriesIDs(l.format, req.Key)
	refs := make([]store.ShardRef, len(shards))
	q := l.quantumOf(req.Q)
	for i := range shards {
		if err := checkQuantum(q, shards[i].Start); err != nil {
			return nil, rpc.Errorf(wire.CodeBadInput, "%s of %q: %v", wire.MethodAggSeries, req.Key, err)
		}
		shards[i].Q = req.Q
		refs[i] = store.ShardRef{ID: ids.At(shards[i].Start), Start: shards[i].Start, Q: q}
	}
	return l.AggRefs(ctx, req.Every, shards, refs, nil, nil)
}

// ctxCheckEvery is how many shards an aggregate or a read reads between looks at whether its
// caller is still waiting.
const ctxCheckEvery = 16

// AggRefs implements Local: it answers shards, whose store references are refs
// (checked), with windows of width every (checked), in out when it has a result per
// shard (a long aggregate's page buffer: pagebufs.go), else in a new slice, and calls
// yield (when not nil) with the index of each shard once it has read it. The pairs'
// statistics, and the points of those whose windows cut their quantum, are read in one
// store pass (store.AggregateBatch), in the request's order: the coordinator asks for a
// replica's shards in the store's key order (store.ComparePairs).
func (l *Local) AggRefs(ctx context.Context, every int64, shards []wire.ShardAgg, refs []store.ShardRef, out []wire.ShardAggResult, yield func(i int)) (*wire.AggResp, error) {
	for i := range shards {
		if r := &shards[i]; r.From > r.To {
			return nil, rpc.Errorf(wire.CodeBadInput, "aggregate of %q: from %d is after to %d", r.Key, r.From, r.To)
		}
	}
	if len(out) != len(shards) {
		out = make([]wire.ShardAggResult, len(shards))
	}
	clear(out)
	resp := &wire.AggResp{Shards: out}
	// Every pair's statistics, and the points of those whose windows cut their quantum,
	// in one store pass.
	aggs := make([]store.PairAgg, len(shards))
	for i := range shards {
		r := &shards[i]
		aggs[i] = store.PairAgg{Ref: refs[i], Key: r.Key}
		begin, end := refs[i].Q.BeginNanos(r.Start), refs[i].Q.EndNanos(r.Start)
		if !r.Digest && !store.WholeQuantum(begin, end, r.From, r.To, every) {
			aggs[i].From, aggs[i].To, aggs[i].Every = r.From, r.To, every
		}
	}
	// The windows answered by statistics, in one array as far as it goes: grown as
	// held shards come (most of a long aggregate's hold nothing), each answer keeps
	// the array it was made in.
	var whole []agg.Window
	err := store.AggregateBatch(l.store, aggs, func(i int, st agg.Partial, held bool, ws []agg.Window) error {
		if yield != nil {
			yield(i) // a long read's page lets small requests in (longread.go)
		}
		if i%ctxCheckEvery == ctxCheckEvery-1 && ctx.Err() != nil {
			// The caller gave up (cancelled, or past its deadline): stop reading for it.
			return fmt.Errorf("aggregate stopped after %d of %d shards: %w", i+1, len(shards), ctx.Err())
		}
		r, res := &shards[i], &resp.Shards[i]
		res.Held, res.Count, res.Hash, res.Type = held, st.Count, cluster.StatsDigest(st.Count, st.Hash), st.Type
		switch {
		case r.Digest || !held:
		case aggs[i].Every == 0: // the statistics in hand answer
			begin := refs[i].Q.BeginNanos(r.Start)
			st.Hash = 0
			whole = append(whole, agg.Window{Start: agg.WindowStart(begin, every), Partial: st})
			res.Windows = whole[len(whole)-1 : len(whole) : len(whole)]
		default:
			res.Windows = ws
		}
		return nil
	})
	if err != nil {
		return nil, storeError(err)
	}
	return resp, nil
}

// LatestPart implements Replica from this node's catalog and store.
func (l *Local) LatestPart(ctx context.Context, key string, entry bool, every int64, shards []wire.ShardAgg) (cluster.LatestAnswer, error) {
	return cluster.LatestInParts(ctx, l, key, entry, every, shards)
}

// latestPart answers wire.MethodLatestPart from the local store and catalog.
func (l *Local) latestPart(ctx context.Context, req *wire.LatestPartReq) (*wire.LatestPartResp, error) {
	resp := &wire.LatestPartResp{}
	if req.Entry {
		es, err := l.Entries(ctx, []string{req.Key})
		if err != nil {
			return nil, err
		}
		for i := range es {
			if es[i].Key == req.Key {
				resp.Entry = es[i].Encode(nil)
			}
		}
	}
	shards, err := l.AggSeries(ctx, &wire.AggSeriesReq{Key: req.Key, Every: req.Every, Shards: req.Shards, Q: req.Q})
	if err != nil {
		return nil, err
	}
	resp.Shards = wire.AppendAggResults(nil, shards.Shards)
	return resp, nil
}
