package main

import (
	"encoding/csv"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/agg/aggtest"
	"github.com/tsdht/tsdht/tsdb/series"
)

// TestEndToEndAggRollups drives agg through real node processes started with --rollups
// and checks every window against a brute force over the points written, before and
// after the homes pulled and after a late point.
func TestEndToEndAggRollups(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real node processes")
	}
	c := startE2ECluster(t, 3, "--rf", "2", "--rollups")
	key := "site/temp"
	hour := int64(time.Hour)
	t0 := (time.Now().UnixNano()/hour - 3) * hour
	var all []point
	for i := range 7200 {
		all = append(all, point{t0 + int64(i)*int64(time.Second), float64(i%97) + 0.5})
	}
	put := func(pts []point) {
		t.Helper()
		if _, errOut, code := c.Run(csvOf(pts), "put", "--cluster", c.Nodes[0].RPC, "--series", key); code != 0 {
			t.Fatalf("put: exit %d: %s", code, errOut)
		}
	}
	put(all)
	check := func(every time.Duration) {
		t.Helper()
		fns := []agg.Fn{agg.Mean, agg.Min, agg.Max, agg.Count}
		out, errOut, code := c.Run("", "agg", "--cluster", c.Nodes[1].RPC, "--series", key, "--from", strconv.FormatInt(t0, 10),
			"--to", strconv.FormatInt(t0+2*hour, 10), "--every", every.String(), "--fn", "mean,min,max,count")
		if code != 0 {
			t.Fatalf("agg: exit %d: %s", code, errOut)
		}
		rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		groups := map[int64]*series.Points{}
		for _, p := range all {
			w := agg.WindowStart(p.t, int64(every))
			if groups[w] == nil {
				groups[w] = &series.Points{Type: series.Float}
			}
			groups[w].AppendFloat(p.t, p.v)
		}
		if len(rows)-1 != len(groups) {
			t.Fatalf("every %v: %d windows, want %d", every, len(rows)-1, len(groups))
		}
		for _, row := range rows[1:] {
			start, _ := strconv.ParseInt(row[0], 10, 64)
			g := groups[start]
			if g == nil {
				t.Fatalf("every %v: a window at %d holds no point", every, start)
			}
			for k, fn := range fns {
				v := agg.Value{Kind: series.Float}
				if fn == agg.Count {
					v.Kind = series.Int
					v.I, err = strconv.ParseInt(row[k+1], 10, 64)
				} else {
					v.F, err = strconv.ParseFloat(row[k+1], 64)
				}
				if err != nil {
					t.Fatalf("%s: %q: %v", fn, row[k+1], err)
				}
				if err := aggtest.Check(g, fn, v); err != nil {
					t.Fatalf("every %v, window %d: %v", every, start, err)
				}
			}
		}
	}
	for range 3 { // the first asks start the homes; later ones find rollups
		check(time.Minute)
		check(time.Hour)
	}
	late := point{t0 + 30*int64(time.Minute) + 1, 1e6}
	put([]point{late})
	// all stays sorted for csvOf's sake only where it is used; the groups do not care.
	all = append(all, late)
	for range 2 {
		check(time.Minute)
		check(time.Hour)
	}
}
