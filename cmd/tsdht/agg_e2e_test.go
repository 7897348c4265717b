package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/agg/aggtest"
	"github.com/tsdht/tsdht/tsdb/series"
)

// TestEndToEndAnalytics drives agg, latest and completeness through real node processes
// and checks them against a brute force over the points written.
func TestEndToEndAnalytics(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real node processes")
	}
	c := startE2ECluster(t, 3, "--rf", "2", "--id-format", "kfi")
	key := "pmu1/freq"
	base := (time.Now().Add(-time.Hour).Unix()/10)*10*int64(time.Second) + 3_300_000_000
	all := pmuPoints(base, 9000) // 150 s at 60 Hz
	// A gap: 2 s missing in the third quantum.
	var kept []point
	gapFrom, gapTo := base+20*int64(time.Second), base+22*int64(time.Second)
	for _, p := range all {
		if p.t < gapFrom || p.t >= gapTo {
			kept = append(kept, p)
		}
	}
	if _, errOut, code := c.Run(csvOf(kept), "put", "--cluster", c.Nodes[0].RPC, "--series", key); code != 0 {
		t.Fatalf("put: exit %d: %s", code, errOut)
	}
	var pts series.Points
	for _, p := range kept {
		pts.AppendFloat(p.t, p.v)
	}

	// agg, csv, the default functions and more, over a relative range.
	fns := []agg.Fn{agg.Mean, agg.Min, agg.Max, agg.Count, agg.Stddev, agg.First, agg.Last, agg.Sum, agg.Spread}
	names := make([]string, len(fns))
	for i, fn := range fns {
		names[i] = fn.String()
	}
	out, errOut, code := c.Run("", "agg", "--cluster", c.Nodes[1].RPC, "--series", key, "--from", "-2h", "--to", "now",
		"--every", "1m", "--fn", strings.Join(names, ","))
	if code != 0 {
		t.Fatalf("agg: exit %d: %s", code, errOut)
	}
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(rows[0], ","), "time,"+strings.Join(names, ","); got != want {
		t.Fatalf("header %q, want %q", got, want)
	}
	minute := int64(time.Minute)
	groups := map[int64]*series.Points{}
	var starts []int64
	for i, ts := range pts.T {
		w := agg.WindowStart(ts, minute)
		if groups[w] == nil {
			groups[w] = &series.Points{Type: series.Float}
			starts = append(starts, w)
		}
		groups[w].AppendFrom(&pts, i)
	}
	if len(rows)-1 != len(starts) {
		t.Fatalf("agg printed %d windows, want %d:\n%s", len(rows)-1, len(starts), out)
	}
	for i, row := range rows[1:] {
		start, _ := strconv.ParseInt(row[0], 10, 64)
		if start != starts[i] {
			t.Fatalf("window %d starts at %s, want %d", i, row[0], starts[i])
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
				t.Fatalf("window %d, %s: %q: %v", i, fn, row[k+1], err)
			}
			if err := aggtest.Check(groups[start], fn, v); err != nil {
				t.Fatalf("window %d: %v", i, err)
			}
		}
	}

	// json carries the same windows.
	out, errOut, code = c.Run("", "agg", "--cluster", c.Nodes[2].RPC, "--series", key, "--from", strconv.FormatInt(base, 10),
		"--to", "now", "--every", "10s", "--format", "json")
	if code != 0 {
		t.Fatalf("agg json: exit %d: %s", code, errOut)
	}
	var doc struct {
		Series  string           `json:"series"`
		Windows []map[string]any `json:"windows"`
		Partial bool             `json:"partial"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("agg json: %v\n%s", err, out)
	}
	if doc.Series != key || len(doc.Windows) != 16 || doc.Partial {
		t.Fatalf("agg json: series %q, %d windows, partial %v; want 16 windows", doc.Series, len(doc.Windows), doc.Partial)
	}
	if n := doc.Windows[2]["count"].(float64); n != 600-120 {
		t.Fatalf("the window with the gap counts %v points, want 480", n)
	}

	// get and agg from the epoch to now read only where the series has points: the
	// same answer as over the series' own range, at once.
	narrow, errOut, code := c.Run("", "get", "--cluster", c.Nodes[1].RPC, "--series", key, "--from", strconv.FormatInt(base-int64(time.Hour), 10), "--to", "now")
	if code != 0 {
		t.Fatalf("get: exit %d: %s", code, errOut)
	}
	wide, errOut, code := c.Run("", "get", "--cluster", c.Nodes[1].RPC, "--series", key, "--from", "0", "--to", "now")
	if code != 0 || wide != narrow || strings.Count(wide, "\n") != len(kept) {
		t.Fatalf("get --from 0 --to now: exit %d, %d lines (stderr %s), want the %d of the series' own range", code, strings.Count(wide, "\n"), errOut, len(kept))
	}
	wideAgg, errOut, code := c.Run("", "agg", "--cluster", c.Nodes[1].RPC, "--series", key, "--from", "0", "--to", "now", "--every", "1m")
	if code != 0 || len(strings.Split(strings.TrimSpace(wideAgg), "\n"))-1 != len(starts) {
		t.Fatalf("agg --from 0 --to now: exit %d, %q (stderr %s), want %d windows", code, wideAgg, errOut, len(starts))
	}

	// latest: the last point written.
	last := kept[len(kept)-1]
	out, errOut, code = c.Run("", "latest", "--cluster", c.Nodes[0].RPC, "--series", key)
	if want := fmt.Sprintf("%s,%d,%s\n", key, last.t, strconv.FormatFloat(last.v, 'g', -1, 64)); code != 0 || out != want {
		t.Fatalf("latest: exit %d, %q (stderr %s), want %q", code, out, errOut, want)
	}
	_, errOut, code = c.Run("", "latest", "--cluster", c.Nodes[0].RPC, "--series", key+",nothing/here")
	if code == 0 || !strings.Contains(errOut, "nothing/here") {
		t.Fatalf("latest of an unknown series: exit %d, stderr %q", code, errOut)
	}

	// completeness: the quantum with the gap, and the total.
	from, to := base-3_300_000_000, base-3_300_000_000+150*int64(time.Second) // 15 whole quanta
	out, errOut, code = c.Run("", "completeness", "--cluster", c.Nodes[1].RPC, "--series", key,
		"--from", strconv.FormatInt(from, 10), "--to", strconv.FormatInt(to, 10), "--rate", "60")
	// The data starts 3.3 s into the first quantum: 198 points short there too.
	want := fmt.Sprintf("%d,402,600\n%d,480,600\ntotal,%d,9000\n", from, from+20*int64(time.Second), len(inRange(kept, from, to)))
	if code != 0 || out != want {
		t.Fatalf("completeness: exit %d, stderr %s\n got %q\nwant %q", code, errOut, out, want)
	}
	_, errOut, code = c.Run("", "completeness", "--cluster", c.Nodes[1].RPC, "--series", key,
		"--from", strconv.FormatInt(from, 10), "--to", strconv.FormatInt(to, 10))
	if code != 0 || !strings.Contains(errOut, "inferred from the data: 60 Hz") {
		t.Fatalf("completeness without --rate: exit %d, stderr %q", code, errOut)
	}

	// Bad input names the problem.
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--every", "0s"}, "--every"},
		{[]string{"--every", "1m", "--fn", "mean,median"}, "median"},
		{[]string{"--every", "1m", "--from", "now-bogus"}, "relative times look like"},
	} {
		args := append([]string{"agg", "--cluster", c.Nodes[0].RPC, "--series", key, "--from", "-1h", "--to", "now"}, bad.args...)
		_, errOut, code := c.Run("", args...)
		if code == 0 || !strings.Contains(errOut, bad.want) {
			t.Fatalf("agg %v: exit %d, stderr %q; want it to name %q", bad.args, code, errOut, bad.want)
		}
	}
}
