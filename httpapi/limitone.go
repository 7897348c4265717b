package httpapi

import (
	"context"
	"errors"
	"math"

	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
)

// firstRows answers, where it can, the groups of a raw SELECT with LIMIT 1 and no
// condition on fields (TSBS' last-loc, single-last-loc, lastpoint shapes) from one
// partial per series: EndsMany's, of each series' newest quantum holding a point in
// the range (oldest, for ASC), where the engine is an EndsReader, else AggregateMany's
// of one window over the plan's range; either asks each node once for every series of
// the statement. Each series' partial names its earliest (latest, for DESC) point in
// the range and its value, which are all the group's first row needs. The row is at the earliest FirstT of the group's series (the latest LastT);
// the series with a point there are those whose FirstT (LastT) is that time, with
// their First (Last) value there; no other series has a point there. Those points
// are handed to execGroups as read over [t, t+1), so that the row is built, typed and
// projected as a read of the range builds it.
//
// It returns the rows by group and which groups it answered (nil rows: no points);
// the others (a string series, whose partials hold no values the replicas keep as
// points; a series that failed) are left to the tries. Where the plan is not of that
// shape, or the engine is no ManyReader, it answers none.
func (h *Handler) firstRows(ctx context.Context, qc *queryCost, p *selectPlan) (rows []*row, done []bool, err error) {
	mr, ok := h.eng.(ManyReader)
	if !ok || p.limit != 1 || p.offset != 0 || p.where != nil || !p.raw || p.transforms || p.lookBack {
		return nil, nil, nil
	}
	var keys []string
	seen := map[string]bool{}
	for _, g := range p.groups {
		for _, ks := range g.keys {
			for _, k := range ks {
				if !seen[k] {
					seen[k] = true
					keys = append(keys, k)
				}
			}
		}
	}
	if len(keys) == 0 {
		return nil, nil, nil
	}
	var ans []AggregateResult
	if er, ok := h.eng.(EndsReader); ok {
		ans = er.EndsMany(ctx, p.infosOf(keys), p.from, p.to, !p.desc)
	} else {
		ans = mr.AggregateMany(ctx, keys, p.from, p.to, wholeRange)
	}
	ends := make(map[string]agg.Partial, len(keys))
	for i, r := range ans {
		switch {
		case errors.Is(r.Err, ErrUnknownSeries):
			ends[keys[i]] = agg.Partial{} // no points: as readSeries reads it
		case r.Err == nil && len(r.Windows) == 0:
			ends[keys[i]] = agg.Partial{}
		case r.Err == nil && len(r.Windows) == 1 && r.Type != series.String:
			ends[keys[i]] = r.Windows[0].Partial
		}
		// Else the groups reading it go to the tries.
	}
	if err := chargeExtents(qc, len(ends)); err != nil {
		return nil, nil, err
	}
	rows = make([]*row, len(p.groups))
	done = make([]bool, len(p.groups))
	try := *p
	try.groups = nil
	try.given = map[string]series.Points{}
	var idx []int // groups of try, by index in p
	for gi, g := range p.groups {
		t, ok := g.firstTime(ends, p.desc)
		switch {
		case !ok:
			continue // to the tries
		case t == noPoint:
			done[gi] = true // no points in the range: no rows
			continue
		}
		for _, ks := range g.keys {
			for _, k := range ks {
				try.given[k] = pointAt(ends[k], t, p.desc)
			}
		}
		g.ranged, g.from, g.to = true, t, t+1
		try.groups = append(try.groups, g)
		idx = append(idx, gi)
	}
	if len(idx) == 0 {
		return rows, done, nil
	}
	got, err := h.execGroups(ctx, qc, &try)
	if err != nil {
		return nil, nil, err
	}
	for j, gi := range idx {
		rows[gi], done[gi] = got[j], got[j] != nil
	}
	return rows, done, nil
}

// noPoint is firstTime's time of a group without points.
const noPoint = math.MinInt64

// firstTime returns the time of a group's first row (its last, when desc) by its
// series' partials over the range, noPoint when none has a point; ok is false when
// some series' partial is missing.
func (g *group) firstTime(ends map[string]agg.Partial, desc bool) (t int64, ok bool) {
	t = noPoint
	for _, ks := range g.keys {
		for _, k := range ks {
			e, known := ends[k]
			if !known {
				return 0, false
			}
			switch {
			case e.Count == 0:
			case t == noPoint:
				t = e.FirstT
				if desc {
					t = e.LastT
				}
			case desc:
				t = max(t, e.LastT)
			default:
				t = min(t, e.FirstT)
			}
		}
	}
	return t, true
}

// pointAt returns the point a series whose partial over the range is e has at t, its
// first (last, when desc) or none.
func pointAt(e agg.Partial, t int64, desc bool) series.Points {
	at := e.FirstT
	if desc {
		at = e.LastT
	}
	if e.Count == 0 || at != t {
		return series.Points{}
	}
	pts := series.Points{Type: e.Type, T: []int64{t}}
	switch {
	case e.Type == series.Int && desc:
		pts.I = []int64{e.ILast}
	case e.Type == series.Int:
		pts.I = []int64{e.IFirst}
	case desc:
		pts.F = []float64{e.Last}
	default:
		pts.F = []float64{e.First}
	}
	return pts
}
