package httpapi

import (
	"context"
	"errors"
	"fmt"
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
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var opened error
	lc, err := tsdb.StartLocal(ctx, 3, b.TempDir(), func(i int, cfg *tsdb.Config) {
		opened = errors.Join(opened, tsdb.UsePebble(cfg, store.PebbleOptions{Sync: store.SyncNone}))
	})
	if err = errors.Join(err, opened); err != nil {
		b.Fatal(err)
	}
	defer lc.Close()
	h, err := New(NewNodeEngine(lc.Nodes[0]), Config{WorkBytesPerSecond: 1 << 30, ClientShare: 1}, nil)
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
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
