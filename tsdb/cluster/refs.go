package cluster

import (
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

func FromWireRanges(rs []wire.Range) []store.Range {
	var out []store.Range
	for _, r := range rs {
		if r.From < r.To {
			out = append(out, store.Range{From: r.From, To: r.To})
		}
	}
	return out
}

func ToWireRanges(rs []store.Range) []wire.Range {
	out := make([]wire.Range, len(rs))
	for i, r := range rs {
		out[i] = wire.Range{From: r.From, To: r.To}
	}
	return out
}

// ShardRef returns the store reference of a series' shard at quantum start.
func ShardRef(f quanta.Format, key string, start int64) store.ShardRef {
	return store.ShardRef{ID: quanta.ShardID(f, key, start), Start: start}
}
