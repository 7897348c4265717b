package httpapi

import (
	"context"
	"errors"
	"time"

	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
)

// ManyReader is an Engine that reads or aggregates many series in one call. A SELECT
// over several series (GROUP BY "host" over 8 hosts, WHERE host = 'a' OR host = 'b',
// several fields) then costs each node one request per page of shards (coord.GetMany),
// not one per series. An Engine without it gets one Read or Aggregate per series.
type ManyReader interface {
	// ReadMany returns, per key and in order, what Read would of the key over
	// [from, to).
	ReadMany(ctx context.Context, keys []string, from, to int64) []ReadResult
	// ReadRanges returns, per item and in order, what Read would of the item's key over
	// the item's own range: a raw SELECT with LIMIT reads each group from where its
	// points start (limit.go).
	ReadRanges(ctx context.Context, items []KeyRange) []ReadResult
	// AggregateMany returns, per key and in order, what Aggregate would of the key
	// over [from, to) at windows of every.
	AggregateMany(ctx context.Context, keys []string, from, to int64, every time.Duration) []AggregateResult
}

// KeyRange is one series and the range [From, To) ReadRanges reads of it.
type KeyRange struct {
	Key      string
	From, To int64
}

// ReadResult is what ReadMany read of one series (as Read returns it).
type ReadResult struct {
	Pts series.Points
	Err error
}

// AggregateResult is what AggregateMany computed of one series (as Aggregate returns it).
type AggregateResult struct {
	Type    series.Type
	Windows []agg.Window
	Err     error
}

// ReadMany implements ManyReader with one coordinated GetMany.
func (e *NodeEngine) ReadMany(ctx context.Context, keys []string, from, to int64) []ReadResult {
	return e.readMany(ctx, seriesRanges(keys, from, to))
}

// ReadRanges implements ManyReader with one coordinated GetMany.
func (e *NodeEngine) ReadRanges(ctx context.Context, items []KeyRange) []ReadResult {
	rs := make([]tsdb.SeriesRange, len(items))
	for i, it := range items {
		rs[i] = tsdb.SeriesRange{Key: it.Key, From: it.From, To: it.To}
	}
	return e.readMany(ctx, rs)
}

func (e *NodeEngine) readMany(ctx context.Context, items []tsdb.SeriesRange) []ReadResult {
	rs, err := e.node.Coordinator().GetMany(ctx, items, tsdb.GetOptions{MaxBytes: e.maxReadBytes()})
	out := make([]ReadResult, len(items))
	for i, it := range items {
		if err != nil {
			out[i].Err = err
			continue
		}
		out[i].Pts, out[i].Err = e.readAnswer(it.Key, rs[i].Result, rs[i].Err)
	}
	return out
}

// AggregateMany implements ManyReader with one coordinated AggregateMany. A range of
// more windows than one answer holds is refused as Aggregate refuses it.
func (e *NodeEngine) AggregateMany(ctx context.Context, keys []string, from, to int64, every time.Duration) []AggregateResult {
	out := make([]AggregateResult, len(keys))
	if tooLarge := tooManyWindows("", from, to, every); tooLarge != nil {
		for i, k := range keys {
			tl := *tooLarge
			tl.Key = k
			out[i].Err = &tl
		}
		return out
	}
	rs, err := e.node.Coordinator().AggregateMany(ctx, seriesRanges(keys, from, to), int64(every), tsdb.GetOptions{})
	for i, k := range keys {
		if err != nil {
			out[i].Err = err
			continue
		}
		out[i].Type, out[i].Windows, out[i].Err = aggAnswer(k, from, to, every, rs[i].AggResult, rs[i].Err)
	}
	return out
}

func seriesRanges(keys []string, from, to int64) []tsdb.SeriesRange {
	items := make([]tsdb.SeriesRange, len(keys))
	for i, k := range keys {
		items[i] = tsdb.SeriesRange{Key: k, From: from, To: to}
	}
	return items
}

// prefetch reads at once, when the engine is a ManyReader, what the plan's groups will
// ask of more than one series: the windows of the columns answered by the replicas'
// partial aggregates (of series no field condition filters), the points of the others
// and of the condition's fields. Windows go into the executor's cache; points are held
// as read (prefetched) for readSeries, which filters and counts them as any read. A
// series it could not read (too large, a string series' aggregate, a failure) is left
// to the per-series path, which reads it again and says why.
func (ex *executor) prefetch() {
	mr, ok := ex.h.eng.(ManyReader)
	if !ok {
		return
	}
	var pointKeys, windowKeys []string
	seen := map[string]bool{}
	add := func(list *[]string, k string, kind string) {
		if _, given := ex.p.given[k]; given && kind == "p" {
			return // read already, as the plan says
		}
		if !seen[kind+k] {
			seen[kind+k] = true
			*list = append(*list, k)
		}
	}
	w := ex.p.where
	for _, g := range ex.p.groups {
		for i, c := range ex.p.cols {
			if c.tag || c.special != "" || i >= len(g.keys) {
				continue // a tag's values are the plan's; mode and integral read alone
			}
			for _, k := range g.keys[i] {
				if !ex.p.raw && c.fn.Mergeable() && ex.p.win.aligned() && !w.filters(k) {
					add(&windowKeys, k, "w")
					continue
				}
				add(&pointKeys, k, "p")
				if set := w.setOf(k); set != nil {
					for _, ck := range set.keys { // the condition's fields, read even when not selected
						add(&pointKeys, ck, "p")
					}
				}
			}
		}
	}
	var windows []AggregateResult
	er, ends := ex.h.eng.(EndsReader)
	oldest, endsOnly := ex.p.endsAnswer()
	switch {
	case ends && endsOnly && len(windowKeys) > 0:
		windows = er.EndsMany(ex.ctx, ex.p.infosOf(windowKeys), ex.p.from, ex.p.to, oldest) // lastfirst.go
	case len(windowKeys) > 1:
		windows = mr.AggregateMany(ex.ctx, windowKeys, ex.p.from, ex.p.to, time.Duration(ex.p.win.every))
	}
	for i, r := range windows {
		if r.Err != nil && !errors.Is(r.Err, ErrUnknownSeries) {
			continue
		}
		// Charged as the per-series path charges them (aggregateKey): the points
		// aggregated into them to the work budget, the windows to the query memory.
		// Past the memory, the rest is left to that path, which fails naming it.
		if ex.qc.windows(r.Windows) != nil {
			break
		}
		ex.windows[windowKeys[i]], ex.types[windowKeys[i]] = r.Windows, r.Type
	}
	if len(pointKeys) > 1 {
		ex.prefetchPoints(mr, pointKeys) // wherefirst.go
	}
}
