package coord

import (
	"context"
	"errors"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// HistoryMany reads the points of many series, each over its own range, as GetMany
// does, after narrowing each range to where its series' catalog entry says acknowledged
// points can be (searchRange, as Bounds and Latest narrow theirs). The entries of all
// the series are read in one request per registry replica, so a series with nothing in
// its range costs no read of points, and the others are read together: one request
// per node per page, not a Bounds and a Get per series. What a live subscription reads
// of a selection of many series when it opens (package watch).
//
// Only short ranges are read together: a series whose narrowed range spans
// historyManyQuanta quanta or more has its Err set (CodeTooLarge), so that what one
// call holds stays bounded (GetMany checks opt.MaxBytes once a series is read).
//
// A series the catalog does not hold (never written, or deleted) has no points and no
// error. A series whose entry was not read at read quorum, or whose read failed, has
// its Err set: the caller reads it alone (Bounds, Get). Exact for every point
// acknowledged before the call: the bounds and the newest quantum of an entry are
// widened at write quorum before such points are acknowledged.
func (c *Coordinator) HistoryMany(ctx context.Context, items []SeriesRange, opt wire.GetOptions) ([]ManyResult, error) {
	er, err := c.entryRanges(ctx, items, nil, nil, opt)
	if err != nil {
		return nil, err
	}
	out := make([]ManyResult, len(items))
	var ask []SeriesRange
	var at []int // ask[j] is items[at[j]]
	for i, it := range items {
		r := &er[i]
		out[i].Err, out[i].Points.Type = r.err, r.desc.Type
		q := r.desc.Q
		switch {
		case r.err != nil || r.lo >= r.hi:
		case (q.Start(r.hi-1)-q.Start(r.lo))/int64(q) >= historyManyQuanta:
			out[i].Err = rpc.Errorf(wire.CodeTooLarge, "history of %q: [%d, %d) spans more than %d quanta: read it alone, in parts",
				it.Key, r.lo, r.hi, historyManyQuanta)
		default:
			ask = append(ask, SeriesRange{Key: it.Key, From: r.lo, To: r.hi})
			at = append(at, i)
		}
	}
	if len(ask) == 0 {
		return out, nil
	}
	got, err := c.GetMany(ctx, ask, opt)
	if err != nil {
		return nil, err
	}
	for j, g := range got {
		switch {
		case isUnknown(g.Err): // deleted since its entry was read
			g = ManyResult{}
		case g.Err != nil:
			g.Points = series.Points{} // not held for a caller that reads it alone
		}
		g.Points.Type = out[at[j]].Points.Type
		out[at[j]] = g
	}
	return out, nil
}

// historyManyQuanta bounds the quanta of one series HistoryMany reads.
const historyManyQuanta = 16

// errNothing marks, in HistoryMany, a series its entry says holds nothing to read.
var errNothing = rpc.Errorf(wire.CodeUnknownSeries, "no points")

// isUnknown reports whether err says the series is not known.
func isUnknown(err error) bool {
	var re *rpc.RemoteError
	return errors.As(err, &re) && re.Code == wire.CodeUnknownSeries
}
