package httpapi

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
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
