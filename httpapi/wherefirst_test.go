package httpapi

import (
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

// A raw SELECT * with a condition on one field reads that field first and the others
// only over the spans where it holds, nothing of a host where it holds nowhere; its
// answer is the one an Engine read series by series gives.
func TestSelectReadsTheConditionFirst(t *testing.T) {
	// 4 hosts, three fields every 10 s for 30 minutes. u passes 90 on h1 for minutes
	// 5 to 7, on h2 at two close times, never on h0 and h3.
	t0 := base.Add(-30 * time.Minute)
	lines := make([]string, 0, 4*180)
	for i := range 180 {
		for h := range 4 {
			u := 50 + h
			switch {
			case h == 1 && i >= 30 && i < 42:
				u = 91 + i%5
			case h == 2 && (i == 100 || i == 104):
				u = 99
			}
			lines = append(lines, fmt.Sprintf("wf,host=h%d,dc=d%d u=%di,s=%d,i=%g %d", h, h%2, u, i, float64(i)/2, ns(t0.Add(time.Duration(i)*10*time.Second))))
		}
	}
	if code, b := write(t, "wf", "", strings.Join(lines, "\n")); code != http.StatusNoContent {
		t.Fatalf("write: %d %s", code, b)
	}
	one, oneURL := serveCounting(t, false)
	many, manyURL := serveCounting(t, true)
	rng := fmt.Sprintf("time >= '%s' AND time < '%s'", rfc(t0), rfc(t0.Add(30*time.Minute)))
	for _, c := range []struct {
		q    string
		rows int
		want map[string]int
	}{
		// s and i of h1 and h2, a span each: 4 items; 12 + 2 rows.
		{"SELECT * FROM wf WHERE u > 90 AND " + rng, 14, map[string]int{"ReadMany": 1, "ReadRanges": 1, "ReadRanges series": 4}},
		{"SELECT * FROM wf WHERE u > 90 AND " + rng + " GROUP BY host", 14, map[string]int{"ReadMany": 1, "ReadRanges": 1, "ReadRanges series": 4}},
		{"SELECT s, i FROM wf WHERE u > 90 AND dc = 'd0' AND " + rng, 2, map[string]int{"ReadMany": 1, "ReadRanges": 1, "ReadRanges series": 2}},
		// It holds nowhere: the other fields are not read at all.
		{"SELECT * FROM wf WHERE u > 100 AND " + rng, 0, map[string]int{"ReadMany": 1}},
		// u and s are read whole beside each other: one round.
		{"SELECT u, s FROM wf WHERE u > 90 AND " + rng, 14, map[string]int{"ReadMany": 1}},
	} {
		one.calls, many.calls = map[string]int{}, map[string]int{}
		codeOne, ansOne := queryAt(t, oneURL, "wf", c.q)
		codeMany, ansMany := queryAt(t, manyURL, "wf", c.q)
		if codeOne != http.StatusOK || codeMany != codeOne || !reflect.DeepEqual(ansOne, ansMany) {
			t.Fatalf("%s:\nseries by series %d %+v\nat once %d %+v", c.q, codeOne, ansOne, codeMany, ansMany)
		}
		rows := 0
		for _, s := range ansMany.Results[0].Series {
			rows += len(s.Values)
		}
		if rows != c.rows {
			t.Errorf("%s: %d rows, want %d: %+v", c.q, rows, c.rows, ansMany)
		}
		if !reflect.DeepEqual(many.calls, c.want) {
			t.Errorf("%s: the ManyReader was called %v, want %v", c.q, many.calls, c.want)
		}
	}
}

func TestCondHoldsPassed(t *testing.T) {
	h := &condHolds{t: []int64{10, 20, 30, 40, 50, 60, 70, 80}, ok: []bool{false, true, true, false, false, true, false, true}}
	for _, c := range []struct {
		apart, most int
		want        [][2]int64
	}{
		{1, 8, [][2]int64{{20, 31}, {60, 61}, {80, 81}}},
		{2, 8, [][2]int64{{20, 31}, {60, 81}}},                     // 60 and 80 are two times apart: joined
		{3, 8, [][2]int64{{20, 81}}},                               // 30 and 60 are three apart
		{1, 2, [][2]int64{{20, 31}, {60, 81}}},                     // the shortest gap joined
		{1, 1, [][2]int64{{20, 81}}},                               // one span of them all
		{1200, 8, [][2]int64{{20, 81}}},                            // condApart's spans
		{0, 8, [][2]int64{{20, 21}, {30, 31}, {60, 61}, {80, 81}}}, // every time alone
	} {
		if got := h.passed(c.apart, c.most); !reflect.DeepEqual(got, c.want) {
			t.Errorf("passed(%d, %d) = %v, want %v", c.apart, c.most, got, c.want)
		}
	}
	if got := (&condHolds{t: []int64{1, 2}, ok: []bool{false, false}}).passed(1, 8); got == nil || len(got) != 0 {
		t.Errorf("holding nowhere: %v, want no span", got)
	}
	if got := (&condHolds{t: []int64{1}, ok: []bool{false}, null: true}).passed(1, 8); got != nil {
		t.Errorf("holding where the fields are null: %v, want nil (the whole range)", got)
	}
}

// BenchmarkIoTFuel asks the package's 3-node cluster TSBS' avg-vs-projected-fuel-
// consumption shape (means of two fields under a condition on a third, by fleet) and
// low-fuel's raw scan over iotFleetLines' 100 trucks' two hours.
func BenchmarkIoTFuel(b *testing.B) {
	base := time.Now().Add(-6 * time.Hour).Truncate(time.Hour)
	writeLines(b, "benchfuel", iotFleetLines(base, 100, 120))
	benchQueries(b, "benchfuel", []benchQuery{
		{"avg-vs-projected", `SELECT mean("latitude"), mean("longitude") FROM "readings" WHERE "velocity" > 1 GROUP BY "fleet"`},
		{"low-fuel-scan", `SELECT "name", "driver", "fuel_state" FROM "diagnostics" WHERE "fuel_state" <= 0.1 AND "fleet" = 'South'`},
	})
}
