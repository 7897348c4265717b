package httpapi

import (
	"fmt"
	"math"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/influxdata/influxql"

	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
)

// A tag set's field condition is judged impossible only where no value between each
// compared field's minimum and maximum meets it; whatever it cannot judge may hold.
func TestCannotHold(t *testing.T) {
	w := &fieldCond{fields: map[string]influxql.DataType{"f": influxql.Unknown, "n": influxql.Unknown, "g": influxql.Unknown}}
	f := agg.Partial{Type: series.Float, Count: 3, Min: 1, Max: 10}
	n := agg.Partial{Type: series.Int, Count: 3, IMin: 5, IMax: 9}
	stats := map[string]agg.Partial{"kf": f, "kn": n}
	for _, c := range []struct {
		cond  string
		never bool
	}{
		{"f > 10", true},
		{"f >= 10", false},
		{"10 < f", true},
		{"10 <= f", false},
		{"f < 1", true},
		{"f <= 1", false},
		{"f = 11", true},
		{"f = 0.5", true},
		{"f = 5", false},
		{"f > 9.5", false},
		{"n > 9", true},
		{"n >= 9", false},
		{"n > 8.5", false},
		{"n < 5", true},
		{"f > 10 AND n < 7", true},
		{"n < 7 AND f > 10", true},
		{"f > 10 OR n > 9", true},
		{"f > 10 OR n > 8", false},
		{"(f > 10 OR n > 9) AND n = 6", true},
		{"g > 1", true},            // no series of g in the set: null at every point
		{"f != 3", false},          // not judged
		{"f > n", false},           // not a number
		{"f::integer > 10", false}, // a cast: not as stored
		{"f > 10 OR f != 3", false},
	} {
		expr, err := influxql.ParseExpr(c.cond)
		if err != nil {
			t.Fatal(err)
		}
		set := &condSet{cond: expr, keys: map[string]string{"f": "kf", "n": "kn"}}
		if got := w.cannotHold(set, stats); got != c.never {
			t.Errorf("%s over f in [1, 10] and n in [5, 9]: cannotHold %v, want %v", c.cond, got, c.never)
		}
	}
	set := &condSet{cond: influxql.MustParseExpr("f > 10"), keys: map[string]string{"f": "kf"}}
	if w.cannotHold(set, map[string]agg.Partial{}) {
		t.Error("a field whose statistics are unknown was judged")
	}
	if !w.cannotHold(set, map[string]agg.Partial{"kf": {}}) {
		t.Error("a field without points in the range may meet the condition")
	}
	if w.cannotHold(set, map[string]agg.Partial{"kf": {Type: series.Float, Count: 2, Min: math.NaN(), Max: 3}}) {
		t.Error("a NaN minimum was trusted")
	}
	below := &condSet{cond: influxql.MustParseExpr("f < 0"), keys: map[string]string{"f": "kf"}}
	if w.cannotHold(below, map[string]agg.Partial{"kf": {Type: series.Int, Count: 2, IMin: 1 << 60, IMax: 1<<60 + 1}}) {
		t.Error("integers past 2^53, which a float64 does not hold exactly, were judged")
	}
}

// A group's extent starts its window at its own first point (its last, for DESC),
// wide enough for OFFSET+LIMIT of its points were they evenly spread, and never
// reaches past the plan's range.
func TestExtentWindow(t *testing.T) {
	g := group{keys: [][]string{{"a"}, {"b"}}}
	win := func(start, n, first, last int64) agg.Window {
		return agg.Window{Start: start, Partial: agg.Partial{Type: series.Float, Count: n, FirstT: first, LastT: last}}
	}
	stats := map[string][]agg.Window{
		"a": {win(0, 6, 100, 900), win(1000, 4, 1000, 1000)},
		"b": {win(0, 4, 50, 900)},
	}
	e := g.extent(nil, stats, 1, 1000)
	if !e.known || e.points != 10 || e.first != 50 || e.last != 1000 || e.never {
		t.Fatalf("extent %+v", e)
	}
	p := &selectPlan{from: 0, to: 2000}
	if from, to := e.window(p); from != 50 || to != max(50+e.width, 1000) || e.width < 1 || e.firstTo != 1000 {
		t.Errorf("ascending window [%d, %d), width %d: want it from the first point to the first window's end at least", from, to, e.width)
	}
	p.desc = true
	if from, to := e.window(p); to != 1001 || from != 1001-e.width {
		t.Errorf("descending window [%d, %d), width %d", from, to, e.width)
	}
	e.width = math.MaxInt64 / 4
	e.widen()
	if e.width != math.MaxInt64 {
		t.Errorf("widen past the largest width: %d", e.width)
	}
	if from, to := e.window(p); from != 0 || to != 1001 {
		t.Errorf("a window wider than the range: [%d, %d)", from, to)
	}
	if e := g.extent(nil, map[string][]agg.Window{"a": stats["a"]}, 1, 1000); e.known {
		t.Errorf("a group with a series whose statistics are unknown has a known extent: %+v", e)
	}
	if e := g.extent(nil, map[string][]agg.Window{"a": nil, "b": nil}, 1, 1000); !e.known || !e.empty() {
		t.Errorf("a group without points: %+v", e)
	}
	// Under a condition, only the windows where it may hold bound the group.
	w := &fieldCond{fields: map[string]influxql.DataType{"f": influxql.Unknown}, sets: map[string]*condSet{
		"s": {cond: influxql.MustParseExpr("f > 5"), keys: map[string]string{"f": "a"}}}}
	g.sets = []tagSet{{id: "s"}}
	stats["a"][0].Max, stats["a"][1].Max = 9, 3
	if e := g.extent(w, stats, 1, 1000); e.first != 50 || e.last != 900 || e.never {
		t.Errorf("f > 5 where only the first window's values can: %+v", e)
	}
	stats["a"][0].Max = 5
	if e := g.extent(w, stats, 1, 1000); !e.never || !e.empty() {
		t.Errorf("f > 5 where no window's values can: %+v", e)
	}
	if got := extentWindow(13 * int64(time.Hour)); got != time.Hour {
		t.Errorf("extentWindow(13h) = %v", got)
	}
	if got := extentWindow(365 * 24 * int64(time.Hour)); got%time.Hour != 0 || 365*24*time.Hour/got > 64 {
		t.Errorf("extentWindow(1 year) = %v", got)
	}
}

// A raw SELECT with LIMIT whose groups miss its first two windows asks for their
// statistics once: the groups none of whose values meets the condition are not read
// again, and the others are read from their own last (or first) point — and the answer
// is the one reading every series whole gives.
func TestLimitBoundsGroupsByTheirStatistics(t *testing.T) {
	t0 := time.Date(2016, 2, 1, 0, 0, 0, 0, time.UTC)
	var lines []string
	for i := range 60 {
		for h := range 4 {
			fuel := 0.5 + float64((i*7+h)%50)/100
			if h == 3 && i == 30 {
				fuel = 0.05 // the one point the condition keeps
			}
			lines = append(lines, fmt.Sprintf("bystats,host=h%d fuel=%g,v=%di %d", h, fuel, i, ns(t0.Add(time.Duration(i)*time.Minute))))
		}
	}
	// A host with two points mid-hour: its first and last lie far inside the range.
	lines = append(lines, fmt.Sprintf("bystats,host=h4 fuel=0.08,v=1i %d", ns(t0.Add(20*time.Minute))),
		fmt.Sprintf("bystats,host=h4 fuel=0.09,v=2i %d", ns(t0.Add(22*time.Minute))))
	if code, b := write(t, "bystats", "", strings.Join(lines, "\n")); code != http.StatusNoContent {
		t.Fatalf("write: %d %s", code, b)
	}
	checkLimitCases(t, "bystats", []limitCase{
		// The statistics are asked beside the first try (one ReadMany), which finds no
		// row. h0…h2 never go below 0.5: their statistics rule them out. h3 and h4 are
		// read back from their last point, 2 series each, over the hour of statistics
		// that may hold their rows: found in one read (DESC answers the series in
		// descending order).
		{`SELECT fuel, v FROM bystats WHERE fuel <= 0.1 GROUP BY host ORDER BY time DESC LIMIT 1`,
			[]string{rfc(t0.Add(22 * time.Minute)), rfc(t0.Add(30 * time.Minute))},
			map[string]int{"ReadMany": 1, "AggregateMany": 1, "ReadRanges": 1, "ReadRanges series": 4}},
		{`SELECT fuel FROM bystats WHERE fuel <= 0.1 GROUP BY host LIMIT 1`,
			[]string{rfc(t0.Add(30 * time.Minute)), rfc(t0.Add(20 * time.Minute))},
			map[string]int{"ReadMany": 1, "AggregateMany": 1, "ReadRanges": 1, "ReadRanges series": 2}},
		// No group meets it: answered from the statistics, nothing read after them.
		{`SELECT fuel FROM bystats WHERE fuel > 2 OR v < 0 GROUP BY host ORDER BY time DESC LIMIT 1`,
			nil, map[string]int{"ReadMany": 1, "AggregateMany": 1}},
	})
}

// limitCase is a query of checkLimitCases: the time of the first row of each series of
// its answer, and the calls of each kind it makes of a ManyReader.
type limitCase struct {
	q     string
	times []string
	want  map[string]int
}

// checkLimitCases asks each case's query of database db through an engine read series
// by series and through a ManyReader, each behind a seam counting its calls, and checks
// that both answer alike, the answer's times and the ManyReader's calls.
func checkLimitCases(t *testing.T, db string, cases []limitCase) {
	t.Helper()
	one, many := newCountingEngine(), newCountingEngine()
	oneURL, manyURL := serveEngine(t, one), serveEngine(t, manyEngine{many})
	for _, c := range cases {
		one.calls, many.calls = map[string]int{}, map[string]int{}
		codeOne, ansOne := queryAt(t, oneURL, db, c.q)
		codeMany, ansMany := queryAt(t, manyURL, db, c.q)
		if codeOne != http.StatusOK || codeMany != codeOne || !reflect.DeepEqual(ansOne, ansMany) {
			t.Fatalf("%s:\nseries by series %d %+v\nat once %d %+v", c.q, codeOne, ansOne, codeMany, ansMany)
		}
		var times []string
		for _, s := range ansMany.Results[0].Series {
			if len(s.Values) == 0 {
				t.Errorf("%s: no rows in %v", c.q, s.Tags)
				continue
			}
			times = append(times, fmt.Sprint(s.Values[0][0]))
		}
		if !reflect.DeepEqual(times, c.times) {
			t.Errorf("%s: rows at %v, want %v", c.q, times, c.times)
		}
		if !reflect.DeepEqual(many.calls, c.want) {
			t.Errorf("%s: the ManyReader was called %v, want %v", c.q, many.calls, c.want)
		}
	}
}
