package httpapi

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
)

// pointsRead returns the /metrics counter of points /query read from the cluster.
func pointsRead(t *testing.T) float64 {
	t.Helper()
	resp, err := http.Get(srvURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	f := fams["tsdht_http_points_read_total"]
	if f == nil {
		t.Fatal("/metrics lacks tsdht_http_points_read_total")
	}
	return f.Metric[0].GetCounter().GetValue()
}

// TestAggregatesFromPartials: the aggregates the replicas' partials answer are
// computed without reading a point to this node (the read counter stays put), over
// several series of a group and with and without GROUP BY time(), and equal what the
// points give; median still reads the points.
func TestAggregatesFromPartials(t *testing.T) {
	t0 := base.Add(20 * time.Minute)
	var lp strings.Builder
	var all []float64
	for i := 0; i < 200; i++ {
		for h := 0; h < 2; h++ {
			v := math.Round(math.Sin(float64(i*(h+1)))*1000) / 8
			all = append(all, v)
			fmt.Fprintf(&lp, "part,host=h%d v=%v %d\n", h, v, ns(t0.Add(time.Duration(i)*time.Second)))
		}
	}
	if code, b := write(t, "part", "", lp.String()); code != http.StatusNoContent {
		t.Fatalf("write: %d %s", code, b)
	}
	rng := fmt.Sprintf("WHERE time >= '%s' AND time < '%s'", rfc(t0), rfc(t0.Add(200*time.Second)))
	mn, mx, sum := math.Inf(1), math.Inf(-1), 0.0
	for _, v := range all {
		mn, mx, sum = math.Min(mn, v), math.Max(mx, v), sum+v
	}
	before := pointsRead(t)
	for fn, want := range map[string]float64{"min": mn, "max": mx, "sum": sum, "count": float64(len(all)), "mean": sum / float64(len(all))} {
		q := fmt.Sprintf("SELECT %s(v) FROM part %s", fn, rng)
		code, r := query(t, "part", q)
		if code != 200 || r.Results[0].Error != "" || len(r.Results[0].Series) != 1 {
			t.Fatalf("%s: %d %+v", q, code, r)
		}
		got, _ := r.Results[0].Series[0].Values[0][1].(float64)
		if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
			t.Fatalf("%s = %v, want %v", q, got, want)
		}
		q = fmt.Sprintf("SELECT %s(v) FROM part %s GROUP BY time(20s)", fn, rng)
		if code, r = query(t, "part", q); code != 200 || len(r.Results[0].Series) != 1 || len(r.Results[0].Series[0].Values) != 10 {
			t.Fatalf("%s: %d %+v", q, code, r)
		}
	}
	for _, fn := range []string{"first", "last", "stddev", "spread"} {
		if code, r := query(t, "part", fmt.Sprintf("SELECT %s(v) FROM part %s GROUP BY time(1m)", fn, rng)); code != 200 || len(r.Results[0].Series) != 1 {
			t.Fatalf("%s: %d %+v", fn, code, r)
		}
	}
	if after := pointsRead(t); after != before {
		t.Fatalf("aggregates read %v points to this node; the replicas' partials should answer them", after-before)
	}
	if code, r := query(t, "part", fmt.Sprintf("SELECT median(v) FROM part %s", rng)); code != 200 || len(r.Results[0].Series) != 1 {
		t.Fatalf("median: %d %+v", code, r)
	}
	if after := pointsRead(t); after-before != float64(len(all)) {
		t.Fatalf("median read %v points, want %d", after-before, len(all))
	}
}

// pagingEngine is the node's engine behind a seam that answers at most maxWindows
// windows at once, as the coordinator does at its own limit, and counts what is
// asked of it. It is the node's Engine only, not its ManyReader: every aggregate
// passes the seam.
type pagingEngine struct {
	Engine
	maxWindows int64

	mu       sync.Mutex
	reads    int
	refused  int
	asked    [][2]int64 // [from, to) of each aggregate answered
	straddle []string   // pages that split a window with their neighbour
}

func (e *pagingEngine) Read(ctx context.Context, key string, from, to int64) (series.Points, error) {
	e.mu.Lock()
	e.reads++
	e.mu.Unlock()
	return e.Engine.Read(ctx, key, from, to)
}

func (e *pagingEngine) Aggregate(ctx context.Context, key string, from, to int64, every time.Duration) (series.Type, []agg.Window, error) {
	n := agg.WindowCount(from, to, int64(every))
	e.mu.Lock()
	if n > e.maxWindows {
		e.refused++
		e.mu.Unlock()
		return series.Unknown, nil, &TooLargeError{Key: key, Windows: n, MaxWindows: e.maxWindows}
	}
	e.asked = append(e.asked, [2]int64{from, to})
	if agg.WindowStart(to, int64(every)) != to && agg.WindowStart(to-1, int64(every)) != agg.WindowStart(from, int64(every)) {
		// to cuts a window: only the statement's own end may.
		e.straddle = append(e.straddle, fmt.Sprintf("[%d, %d)", from, to))
	}
	e.mu.Unlock()
	return e.Engine.Aggregate(ctx, key, from, to, every)
}

// TestOversizedAggregateIsPaged: an aggregate of more windows than one answer holds is
// asked for in pages aligned to its windows, its answer equals the unpaged one, and no
// point is read to this node.
func TestOversizedAggregateIsPaged(t *testing.T) {
	t0 := base.Add(30 * time.Minute)
	var lp strings.Builder
	for i := 0; i < 300; i++ {
		for h := 0; h < 2; h++ {
			fmt.Fprintf(&lp, "paged,host=h%d v=%v %d\n", h, math.Round(math.Cos(float64(i*(h+2)))*1000)/8, ns(t0.Add(time.Duration(i)*time.Second)))
		}
	}
	if code, b := write(t, "paged", "", lp.String()); code != http.StatusNoContent {
		t.Fatalf("write: %d %s", code, b)
	}
	eng := &pagingEngine{Engine: engine, maxWindows: 7}
	h, err := New(eng, Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	// The range starts and ends inside windows: the pages' first and last windows are cut
	// by the statement's bounds, as the unpaged answer's are.
	from, to := t0.Add(1500*time.Millisecond), t0.Add(298500*time.Millisecond)
	q := fmt.Sprintf("SELECT mean(v), min(v), max(v), count(v), sum(v), first(v), last(v), stddev(v), spread(v) FROM paged "+
		"WHERE time >= '%s' AND time < '%s' GROUP BY time(3s)", rfc(from), rfc(to))
	code, want := query(t, "paged", q)
	if code != http.StatusOK || want.Results[0].Error != "" || len(want.Results[0].Series) != 1 {
		t.Fatalf("unpaged: %d %+v", code, want)
	}
	code, got := queryAt(t, srv.URL, "paged", q)
	if code != http.StatusOK || got.Results[0].Error != "" || len(got.Results[0].Series) != 1 {
		t.Fatalf("paged: %d %+v", code, got)
	}
	wantRows, gotRows := want.Results[0].Series[0].Values, got.Results[0].Series[0].Values
	if len(gotRows) != 100 || len(gotRows) != len(wantRows) {
		t.Fatalf("paged answer has %d windows, the unpaged %d; want 100", len(gotRows), len(wantRows))
	}
	var points float64
	for i := range wantRows {
		for c := range wantRows[i] {
			w, g := wantRows[i][c], gotRows[i][c]
			wf, wok := w.(float64)
			gf, gok := g.(float64)
			if wok && gok && approxEq(wf, gf) || w == g {
				continue
			}
			t.Fatalf("window %d column %d: paged %v, unpaged %v", i, c, g, w)
		}
		points += gotRows[i][4].(float64)
	}
	if points != 2*(298-1) {
		t.Fatalf("the windows count %v points, want %d", points, 2*(298-1))
	}
	eng.mu.Lock()
	defer eng.mu.Unlock()
	if eng.reads != 0 {
		t.Fatalf("the paged aggregate read raw points %d times; it must only ask for aggregates", eng.reads)
	}
	// One refusal per series, then pages of at most 7 windows each: 100 windows in 15.
	if eng.refused != 2 || len(eng.asked) != 2*15 {
		t.Fatalf("%d refusals and %d pages, want 2 and 30", eng.refused, len(eng.asked))
	}
	if len(eng.straddle) > 2 { // each series' last page ends at the statement's end
		t.Fatalf("pages split windows: %v", eng.straddle)
	}
}
