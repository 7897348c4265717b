package httpapi

import "context"

// limitFirstWindows is how many windows the first read of a raw SELECT with LIMIT
// divides its time range into: the read asks for the window at the end it starts from
// (the oldest for ORDER BY time, the newest for DESC), then for 16 times as much, and so
// on, until every group has its rows or the range is read whole.
const limitFirstWindows = 4096

// execLimited answers a raw SELECT with LIMIT (and OFFSET) without reading every point
// of its range: `SELECT … WHERE "name" = 'truck_35' ORDER BY time DESC LIMIT 1` over a
// series' whole history reads its newest window, not its history. A try reads a window
// at the end the order starts from; when some group has fewer than OFFSET+LIMIT rows
// in it (a WHERE condition on fields may drop rows too), the next try reads a window 16
// times as wide, until the whole range was read. Every group's rows come from one try,
// so the answer is what reading the whole range gives.
func (h *Handler) execLimited(ctx context.Context, qc *queryCost, p *selectPlan) ([]*row, error) {
	span := p.to - p.from
	w := max(span/limitFirstWindows, 1)
	for {
		try := *p
		if w < span {
			if p.desc {
				try.from = p.to - w
			} else {
				try.to = p.from + w
			}
		}
		rows, err := h.execPlan(ctx, qc, &try)
		if err != nil || w >= span || complete(rows, len(p.groups), p.limit) {
			return rows, err
		}
		if w > span/16 {
			w = span
		} else {
			w *= 16
		}
	}
}

// complete reports whether a try's rows answer every group in full: a row per group,
// each of limit values (execPlan drops a group with no row and cuts each to limit).
func complete(rows []*row, groups, limit int) bool {
	if len(rows) < groups {
		return false
	}
	for _, r := range rows {
		if r.len() < limit {
			return false
		}
	}
	return true
}
