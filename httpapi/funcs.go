package httpapi

import (
	"fmt"
	"sort"
	"time"

	"github.com/influxdata/influxql"

	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
)

// mode() and integral(): aggregates of a window's points that no partial answers,
// computed here from the points of one series with InfluxDB 1.x's rules (its
// query/functions.go): mode is the most frequent value, ties going as InfluxDB's
// unstable sort by value leaves them; integral sums trapezoids between successive
// points (answered without GROUP BY time() only: InfluxDB answers a group's last window
// of it as a series of its own).

// specialColumn fills col for mode(field) or integral(field[, unit]).
func specialColumn(e *influxql.Call, col *column) error {
	most := 1
	if e.Name == "integral" {
		most = 2
	}
	if len(e.Args) < 1 || len(e.Args) > most {
		return fmt.Errorf("invalid number of arguments for %s, expected at least 1 but no more than %d, got %d", e.Name, most, len(e.Args))
	}
	ref, ok := e.Args[0].(*influxql.VarRef)
	if !ok {
		return unsupported("%s() of %s (the argument must be a field)", e.Name, e.Args[0])
	}
	col.field, col.special, col.unit = ref.Val, e.Name, int64(time.Second)
	if len(e.Args) == 2 {
		d, ok := e.Args[1].(*influxql.DurationLiteral)
		if !ok {
			return fmt.Errorf("second argument must be a duration")
		}
		if d.Val <= 0 {
			return fmt.Errorf("duration argument must be positive, got %s", d)
		}
		col.unit = int64(d.Val)
	}
	return nil
}

// special returns mode's or integral's value for each window ws of the points.
func (ex *executor) special(c column, pts *series.Points, ws []agg.Window) []any {
	var in []valueAt
	for i, t := range pts.T {
		if t >= ex.p.from && t < ex.p.to {
			in = append(in, valueAt{value(pts, i), t})
		}
	}
	out := make([]any, len(ws))
	if c.special == "integral" { // one window: no GROUP BY time()
		if len(ws) == 1 {
			out[0] = integral(in, c.unit)
		}
		return out
	}
	at := 0
	for i, w := range ws {
		n := int(w.Count)
		m := modeOf(append([]valueAt(nil), in[at:at+n]...))
		at += n
		if pts.Type == series.Int {
			out[i] = int64(m)
		} else {
			out[i] = m
		}
	}
	return out
}

// byValue sorts points by value alone, as InfluxDB's floatPointsByValue.
type byValue []valueAt

func (a byValue) Len() int           { return len(a) }
func (a byValue) Less(i, j int) bool { return a[i].v < a[j].v }
func (a byValue) Swap(i, j int)      { a[i], a[j] = a[j], a[i] }

// modeOf returns the mode of a window's points, given in time order.
func modeOf(a []valueAt) float64 {
	if len(a) == 1 {
		return a[0].v
	}
	sort.Sort(byValue(a)) // not stable: InfluxDB's order of equal values
	mostFreq, currFreq := 0, 0
	currMode, mostMode := a[0].v, a[0].v
	currTime, mostTime := a[0].t, a[0].t
	for _, p := range a {
		if p.v != currMode {
			currFreq, currMode, currTime = 1, p.v, p.t
			continue
		}
		currFreq++
		if mostFreq > currFreq || (mostFreq == currFreq && currTime > mostTime) {
			continue
		}
		mostFreq, mostMode, mostTime = currFreq, p.v, p.t
	}
	return mostMode
}

// integral returns the area under the points, given in time order, by the trapezoid
// rule, in value × unit.
func integral(pts []valueAt, unit int64) float64 {
	sum := 0.0
	for i := 1; i < len(pts); i++ {
		if pts[i].t != pts[i-1].t {
			sum += 0.5 * (pts[i].v + pts[i-1].v) * (float64(pts[i].t-pts[i-1].t) / float64(unit))
		}
	}
	return sum
}
