package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
)

// rawEngine answers aggregates from the points it reads (Engine.Read), never from
// rollups or replicas' partials: the truth the rollups' answers are checked against.
type rawEngine struct{ *NodeEngine }

func (e rawEngine) Aggregate(ctx context.Context, key string, from, to int64, every time.Duration) (series.Type, []agg.Window, error) {
	pts, err := e.Read(ctx, key, from, to)
	if err != nil {
		return series.Unknown, nil, err
	}
	return pts.Type, agg.Windows(&pts, from, to, int64(every)), nil
}

// rollupHits sums the windows the cluster's coordinators answered from rollup homes.
func rollupHits() int64 {
	var n int64
	for _, node := range cluster.Nodes {
		n += node.RollupStats().Hits
	}
	return n
}

// InfluxQL aggregates with GROUP BY time() of a multiple of a rollup level, and those
// without GROUP BY time() but last() or first() alone, are answered from the rollups where the homes hold them,
// and equal the answers computed from the raw points — over a range whose first and
// last windows the range cuts, and whose end lies inside the horizon, where only raw
// shards answer.
func TestInfluxQLAggregatesFromRollups(t *testing.T) {
	now := time.Now()
	t0 := now.Add(-5 * time.Hour).Truncate(time.Minute).Add(-13 * time.Second)
	// Rollups are kept for series of the cluster's quantum: a first write at a PMU's rate
	// gives the series that quantum (quanta.Fit), the rest then come sparser.
	var lp strings.Builder
	for h, host := range []string{"a", "b"} {
		fmt.Fprintf(&lp, "roll,host=%s v=%v %d\n", host, float64(h), ns(t0.Add(-time.Second)))
		fmt.Fprintf(&lp, "roll,host=%s v=%v %d\n", host, float64(h+1), ns(t0.Add(-time.Second+time.Millisecond)))
	}
	if code, b := write(t, "rollq", "", lp.String()); code != http.StatusNoContent {
		t.Fatalf("write: %d %s", code, b)
	}
	lp.Reset()
	for i, t := 0, t0; t.Before(now.Add(-20 * time.Second)); i, t = i+1, t.Add(20*time.Second) {
		for h, host := range []string{"a", "b"} {
			// Values with few bits: sums are exact whatever the order of the merges.
			fmt.Fprintf(&lp, "roll,host=%s v=%v %d\n", host, float64((i*(h+3))%97)/4, ns(t))
		}
	}
	if code, b := write(t, "rollq", "", lp.String()); code != http.StatusNoContent {
		t.Fatalf("write: %d %s", code, b)
	}
	h, err := New(rawEngine{engine}, Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rawSrv := httptest.NewServer(h)
	defer rawSrv.Close()

	from, to := rfc(t0.Add(7*time.Minute+3500*time.Millisecond)), rfc(now.Add(-30*time.Second))
	where := fmt.Sprintf("WHERE time >= '%s' AND time < '%s'", from, to)
	all := "mean(v), min(v), max(v), sum(v), count(v), first(v), last(v), spread(v), stddev(v)"
	queries := []string{
		"SELECT " + all + " FROM roll " + where + " GROUP BY time(1h)",
		"SELECT " + all + " FROM roll " + where + " GROUP BY time(2h), host",
		"SELECT " + all + " FROM roll " + where + " GROUP BY time(1m) fill(none)",
		"SELECT mean(v) FROM roll " + where + " GROUP BY time(1h), host",
		"SELECT " + all + " FROM roll " + where,
		"SELECT last(v) FROM roll " + where + " GROUP BY host",
		"SELECT first(v) FROM roll " + where,
		"SELECT count(v) FROM roll " + where + " GROUP BY host",
		"SELECT max(v) FROM roll " + where,
	}
	check := func(q string) {
		t.Helper()
		code, want := queryAt(t, rawSrv.URL, "rollq", q)
		if code != http.StatusOK || want.Results[0].Error != "" || len(want.Results[0].Series) == 0 {
			t.Fatalf("%s from raw points: %d %+v", q, code, want)
		}
		code, got := query(t, "rollq", q)
		if code != http.StatusOK || got.Results[0].Error != "" {
			t.Fatalf("%s: %d %+v", q, code, got)
		}
		ws, gs := want.Results[0].Series, got.Results[0].Series
		if len(gs) != len(ws) {
			t.Fatalf("%s: %d series, from raw points %d", q, len(gs), len(ws))
		}
		for s := range ws {
			if fmt.Sprint(gs[s].Tags) != fmt.Sprint(ws[s].Tags) || len(gs[s].Values) != len(ws[s].Values) {
				t.Fatalf("%s: series %d is %v with %d rows, from raw points %v with %d", q, s, gs[s].Tags, len(gs[s].Values), ws[s].Tags, len(ws[s].Values))
			}
			for r := range ws[s].Values {
				for c, w := range ws[s].Values[r] {
					g := gs[s].Values[r][c]
					wf, wok := w.(float64)
					gf, gok := g.(float64)
					if w != g && !(wok && gok && approxEq(wf, gf)) {
						t.Fatalf("%s: series %v row %d column %s: %v, from raw points %v", q, ws[s].Tags, r, ws[s].Columns[c], g, w)
					}
				}
			}
		}
	}
	for _, q := range queries { // the homes start keeping the series
		check(q)
	}
	// Pull until the homes vouch for the hours (a replica still taking a write leaves
	// its windows unsettled until a later pull), then every query takes windows from
	// them.
	deadline := time.Now().Add(time.Minute)
	for {
		for _, n := range cluster.Nodes {
			if err := n.RollupNow(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		before := rollupHits()
		check(queries[0])
		if rollupHits()-before >= 2*4 { // two series, four whole hours at least
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a minute of pulls the homes vouch for %d windows of the hourly mean; want at least 8", rollupHits()-before)
		}
	}
	for _, q := range queries {
		before := rollupHits()
		check(q)
		if strings.HasPrefix(q, "SELECT last(v) ") || strings.HasPrefix(q, "SELECT first(v) ") {
			// Each series' newest (oldest) quantum answers these, not the rollups
			// (lastfirst.go; TestLimitOneFromNewestQuantum).
			continue
		}
		if rollupHits() == before {
			t.Errorf("%s: answered without rollups", q)
		}
	}
}
