package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
)

// countingEngine is the node's engine behind a seam that counts the calls of each
// kind. With many set it is also a ManyReader (the node's); without, only an Engine.
type countingEngine struct {
	Engine
	node *NodeEngine
	many bool

	mu    sync.Mutex
	calls map[string]int
	span  [2]int64 // the range of the last ReadMany or AggregateMany
}

func (e *countingEngine) count(kind string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.calls[kind]++
}

func (e *countingEngine) Read(ctx context.Context, key string, from, to int64) (series.Points, error) {
	e.count("Read")
	return e.Engine.Read(ctx, key, from, to)
}

func (e *countingEngine) Aggregate(ctx context.Context, key string, from, to int64, every time.Duration) (series.Type, []agg.Window, error) {
	e.count("Aggregate")
	return e.Engine.Aggregate(ctx, key, from, to, every)
}

// serveCounting serves the package's node behind a countingEngine, a ManyReader when
// many is set, for the test's duration.
func serveCounting(t *testing.T, many bool) (*countingEngine, string) {
	ce := &countingEngine{Engine: engine, node: engine, calls: map[string]int{}}
	var eng Engine = ce
	if many {
		eng = manyEngine{ce}
	}
	h, err := New(eng, Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return ce, srv.URL
}

// manyEngine is a countingEngine that is a ManyReader.
type manyEngine struct{ *countingEngine }

func (e manyEngine) ReadMany(ctx context.Context, keys []string, from, to int64) []ReadResult {
	e.count("ReadMany")
	return e.node.ReadMany(ctx, keys, from, to)
}

func (e manyEngine) ReadRanges(ctx context.Context, items []KeyRange) []ReadResult {
	e.count("ReadRanges")
	e.mu.Lock()
	e.calls["ReadRanges series"] += len(items)
	e.mu.Unlock()
	return e.node.ReadRanges(ctx, items)
}

func (e manyEngine) AggregateMany(ctx context.Context, keys []string, from, to int64, every time.Duration) []AggregateResult {
	e.count("AggregateMany")
	e.mu.Lock()
	e.span = [2]int64{from, to}
	e.mu.Unlock()
	return e.node.AggregateMany(ctx, keys, from, to, every)
}

// A SELECT over many series asks a ManyReader once for all of them (ReadMany for
// points, AggregateMany for the replicas' partials) and its answer is the one an
// Engine read series by series gives; a series that is not written, a non-mergeable
// function (median), a GROUP BY time() with an offset and conditions on field values
// are answered alike.
func TestSelectReadsManySeriesAtOnce(t *testing.T) {
	// 8 hosts in 2 data centres, a point every 10 s for 20 minutes.
	t0 := base.Add(10 * time.Minute)
	lines := make([]string, 0, 8*120)
	for n := range 8 * 120 {
		h, i := n%8, n/8
		lines = append(lines, fmt.Sprintf("many,host=h%d,dc=d%d usage=%d,idle=%d %d", h, h%2, h*1000+i*7%13, i, ns(t0.Add(time.Duration(i)*10*time.Second))))
	}
	if code, b := write(t, "many", "", strings.Join(lines, "\n")); code != http.StatusNoContent {
		t.Fatalf("write: %d %s", code, b)
	}
	one, oneURL := serveCounting(t, false)
	many, manyURL := serveCounting(t, true)
	from, to := rfc(t0), rfc(t0.Add(20*time.Minute))
	for _, c := range []struct {
		q    string
		want map[string]int // the calls of the ManyReader's statement
	}{
		{`SELECT usage FROM many WHERE time >= '%s' AND time < '%s' GROUP BY "host"`, map[string]int{"ReadMany": 1}},
		{`SELECT usage, idle FROM many WHERE dc = 'd1' AND time >= '%s' AND time < '%s'`, map[string]int{"ReadMany": 1}},
		{`SELECT mean(usage), max(idle) FROM many WHERE time >= '%s' AND time < '%s' GROUP BY time(5m), "host"`, map[string]int{"AggregateMany": 1}},
		{`SELECT last(usage) FROM many WHERE time >= '%s' AND time < '%s' GROUP BY "host"`, map[string]int{"AggregateMany": 1}},
		{`SELECT max(usage) FROM many WHERE (host = 'h1' OR host = 'h5' OR host = 'h9') AND time >= '%s' AND time < '%s' GROUP BY time(1m)`, map[string]int{"AggregateMany": 1}},
		{`SELECT median(usage) FROM many WHERE time >= '%s' AND time < '%s' GROUP BY time(5m), "dc"`, map[string]int{"ReadMany": 1}},
		{`SELECT sum(usage) FROM many WHERE time >= '%s' AND time < '%s' GROUP BY time(5m, 1m), "host"`, map[string]int{"ReadMany": 1}},
		{`SELECT mean(usage) FROM many WHERE idle > 50 AND time >= '%s' AND time < '%s' GROUP BY time(5m), "host"`, map[string]int{"ReadMany": 1}},
		{`SELECT usage FROM many WHERE (idle > 100 OR host = 'h2') AND time >= '%s' AND time < '%s' GROUP BY "host"`, map[string]int{"ReadMany": 1}},
	} {
		q := fmt.Sprintf(c.q, from, to)
		one.calls, many.calls = map[string]int{}, map[string]int{}
		codeOne, ansOne := queryAt(t, oneURL, "many", q)
		codeMany, ansMany := queryAt(t, manyURL, "many", q)
		if codeOne != http.StatusOK || codeMany != codeOne || !reflect.DeepEqual(ansOne, ansMany) {
			t.Fatalf("%s:\nseries by series %d %+v\nat once %d %+v", q, codeOne, ansOne, codeMany, ansMany)
		}
		if len(ansOne.Results) != 1 || len(ansOne.Results[0].Series) == 0 {
			t.Fatalf("%s: no series: %+v", q, ansOne)
		}
		if !reflect.DeepEqual(many.calls, c.want) {
			t.Errorf("%s: the ManyReader was called %v, want %v (series by series: %v)", q, many.calls, c.want, one.calls)
		}
	}
}

// A statement without an upper time bound reads up to the catalog's bound of its
// series, not up to now: last(*) of hosts silent for years (InfluxQL's lastpoint) asks
// about the hours they wrote in, at once, not a decade of quanta series by series.
func TestSelectAllTimeStopsAtTheBounds(t *testing.T) {
	t0 := time.Date(2016, 1, 1, 0, 0, 0, 0, time.UTC)
	lines := make([]string, 0, 4*60)
	for n := range 4 * 60 {
		lines = append(lines, fmt.Sprintf("old,host=h%d usage=%d %d", n%4, n, ns(t0.Add(time.Duration(n/4)*time.Minute))))
	}
	if code, b := write(t, "old", "", strings.Join(lines, "\n")); code != http.StatusNoContent {
		t.Fatalf("write: %d %s", code, b)
	}
	ce := &countingEngine{Engine: engine, node: engine, calls: map[string]int{}}
	h, err := New(manyEngine{ce}, Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	code, ans := queryAt(t, srv.URL, "old", `SELECT last(usage) FROM old GROUP BY "host"`)
	if code != http.StatusOK || len(ans.Results) != 1 || len(ans.Results[0].Series) != 4 {
		t.Fatalf("%d %+v", code, ans)
	}
	for i, s := range ans.Results[0].Series {
		if len(s.Values) != 1 || s.Values[0][1] != float64(59*4+i) {
			t.Errorf("host %s: %v, want last %d", s.Tags["host"], s.Values, 59*4+i)
		}
	}
	if !reflect.DeepEqual(ce.calls, map[string]int{"AggregateMany": 1}) {
		t.Errorf("calls %v, want one AggregateMany", ce.calls)
	}
	if end := t0.Add(3 * time.Hour).UnixNano(); ce.span[1] > end {
		t.Errorf("asked up to %v, past the catalog's bound (before %v)", time.Unix(0, ce.span[1]).UTC(), time.Unix(0, end).UTC())
	}
}

// TestReadsStayWithinTheSeriesBounds: a statement whose range reaches far past the
// points of its series (time < now() over data of years ago, a GROUP BY time() from
// long before it) reads the windows the catalog's bounds of the series hold, not the
// empty years around them, and still answers every window of its range.
func TestReadsStayWithinTheSeriesBounds(t *testing.T) {
	t0 := time.Now().AddDate(-5, 0, 0).UTC().Truncate(24 * time.Hour)
	var lines []string
	for i := range 60 {
		for h := range 2 {
			lines = append(lines, fmt.Sprintf("old,host=h%d v=%d %d", h, i+h, ns(t0.Add(time.Duration(i)*time.Minute))))
		}
	}
	if code, b := write(t, "oldbounds", "", strings.Join(lines, "\n")); code != http.StatusNoContent {
		t.Fatalf("write: %d %s", code, b)
	}
	many, manyURL := serveCounting(t, true)
	within := func(q string) {
		t.Helper()
		sp := many.span
		if sp[0] < t0.Add(-48*time.Hour).UnixNano() || sp[1] > t0.Add(48*time.Hour).UnixNano() {
			t.Errorf("%s: aggregated [%v, %v), past the series' bounds around %v", q,
				time.Unix(0, sp[0]).UTC(), time.Unix(0, sp[1]).UTC(), t0)
		}
	}
	q := "SELECT count(v) FROM old WHERE time < now()"
	if _, r := queryAt(t, manyURL, "oldbounds", q); len(r.Results) != 1 || len(r.Results[0].Series) != 1 ||
		fmt.Sprint(r.Results[0].Series[0].Values) != "[[1970-01-01T00:00:00Z 120]]" {
		t.Fatalf("%s: %+v", q, r)
	}
	within(q)
	lo := t0.AddDate(0, 0, -10)
	q = fmt.Sprintf("SELECT max(v) FROM old WHERE time >= '%s' AND time < '%s' GROUP BY time(1d)", rfc(lo), rfc(t0.AddDate(0, 0, 10)))
	_, r := queryAt(t, manyURL, "oldbounds", q)
	if len(r.Results) != 1 || len(r.Results[0].Series) != 1 {
		t.Fatalf("%s: %+v", q, r)
	}
	vals := r.Results[0].Series[0].Values
	if len(vals) != 20 || vals[0][0] != rfc(lo) || vals[10][0] != rfc(t0) || fmt.Sprint(vals[10][1]) != "60" || vals[9][1] != nil || vals[11][1] != nil {
		t.Fatalf("%s: %d rows %v", q, len(vals), vals)
	}
	within(q)
	// The row of an aggregate without GROUP BY time() shows the statement's lower bound.
	q = fmt.Sprintf("SELECT count(v), sum(v) FROM old WHERE time >= '%s'", rfc(lo))
	if _, r := queryAt(t, manyURL, "oldbounds", q); len(r.Results) != 1 || len(r.Results[0].Series) != 1 ||
		fmt.Sprint(r.Results[0].Series[0].Values) != fmt.Sprintf("[[%s 120 3600]]", rfc(lo)) {
		t.Fatalf("%s: %+v", q, r)
	}
	within(q)
}
