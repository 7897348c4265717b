package httpapi

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// iotLines are points of the shape of TSBS' IoT use case: trucks of two fleets, each a
// readings point (velocity) and a diagnostics point (current_load, load_capacity,
// status) every minute for two hours from base, some minutes missing.
func iotLines(base time.Time) string {
	var b strings.Builder
	fleets := []string{"North", "South"}
	for i := 0; i < 120; i++ {
		t := base.Add(time.Duration(i) * time.Minute).UnixNano()
		for k := 0; k < 6; k++ {
			if (i+k)%9 == 0 {
				continue // a gap
			}
			tags := fmt.Sprintf("name=truck_%d,fleet=%s,driver=%s,model=%s", k, fleets[k%2], []string{"Ann", "Bob", "Cid"}[k%3], []string{"F-150", "H-2"}[k/3])
			v := float64((i*(k+2)+k*k)%70) + 0.5*float64(k)
			if (i/20+k)%4 == 0 {
				v = 0.25 * float64(k%2) // parked
			}
			fmt.Fprintf(&b, "readings,%s velocity=%g %d\n", tags, v, t)
			capacity := 1024 << (k % 3) // ratios of loads to it are exact: sums of them do not depend on their order
			load := (i*37 + k*101) % capacity
			if i == 119 && k%2 == 1 {
				load = capacity - k // loaded at the end: high-load finds them
			}
			fmt.Fprintf(&b, "diagnostics,%s current_load=%d,load_capacity=%d,status=%di %d\n", tags, load, capacity, (i/15+k)%3, t)
		}
	}
	return b.String()
}

// limitLines are points for subqueries with LIMIT whose series the outer GROUP BY
// merges (limitsPerSeries), in database sublim: measurement m, whose inner groups (a, b)
// hold several stored series (c) with points at equal times; and measurement diag,
// trucks whose name or driver tag is now and then missing or whose model changes,
// every minute for an hour from base, each truck at its own second.
func limitLines(base time.Time) string {
	var b strings.Builder
	s := base.Unix()
	for _, l := range []struct {
		tags string
		v, t int64
	}{
		{"a=1,b=x,c=1", 1, 1}, {"a=1,b=x,c=2", 2, 2}, {"a=1,b=x,c=1", 3, 3}, {"a=1,b=y,c=1", 4, 4}, {"a=1,b=x,c=2", 5, 5},
		{"a=1,b=y,c=1", 6, 6}, {"a=1,b=y,c=1", 7, 7}, {"a=1,b=x,c=1", 8, 7}, {"a=1,b=y,c=2", 9, 8}, {"a=1,b=x,c=1", 10, 8},
		{"a=2,b=x,c=1", 11, 1}, {"a=2,b=x,c=1", 12, 2}, {"a=2,b=z,c=1", 13, 2},
	} {
		fmt.Fprintf(&b, "m,%s v=%d %d\n", l.tags, l.v, (s+l.t)*int64(time.Second))
	}
	for i := 0; i < 60; i++ {
		for k := 0; k < 5; k++ {
			tags := fmt.Sprintf("fleet=F%d,model=M%d", k%2, k%2)
			if (i*5+k)%13 != 0 {
				tags += fmt.Sprintf(",name=truck_%d", k)
			}
			if (i*7+k)%11 != 0 {
				tags += fmt.Sprintf(",driver=d%d", k)
			}
			if (i+k)%17 == 0 {
				tags = strings.Replace(tags, fmt.Sprintf("model=M%d", k%2), "model=X", 1)
			}
			t := base.Add(time.Duration(i)*time.Minute + time.Duration(k)*time.Second).UnixNano()
			fmt.Fprintf(&b, "diag,%s load=%d,cap=100 %d\n", tags, (i*31+k*17)%120, t)
		}
	}
	return b.String()
}

// limitCases are the differential test's subqueries over limitLines (high-load's
// shape and simpler ones): InfluxDB's limit per stored series and per run of points.
func limitCases(base time.Time) []struct {
	name, q string
	params  url.Values
} {
	db := url.Values{"db": {"sublim"}}
	rng := fmt.Sprintf("time >= '%s' AND time < '%s'", base.Format(time.RFC3339), base.Add(time.Hour).Format(time.RFC3339))
	return []struct {
		name, q string
		params  url.Values
	}{
		{"limit runs desc", "SELECT b, v FROM (SELECT v FROM m GROUP BY a, b ORDER BY time DESC LIMIT 1) GROUP BY a ORDER BY time DESC", db},
		{"limit runs offset", "SELECT b, v FROM (SELECT v FROM m GROUP BY a, b LIMIT 2 OFFSET 1) GROUP BY a", db},
		{"limit runs limit 2", "SELECT b, v FROM (SELECT v FROM m GROUP BY a, b ORDER BY time DESC LIMIT 2) GROUP BY a ORDER BY time DESC", db},
		{"limit runs no outer group", "SELECT v FROM (SELECT v FROM m GROUP BY a, b LIMIT 1)", db},
		{"limit runs high-load", "SELECT \"name\", driver, load, cap FROM (SELECT load, cap FROM diag WHERE fleet = 'F0' GROUP BY \"name\", driver ORDER BY time DESC LIMIT 1) WHERE load >= 0.9 * cap GROUP BY \"name\" ORDER BY time DESC", db},
		{"limit runs high-load F1", "SELECT \"name\", driver, load FROM (SELECT load, cap FROM diag WHERE fleet = 'F1' GROUP BY \"name\", driver ORDER BY time DESC LIMIT 1) WHERE load >= 50 GROUP BY \"name\" ORDER BY time DESC", db},
		{"limit runs asc limit 3", "SELECT driver, load FROM (SELECT load FROM diag GROUP BY \"name\", driver LIMIT 3) GROUP BY \"name\"", db},
		// An inner aggregate: its stream is each outer group's windows, in each a point
		// per inner tag set in the order of their tags.
		{"limit runs stationary-trucks", "SELECT \"name\", driver FROM (SELECT mean(load) AS ml FROM diag WHERE " + rng + " GROUP BY time(10m), \"name\", driver, fleet LIMIT 1) WHERE fleet = 'F0' AND ml < 80 GROUP BY \"name\"", db},
		{"limit runs windows desc", "SELECT \"name\", driver, ml FROM (SELECT sum(load) AS ml FROM diag WHERE " + rng + " GROUP BY time(10m), \"name\", driver, fleet ORDER BY time DESC LIMIT 2) WHERE ml < 300 GROUP BY \"name\" ORDER BY time DESC", db},
		{"limit runs windows offset", "SELECT driver, ml FROM (SELECT max(load) AS ml FROM diag WHERE " + rng + " GROUP BY time(5m), \"name\", driver LIMIT 1 OFFSET 1) GROUP BY \"name\"", db},
		{"aggregate subquery ties desc", "SELECT \"name\", driver, ml FROM (SELECT sum(load) AS ml FROM diag WHERE " + rng + " GROUP BY time(20m), \"name\", driver, fleet) GROUP BY fleet ORDER BY time DESC", db},
		{"aggregate subquery ties", "SELECT \"name\", driver, ml FROM (SELECT min(load) AS ml FROM diag WHERE " + rng + " GROUP BY time(20m), \"name\", driver, fleet) GROUP BY fleet", db},
		{"limit runs offset desc", "SELECT driver, load FROM (SELECT load FROM diag GROUP BY \"name\", driver ORDER BY time DESC LIMIT 3 OFFSET 1) GROUP BY \"name\" ORDER BY time DESC", db},
	}
}

// subqueryCases are the differential test's subqueries (TSBS' IoT query types and
// simpler ones) over iotLines(base), in database iot.
func subqueryCases(base time.Time) []struct {
	name, q string
	params  url.Values
} {
	rng := fmt.Sprintf("time >= '%s' AND time < '%s'", base.Format(time.RFC3339), base.Add(2*time.Hour).Format(time.RFC3339))
	mid := fmt.Sprintf("time >= '%s' AND time < '%s'", base.Add(17*time.Minute).Format(time.RFC3339), base.Add(95*time.Minute).Format(time.RFC3339))
	iot := url.Values{"db": {"iot"}}
	return []struct {
		name, q string
		params  url.Values
	}{
		{"subquery mean of means", "SELECT mean(mv) FROM (SELECT mean(velocity) AS mv FROM readings WHERE " + rng + " GROUP BY time(10m), fleet) WHERE " + rng + " GROUP BY time(30m)", iot},
		{"subquery outer range", "SELECT max(mv), min(mv) FROM (SELECT mean(velocity) AS mv FROM readings WHERE " + rng + " GROUP BY time(10m)) WHERE " + mid, iot},
		{"subquery outer bounds inner", "SELECT count(mv) FROM (SELECT mean(velocity) AS mv FROM readings GROUP BY time(5m)) WHERE " + mid + " GROUP BY time(20m)", iot},
		{"subquery max of ratio", "SELECT max(r) FROM (SELECT current_load / load_capacity AS r FROM \"diagnostics\" WHERE " + rng + " GROUP BY \"name\")", iot},
		{"subquery max of ratio by tag", "SELECT max(r) FROM (SELECT current_load / load_capacity AS r FROM \"diagnostics\" WHERE " + rng + " GROUP BY \"name\", fleet) GROUP BY fleet", iot},
		{"subquery count filtered", "SELECT count(mv) FROM (SELECT mean(velocity) AS mv FROM readings WHERE " + rng + " GROUP BY time(10m), \"name\") WHERE mv > 30", iot},
		{"subquery outer tag not inner", "SELECT count(mv) FROM (SELECT mean(velocity) AS mv FROM readings WHERE " + mid + " GROUP BY time(10m)) GROUP BY fleet", iot},
		{"subquery raw outer", "SELECT mv FROM (SELECT mean(velocity) AS mv FROM readings WHERE " + mid + " GROUP BY time(10m), fleet) WHERE mv < 30", iot},
		{"subquery inner no interval", "SELECT sum(m) FROM (SELECT max(velocity) AS m FROM readings WHERE " + mid + " GROUP BY \"name\") WHERE " + mid + " GROUP BY time(30m)", iot},
		{"subquery unnamed", "SELECT max(mean) FROM (SELECT mean(velocity) FROM readings WHERE " + rng + " GROUP BY time(1m))", iot},
		// TSBS' IoT query types.
		{"iot daily-activity", "SELECT count(mv) FROM (SELECT mean(velocity) AS mv FROM readings WHERE " + rng + " GROUP BY time(10m), fleet, \"name\", driver) WHERE " + rng + " GROUP BY time(1d), fleet, \"name\", driver", iot},
		{"iot avg-daily-driving-duration", "SELECT count(mv)/6 AS hours_driven FROM (SELECT mean(velocity) AS mv FROM readings WHERE " + rng + " GROUP BY time(10m), fleet, \"name\", driver) WHERE " + rng + " GROUP BY time(1d), fleet, \"name\", driver", iot},
		{"iot avg-load", "SELECT mean(ml) AS mean_load_percentage FROM (SELECT current_load / load_capacity AS ml FROM \"diagnostics\" GROUP BY \"name\", fleet, model) WHERE " + rng + " GROUP BY time(1h), fleet, model", iot},
		{"iot high-load", "SELECT \"name\", driver, current_load, load_capacity FROM (SELECT current_load, load_capacity FROM \"diagnostics\" WHERE fleet = 'South' GROUP BY \"name\", driver ORDER BY time DESC LIMIT 1) WHERE current_load >= 0.9 * load_capacity GROUP BY \"name\" ORDER BY time DESC", iot},
		{"subquery order mismatch", "SELECT \"name\", driver, current_load FROM (SELECT current_load FROM \"diagnostics\" WHERE fleet = 'North' GROUP BY \"name\", driver ORDER BY time DESC LIMIT 1) WHERE current_load >= 100 GROUP BY \"name\"", iot},
		{"iot low-fuel", "SELECT \"name\", driver, status FROM (SELECT status FROM \"diagnostics\" WHERE fleet = 'North' GROUP BY \"name\", driver ORDER BY time DESC LIMIT 1) WHERE status <= 1 GROUP BY \"name\" ORDER BY time DESC", iot},
		{"iot stationary-trucks", "SELECT \"name\", driver FROM (SELECT mean(velocity) AS mean_velocity FROM readings WHERE " + mid + " GROUP BY time(10m), \"name\", driver, fleet LIMIT 1) WHERE fleet = 'North' AND mean_velocity < 1 GROUP BY \"name\"", iot},
		{"iot long-driving-sessions", "SELECT \"name\", driver FROM (SELECT count(*) AS ten_min FROM (SELECT mean(velocity) AS mean_velocity FROM readings WHERE fleet = 'South' AND " + rng + " GROUP BY time(10m), \"name\", driver) WHERE mean_velocity > 1 GROUP BY \"name\", driver) WHERE ten_min > 5", iot},
		{"iot two levels count", "SELECT count(ten_min) FROM (SELECT count(*) AS ten_min FROM (SELECT mean(velocity) AS mean_velocity FROM readings WHERE " + rng + " GROUP BY time(10m), \"name\", driver) WHERE mean_velocity > 1 GROUP BY \"name\", driver)", iot},
		{"iot long-daily-sessions", "SELECT \"name\", driver FROM (SELECT count(*) AS ten_min FROM (SELECT mean(velocity) AS mean_velocity FROM readings WHERE fleet = 'North' AND " + rng + " GROUP BY time(10m), \"name\", driver) WHERE mean_velocity > 1 GROUP BY \"name\", driver) WHERE ten_min > 3", iot},
		{"subquery limit merged", "SELECT mean(velocity) AS mean_velocity FROM (SELECT velocity FROM readings WHERE " + rng + " GROUP BY \"name\", fleet LIMIT 5) GROUP BY fleet", iot},
		{"iot breakdown-frequency", "SELECT count(state_changed) FROM (SELECT difference(broken_down) AS state_changed FROM (SELECT floor(2*(sum(nzs)/count(nzs)))/floor(2*(sum(nzs)/count(nzs))) AS broken_down FROM (SELECT \"name\", status AS nzs FROM \"diagnostics\" WHERE " + rng + ") WHERE " + rng + " GROUP BY time(10m), \"name\") GROUP BY \"name\") WHERE state_changed = 1 GROUP BY \"name\"", iot},
		{"subquery two levels mean", "SELECT max(m) FROM (SELECT mean(mv) AS m FROM (SELECT mean(velocity) AS mv FROM readings WHERE " + rng + " GROUP BY time(5m), \"name\") GROUP BY time(20m)) WHERE " + rng, iot},
		{"subquery desc", "SELECT mv FROM (SELECT mean(velocity) AS mv FROM readings WHERE " + mid + " GROUP BY time(10m)) ORDER BY time DESC", iot},
		{"subquery coarser inner windows", "SELECT max(mv) FROM (SELECT mean(velocity) AS mv FROM readings WHERE " + rng + " GROUP BY time(1h)) WHERE " + mid + " GROUP BY time(10m)", iot},
		{"subquery only tags", "SELECT \"name\" FROM (SELECT current_load, load_capacity FROM \"diagnostics\" WHERE " + mid + " GROUP BY \"name\")", iot},
		{"subquery fill", "SELECT count(mv), sum(mv) FROM (SELECT max(velocity) AS mv FROM readings WHERE truck = 'none' OR " + mid + " GROUP BY time(10m) fill(0)) GROUP BY time(30m)", iot},
	}
}

// TestSubquery answers subqueries over a few points whose answers are known: an
// aggregate of an inner GROUP BY tag aggregate, two levels, tags of the inner GROUP BY
// selected by the outer query, and the inner time range bounded by the outer one.
func TestSubquery(t *testing.T) {
	t0 := base.Add(-10 * time.Minute)
	var lines strings.Builder
	for i, v := range []int{1, 2, 3, 4} {
		fmt.Fprintf(&lines, "m,t=a,u=x v=%d %d\n", v, t0.Add(time.Duration(i)*time.Minute).UnixNano())
	}
	for i, v := range []int{10, 20} {
		fmt.Fprintf(&lines, "m,t=b,u=y v=%d %d\n", v, t0.Add(time.Duration(i)*time.Minute).UnixNano())
	}
	writeLines(t, "subq", lines.String())
	rng := fmt.Sprintf("time >= '%s' AND time < '%s'", rfc(t0), rfc(t0.Add(5*time.Minute)))
	for _, c := range []struct{ q, want string }{
		{"SELECT max(s) FROM (SELECT sum(v) AS s FROM m WHERE " + rng + " GROUP BY t)", "[[" + rfc(t0) + " 30]]"}, // stamped where the inner range starts
		{"SELECT count(c) FROM (SELECT count(s) AS c FROM (SELECT sum(v) AS s FROM m WHERE " + rng + " GROUP BY time(1m), t) GROUP BY t)", "[[" + rfc(time.Unix(0, 0)) + " 2]]"},
		{"SELECT t, s FROM (SELECT sum(v) AS s FROM m WHERE " + rng + " GROUP BY t) WHERE s > 15", "[[" + rfc(t0) + " b 30]]"},
		{"SELECT sum(v) FROM (SELECT v FROM m WHERE " + rng + ") WHERE time >= '" + rfc(t0.Add(2*time.Minute)) + "'", "[[" + rfc(t0.Add(2*time.Minute)) + " 7]]"},
	} {
		code, r := query(t, "subq", c.q)
		if code != http.StatusOK || len(r.Results) != 1 || r.Results[0].Error != "" || len(r.Results[0].Series) != 1 {
			t.Errorf("%s: %d %+v", c.q, code, r)
			continue
		}
		if got := fmt.Sprint(r.Results[0].Series[0].Values); got != c.want {
			t.Errorf("%s: %s, want %s", c.q, got, c.want)
		}
	}
}

// TestSubqueryLimits holds a subquery's inner answer to MaxQueryPoints, its nesting to
// MaxQueryDepth, and refuses with 400 the forms tsdht does not answer.
func TestSubqueryLimits(t *testing.T) {
	t0 := base.Add(-3 * time.Hour)
	writeLines(t, "subqlim", iotLines(t0))
	h, err := New(engine, Config{MaxQueryPoints: 300, MaxQueryDepth: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	rng := fmt.Sprintf("time >= '%s' AND time < '%s'", rfc(t0), rfc(t0.Add(2*time.Hour)))
	inner := "(SELECT mean(velocity) AS mv FROM readings WHERE " + rng + " GROUP BY time(1m), \"name\")"

	// Aggregated from the replicas' partials, the inner answer reads no point, but holds ~640 values.
	code, r := queryAt(t, srv.URL, "subqlim", "SELECT count(mv) FROM "+inner)
	if code != http.StatusOK || len(r.Results) != 1 || !strings.Contains(r.Results[0].Error, "more than 300 values (MaxQueryPoints)") {
		t.Errorf("inner answer past MaxQueryPoints: %d %+v", code, r)
	}
	code, r = queryAt(t, srv.URL, "subqlim", "SELECT count(mv) FROM (SELECT mean(velocity) AS mv FROM readings WHERE "+rng+" GROUP BY time(1h))")
	if code != http.StatusOK || len(r.Results) != 1 || r.Results[0].Error != "" || len(r.Results[0].Series) != 1 {
		t.Errorf("inner answer within MaxQueryPoints: %d %+v", code, r)
	}
	deep := "SELECT count(a) FROM (SELECT count(b) AS a FROM (SELECT count(mv) AS b FROM " + inner + "))"
	if code, _ := queryAt(t, srv.URL, "subqlim", deep); code != http.StatusBadRequest {
		t.Errorf("subqueries nested past MaxQueryDepth: %d, want 400", code)
	}
	code, r = queryAt(t, srv.URL, "subqlim", "SELECT mv FROM (SELECT mean(velocity) AS mv FROM readings WHERE "+rng+" GROUP BY time(1h) ORDER BY time DESC)")
	if code != http.StatusOK || len(r.Results) != 1 || r.Results[0].Error != "subqueries must be ordered in the same direction as the query itself" {
		t.Errorf("inner ORDER BY time DESC under an ascending query: %d %+v", code, r)
	}
	for _, q := range []string{
		"SELECT count(mv) FROM " + inner + " SLIMIT 1",
		"SELECT count(mv) FROM " + inner + " GROUP BY *",
		"SELECT count(mv) FROM readings, " + inner,
		"SELECT max(mv) FROM (SELECT mean(velocity) AS mv, max(velocity) AS mx FROM readings WHERE " + rng + " GROUP BY time(10m), \"name\", fleet LIMIT 1) GROUP BY fleet",
	} {
		code, r := query(t, "subqlim", q)
		if code != http.StatusBadRequest || len(r.Results) != 1 || !strings.Contains(r.Results[0].Error, "not supported") {
			t.Errorf("%s: %d %+v, want 400 saying what is not supported", q, code, r)
		}
	}
}
