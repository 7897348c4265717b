package coord

import (
	"context"
	"errors"
	"time"

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
	if len(items) > MaxManySeries {
		return nil, rpc.Errorf(wire.CodeBadInput, "%d series in one read; at most %d: ask in parts", len(items), MaxManySeries)
	}
	r := c.cfg.ReadQuorum
	if opt.ReadQuorum != 0 {
		r = opt.ReadQuorum
	}
	keys := make([]string, len(items))
	for i, it := range items {
		keys[i] = it.Key
	}
	out := make([]ManyResult, len(items))
	entries, found, errs := c.readEntriesAt(ctx, keys, r)
	// The series the entries say may hold points in their ranges, and their quanta
	// (looked up as GetMany would, which then finds them cached).
	p := &manyPlan{descs: make([]Desc, len(items)), errs: make([]error, len(items))}
	for i, it := range items {
		e := &entries[i]
		switch {
		case errs[i] != nil:
			p.errs[i] = errs[i]
			out[i].Err = errs[i]
		case !found[i] || !e.Live() || !e.HasBounds || it.From >= it.To:
			p.errs[i] = errNothing // no points: nothing to look up
		}
	}
	c.lookupMany(ctx, items, p)
	now := time.Now().UnixNano()
	var ask []SeriesRange
	var at []int // ask[j] is items[at[j]]
	for i, it := range items {
		switch {
		case p.errs[i] == errNothing:
			continue
		case p.errs[i] != nil:
			if out[i].Err == nil && !isUnknown(p.errs[i]) {
				out[i].Err = p.errs[i]
			}
			continue
		}
		out[i].Points.Type = p.descs[i].Type
		q := p.descs[i].Q
		lo, _, hi := c.searchRange(entries[i], q, it.From, it.To, now)
		switch {
		case lo >= hi:
		case (q.Start(hi-1)-q.Start(lo))/int64(q) >= historyManyQuanta:
			out[i].Err = rpc.Errorf(wire.CodeTooLarge, "history of %q: [%d, %d) spans more than %d quanta: read it alone, in parts",
				it.Key, lo, hi, historyManyQuanta)
		default:
			ask = append(ask, SeriesRange{Key: it.Key, From: lo, To: hi})
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
