package httpapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
)

// diffLines are the points the differential test writes to both servers: three hosts
// with float, integer and string fields every 30 s for an hour (some points missing,
// and equal timestamps across hosts), and an hourly series across both of Berlin's
// daylight-saving changes of the year before base.
func diffLines(base time.Time) string {
	var b strings.Builder
	for i := 0; i < 120; i++ {
		t := base.Add(time.Duration(i) * 30 * time.Second).UnixNano()
		for h, host := range []string{"a", "b", "c"} {
			if (i+h)%7 == 0 {
				continue // a gap
			}
			fmt.Fprintf(&b, "cpu,host=%s,dc=%s usage=%g,n=%di", host, []string{"x", "y"}[h%2], float64((i*(h+3))%17)+0.25*float64(h), (i*i+h)%50-10)
			if i%5 == 0 {
				fmt.Fprintf(&b, `,state="s%d"`, i%3)
			}
			fmt.Fprintf(&b, " %d\n", t)
		}
		if i%2 == 0 {
			fmt.Fprintf(&b, "mem,host=a free=%di %d\n", 1000-i*3, t)
		}
	}
	// Two hosts at equal times across a Monday, where InfluxDB's shard groups change.
	monday, _ := time.Parse(time.RFC3339, "2026-11-16T00:00:00Z")
	for i := -5; i < 5; i++ {
		for _, host := range []string{"b", "a"} {
			fmt.Fprintf(&b, "week,host=%s v=%d %d\n", host, i*i+len(host), monday.Add(time.Duration(i)*time.Hour).UnixNano())
		}
	}
	for _, day := range []string{"2025-10-23T00:00:00Z", "2026-03-26T00:00:00Z"} {
		d, _ := time.Parse(time.RFC3339, day)
		for i := 0; i < 6*24; i++ {
			fmt.Fprintf(&b, "power,site=p kw=%d %d\n", i%24+i/24, d.Add(time.Duration(i)*time.Hour).UnixNano())
		}
	}
	return b.String()
}

// tsbsLines are points of the shape of TSBS' cpu-only use case: hosts with ten integer
// usage fields every 10 s, n times from base, usage_user above 90 now and then.
// gapLines are series of measurement m some of which lack a tag: t0 South, t1
// North, t2 without fleet, and a series without name; a point a minute for 90 minutes.
func gapLines(base time.Time) string {
	var b strings.Builder
	for i := 0; i < 90; i++ {
		t := base.Add(time.Duration(i) * time.Minute).UnixNano()
		for k, tags := range []string{"name=t0,fleet=South", "name=t1,fleet=North", "name=t2", "fleet=West"} {
			fmt.Fprintf(&b, "m,%s v=%d %d\n", tags, (i*(k+3))%40, t)
		}
	}
	return b.String()
}

func tsbsLines(base time.Time, hosts, n int) string {
	fields := []string{"usage_user", "usage_system", "usage_idle", "usage_nice", "usage_iowait",
		"usage_irq", "usage_softirq", "usage_steal", "usage_guest", "usage_guest_nice"}
	var b strings.Builder
	for i := 0; i < n; i++ {
		t := base.Add(time.Duration(i) * 10 * time.Second).UnixNano()
		for h := 0; h < hosts; h++ {
			fmt.Fprintf(&b, "cpu,hostname=host_%d,region=%s,datacenter=%s ", h, []string{"eu", "us"}[h%2], []string{"a", "b", "c"}[h%3])
			for f, name := range fields {
				if f > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, "%s=%di", name, (i*(7+h)+f*13+h*i*i)%101)
			}
			fmt.Fprintf(&b, " %d\n", t)
		}
	}
	return b.String()
}

// TestInfluxQLAnswersOrRefuses asks InfluxDB 1.x and tsdht the same InfluxQL over the
// same writes and wants, for every query, the same answer (after JSON normalisation)
// or a 400 from tsdht: never a different answer.
func TestInfluxQLAnswersOrRefuses(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the InfluxDB differential test")
	}
	addr := testutil.StartInfluxd(t)
	base := time.Now().Add(-3 * time.Hour).Truncate(time.Hour)
	urls := []string{"http://" + addr, srvURL}
	writeBoth(t, urls, "diff", diffLines(base))
	writeBoth(t, urls, "tsbs", tsbsLines(base, 4, 360))
	writeBoth(t, urls, "iot", iotLines(base))
	writeBoth(t, urls, "gaps", gapLines(base))
	writeBoth(t, urls, "sublim", limitLines(base))
	rng := fmt.Sprintf("time >= '%s' AND time < '%s'", base.Format(time.RFC3339), base.Add(time.Hour).Format(time.RFC3339))
	mid := fmt.Sprintf("time >= '%s' AND time < '%s'", base.Add(7*time.Minute+13*time.Second).Format(time.RFC3339),
		base.Add(41*time.Minute).Format(time.RFC3339))
	dst := func(from, to string) string { return fmt.Sprintf("time >= '%s' AND time < '%s'", from, to) }
	tsbs := url.Values{"db": {"tsbs"}}
	spring := dst("2026-03-26T00:00:00Z", "2026-03-31T00:00:00Z")
	autumn := dst("2025-10-23T00:00:00Z", "2025-10-28T23:00:00Z")
	cases := []struct {
		name, q string
		params  url.Values
	}{
		// GROUP BY time() offsets, positive, negative and past the interval.
		{"offset", "SELECT mean(usage) FROM cpu WHERE " + rng + " GROUP BY time(10m, 2m)", nil},
		{"offset negative", "SELECT count(usage), max(n) FROM cpu WHERE " + mid + " GROUP BY time(10m, -2m)", nil},
		{"offset fill", "SELECT sum(n) FROM cpu WHERE host = 'a' AND " + mid + " GROUP BY time(7m, 3m) fill(0)", nil},
		{"offset wide", "SELECT min(usage) FROM cpu WHERE " + rng + " GROUP BY time(10m, 25m), host", nil},
		{"offset median", "SELECT median(usage), percentile(n, 90) FROM cpu WHERE " + mid + " GROUP BY time(5m, 90s)", nil},
		{"offset epoch", "SELECT last(usage) FROM cpu WHERE " + mid + " GROUP BY time(4m, 1m) fill(previous)", url.Values{"epoch": {"s"}}},
		// tz(): days cut at local midnight, 23- and 25-hour days, times with the zone's offset.
		{"tz spring", "SELECT count(kw), sum(kw) FROM power WHERE " + spring + " GROUP BY time(1d) tz('Europe/Berlin')", nil},
		{"tz autumn", "SELECT count(kw), max(kw) FROM power WHERE " + autumn + " GROUP BY time(1d) fill(none) tz('Europe/Berlin')", nil},
		{"tz hours", "SELECT mean(kw) FROM power WHERE " + dst("2026-03-28T20:00:00Z", "2026-03-29T06:00:00Z") + " GROUP BY time(1h) tz('Europe/Berlin')", nil},
		{"tz 12h", "SELECT count(kw) FROM power WHERE " + autumn + " GROUP BY time(12h) tz('America/New_York')", nil},
		{"tz raw", "SELECT kw FROM power WHERE " + dst("2026-03-29T00:00:00Z", "2026-03-29T03:00:00Z") + " tz('Europe/Berlin')", nil},
		{"tz raw epoch", "SELECT kw FROM power WHERE " + dst("2026-03-29T00:00:00Z", "2026-03-29T03:00:00Z") + " tz('Europe/Berlin')", url.Values{"epoch": {"ms"}}},
		{"tz pretty", "SELECT max(kw) FROM power WHERE " + spring + " GROUP BY time(1d) tz('Asia/Kolkata')", url.Values{"pretty": {"true"}}},
		{"tz utc", "SELECT max(kw) FROM power WHERE " + spring + " GROUP BY time(1d) tz('UTC')", nil},
		{"tz offset", "SELECT count(kw) FROM power WHERE " + spring + " GROUP BY time(1d, 6h) tz('Europe/Berlin')", nil},
		// Raw rows across series with equal timestamps: InfluxDB's order, then LIMIT.
		{"star limit", "SELECT * FROM cpu WHERE " + rng + " LIMIT 5", nil},
		{"star limit offset", "SELECT * FROM cpu WHERE " + rng + " LIMIT 4 OFFSET 3", nil},
		{"star desc limit", "SELECT * FROM cpu WHERE " + rng + " ORDER BY time DESC LIMIT 7", nil},
		{"lastpoint shape", "SELECT * FROM cpu GROUP BY host ORDER BY time DESC LIMIT 1", nil},
		{"first row of a series", "SELECT usage, n FROM cpu WHERE host = 'a' ORDER BY time LIMIT 1", nil},
		{"newest rows past a field condition", "SELECT usage FROM cpu WHERE n <= 12 GROUP BY host ORDER BY time DESC LIMIT 2 OFFSET 1", nil},
		{"field limit", "SELECT usage FROM cpu WHERE " + rng + " LIMIT 5", nil},
		{"field desc", "SELECT usage FROM cpu WHERE " + rng + " ORDER BY time DESC LIMIT 7", nil},
		{"field group", "SELECT usage, n FROM cpu WHERE " + mid + " GROUP BY dc LIMIT 9", nil},
		{"field week", "SELECT v FROM week WHERE time >= '2026-11-15T00:00:00Z' AND time < '2026-11-17T00:00:00Z'", nil},
		{"field week desc", "SELECT v FROM week WHERE time >= '2026-11-15T00:00:00Z' AND time < '2026-11-17T00:00:00Z' ORDER BY time DESC", nil},
		{"fields limit", "SELECT usage, state FROM cpu WHERE " + rng + " LIMIT 6 OFFSET 2", nil},
		// Transformations, over raw values and over windows.
		{"derivative raw", "SELECT derivative(usage) FROM cpu WHERE host = 'a' AND " + mid, nil},
		{"derivative raw unit", "SELECT derivative(usage, 1m), non_negative_derivative(n, 10s) FROM cpu WHERE host = 'b' AND " + mid, nil},
		{"derivative windows", "SELECT derivative(mean(usage)) FROM cpu WHERE " + mid + " GROUP BY time(2m)", nil},
		{"derivative windows unit", "SELECT mean(usage), derivative(mean(usage), 1s), non_negative_derivative(max(n)) FROM cpu WHERE " + mid + " GROUP BY time(3m), host", nil},
		{"derivative fill", "SELECT non_negative_derivative(sum(n)) FROM cpu WHERE host = 'c' AND " + mid + " GROUP BY time(40s) fill(0)", nil},
		{"derivative fill none", "SELECT derivative(last(usage), 1m) FROM cpu WHERE host = 'c' AND " + mid + " GROUP BY time(40s) fill(none)", nil},
		{"derivative offset", "SELECT derivative(min(usage)) FROM cpu WHERE " + mid + " GROUP BY time(5m, 1m)", nil},
		{"difference", "SELECT difference(n), non_negative_difference(usage) FROM cpu WHERE host = 'a' AND " + mid, nil},
		{"difference windows", "SELECT difference(count(n)), non_negative_difference(mean(usage)) FROM cpu WHERE " + mid + " GROUP BY time(4m)", nil},
		{"cumulative sum", "SELECT cumulative_sum(n), cumulative_sum(usage) FROM cpu WHERE host = 'b' AND " + mid, nil},
		{"cumulative sum windows", "SELECT cumulative_sum(sum(n)) FROM cpu WHERE " + mid + " GROUP BY time(5m)", nil},
		{"moving average", "SELECT moving_average(usage, 3) FROM cpu WHERE host = 'a' AND " + mid + " LIMIT 10", nil},
		{"moving average windows", "SELECT moving_average(mean(usage), 4) FROM cpu WHERE " + mid + " GROUP BY time(2m)", nil},
		{"elapsed", "SELECT elapsed(usage), elapsed(n, 1s) FROM cpu WHERE host = 'c' AND " + mid + " LIMIT 20", nil},
		{"elapsed windows", "SELECT elapsed(mean(usage), 1m) FROM cpu WHERE host = 'c' AND " + mid + " GROUP BY time(2m)", nil},
		{"derivative several series", "SELECT derivative(usage) FROM cpu WHERE " + mid, nil},
		{"derivative desc", "SELECT derivative(usage) FROM cpu WHERE host = 'a' AND " + mid + " ORDER BY time DESC", nil},
		// mode() and integral().
		{"mode", "SELECT mode(n), mode(usage) FROM cpu WHERE host = 'a' AND " + mid, nil},
		{"mode windows", "SELECT mode(n) FROM cpu WHERE " + mid + " GROUP BY time(5m), host", nil},
		{"mode several series", "SELECT mode(n) FROM cpu WHERE " + mid + " GROUP BY time(5m)", nil},
		{"integral", "SELECT integral(usage) FROM cpu WHERE host = 'a' AND " + mid, nil},
		{"integral unit", "SELECT integral(n, 1m) FROM cpu WHERE host = 'b' AND " + mid, nil},
		{"integral windows", "SELECT integral(usage), mean(usage) FROM cpu WHERE " + mid + " GROUP BY time(10m), host", nil},
		{"integral windows fill", "SELECT integral(n, 10s) FROM cpu WHERE host = 'c' AND " + mid + " GROUP BY time(4m, 1m) fill(0)", nil},
		{"integral beside", "SELECT integral(usage), integral(n, 1m) FROM cpu WHERE host = 'a' AND " + mid, nil},
		{"top", "SELECT top(usage, 3) FROM cpu WHERE host = 'a' AND " + mid, nil},
		{"subquery", "SELECT max(mean) FROM (SELECT mean(usage) FROM cpu WHERE " + mid + " GROUP BY time(1m))", nil},
		// Math between fields, aggregates and numbers.
		{"math aggregates", "SELECT mean(usage) * 2, max(usage) - min(usage), sum(n) / count(n) FROM cpu WHERE " + mid + " GROUP BY time(5m)", nil},
		{"math aggregates fill", "SELECT mean(usage) + 1 FROM cpu WHERE host = 'a' AND " + mid + " GROUP BY time(1m) fill(none)", nil},
		{"math fields", "SELECT usage * 2, usage + n, n / 3, n * 2, (usage - 1) % 4 FROM cpu WHERE host = 'b' AND " + mid, nil},
		{"math whole range", "SELECT last(usage) - first(usage) FROM cpu WHERE " + mid, nil},
		{"math functions fields", "SELECT abs(usage - 50), floor(usage), ceil(usage), round(usage), sqrt(usage), pow(usage, 2), log(usage, 10), ln(usage), log2(usage), exp(usage / 100) FROM cpu WHERE host = 'b' AND " + mid, nil},
		{"math functions integers", "SELECT floor(n), round(n / 3), sin(n), atan2(n, 2) FROM cpu WHERE host = 'a' AND " + mid, nil},
		{"math functions aggregates", "SELECT floor(2 * (sum(n) / count(n))), round(mean(usage)), abs(min(usage) - max(usage)) FROM cpu WHERE " + mid + " GROUP BY time(5m)", nil},
		{"selectors tie", "SELECT last(usage), first(usage) FROM cpu WHERE " + mid, nil},
		{"selectors tie of two", "SELECT last(usage), first(usage), last(n) FROM cpu WHERE host != 'c' AND " + mid, nil},
		{"selector math", "SELECT last(usage) * 1 FROM cpu WHERE host = 'a' AND " + mid, nil},
		{"selectors tie windows", "SELECT last(usage), first(usage) FROM cpu WHERE " + mid + " GROUP BY time(1m)", nil},
		{"math tag", "SELECT host + 1 FROM cpu WHERE " + mid, nil},
		// Several measurements, listed or by regular expression; SLIMIT and SOFFSET.
		{"from two", "SELECT mean(usage), mean(free) FROM mem, cpu WHERE " + mid + " GROUP BY time(10m)", nil},
		{"from two raw", "SELECT * FROM cpu, mem WHERE " + mid + " LIMIT 4", nil},
		{"from regex", "SELECT count(*) FROM /^(cpu|mem)$/ WHERE " + rng + " GROUP BY host", nil},
		{"from regex star", "SELECT * FROM /e/ WHERE " + mid + " GROUP BY * LIMIT 3", nil},
		{"from regex none", "SELECT * FROM /^nothing/ WHERE " + mid, nil},
		{"from regex other db", "SELECT * FROM nodb../cpu/ WHERE " + mid, nil},
		{"slimit", "SELECT max(usage) FROM cpu WHERE " + mid + " GROUP BY time(10m), host SLIMIT 2", nil},
		{"slimit soffset", "SELECT usage FROM cpu, mem WHERE " + mid + " GROUP BY host LIMIT 2 SLIMIT 1 SOFFSET 1", nil},
		{"soffset", "SELECT count(usage) FROM cpu WHERE " + mid + " GROUP BY * SOFFSET 2", nil},
		// No lower time bound: all time.
		{"no lower bound count", "SELECT count(usage), count(*) FROM cpu", nil},
		{"no lower bound last", "SELECT last(usage) FROM cpu WHERE host = 'a'", nil},
		// last() and first() of every series from its newest (oldest) quantum (lastfirst.go).
		{"last of each host", "SELECT last(usage), last(n) FROM cpu GROUP BY host", nil},
		{"first of each host", "SELECT first(usage) FROM cpu GROUP BY host", nil},
		{"last of all hosts before", "SELECT last(usage) FROM cpu WHERE time < '" + base.Add(30*time.Minute).Format(time.RFC3339) + "'", nil},
		{"first of all hosts after", "SELECT first(n) FROM cpu WHERE time >= '" + base.Add(30*time.Minute).Format(time.RFC3339) + "' GROUP BY host", nil},
		{"no lower bound raw", "SELECT usage FROM cpu WHERE host = 'b' LIMIT 3", nil},
		{"no lower bound upper", "SELECT sum(n) FROM cpu WHERE time < '" + base.Add(30*time.Minute).Format(time.RFC3339) + "' GROUP BY host", nil},
		{"no lower bound group by time", "SELECT mean(usage) FROM cpu WHERE host = 'a' GROUP BY time(1h)", nil},
		{"no lower bound derivative", "SELECT derivative(usage) FROM cpu WHERE host = 'a' LIMIT 3", nil},
		// GROUP BY time() without a lower bound: each group's windows from its first point's.
		{"groupby-orderby-limit", "SELECT max(usage_user) FROM cpu WHERE time < '" + base.Add(30*time.Minute).Format(time.RFC3339) + "' GROUP BY time(1m) ORDER BY time DESC LIMIT 5", tsbs},
		{"no lower bound group by time asc limit", "SELECT max(usage_user) FROM cpu WHERE time < '" + base.Add(30*time.Minute).Format(time.RFC3339) + "' GROUP BY time(1m) LIMIT 4", tsbs},
		{"no lower bound group by time host", "SELECT max(usage) FROM cpu WHERE time < '" + base.Add(5*time.Minute).Format(time.RFC3339) + "' GROUP BY time(20s), host", nil},
		{"no lower bound group by time fill none desc", "SELECT count(n) FROM cpu WHERE time < '" + base.Add(5*time.Minute).Format(time.RFC3339) + "' GROUP BY time(20s), host fill(none) ORDER BY time DESC", nil},
		// Raw LIMIT per group, groups finding their rows at different widths of the window.
		{"last-loc shape", "SELECT velocity FROM readings WHERE fleet = 'South' GROUP BY \"name\", driver ORDER BY time LIMIT 1", url.Values{"db": {"iot"}}},
		{"low-fuel shape", "SELECT \"name\", driver, status FROM \"diagnostics\" WHERE status = 2 AND fleet = 'North' GROUP BY \"name\" ORDER BY time DESC LIMIT 1", url.Values{"db": {"iot"}}},
		{"single-last-loc shape", "SELECT \"name\", driver, velocity FROM readings WHERE \"name\" = 'truck_1' OR \"name\" = 'truck_4' ORDER BY time DESC LIMIT 1", url.Values{"db": {"iot"}}},
		// LIMIT 1 without a condition on fields, answered from the series' partials
		// (limitone.go): integer fields, groups merging series with rows at one time,
		// a time range, a string field among them.
		{"first row of integers", "SELECT current_load, status FROM \"diagnostics\" WHERE fleet = 'North' GROUP BY \"name\" ORDER BY time LIMIT 1", url.Values{"db": {"iot"}}},
		{"newest row of a fleet", "SELECT velocity FROM readings GROUP BY fleet ORDER BY time DESC LIMIT 1", url.Values{"db": {"iot"}}},
		{"newest row in a range", "SELECT velocity FROM readings WHERE time >= '" + base.Add(10*time.Minute).Format(time.RFC3339) + "' AND time < '" + base.Add(50*time.Minute).Format(time.RFC3339) + "' GROUP BY \"name\" ORDER BY time DESC LIMIT 1", url.Values{"db": {"iot"}}},
		{"first row beside a string", "SELECT usage, state FROM cpu GROUP BY host LIMIT 1", nil},
		{"tags only", "SELECT \"name\", driver FROM readings WHERE fleet = 'South' LIMIT 2", url.Values{"db": {"iot"}}},
		{"newest rows where rare", "SELECT current_load FROM \"diagnostics\" WHERE current_load > 1000 GROUP BY \"name\" ORDER BY time DESC LIMIT 2", url.Values{"db": {"iot"}}},
		// Groups bounded by their series' statistics: some hold no value the condition
		// can meet (no rows, not read again), the others are read from their own newest
		// or oldest point.
		{"condition no value of some groups meets", "SELECT current_load, status FROM \"diagnostics\" WHERE current_load > 2000 GROUP BY \"name\" ORDER BY time DESC LIMIT 3", url.Values{"db": {"iot"}}},
		{"condition number first, or never", "SELECT status FROM \"diagnostics\" WHERE 1500 < current_load OR status = 7 GROUP BY \"name\" LIMIT 1", url.Values{"db": {"iot"}}},
		{"condition true by a tag", "SELECT velocity FROM readings WHERE velocity < 0 OR driver = 'Ann' GROUP BY \"name\" ORDER BY time DESC LIMIT 1", url.Values{"db": {"iot"}}},
		{"rows late in every group", "SELECT velocity FROM readings WHERE velocity >= 60 GROUP BY \"name\" ORDER BY time LIMIT 2 OFFSET 1", url.Values{"db": {"iot"}}},
		{"rows late, integer bounds", "SELECT load_capacity FROM \"diagnostics\" WHERE current_load <= 40 AND status <= 1 GROUP BY \"name\", driver LIMIT 3", url.Values{"db": {"iot"}}},
		// Databases that do not exist.
		{"no database", "SELECT usage FROM cpu WHERE " + rng, url.Values{"db": {"nodb"}}},
		{"no database from", "SELECT usage FROM nodb..cpu WHERE " + rng, nil},
		{"no database agg", "SELECT mean(usage) FROM cpu WHERE " + rng + " GROUP BY time(10m)", url.Values{"db": {"nodb"}}},
		{"star no measurement", "SELECT * FROM nosuch WHERE " + rng, nil},
		{"no database show series", "SHOW SERIES", url.Values{"db": {"nodb"}}},
		{"no database show tag keys", "SHOW TAG KEYS", url.Values{"db": {"nodb"}}},
		{"no database show tag values", "SHOW TAG VALUES WITH KEY = host", url.Values{"db": {"nodb"}}},
		{"no database show field keys", "SHOW FIELD KEYS", url.Values{"db": {"nodb"}}},
		{"no database show measurements", "SHOW MEASUREMENTS; SHOW RETENTION POLICIES", url.Values{"db": {"nodb"}}},
		{"error stops statements", "SELECT count(usage) FROM cpu WHERE " + mid + "; SELECT * FROM nodb..x WHERE " + mid + "; SELECT count(n) FROM cpu WHERE " + mid, nil},
		{"no measurement", "SELECT usage FROM nosuch WHERE " + rng, nil},
		// Conditions on field values: rows (raw) and points (aggregates) where they hold.
		{"high-cpu-1", "SELECT * FROM cpu WHERE usage_user > 90.0 AND " + rng + " AND hostname = 'host_1'", tsbs},
		{"high-cpu-all", "SELECT * FROM cpu WHERE usage_user > 90.0 AND " + rng, tsbs},
		{"high-cpu max", "SELECT max(usage_user), count(usage_system) FROM cpu WHERE usage_idle < 10 AND " + rng + " GROUP BY time(5m)", tsbs},
		{"where field", "SELECT usage FROM cpu WHERE usage > 10 AND " + rng, nil},
		{"where field star", "SELECT * FROM cpu WHERE usage > 12 AND " + mid, nil},
		{"where field or tag", "SELECT usage, n FROM cpu WHERE (usage > 14 OR host = 'a') AND " + mid, nil},
		{"where field and tag", "SELECT n FROM cpu WHERE host != 'c' AND n > 20 AND " + mid, nil},
		{"where string", "SELECT usage FROM cpu WHERE state = 's1' AND " + rng, nil},
		{"where string absent", "SELECT usage, state FROM cpu WHERE state != 's1' AND " + rng, nil},
		{"where string regex", "SELECT n, state FROM cpu WHERE state =~ /[12]/ AND " + rng, nil},
		{"where string number", "SELECT usage FROM cpu WHERE state > 5 AND " + mid, nil},
		{"where cast integer", "SELECT n FROM cpu WHERE usage::integer = 5 AND " + mid, nil},
		{"where cast float", "SELECT usage FROM cpu WHERE n::float > 20.5 AND " + mid, nil},
		{"where cast string equal", "SELECT usage FROM cpu WHERE state::string = 's1' AND " + rng, nil},
		{"where cast tag", "SELECT usage FROM cpu WHERE host::tag = 'a' AND usage > 3 AND " + mid, nil},
		{"where two fields", "SELECT usage FROM cpu WHERE usage > n AND " + mid, nil},
		{"where math", "SELECT usage, n FROM cpu WHERE usage * 2 > n + 10 AND " + mid, nil},
		{"where or fields", "SELECT n FROM cpu WHERE (usage < 1 OR n > 35) AND " + mid, nil},
		{"where not selected desc", "SELECT usage FROM cpu WHERE n > 15 AND " + rng + " ORDER BY time DESC LIMIT 10", nil},
		{"where group by", "SELECT usage FROM cpu WHERE usage < 2 AND " + mid + " GROUP BY host", nil},
		{"where integer field", "SELECT free FROM mem WHERE free > 900 AND " + rng, nil},
		{"where aggregate", "SELECT max(usage), count(usage), mean(n) FROM cpu WHERE n < 10 AND " + mid + " GROUP BY time(5m)", nil},
		{"where aggregate tag", "SELECT count(usage), sum(n) FROM cpu WHERE usage > 8 AND host = 'b' AND " + rng + " GROUP BY time(10m), dc", nil},
		{"where aggregate fill", "SELECT count(usage), last(n) FROM cpu WHERE state = 's0' AND " + rng + " GROUP BY time(5m) fill(0)", nil},
		{"where aggregate whole", "SELECT last(usage), first(n), min(usage) FROM cpu WHERE n > 0 AND " + mid + " GROUP BY host", nil},
		{"where count star", "SELECT count(*) FROM cpu WHERE usage > 5 AND " + mid + " GROUP BY time(10m)", nil},
		{"where absent or", "SELECT usage, state FROM cpu WHERE (state = 's1' OR usage > 15) AND " + rng, nil},
		{"where string and tag", "SELECT n FROM cpu WHERE host = 'b' AND state = 's2' AND " + rng, nil},
		{"where integer equal", "SELECT usage FROM cpu WHERE n = 15 AND " + mid, nil},
		{"where median", "SELECT median(usage), percentile(n, 90) FROM cpu WHERE state =~ /s[01]/ AND " + rng + " GROUP BY time(15m)", nil},
		{"where derivative", "SELECT derivative(usage) FROM cpu WHERE host = 'a' AND n > 0 AND " + mid, nil},
		{"where no lower bound", "SELECT count(usage) FROM cpu WHERE n > 30", nil},
		{"where tags or and field", "SELECT usage FROM cpu WHERE (host = 'a' OR host = 'b') AND usage > 10 AND " + mid, nil},
		{"where tag regex and field", "SELECT usage, n FROM cpu WHERE host =~ /a|c/ AND usage > 10 AND " + mid, nil},
		{"where nested", "SELECT usage, n, state FROM cpu WHERE ((usage > 14 AND n < 0) OR (state = 's2' AND host = 'c')) AND " + rng, nil},
		{"where boolean", "SELECT usage FROM cpu WHERE usage = true AND " + mid, nil},
		{"where integer float equal", "SELECT n FROM cpu WHERE n = 15.0 AND " + mid, nil},
		{"where star desc limit", "SELECT * FROM cpu WHERE usage > 9 AND " + rng + " ORDER BY time DESC LIMIT 8", nil},
		{"where absent field cast", "SELECT usage FROM cpu WHERE nosuch::float > 1 AND " + mid, nil},
		{"where group by time host", "SELECT count(usage), mean(usage) FROM cpu WHERE usage > 10 AND " + rng + " GROUP BY time(10m), host fill(none)", nil},
		{"where function", "SELECT usage FROM cpu WHERE abs(n) > 5 AND " + mid, nil},
		// avg-vs-projected-fuel-consumption's shape over all time: means of a field and of a
		// field constant per truck where another field holds; where it holds nowhere in some series, and
		// everywhere (condkeep.go keeps the series as read).
		{"avg-vs-projected shape", "SELECT mean(current_load) AS mean_load, mean(load_capacity) AS load_capacity FROM \"diagnostics\" WHERE status > 0 GROUP BY fleet", url.Values{"db": {"iot"}}},
		{"where aggregate holds nowhere in some", "SELECT mean(current_load), count(load_capacity) FROM \"diagnostics\" WHERE current_load > 1500 GROUP BY fleet, \"name\"", url.Values{"db": {"iot"}}},
		{"where aggregate holds everywhere", "SELECT mean(current_load), sum(load_capacity) FROM \"diagnostics\" WHERE status >= 0 GROUP BY fleet, model", url.Values{"db": {"iot"}}},
		{"where aggregate own field", "SELECT mean(velocity), count(velocity) FROM readings WHERE velocity > 1 GROUP BY fleet", url.Values{"db": {"iot"}}},
	}
	// Series without a tag: the tag is the empty string, as in InfluxDB's index.
	gaps := url.Values{"db": {"gaps"}}
	cases = append(cases, []struct {
		name, q string
		params  url.Values
	}{
		{"missing tag not equal", "SELECT count(v) FROM m WHERE fleet != 'South' AND " + rng + " GROUP BY fleet", gaps},
		{"missing tag not matching", "SELECT sum(v) FROM m WHERE fleet !~ /Sou/ AND " + rng, gaps},
		{"missing tag matching anything", "SELECT count(v) FROM m WHERE fleet =~ /.*/ AND " + rng, gaps},
		{"missing tag matching empty", "SELECT count(v) FROM m WHERE fleet =~ /^$/ AND " + rng + " GROUP BY \"name\"", gaps},
		{"missing tag equal empty", "SELECT count(v) FROM m WHERE fleet = '' AND " + rng + " GROUP BY \"name\"", gaps},
		{"unknown tag not equal", "SELECT count(v) FROM m WHERE nosuch != 'x' AND " + rng, gaps},
		{"missing tag beside a field condition", "SELECT mean(v) FROM m WHERE fleet != 'South' AND v > 10 AND " + rng + " GROUP BY fleet", gaps},
		{"missing tag raw", "SELECT v FROM m WHERE \"name\" != 't0' AND fleet !~ /North/ AND " + mid + " LIMIT 6", gaps},
		{"show series missing tag", "SHOW SERIES FROM m WHERE fleet != 'South'", gaps},
		{"show tag keys missing tag", "SHOW TAG KEYS FROM m WHERE fleet =~ /^$/", gaps},
		{"show tag values time ignored", "SHOW TAG VALUES FROM m WITH KEY = \"name\" WHERE time > '" + base.Add(time.Hour).Format(time.RFC3339) + "'", gaps},
		{"show series cardinality missing tag", "SHOW SERIES EXACT CARDINALITY WHERE fleet != 'South'", gaps},
	}...)
	var gapCases []string
	for _, c := range cases[len(cases)-12:] {
		gapCases = append(gapCases, c.name)
	}
	// time among the fields: the first column already, named by an alias.
	cases = append(cases, []struct {
		name, q string
		params  url.Values
	}{
		{"time field", "SELECT time, v FROM m WHERE \"name\" = 't1' AND " + mid + " LIMIT 3", gaps},
		{"time field alias", "SELECT v, time AS t FROM m WHERE \"name\" = 't1' AND " + mid + " LIMIT 3", gaps},
		{"time field alias aggregate", "SELECT time AS t, max(v) FROM m WHERE " + rng + " GROUP BY time(20m)", gaps},
		{"time alone", "SELECT \"time\" FROM m WHERE " + mid, gaps},
	}...)
	// Answered, with values.
	gapCases = append(gapCases, "time field", "time field alias", "time field alias aggregate")
	cases = append(cases, subqueryCases(base)...) // subquery_test.go
	cases = append(cases, limitCases(base)...)    // subquery_test.go
	for _, c := range limitCases(base) {
		gapCases = append(gapCases, c.name) // answered, with values
	}
	// Field type conflicts at /write: the same writes answered the same, the same kept.
	// The first write opens InfluxDB's shard group of 1970, whose first write refuses a
	// conflict within itself whole ("field type conflict", nothing stored): that is
	// InfluxDB creating a shard, not a rule of its field types. In a line refused for a
	// conflict, the fields before the conflicting one stay unknown here where InfluxDB
	// creates them (SELECT * lists them without values): the lines below name the
	// conflicting field first.
	for i, body := range []string{
		"opens,the=shard v=0 500000000\n",
		"ft v=1 1000000000\nft,t=x v=\"s\" 2000000000\nft,t=y v=3i 3000000000\nft,t=z v=4,w=7i 4000000000\n",
		"ft,t=q v=5i,u=1 5000000000\n",
		"ft,t=q u=2,v=5 6000000000\n",
		"fs,t=q v=\"a\" 5000000000\nfs,t=r v=5,w=2 6000000000\nft,t=q v=6,u=3 7000000000\n",
		"ft,t=n v=\"x\",u=\"y\" 8000000000\nft,t=n v=\"x\" 9000000000\n",
	} {
		t.Run(fmt.Sprintf("write conflict %d", i), func(t *testing.T) {
			var ans [2]string
			for j, u := range urls {
				resp, err := http.Post(u+"/write?db=diff", "text/plain", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				ans[j] = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
			}
			if ans[0] != ans[1] {
				t.Errorf("%q\ninfluxdb: %s\n   tsdht: %s", body, ans[0], ans[1])
			}
		})
	}
	cases = append(cases, []struct {
		name, q string
		params  url.Values
	}{
		{"after conflicts", "SELECT * FROM ft WHERE time >= 0 AND time < 10s", nil},
		{"after conflicts fs", "SELECT * FROM fs WHERE time >= 0 AND time < 10s", nil},
		{"after conflicts mean", "SELECT mean(v), count(u) FROM ft WHERE time >= 0 AND time < 10s", nil},
		{"after conflicts where", "SELECT * FROM ft WHERE u > 1 AND time >= 0 AND time < 10s", nil},
		{"after conflicts where absent", "SELECT v FROM ft WHERE w = 7 AND time >= 0 AND time < 10s", nil},
	}...)
	// SELECT … INTO: the answer written back, then read. Last: they write to iot.
	iot := url.Values{"db": {"iot"}}
	irng := fmt.Sprintf("time >= '%s' AND time < '%s'", base.Format(time.RFC3339), base.Add(2*time.Hour).Format(time.RFC3339))
	intoCases := []struct {
		name, q string
		params  url.Values
	}{
		{"into windows", "SELECT mean(velocity) AS mv, max(velocity) INTO vmean FROM readings WHERE " + irng + " GROUP BY time(10m), \"name\"", iot},
		{"into windows read", "SELECT * FROM vmean WHERE " + irng + " GROUP BY *", iot},
		{"into tags as fields select", "SELECT velocity, driver FROM readings WHERE fleet = 'North' AND " + irng, iot},
		{"into tags as fields", "SELECT velocity, driver INTO \"iot\".\"autogen\".vraw FROM readings WHERE fleet = 'North' AND " + irng, iot},
		{"into tags as fields read", "SELECT * FROM vraw WHERE " + irng, iot},
		{"into measurement backreference", "SELECT max(current_load) INTO iot..:MEASUREMENT FROM \"diagnostics\" WHERE " + irng + " GROUP BY time(1h), fleet", iot},
		{"into measurement backreference read", "SELECT max FROM \"diagnostics\" WHERE " + irng + " GROUP BY fleet", iot},
		{"into no database", "SELECT max(velocity) INTO vx FROM iot..readings WHERE " + irng, url.Values{"db": {""}}},
		{"into avg-daily-driving-session", "SELECT \"elapsed\" INTO \"random_measure2_1\" FROM (SELECT difference(\"difka\"), elapsed(\"difka\", 1m) FROM (SELECT \"difka\" FROM (SELECT difference(\"mv\") AS difka FROM (SELECT floor(mean(\"velocity\")/10)/floor(mean(\"velocity\")/10) AS \"mv\" FROM \"readings\" WHERE \"name\"!='' AND " + irng + " GROUP BY time(10m), \"fleet\", \"name\", \"driver\" fill(0)) GROUP BY \"fleet\", \"name\", \"driver\") WHERE \"difka\"!=0 GROUP BY \"fleet\", \"name\", \"driver\") GROUP BY \"fleet\", \"name\", \"driver\") WHERE \"difference\" = -2 GROUP BY \"fleet\", \"name\", \"driver\"; SELECT mean(\"elapsed\") FROM \"random_measure2_1\" WHERE " + irng + " GROUP BY time(1d),\"fleet\", \"name\", \"driver\"", iot},
	}
	cases = append(cases, intoCases...)
	for _, c := range intoCases {
		if c.name != "into no database" {
			gapCases = append(gapCases, c.name) // answered, with values
		}
	}
	// Answered, with values, not refused: what tsdht answers since issue #29.
	mustAnswer := map[string]bool{"groupby-orderby-limit": true, "no lower bound group by time asc limit": true,
		"no lower bound group by time host": true, "no lower bound group by time fill none desc": true,
		"no lower bound group by time": true, "last-loc shape": true, "low-fuel shape": true, "single-last-loc shape": true, "newest rows where rare": true,
		"first row of integers": true, "newest row of a fleet": true, "newest row in a range": true, "first row beside a string": true,
		"avg-vs-projected shape": true, "where aggregate holds nowhere in some": true, "where aggregate holds everywhere": true, "where aggregate own field": true}
	for _, n := range gapCases {
		mustAnswer[n] = true
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := url.Values{"db": {"diff"}, "q": {c.q}}
			for k, x := range c.params {
				v[k] = x
			}
			var (
				codes [2]int
				raw   [2]string
				ans   [2]any
			)
			for i, u := range urls {
				resp, err := http.Get(u + "/query?" + v.Encode())
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				codes[i], raw[i] = resp.StatusCode, string(b)
				if err := json.Unmarshal(b, &ans[i]); err != nil {
					t.Fatalf("answer %d not JSON: %v: %s", i, err, b)
				}
			}
			if mustAnswer[c.name] && !strings.Contains(raw[0], `"values"`) {
				t.Errorf("InfluxDB answers %s without values: the case tests nothing: %s", c.q, raw[0])
			}
			if codes[1] == http.StatusBadRequest && codes[0] == http.StatusOK {
				if mustAnswer[c.name] {
					t.Errorf("%s: refused, want InfluxDB's answer %s: %s", c.q, raw[0], raw[1])
				}
				if !strings.Contains(raw[1], "not supported") {
					t.Errorf("tsdht refused without saying what is not supported: %s", raw[1])
				}
				t.Logf("refused: %s", raw[1])
				return
			}
			if codes[0] != codes[1] || !reflect.DeepEqual(ans[0], ans[1]) {
				t.Errorf("%s\ninfluxdb %d: %s\n   tsdht %d: %s", c.q, codes[0], raw[0], codes[1], raw[1])
			}
		})
	}
	// A measurement's fields and tag keys (the catalog's shape), before and after one
	// host's series are dropped, its own tag key with them (shape_test.go).
	t.Run("shape before and after a drop", func(t *testing.T) {
		writeBoth(t, urls, "gone", shapeLines(base))
		compareShapes(t, urls, "gone", base, "before the drop")
		dropHost(t, urls, "gone", "c")
		compareShapes(t, urls, "gone", base, "after the drop")
	})
}
