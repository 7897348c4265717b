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
// at the end the order starts from; the groups with fewer than OFFSET+LIMIT rows in it
// (a WHERE condition on fields may drop rows too) are tried again over a window 16
// times as wide, until the whole range was read; a group with its rows is not read
// again. Every group's rows come from one try, so the answer is what reading the
// whole range gives.
func (h *Handler) execLimited(ctx context.Context, qc *queryCost, p *selectPlan) ([]*row, error) {
	span := p.to - p.from
	w := max(span/limitFirstWindows, 1)
	rows := make([]*row, len(p.groups)) // by group
	pending := make([]int, len(p.groups))
	for i := range pending {
		pending[i] = i
	}
	for len(pending) > 0 {
		try := *p
		try.groups = make([]group, len(pending))
		for j, gi := range pending {
			try.groups[j] = p.groups[gi]
		}
		if w < span {
			if p.desc {
				try.from = p.to - w
			} else {
				try.to = p.from + w
			}
		}
		got, err := h.execGroups(ctx, qc, &try)
		if err != nil {
			return nil, err
		}
		left := pending[:0]
		for j, gi := range pending {
			rows[gi] = got[j]
			if w < span && (got[j] == nil || got[j].len() < p.limit) {
				left = append(left, gi) // execGroups cut the row to limit: short means incomplete
			}
		}
		pending = left
		if w > span/16 {
			w = span
		} else {
			w *= 16
		}
	}
	return p.answer(rows), nil
}
