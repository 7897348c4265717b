package main

import (
	"context"
	"sort"

	"github.com/xrash/smetrics"

	"github.com/tsdht/tsdht/tsdb/client"
)

// suggestSeries returns up to three catalog keys within a few edits of key (a typo):
// it lists the series sharing key's first half, and the whole catalog when none does
// (a typo near the start).
func suggestSeries(ctx context.Context, cl *client.Client, key string) []string {
	es, err := cl.Series(ctx, nil, key[:len(key)/2])
	if err == nil && len(es) == 0 && len(key) > 1 {
		es, err = cl.Series(ctx, nil, "")
	}
	if err != nil {
		return nil
	}
	limit := max(2, len(key)/5)
	type cand struct {
		key string
		d   int
	}
	var cs []cand
	for _, e := range es {
		if d := smetrics.WagnerFischer(key, e.Key, 1, 1, 1); d <= limit && e.Key != key {
			cs = append(cs, cand{e.Key, d})
		}
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].d < cs[j].d })
	var out []string
	for i := 0; i < len(cs) && i < 3; i++ {
		out = append(out, cs[i].key)
	}
	return out
}
