package main

import (
	"context"
	"sort"

	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/wire"
	"github.com/tsdht/tsdht/web"
)

// nodePage is the page's view of the cluster (web.Backend, web.Aggregator and
// web.Catalog) through the node that serves it, in process: nothing goes over RPC to
// the node itself.
type nodePage struct{ n *tsdb.Node }

func (p nodePage) Status(ctx context.Context) ([]wire.NodeStats, error) { return p.n.Status(ctx), nil }

func (p nodePage) Get(ctx context.Context, key string, from, to int64, opt wire.GetOptions) (wire.Result, error) {
	return p.n.Coordinator().Get(ctx, key, from, to, opt)
}

// AggWindows asks the coordinator for [from, to) in pages that end on window
// boundaries (agg.PageEnd), each within one answer's windows.
func (p nodePage) AggWindows(ctx context.Context, key string, from, to, every int64, opt wire.GetOptions,
	fn func(wire.AggResult) error, progress func(done, total int64)) error {
	if err := agg.CheckWidth(every); err != nil {
		return err
	}
	for lo := from; lo < to; {
		hi := agg.PageEnd(lo, to, every, wire.MaxAggWindows)
		res, err := p.n.Coordinator().Aggregate(ctx, key, lo, hi, every, opt)
		if err != nil {
			return err
		}
		if err := fn(res); err != nil {
			return err
		}
		if progress != nil {
			progress(hi-from, to-from)
		}
		lo = hi
	}
	return nil
}

func (p nodePage) Series(ctx context.Context, prefix string, match map[string]string) ([]web.SeriesInfo, error) {
	var tags []catalog.Tag
	for k, v := range match {
		tags = append(tags, catalog.Tag{K: k, V: v})
	}
	sort.Slice(tags, func(i, j int) bool { return tags[i].K < tags[j].K })
	entries, err := p.n.Coordinator().Series(ctx, catalog.Query{Match: tags, Prefix: prefix})
	if err != nil {
		return nil, err
	}
	out := make([]web.SeriesInfo, 0, len(entries))
	for _, e := range entries {
		info := web.SeriesInfo{Key: e.Key, Type: e.Type.String(), Unit: e.Unit, Description: e.Description, NominalRate: e.NominalRate}
		if len(e.Tags) > 0 {
			info.Tags = make(map[string]string, len(e.Tags))
			for _, t := range e.Tags {
				info.Tags[t.K] = t.V
			}
		}
		if e.HasBounds {
			info.First, info.Last = e.First, e.Last
		}
		out = append(out, info)
	}
	return out, nil
}
