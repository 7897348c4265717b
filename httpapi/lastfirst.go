package httpapi

import "github.com/tsdht/tsdht/tsdb/agg"

// endsAnswer reports whether the windows of a statement's series can be EndsMany's
// (newest, or oldest when oldest is true): an aggregate with no GROUP BY time() whose
// every aggregate column is last() (first()), so that one window over the whole range
// is asked of each series and only its latest (earliest) point is used. Such a
// statement (last() of every host, first() of a fleet's trucks) then reads each
// series' newest (oldest) quantum holding a point, not its history.
func (p *selectPlan) endsAnswer() (oldest, ok bool) {
	if p.raw || p.transforms || p.lookBack || p.win.every != int64(wholeRange) || !p.win.aligned() {
		return false, false
	}
	var fn agg.Fn
	for _, c := range p.cols {
		switch {
		case c.tag:
			continue // a tag's value
		case c.fn != agg.First && c.fn != agg.Last || fn != 0 && c.fn != fn:
			return false, false
		}
		fn = c.fn
	}
	return fn == agg.First, fn != 0
}
