package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeInflux answers /query as InfluxDB 1.x would, one series of one row per query,
// from answer(q) (columns time and value).
func fakeInflux(t *testing.T, answer func(q string) [][]any) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/query" || r.URL.Query().Get("epoch") != "ms" {
			t.Errorf("asked %s, want /query with epoch=ms", r.URL)
		}
		rows := answer(r.URL.Query().Get("q"))
		if rows == nil {
			<-r.Context().Done() // never answers: the bench's timeout ends it
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"results": []any{map[string]any{"statement_id": 0,
			"series": []any{map[string]any{"name": "cpu", "columns": []string{"time", "v"}, "values": rows}}}}})
	}))
	t.Cleanup(s.Close)
	return s
}

func queryRecords(t *testing.T, args ...string) map[string]queryResult {
	t.Helper()
	var out bytes.Buffer
	if err := runApp(&out, append([]string{"query"}, args...)...); err != nil {
		t.Fatalf("query %v: %v", args, err)
	}
	recs := map[string]queryResult{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r queryResult
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("stdout line %q: %v", line, err)
		}
		recs[r.System+" "+r.Span+" "+r.Name] = r
	}
	return recs
}

func TestQueryComparesAnswersWithInfluxDB(t *testing.T) {
	day := 24 * time.Hour
	minute := time.Now().Truncate(time.Minute)
	// InfluxDB also has a row at the window's left edge, which moves between the two
	// queries: not a difference. tsdht's "last" differs in its value: a difference.
	influx := fakeInflux(t, func(q string) [][]any {
		return [][]any{{time.Now().Add(-day).UnixMilli(), 1.0}, {minute.UnixMilli(), 2.0}}
	})
	var slowAsked atomic.Int32
	tsdht := fakeInflux(t, func(q string) [][]any {
		switch {
		case strings.Contains(q, "last("):
			return [][]any{{minute.UnixMilli(), 2.5}}
		case strings.Contains(q, "SELECT *"):
			slowAsked.Add(1)
			return nil
		}
		return [][]any{{minute.UnixMilli(), 2.0 + 1e-12}}
	})
	recs := queryRecords(t, "--workload", "dashboard", "--days", "1", "--runs", "2", "--timeout", "300ms",
		"--target", "tsdht:1="+tsdht.URL, "--target", "influxdb="+influx.URL)

	if r := recs["tsdht 1d mean per hour per host"]; r.Equal == nil || !*r.Equal || r.EdgeRows != 1 || r.Compared != 1 || r.Runs != 2 ||
		r.MeanMs == nil || r.VsInfluxDB == nil || r.Nodes != 1 {
		t.Errorf("an answer alike but for the edge row: %+v, want equal, 1 compared, 1 edge row, 2 runs, timed", r)
	}
	if r := recs["tsdht 1d last per host"]; r.Equal == nil || *r.Equal || !strings.Contains(r.Mismatch, "2.5") {
		t.Errorf("a different last value: %+v, want equal false and the mismatch shown", r)
	}
	if r := recs["tsdht 1d every field"]; !r.Timeout || r.MeanMs != nil || r.Equal != nil || slowAsked.Load() != 1 {
		t.Errorf("a query that never answers: %+v asked %d times, want a timeout, no time, asked once", r, slowAsked.Load())
	}
	if r := recs["influxdb 1d mean per hour per host"]; r.Equal != nil || r.Rows != 2 {
		t.Errorf("InfluxDB's own record: %+v, want equal null and its 2 rows", r)
	}
	total := recs["tsdht  total"]
	if total.Queries != 10 || total.Equal == nil || *total.Equal || total.VsInfluxDB == nil {
		t.Errorf("tsdht's total: %+v, want the 10 queries both answered (5 of the catalog), not all equal", total)
	}
}

// A SHOW statement's answer (no time column) is its rows in order, grouped by the
// series' name: two that list other values differ.
func TestQueryAnswersOfShowStatements(t *testing.T) {
	parse := func(body string) answer {
		t.Helper()
		a, err := parseInfluxQL([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := parse(`{"results":[{"series":[{"name":"cpu","columns":["key","value"],"values":[["host","h0"],["host","h1"]]}]}]}`)
	b := parse(`{"results":[{"series":[{"name":"cpu","columns":["key","value"],"values":[["host","h0"],["host","h2"]]}]}]}`)
	if len(a) != 2 || a[1].group != "cpu" || a[1].vals[1] != "h1" {
		t.Fatalf("rows %+v", a)
	}
	if eq, _, _, _ := (comparison{}).compare(a, a); !eq {
		t.Error("an answer differs from itself")
	}
	if eq, _, _, diff := (comparison{}).compare(a, b); eq || !strings.Contains(diff, "h2") {
		t.Errorf("h1 against h2: equal %v, %q", eq, diff)
	}
}

func TestQueryAnswersAcrossLanguages(t *testing.T) {
	influx, err := parseInfluxQL([]byte(`{"results":[{"series":[{"name":"pmu","tags":{"ch":"c00"},"columns":["time","last"],"values":[[1000,230.5]]},` +
		`{"name":"pmu","tags":{"ch":"c01"},"columns":["time","last"],"values":[[1000,null]]}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(influx) != 1 {
		t.Fatalf("InfluxQL answer %v: want the all-null row left out", influx)
	}
	vm, err := parsePromQuery([]byte(`{"status":"success","data":{"result":[{"metric":{"__name__":"pmu_v","ch":"c00","db":"dense"},"value":[5.5,"230.5"]}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	cmp := comparison{ignoreCols: true, ignoreTime: true}
	if eq, n, _, diff := cmp.compare(vm, influx); !eq || n != 1 {
		t.Errorf("VictoriaMetrics' last against InfluxDB's: equal %v over %d rows (%s), want equal over 1", eq, n, diff)
	}
	export, err := parsePromExport([]byte(`{"metric":{"__name__":"pmu_v","ch":"c00"},"values":[230.5,231],"timestamps":[1000,1017]}` + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := parseInfluxQL([]byte(`{"results":[{"series":[{"name":"pmu","columns":["time","v"],"values":[[1000,230.5],[1017,231.5]]}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	cmp = comparison{ignoreGroup: true, ignoreCols: true}
	if eq, n, _, diff := cmp.compare(export, raw); eq || n != 1 || !strings.Contains(diff, "231") {
		t.Errorf("exports differing in the second value: equal %v after %d rows (%s), want the difference at row 1", eq, n, diff)
	}
	if _, err := parseInfluxQL([]byte(`{"results":[{"error":"database not found: x"}]}`)); err == nil ||
		!strings.Contains(fmt.Sprint(err), "database not found") {
		t.Errorf("an InfluxQL error answer: %v, want its message", err)
	}
}

func TestReportShowsMismatchesAndTimeouts(t *testing.T) {
	dir := t.TempDir()
	lines := `{"bench":"dashboard","system":"tsdht","nodes":1,"name":"load","query":"lpsend","points":23040,"seconds":1,"points_per_s":23040}
{"bench":"dashboard","system":"tsdht","nodes":1,"name":"last per host","query":"SELECT last(\"usage\") FROM \"cpu\" WHERE time >= now() - 1d GROUP BY \"host\"","span":"1d","runs":5,"mean_ms":12.5,"min_ms":10,"rows":8,"equal":false,"mismatch":"row 3: {host=h3} 60000 [last]=[2.5] against {host=h3} 60000 [last]=[2]"}
{"bench":"dashboard","system":"influxdb","name":"last per host","query":"SELECT last(\"usage\") FROM \"cpu\" WHERE time >= now() - 1d GROUP BY \"host\"","span":"1d","runs":5,"mean_ms":1.5,"min_ms":1,"rows":8,"equal":null}
{"bench":"dashboard","system":"tsdht","nodes":1,"name":"every field","query":"SELECT * FROM \"cpu\" WHERE time >= now() - 1d","span":"1d","runs":0,"mean_ms":null,"min_ms":null,"timeout":true,"error":"context deadline exceeded","equal":null}
`
	path := dir + "/dashboard.jsonl"
	if err := os.WriteFile(path, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runApp(&out, "report", path); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| tsdht, 1 node | 23040 | 1.00 | 23040 |",
		"| 1d | tsdht, 1 node | 12.5 | 10.0 | — | **no**: row 3: {host=h3} 60000 [last]=[2.5] against",
		"| 1d | tsdht, 1 node | timed out | timed out | — | error: context deadline exceeded | 0 | 0 |",
		"|  | 1d | influxdb | 1.5 | 1.0 | — | — | 8 | 5 |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}
