package main

import (
	"context"
	"sort"

	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/client"
	"github.com/tsdht/tsdht/web"
)

// pageCatalog adapts the cluster's series catalog to the page's picker (web.Catalog).
type pageCatalog struct{ c *client.Client }

func (p pageCatalog) Series(ctx context.Context, prefix string, match map[string]string) ([]web.SeriesInfo, error) {
	var tags []catalog.Tag
	for k, v := range match {
		tags = append(tags, catalog.Tag{K: k, V: v})
	}
	sort.Slice(tags, func(i, j int) bool { return tags[i].K < tags[j].K })
	entries, err := p.c.Series(ctx, tags, prefix)
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
