package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/store"
)

// iotFleetLines are TSBS IoT-shaped readings and diagnostics of trucks in three fleets,
// one point a minute for n minutes from base.
func iotFleetLines(base time.Time, trucks, n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		t := base.Add(time.Duration(i) * time.Minute).UnixNano()
		for k := 0; k < trucks; k++ {
			tags := fmt.Sprintf("name=truck_%d,fleet=%s,driver=%s", k, []string{"East", "North", "South"}[k%3], []string{"Ann", "Bob", "Cid", "Dee"}[k%4])
			fmt.Fprintf(&b, "readings,%s latitude=%g,longitude=%g,velocity=%d %d\n", tags, float64(k)+float64(i)/1000, float64(i)/100, (i*k)%90, t)
			fmt.Fprintf(&b, "diagnostics,%s fuel_state=%g,status=%di %d\n", tags, float64((i*7+k*13)%100)/100, (i+k)%5, t)
		}
	}
	return b.String()
}

// iotLastQueries are TSBS' last-loc, low-fuel and single-last-loc over iotFleetLines:
// queries of one point per group, whose cost is their fixed costs (listings, round
// trips), not their points.
var iotLastQueries = []benchQuery{ // fieldcond_test.go
	{"last-loc", `SELECT "latitude", "longitude" FROM "readings" WHERE "fleet"='South' GROUP BY "name","driver" ORDER BY "time" LIMIT 1`},
	{"low-fuel", `SELECT "name", "driver", "fuel_state" FROM "diagnostics" WHERE "fuel_state" <= 0.1 AND "fleet" = 'South' GROUP BY "name" ORDER BY "time" DESC LIMIT 1`},
	{"single-last-loc", `SELECT "name", "driver", "latitude", "longitude" FROM "readings" WHERE "name" = 'truck_5' OR "name" = 'truck_7' GROUP BY "name" ORDER BY "time" DESC LIMIT 1`},
}

// BenchmarkIoTLast asks the package's 3-node cluster (stores in memory) iotLastQueries
// over 100 trucks' two hours.
func BenchmarkIoTLast(b *testing.B) {
	base := time.Now().Add(-6 * time.Hour).Truncate(time.Hour)
	writeLines(b, "benchiot", iotFleetLines(base, 100, 120))
	benchQueries(b, "benchiot", iotLastQueries)
}

// BenchmarkIoTLastPebble is BenchmarkIoTLast on a 3-node cluster of its own whose
// nodes keep their shards in pebble, as `tsdht node` does: a store that keeps each
// quantum's statistics (the memory store computes them from the points when asked).
func BenchmarkIoTLastPebble(b *testing.B) {
	srv, _ := pebbleServer(b, 3, time.Minute)
	base := time.Now().Add(-6 * time.Hour).Truncate(time.Hour)
	resp, err := http.Post(srv.URL+"/write?db=benchiot", "text/plain", strings.NewReader(iotFleetLines(base, 100, 120)))
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		b.Fatalf("write: %s", resp.Status)
	}
	benchQueriesAt(b, srv.URL, "benchiot", iotLastQueries)
}

// iotTSBSLines are readings and diagnostics of the shape TSBS' IoT use case writes:
// trucks tagged name, fleet, driver, model and device_version, readings of ten fields
// and diagnostics of three every 10 s, the from-th to the (from+n-1)-th times from base,
// velocity a walk that rests at zero now and then.
func iotTSBSLines(base time.Time, trucks, from, n int) string {
	fleets := []string{"East", "North", "South", "West"}
	drivers := []string{"Albert", "Derek", "Trish", "Andy", "Seth"}
	models := []string{"F-150", "G-2000", "H-2"}
	versions := []string{"v1.0", "v1.5", "v2.0", "v2.3"}
	var b strings.Builder
	for i := from; i < from+n; i++ {
		t := base.Add(time.Duration(i) * 10 * time.Second).UnixNano()
		for k := 0; k < trucks; k++ {
			tags := fmt.Sprintf("name=truck_%d,fleet=%s,driver=%s,model=%s,device_version=%s",
				k, fleets[k%4], drivers[k%5], models[k%3], versions[k%4])
			v := (i*7 + k*11) % 120
			if v > 100 || (i/30+k)%7 == 0 {
				v = 0
			}
			fmt.Fprintf(&b, "readings,%s load_capacity=%d,fuel_capacity=%d,nominal_fuel_consumption=%d,latitude=%g,longitude=%g,elevation=%d,velocity=%d,heading=%d,grade=%d,fuel_consumption=%d %d\n",
				tags, 1500+500*(k%3), 150+50*(k%3), 12+3*(k%3), float64(k)+float64(i)/1000, float64(i)/100, (i+k)%500, v, (i*3+k)%360, (i+k*5)%20, 10+(i*13+k)%40, t)
			fmt.Fprintf(&b, "diagnostics,%s load_capacity=%d,fuel_capacity=%d,nominal_fuel_consumption=%d,fuel_state=%g,current_load=%d,status=%d %d\n",
				tags, 1500+500*(k%3), 150+50*(k%3), 12+3*(k%3), float64((i*7+k*13)%100)/100, (i*k)%1500, statusOf(i, k), t)
		}
	}
	return b.String()
}

// BenchmarkIoTHeavyPebble asks a 1-node cluster whose node keeps its shards in pebble,
// as `tsdht node --http` does, TSBS' heavy IoT query types, in the text
// tsbs_generate_queries writes, over 100 trucks' 13 hours every 10 s.
func BenchmarkIoTHeavyPebble(b *testing.B) {
	srv, lc := pebbleServer(b, 1, 5*time.Minute)
	base := time.Date(2016, 1, 1, 0, 0, 0, 0, time.UTC)
	// 13 hours, as scripts/bench-tsbs: more decoded chunks than the store's hot tier
	// holds, as there.
	const hours = 13
	for i := 0; i < hours*360; i += 25 { // 5,000 lines a batch, as tsbs_load_influx sends them
		postLines(b, srv.URL+"/write?db=benchiot", iotTSBSLines(base, 100, i, 25))
	}
	// scripts/bench-tsbs asks once the machine is idle again, the sealer done.
	if _, err := lc.Nodes[0].Store().(*store.Pebble).SealNow(time.Now().Add(time.Hour)); err != nil {
		b.Fatal(err)
	}
	rng := fmt.Sprintf("time >= '%s' AND time < '%s'", base.Format(time.RFC3339), base.Add(hours*time.Hour).Format(time.RFC3339))
	benchQueriesAt(b, srv.URL, "benchiot", []benchQuery{
		{"avg-vs-projected-fuel-consumption", `SELECT mean("fuel_consumption") AS "mean_fuel_consumption", mean("nominal_fuel_consumption") AS "nominal_fuel_consumption" FROM "readings" WHERE "velocity" > 1 GROUP BY "fleet"`},
		{"avg-daily-driving-duration", `SELECT count("mv")/6 as "hours driven" FROM (SELECT mean("velocity") as "mv" FROM "readings" WHERE ` + rng + ` GROUP BY time(10m),"fleet", "name", "driver") WHERE ` + rng + ` GROUP BY time(1d),"fleet", "name", "driver"`},
		{"daily-activity", `SELECT count("ms")/144 FROM (SELECT mean("status") AS ms FROM "diagnostics" WHERE ` + rng + ` GROUP BY time(10m), "model", "fleet") WHERE ` + rng + ` AND "ms"<1 GROUP BY time(1d), "model", "fleet"`},
		{"low-fuel", `SELECT "name", "driver", "fuel_state" FROM "diagnostics" WHERE "fuel_state" <= 0.1 AND "fleet" = 'North' GROUP BY "name" ORDER BY "time" DESC LIMIT 1`},
	})
}

// statusOf is truck k's diagnostic status at its i-th point: zero most of the time.
func statusOf(i, k int) int {
	if (i/60+k)%7 == 0 {
		return 1 + k%4
	}
	return 0
}

// pebbleServer starts an n-node cluster (rf min(n, 3)) whose nodes keep their shards in
// pebble, as `tsdht node` does, and an HTTP server over its first node; both close when
// b ends. start bounds the cluster's start.
func pebbleServer(b *testing.B, n int, start time.Duration) (*httptest.Server, *tsdb.LocalCluster) {
	ctx, cancel := context.WithTimeout(context.Background(), start)
	defer cancel()
	var opened error
	lc, err := tsdb.StartLocal(ctx, n, b.TempDir(), func(i int, cfg *tsdb.Config) {
		cfg.RF = min(n, cfg.RF)
		opened = errors.Join(opened, tsdb.UsePebble(cfg, store.PebbleOptions{Sync: store.SyncNone}))
	})
	if err = errors.Join(err, opened); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { lc.Close() })
	h, err := New(NewNodeEngine(lc.Nodes[0]), Config{WorkBytesPerSecond: 1 << 30, ClientShare: 1}, nil)
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(h)
	b.Cleanup(srv.Close)
	return srv, lc
}

// BenchmarkIoTWritePebble posts TSBS-shaped IoT batches (iotTSBSLines: 100 trucks, 25
// times a batch, 5,000 lines, as tsbs_load_influx sends them) through /write into a
// 1-node cluster whose node keeps its shards in pebble, each batch the next 250 s, and
// reports values/s: the node's cost per value of scripts/bench-tsbs' IoT load, without
// the script (profile it with -cpuprofile, -memprofile).
func BenchmarkIoTWritePebble(b *testing.B) {
	srv, _ := pebbleServer(b, 1, 5*time.Minute)
	base := time.Date(2016, 1, 1, 0, 0, 0, 0, time.UTC)
	b.ReportAllocs()
	values := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		body := iotTSBSLines(base, 100, i*25, 25)
		values += strings.Count(body, "=") - 5*strings.Count(body, "\n") // fields: every '=' but the 5 tags'
		b.StartTimer()
		postLines(b, srv.URL+"/write?db=benchiot", body)
	}
	b.ReportMetric(float64(values)/b.Elapsed().Seconds(), "values/s")
}

// postLines writes body's lines to url and fails b unless they were all taken (204).
func postLines(b *testing.B, url, body string) {
	resp, err := http.Post(url, "text/plain", strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		b.Fatalf("write: %s: %s", resp.Status, msg)
	}
}
