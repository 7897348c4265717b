package httpapi

import (
	"context"
	"math"
	"time"

	"github.com/tsdht/tsdht/tsdb"
)

// EndsReader is an Engine that answers, for many series at once, the statistics of
// each series' newest (oldest) quantum holding a point in a range: what a LIMIT 1
// ordered by time needs of each (firstRows), read from the series' catalog entries
// (those its own Series listed them with, where it can) and one aggregate of one
// quantum per series, not of their whole history. An Engine without it answers those
// from AggregateMany over the whole range.
type EndsReader interface {
	// EndsMany returns, per series and in order, at most one window of width
	// wholeRange whose partial's LastT and Last (FirstT and First, when oldest) are
	// the series' latest (earliest) point in [from, to); the partial's other
	// statistics cover only part of the range. No window: no point there. A series is
	// its SeriesInfo as the engine's Series listed it, or one holding its Key alone.
	EndsMany(ctx context.Context, series []SeriesInfo, from, to int64, oldest bool) []AggregateResult
}

// EndsMany implements EndsReader with one coordinated EndsManyListed: the entries
// Series read are not read again.
func (e *NodeEngine) EndsMany(ctx context.Context, infos []SeriesInfo, from, to int64, oldest bool) []AggregateResult {
	out := make([]AggregateResult, len(infos))
	keys := make([]string, len(infos))
	listed := make([]tsdb.Listed, len(infos))
	for i, in := range infos {
		keys[i], listed[i] = in.Key, in.listed
	}
	rs, err := e.node.Coordinator().EndsManyListed(ctx, seriesRanges(keys, from, to), listed, oldest, tsdb.GetOptions{})
	for i, k := range keys {
		if err != nil {
			out[i].Err = err
			continue
		}
		out[i].Type, out[i].Windows, out[i].Err = aggAnswer(k, from, to, time.Duration(math.MaxInt64), rs[i].AggResult, rs[i].Err)
	}
	return out
}
