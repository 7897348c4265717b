package httpapi

import (
	"math"
	"time"

	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
)

// windowing is how GROUP BY time(every, offset) and tz() cut time into windows, with
// InfluxDB 1.x's rules: windows are multiples of every since the epoch shifted by
// offset; with a time zone they are cut in local time (a day starts at local
// midnight), so across a daylight-saving change a window is shorter or longer by the
// change (a day of 23 or 25 hours), unless the change is as long as the window.
type windowing struct {
	every  int64          // ns, > 0
	offset int64          // ns, 0 ≤ offset < every
	loc    *time.Location // nil: UTC, no zone
}

// aligned reports whether the windows are multiples of every since the epoch: the
// windows the replicas' partial aggregates (Engine.Aggregate) are cut by.
func (w windowing) aligned() bool { return w.offset == 0 && w.loc == nil }

// zone returns the offset from UTC of the zone at t, in ns.
func (w windowing) zone(t int64) int64 {
	if w.loc == nil {
		return 0
	}
	_, off := time.Unix(0, t).In(w.loc).Zone()
	return int64(off) * 1e9
}

// window returns the window [start, end) holding t.
func (w windowing) window(t int64) (start, end int64) {
	t -= w.offset
	zone := w.zone(t)
	dt := (t + zone) % w.every
	if dt < 0 {
		dt += w.every
	}
	if t <= math.MinInt64+dt {
		start = math.MinInt64
	} else {
		start = t - dt
	}
	// The zone at the window's start may differ from t's (t is past a change in the
	// window): cut at the start's local midnight, unless the change is a window or more.
	if o := zone - w.zone(start); o != 0 && abs64(o) < w.every {
		start += o
	}
	if rest := w.every - dt; t >= math.MaxInt64-rest {
		end = math.MaxInt64
	} else {
		end = t + rest
	}
	if o := zone - w.zone(end); o != 0 && abs64(o) < w.every {
		// Time added at the end (clocks back) belongs to this window; time skipped at
		// the end (clocks forward) shortens it only when the change lies inside it.
		if o > 0 || w.zone(end+o) == w.zone(end) {
			end += o
		}
	}
	if start != math.MinInt64 {
		start += w.offset
	}
	if end != math.MaxInt64 {
		end += w.offset
	}
	return start, end
}

// rowTimes returns the times of the rows of GROUP BY time(): with fill(none) the
// starts of the windows holding points (data, ascending); else also the empty windows
// from the one holding from to the one holding to−1, walked as InfluxDB's fill() walks
// them — a step of every, corrected by the zone's change when one is crossed, each row
// of data taking the walk one step on — so that where a zone's change makes the walk
// miss a window's start, the rows are InfluxDB's too. At most max rows are returned.
func (w windowing) rowTimes(data []int64, from, to int64, fill bool, max int) []int64 {
	if !fill || from >= to {
		return data
	}
	t, _ := w.window(from)
	last, _ := w.window(to - 1)
	off := w.zone(t)
	done := false
	step := func() {
		if t > math.MaxInt64-w.every {
			done = true
			return
		}
		t += w.every
		if w.loc != nil {
			if z := w.zone(t - 1); z != off {
				if d := off - z; abs64(d) < w.every {
					t += d
				}
				off = z
			}
		}
	}
	var out []int64
	for _, d := range data {
		for !done && d > t && len(out) < max {
			out = append(out, t)
			step()
		}
		out = append(out, d)
		step()
	}
	for !done && t <= last && len(out) < max {
		out = append(out, t)
		step()
	}
	return out
}

// windows returns the non-empty windows of the points of p in [from, to), ascending; p
// is sorted with distinct times. Aligned windows are agg.Windows'.
func (w windowing) windows(p *series.Points, from, to int64) []agg.Window {
	if w.aligned() {
		return agg.Windows(p, from, to, w.every)
	}
	var out []agg.Window
	n := p.Len()
	i := 0
	for i < n && p.T[i] < from {
		i++
	}
	for i < n && p.T[i] < to {
		start, end := w.window(p.T[i])
		j := i + 1
		for j < n && p.T[j] < to && p.T[j] < end {
			j++
		}
		out = append(out, agg.Window{Start: start, Partial: agg.FromPoints(p, i, j)})
		i = j
	}
	return out
}

func abs64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}
