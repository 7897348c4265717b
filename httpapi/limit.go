package httpapi

import (
	"context"
	"math"
	"slices"
)

// limitFirstWindows is how many windows the first read of a raw SELECT with LIMIT
// divides its time range into: the read asks for the window at the end it starts from
// (the oldest for ORDER BY time, the newest for DESC).
const limitFirstWindows = 4096

// limitTriesBeforeExtents is how many tries over the shared window, each 16 times as
// wide as the one before, come before the groups still short are bounded by their
// extents: a dense group found its rows by then at the cost of reading one or two
// quanta, where its extent costs the statistics of every quantum of the range.
const limitTriesBeforeExtents = 2

// execLimited answers a raw SELECT with LIMIT (and OFFSET) without reading every point
// of its range: `SELECT … WHERE "name" = 'truck_35' ORDER BY time DESC LIMIT 1` over a
// series' whole history reads its newest window, not its history.
//
// The first try reads a window at the end the order starts from, for every group, and
// the next one a window 16 times as wide for the groups with fewer than OFFSET+LIMIT
// rows in the first (a WHERE condition on fields may drop rows too). Those still short
// are then bounded by the replicas' partial aggregates of their series over
// the range, one request per node answered from each quantum's statistics (extents,
// limitspan.go): a group without points, or whose field condition none of its values
// can meet, has no rows and is not read again; each other group is read from its own
// first point (its last, for DESC) over a window sized for OFFSET+LIMIT of its points,
// 16 times as wide on each further try, until it has its rows or its points were read
// whole. A group with its rows is not read again. Every group's rows come from one try
// that read every point of the group up to its last row, so the answer is what reading
// the whole range gives.
func (h *Handler) execLimited(ctx context.Context, qc *queryCost, p *selectPlan) ([]*row, error) {
	span := p.to - p.from
	w := max(span/limitFirstWindows, 1)
	rows, done, err := h.firstRows(ctx, qc, p) // limitone.go
	if err != nil {
		return nil, err
	}
	if rows == nil {
		rows = make([]*row, len(p.groups)) // by group
	}
	pending := make([]int, 0, len(p.groups))
	for i := range p.groups {
		if done == nil || !done[i] {
			pending = append(pending, i)
		}
	}
	var ext []extent // by group, once asked
	tries := 0
	// With a condition on fields, a group's rows may lie far from the end the tries
	// start from: its extent is asked beside the first try, so that the groups that
	// try leaves short are read where their rows can be in the next round, not after
	// a second try and the extents one after another.
	var early <-chan aheadExtents
	if p.where != nil && len(pending) > 0 && w < span {
		actx, cancel := context.WithCancel(ctx)
		defer cancel()
		early = h.extentsAhead(actx, p, slices.Clone(pending))
	}
	for len(pending) > 0 {
		try := *p
		try.groups = make([]group, len(pending))
		for j, gi := range pending {
			try.groups[j] = p.groups[gi]
			if ext != nil && ext[gi].known {
				g := &try.groups[j]
				g.ranged = true
				g.from, g.to = ext[gi].window(p)
			}
		}
		tryWhole := ext != nil || w >= span // what the groups without their own range read
		if !tryWhole {
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
			if got[j] != nil && got[j].len() >= p.limit {
				continue // execGroups cut the row to limit: short means incomplete
			}
			g := try.groups[j]
			whole := tryWhole
			if g.ranged {
				whole = g.from <= ext[gi].first && g.to > ext[gi].last
			}
			if !whole {
				left = append(left, gi)
			}
		}
		pending = left
		if len(pending) == 0 {
			break
		}
		tries++
		if ext == nil && (early != nil || tries >= limitTriesBeforeExtents) && w < span {
			var err error
			if early != nil {
				a := <-early
				early, ext, err = nil, a.ext, chargeExtents(qc, a.held)
			} else {
				ext, err = h.extents(ctx, qc, p, pending)
			}
			if err != nil {
				return nil, err
			}
			if ext != nil {
				// Groups without a point their condition can keep have no rows.
				left := pending[:0]
				for _, gi := range pending {
					if !ext[gi].known || !ext[gi].empty() {
						left = append(left, gi)
					}
				}
				pending = left
				continue
			}
		}
		if ext != nil {
			for _, gi := range pending {
				ext[gi].widen()
			}
		}
		if w > span/16 {
			w = span
		} else {
			w *= 16
		}
	}
	return p.answer(rows), nil
}

// window is the range a try reads of the group whose extent e is: from its first point
// (ORDER BY time) or back from its last (DESC), e.width wide and at least to the end
// of the first window of statistics its rows may be in (back to the start of the
// last), within the plan's range.
func (e *extent) window(p *selectPlan) (from, to int64) {
	if p.desc {
		to = e.last + 1
		from = p.from
		if to-p.from > e.width {
			from = to - e.width
		}
		return max(p.from, min(from, e.lastFrom)), to
	}
	from, to = e.first, p.to
	if p.to-e.first > e.width {
		to = e.first + e.width
	}
	return from, min(p.to, max(to, e.firstTo))
}

// widen makes the group's next window 16 times as wide.
func (e *extent) widen() {
	if e.width > math.MaxInt64/16 {
		e.width = math.MaxInt64
		return
	}
	e.width *= 16
}

// aheadExtents is what extentsAhead gathered.
type aheadExtents struct {
	ext  []extent
	held int // windows of statistics, not yet charged
}

// extentsAhead gathers the extents of groups idx of p while the caller goes on; the
// answer arrives on the channel returned, which holds it until taken.
func (h *Handler) extentsAhead(ctx context.Context, p *selectPlan, idx []int) <-chan aheadExtents {
	out := make(chan aheadExtents, 1)
	go func() {
		ext, held := h.gatherExtents(ctx, p, idx)
		out <- aheadExtents{ext, held}
	}()
	return out
}
