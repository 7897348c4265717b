package httpapi

import (
	"fmt"
	"net/url"
	"strings"
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
		{"iot low-fuel asc", "SELECT \"name\", driver, current_load FROM (SELECT current_load FROM \"diagnostics\" WHERE fleet = 'North' GROUP BY \"name\", driver ORDER BY time DESC LIMIT 1) WHERE current_load >= 100 GROUP BY \"name\"", iot},
		{"iot stationary-trucks", "SELECT \"name\", driver FROM (SELECT mean(velocity) AS mean_velocity FROM readings WHERE " + mid + " GROUP BY time(10m), \"name\", driver, fleet LIMIT 1) WHERE fleet = 'North' AND mean_velocity < 1 GROUP BY \"name\"", iot},
		{"iot long-driving-sessions", "SELECT \"name\", driver FROM (SELECT count(*) AS ten_min FROM (SELECT mean(velocity) AS mean_velocity FROM readings WHERE fleet = 'South' AND " + rng + " GROUP BY time(10m), \"name\", driver) WHERE mean_velocity > 1 GROUP BY \"name\", driver) WHERE ten_min > 5", iot},
		{"iot two levels count", "SELECT count(ten_min) FROM (SELECT count(*) AS ten_min FROM (SELECT mean(velocity) AS mean_velocity FROM readings WHERE " + rng + " GROUP BY time(10m), \"name\", driver) WHERE mean_velocity > 1 GROUP BY \"name\", driver)", iot},
		{"iot long-daily-sessions", "SELECT \"name\", driver FROM (SELECT count(*) AS ten_min FROM (SELECT mean(velocity) AS mean_velocity FROM readings WHERE fleet = 'North' AND " + rng + " GROUP BY time(10m), \"name\", driver) WHERE mean_velocity > 1 GROUP BY \"name\", driver) WHERE ten_min > 3", iot},
		{"iot avg-vs-projected-fuel", "SELECT mean(velocity) AS mean_velocity FROM (SELECT velocity FROM readings WHERE " + rng + " GROUP BY \"name\", fleet LIMIT 5) GROUP BY fleet", iot},
		{"iot breakdown-frequency", "SELECT count(state_changed) FROM (SELECT difference(broken_down) AS state_changed FROM (SELECT floor(2*(sum(nzs)/count(nzs)))/floor(2*(sum(nzs)/count(nzs))) AS broken_down FROM (SELECT \"name\", status AS nzs FROM \"diagnostics\" WHERE " + rng + ") WHERE " + rng + " GROUP BY time(10m), \"name\") GROUP BY \"name\") WHERE state_changed = 1 GROUP BY \"name\"", iot},
		{"subquery two levels mean", "SELECT max(m) FROM (SELECT mean(mv) AS m FROM (SELECT mean(velocity) AS mv FROM readings WHERE " + rng + " GROUP BY time(5m), \"name\") GROUP BY time(20m)) WHERE " + rng, iot},
		{"subquery desc", "SELECT mv FROM (SELECT mean(velocity) AS mv FROM readings WHERE " + mid + " GROUP BY time(10m)) ORDER BY time DESC", iot},
		{"subquery fill", "SELECT count(mv), sum(mv) FROM (SELECT max(velocity) AS mv FROM readings WHERE truck = 'none' OR " + mid + " GROUP BY time(10m) fill(0)) GROUP BY time(30m)", iot},
	}
}
