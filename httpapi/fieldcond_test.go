package httpapi

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/influxdata/influxql"

	"github.com/tsdht/tsdht/tsdb/series"
)

// TestFieldConditions: a WHERE clause on field values filters the points each series
// yields (aggregates count only the points where it holds, so they are not the replicas'
// partials); MaxQueryPoints counts the condition's fields, once each though also
// selected, and of the other fields the points the condition keeps; forms that are not answered are refused naming what is not supported.
// TestInfluxQLAnswersOrRefuses compares the answers with InfluxDB's.
func TestFieldConditions(t *testing.T) {
	base := time.Now().Add(-3 * time.Hour).Truncate(time.Hour)
	writeLines(t, "fieldcond", catalogLines(base))
	rng := fmt.Sprintf("time >= '%s' AND time < '%s'", base.Format(time.RFC3339), base.Add(time.Minute).Format(time.RFC3339))
	capped, err := New(engine, Config{MaxQueryPoints: 300}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sp := httptest.NewServer(capped)
	defer sp.Close()
	ask := func(srv, q string) (int, string) {
		t.Helper()
		code, _, msg := post(t, srv+"/query?db=fieldcond", "application/x-www-form-urlencoded", strings.NewReader("q="+url.QueryEscape(q)), nil)
		return code, msg
	}
	// catalogLines: n = i%7 + h for host h (a=0, b=1, c=2) at second i; usage about 10h.
	wantN := 0
	for i := 0; i < 60; i++ {
		for h := 0; h < 3; h++ {
			if i%7+h >= 5 {
				wantN++
			}
		}
	}
	for _, c := range []struct{ q, want string }{
		{"SELECT count(usage) FROM cpu WHERE usage > 15 AND " + rng, `"values":[["` + base.Format(time.RFC3339) + `",60]]`},
		{"SELECT count(usage) FROM cpu WHERE n >= 5 AND " + rng + " GROUP BY time(1m)", fmt.Sprintf(",%d]]", wantN)},
		{"SELECT count(n) FROM cpu WHERE (usage > 15 OR host = 'a') AND " + rng, ",120]]"},
		{"SELECT count(usage) FROM cpu WHERE n::float > 7.5 AND " + rng, ",8]]"}, // host c's n = 8 at seconds 6, 13, … 55
	} {
		code, msg := ask(srvURL, c.q)
		if code != http.StatusOK || !strings.Contains(msg, c.want) {
			t.Errorf("%s: %d %.300s; want %s", c.q, code, msg, c.want)
		}
	}

	// 180 points of usage: read once though both selected and in the condition.
	if code, msg := ask(sp.URL, "SELECT usage FROM cpu WHERE usage > 15 AND "+rng); code != http.StatusOK || strings.Contains(msg, "error") {
		t.Errorf("a selected field in the condition, under a cap of 300: %d %.300s; want an answer", code, msg)
	}
	// 180 points of n, and the 99 of usage's 180 where n > 3: 279 held.
	if code, msg := ask(sp.URL, "SELECT usage FROM cpu WHERE n > 3 AND "+rng); code != http.StatusOK || strings.Contains(msg, "error") {
		t.Errorf("a condition's field and the points it keeps, under a cap of 300: %d %.300s; want an answer", code, msg)
	}
	// 180 of n, and the 171 of usage where n > 0.
	if _, msg := ask(sp.URL, "SELECT usage, n FROM cpu WHERE n > 0 AND "+rng); !strings.Contains(msg, "more than 300 points") {
		t.Errorf("a condition's field and the points it keeps past the cap: %.300s; want an error naming the cap", msg)
	}
	if code, msg := ask(sp.URL, "SELECT usage FROM cpu WHERE host = 'a' AND n > 3 AND "+rng); code != http.StatusOK || strings.Contains(msg, "error") {
		t.Errorf("the condition's series of one host only: %d %.300s; want an answer", code, msg)
	}

	for _, c := range []struct{ q, want string }{
		{"SELECT usage FROM cpu WHERE abs(n) > 3 AND " + rng, "functions in a WHERE clause (abs())"},
		{"SELECT usage FROM cpu WHERE n > 3 AND n::float < 5 AND " + rng, "field n compared as two types"},
		{"SELECT usage FROM cpu WHERE n > 3 AND n::tag != 'x' AND " + rng, "n read both as a field and as a tag"},
	} {
		code, msg := ask(srvURL, c.q)
		if code != http.StatusBadRequest || !strings.Contains(msg, "not supported") || !strings.Contains(msg, c.want) {
			t.Errorf("%s: %d %.300s; want 400 saying %q is not supported", c.q, code, msg, c.want)
		}
	}
}

// TestFieldCondClassifies: names of the measurement's fields, or cast to a field type,
// are fields; others, or cast ::tag, are tags; a clause of tags only is no field condition.
func TestFieldCondClassifies(t *testing.T) {
	infos := []SeriesInfo{
		{Key: "k1", Tags: map[string]string{TagDB: "d", TagMeasurement: "m", TagField: "usage", "host": "a"}},
		{Key: "k2", Tags: map[string]string{TagDB: "d", TagMeasurement: "m", TagField: "n", "host": "a"}},
		{Key: "k3", Tags: map[string]string{TagDB: "d", TagMeasurement: "m", TagField: "usage", "host": "b"}},
		{Key: "k4", Tags: map[string]string{TagDB: "d", TagMeasurement: "other", TagField: "host"}},
	}
	for _, c := range []struct {
		where  string
		fields string // sorted, "" for no field condition
	}{
		{"host = 'a'", ""},
		{"host =~ /a/ OR region != 'x'", ""},
		{"usage > 90", "usage"},
		{"usage > 90 AND host = 'a'", "usage"},
		{"x::integer = 1 OR host = 'b'", "x"},
		{"usage::tag = 'a'", ""},
		{"usage > n", "n usage"},
	} {
		e, err := influxql.ParseExpr(c.where)
		if err != nil {
			t.Fatal(err)
		}
		w, err := newFieldCond(infos, "d", "m", []influxql.Expr{e})
		if err != nil {
			t.Fatalf("%s: %v", c.where, err)
		}
		var got []string
		if w != nil {
			for f := range w.fields {
				got = append(got, f)
			}
		}
		if g := strings.Join(slices.Sorted(slices.Values(got)), " "); g != c.fields {
			t.Errorf("%s: fields %q, want %q", c.where, g, c.fields)
		}
	}
	// The tags decide per tag set: host b's series are not read for usage > 90 AND host = 'a'.
	e, _ := influxql.ParseExpr("usage > 90 AND host = 'a'")
	w, err := newFieldCond(infos, "d", "m", []influxql.Expr{e})
	if err != nil {
		t.Fatal(err)
	}
	if !w.match(infos[0]) || !w.match(infos[1]) || w.match(infos[2]) {
		t.Errorf("match: host a's series should match and host b's not")
	}
	if !w.names("k1") || w.names("k2") || w.names("k3") {
		t.Errorf("names: only k1 (usage of host a) is a series of the condition's fields")
	}
}

// TestCastValue: a condition's casts convert floats and integers as InfluxDB's cursors
// do (an integer cast truncates) and make other types null.
func TestCastValue(t *testing.T) {
	f := series.Points{Type: series.Float, T: []int64{1}, F: []float64{-2.75}}
	i := series.Points{Type: series.Int, T: []int64{1}, I: []int64{7}}
	s := series.Points{Type: series.String, T: []int64{1}, S: []string{"x"}}
	for _, c := range []struct {
		p    *series.Points
		typ  influxql.DataType
		want any
	}{
		{&f, influxql.Unknown, -2.75}, {&f, influxql.Float, -2.75}, {&f, influxql.Integer, int64(-2)}, {&f, influxql.String, nil},
		{&i, influxql.Unknown, int64(7)}, {&i, influxql.Float, 7.0}, {&i, influxql.Integer, int64(7)}, {&i, influxql.Boolean, nil},
		{&s, influxql.String, "x"}, {&s, influxql.AnyField, "x"}, {&s, influxql.Float, nil},
	} {
		if got := castValue(c.p, 0, c.typ); got != c.want {
			t.Errorf("%s as %s: %v (%T), want %v (%T)", c.p.Type, c.typ, got, got, c.want, c.want)
		}
	}
}

// writeLines writes line protocol to database db of the package's cluster.
func writeLines(tb testing.TB, db, lines string) {
	tb.Helper()
	resp, err := http.Post(srvURL+"/write?db="+db, "text/plain", strings.NewReader(lines))
	if err != nil {
		tb.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		tb.Fatalf("write: %d %s", resp.StatusCode, msg)
	}
}

// BenchmarkHighCPU asks the package's 3-node cluster TSBS' high-cpu queries over 20
// hosts' ten fields every 10 s for 2 hours (144,000 points), beside the same SELECT *
// without the condition on usage_user: what filtering costs over reading.
func BenchmarkHighCPU(b *testing.B) {
	base := time.Now().Add(-5 * time.Hour).Truncate(time.Hour)
	writeLines(b, "benchwhere", tsbsLines(base, 20, 720))
	rng := fmt.Sprintf("time >= '%s' AND time < '%s'", base.Format(time.RFC3339), base.Add(2*time.Hour).Format(time.RFC3339))
	benchQueries(b, "benchwhere", []benchQuery{
		{"high-cpu-all", "SELECT * FROM cpu WHERE usage_user > 90.0 AND " + rng},
		{"high-cpu-1", "SELECT * FROM cpu WHERE usage_user > 90.0 AND " + rng + " AND hostname = 'host_1'"},
		{"select-all", "SELECT * FROM cpu WHERE " + rng},
		// Most rows pass, as in TSBS' data (its usage_user is a clamped random walk).
		{"high-cpu-most", "SELECT * FROM cpu WHERE usage_user > 30 AND " + rng},
	})
}

// benchQuery is one query a benchmark asks, by name.
type benchQuery struct{ name, q string }

// benchQueries runs a sub-benchmark per query, asked of database db on the package's
// server, each answer wanted whole and OK.
func benchQueries(b *testing.B, db string, qs []benchQuery) { benchQueriesAt(b, srvURL, db, qs) }

// benchQueriesAt is benchQueries of the server at base.
func benchQueriesAt(b *testing.B, base, db string, qs []benchQuery) {
	for _, c := range qs {
		b.Run(c.name, func(b *testing.B) {
			u := base + "/query?" + url.Values{"db": {db}, "q": {c.q}}.Encode()
			for i := 0; i < b.N; i++ {
				resp, err := http.Get(u)
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || n < 100 {
					b.Fatalf("%s: %d, %d bytes", c.q, resp.StatusCode, n)
				}
			}
		})
	}
}
