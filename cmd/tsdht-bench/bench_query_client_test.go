package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// A target rpc://ADDR is asked the dense workload's raw reads through the Go client of
// a real node, and only those; its answers are compared with InfluxDB's (here a stand-in
// answering the points written), equal when the client read them all, unequal when a
// point differs.
func TestQueryAsksRawReadsThroughTheGoClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lc, err := tsdb.StartLocal(ctx, 1, t.TempDir(), func(i int, cfg *tsdb.Config) { cfg.RF = 1 })
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	end := time.Now().Truncate(time.Minute).Add(-time.Minute)
	pts := series.Points{Type: series.Float}
	var rows [][]any
	for ms := end.Add(-10 * time.Second).UnixMilli(); ms <= end.UnixMilli(); ms += 500 {
		pts.T = append(pts.T, ms*1e6)
		pts.F = append(pts.F, float64(ms%1000)/8)
		rows = append(rows, []any{ms, float64(ms%1000) / 8})
	}
	if _, err := lc.Nodes[0].Coordinator().Put(ctx, "dense/pmu,ch=c00#v", pts, wire.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		shift float64
		equal bool
	}{{"same points", 0, true}, {"one value off", 1, false}} {
		influx := fakeInflux(t, func(q string) [][]any {
			if !strings.Contains(q, `SELECT "v" FROM "pmu" WHERE "ch" = 'c00'`) {
				return [][]any{{end.UnixMilli(), 1.0}}
			}
			out := append([][]any(nil), rows...)
			out[len(out)-1] = []any{rows[len(rows)-1][0], rows[len(rows)-1][1].(float64) + c.shift}
			return out
		})
		recs := queryRecords(t, "--workload", "dense", "--hours", "0.02", "--end", fmt.Sprint(end.UnixNano()), "--runs", "1",
			"--target", "influxdb="+influx.URL, "--target", "tsdht-client:1=rpc://"+lc.Nodes[0].RPCAddr())
		if tot, ok := recs["influxdb  total"]; !ok || tot.Queries != 4 {
			t.Errorf("%s: InfluxDB's total over %d queries; want all 4 (the client's few do not narrow it)", c.name, tot.Queries)
		}
		got := 0
		for k, r := range recs {
			if r.System != "tsdht-client" {
				continue
			}
			if r.Name == "total" {
				t.Errorf("%s: a total for the client", c.name)
			}
			got++
			if r.Language != "go" || !strings.HasPrefix(r.Query, `client.Get("dense/pmu,ch=c00#v"`) || r.Span != "10s" && r.Span != "1m" {
				t.Errorf("%s: %s %q over %s; want the Go client's read of 10 s or 1 min", k, r.Language, r.Query, r.Span)
			}
			if r.Error != "" || r.Rows != len(rows) || r.Equal == nil || *r.Equal != c.equal {
				t.Errorf("%s: %d rows, equal %v, error %q; want %d rows, equal %v", c.name, r.Rows, r.Equal, r.Error, len(rows), c.equal)
			}
		}
		if got != 2 {
			t.Errorf("%s: %d records of the client; want its raw reads of 10 s and 1 min (72 s of data: 10 min does not fit)", c.name, got)
		}
	}
}
