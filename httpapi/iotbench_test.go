package httpapi

import (
	"fmt"
	"strings"
	"testing"
	"time"
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

// BenchmarkIoTLast asks the package's 3-node cluster TSBS' last-loc, low-fuel and
// single-last-loc over 100 trucks' two hours: queries of one point per group, whose
// cost is their fixed costs (listings, round trips), not their points.
func BenchmarkIoTLast(b *testing.B) {
	base := time.Now().Add(-6 * time.Hour).Truncate(time.Hour)
	writeLines(b, "benchiot", iotFleetLines(base, 100, 120))
	benchQueries(b, "benchiot", []benchQuery{ // fieldcond_test.go
		{"last-loc", `SELECT "latitude", "longitude" FROM "readings" WHERE "fleet"='South' GROUP BY "name","driver" ORDER BY "time" LIMIT 1`},
		{"low-fuel", `SELECT "name", "driver", "fuel_state" FROM "diagnostics" WHERE "fuel_state" <= 0.1 AND "fleet" = 'South' GROUP BY "name" ORDER BY "time" DESC LIMIT 1`},
		{"single-last-loc", `SELECT "name", "driver", "latitude", "longitude" FROM "readings" WHERE "name" = 'truck_5' OR "name" = 'truck_7' GROUP BY "name" ORDER BY "time" DESC LIMIT 1`},
	})
}
