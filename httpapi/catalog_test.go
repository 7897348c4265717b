package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
)

func catalogLines(base time.Time) string {
	var b strings.Builder
	for i := 0; i < 60; i++ {
		t := base.Add(time.Duration(i) * time.Second).UnixNano()
		for h, host := range []string{"a", "b", "c"} {
			region := "eu"
			if host == "c" {
				region = "us"
			}
			fmt.Fprintf(&b, "cpu,host=%s,region=%s usage=%v,n=%di %d\n", host, region, 10*float64(h)+math.Cos(float64(i)/5), i%7+h, t)
		}
		if i%4 == 0 {
			fmt.Fprintf(&b, "mem,host=a free=%di %d\n", 1000-i, t)
		}
	}
	return b.String()
}

func catalogQueries(base time.Time) []string {
	rng := fmt.Sprintf("time >= '%s' AND time < '%s'", base.Format(time.RFC3339), base.Add(time.Minute).Format(time.RFC3339))
	return []string{
		"SHOW MEASUREMENTS",
		"SHOW TAG KEYS",
		"SHOW TAG KEYS FROM cpu",
		`SHOW TAG VALUES FROM cpu WITH KEY = "host"`,
		`SHOW TAG VALUES WITH KEY IN ("host", "region")`,
		`SHOW TAG VALUES FROM cpu WITH KEY = "host" WHERE region = 'eu'`,
		"SHOW FIELD KEYS",
		"SHOW FIELD KEYS FROM cpu",
		"SHOW SERIES",
		"SHOW SERIES FROM cpu WHERE region = 'us'",
		// LIMIT and OFFSET: of the lists of measurements and series, and of each
		// measurement's keys and values; SLIMIT changes nothing, as in InfluxDB.
		"SHOW MEASUREMENTS LIMIT 1",
		"SHOW MEASUREMENTS LIMIT 1 OFFSET 1",
		"SHOW TAG KEYS LIMIT 1",
		"SHOW TAG KEYS FROM cpu LIMIT 1 OFFSET 1",
		"SHOW TAG KEYS SLIMIT 1",
		`SHOW TAG VALUES WITH KEY IN ("host", "region") LIMIT 2 OFFSET 1`,
		"SHOW FIELD KEYS LIMIT 1 OFFSET 1",
		"SHOW SERIES LIMIT 2 OFFSET 1",
		"SHOW SERIES FROM cpu WHERE region = 'eu' LIMIT 1",
		// Cardinalities: estimations of the whole database, else counts per measurement.
		"SHOW SERIES CARDINALITY",
		"SHOW SERIES EXACT CARDINALITY",
		"SHOW SERIES CARDINALITY FROM cpu WHERE region = 'eu'",
		"SHOW MEASUREMENT CARDINALITY",
		"SHOW MEASUREMENT EXACT CARDINALITY",
		"SHOW MEASUREMENT CARDINALITY WHERE region = 'us'",
		"SHOW TAG KEY CARDINALITY",
		"SHOW TAG KEY EXACT CARDINALITY FROM cpu",
		`SHOW TAG VALUES CARDINALITY WITH KEY = "host"`,
		`SHOW TAG VALUES EXACT CARDINALITY WITH KEY IN ("host", "region") WHERE region = 'eu'`,
		"SHOW FIELD KEY CARDINALITY",
		"SHOW FIELD KEY EXACT CARDINALITY FROM mem",
		"SELECT mean(usage) FROM cpu WHERE " + rng + " GROUP BY host",
		"SELECT mean(usage), max(n) FROM cpu WHERE " + rng + " GROUP BY time(20s), host",
		"SELECT count(usage) FROM cpu WHERE region = 'eu' AND " + rng + " GROUP BY time(30s)",
		"SELECT sum(n) FROM cpu WHERE host =~ /^[ab]$/ AND " + rng + " GROUP BY region",
		"SELECT max(usage) FROM cpu WHERE host != 'a' AND " + rng + " GROUP BY time(30s), region fill(none)",
		"SELECT min(usage) FROM cpu WHERE (host = 'a' OR host = 'c') AND " + rng + " GROUP BY host",
		"SELECT usage FROM cpu WHERE host = 'b' AND " + rng + " ORDER BY time DESC LIMIT 3",
		"SELECT free FROM mem WHERE " + rng + " LIMIT 4",
		"SELECT * FROM cpu WHERE " + rng + " LIMIT 20",
		"SELECT * FROM cpu WHERE host = 'c' AND " + rng + " ORDER BY time DESC LIMIT 5",
		"SELECT *::field FROM cpu WHERE host = 'b' AND " + rng,
		"SELECT * FROM cpu WHERE " + rng + " GROUP BY host LIMIT 3",
		"SELECT /^u/ FROM cpu WHERE host = 'a' AND " + rng + " LIMIT 5",
		"SELECT * FROM mem WHERE " + rng,
		"SELECT mean(*) FROM cpu WHERE " + rng + " GROUP BY time(20s)",
		"SELECT max(*) FROM cpu WHERE " + rng + " GROUP BY host",
		// Several series per group, equal times and equal values: InfluxDB's choices among
		// equal candidates (min/max the earliest point, first/last the greater value).
		"SELECT first(n), last(n) FROM cpu WHERE region = 'eu' AND " + rng + " GROUP BY time(20s)",
		"SELECT first(usage) FROM cpu WHERE " + rng,
		"SELECT last(n) FROM cpu WHERE " + rng,
		"SELECT max(n) FROM cpu WHERE region = 'eu' AND " + rng,
		"SELECT min(n) FROM cpu WHERE " + rng,
		"SELECT mean(usage), stddev(usage), spread(n), count(n), sum(usage) FROM cpu WHERE " + rng + " GROUP BY time(15s), region",
	}
}

// TestCatalogPathDifferential runs the queries that need the series catalog against
// InfluxDB 1.x and against the package's real cluster (its nodes' series catalog):
// the SHOW statements, SELECT *, GROUP BY tag and the tag filters must answer as
// InfluxDB does.
func TestCatalogPathDifferential(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the InfluxDB differential test")
	}
	addr := testutil.StartInfluxd(t)
	base := time.Now().Add(-3 * time.Hour).Truncate(time.Hour)
	lines := catalogLines(base)
	urls := []string{"http://" + addr, srvURL}
	writeBoth(t, urls, "cat", lines)
	// Answers without series or with an error, as InfluxDB's.
	empty := []string{
		"SHOW MEASUREMENTS OFFSET 2",
		"SHOW TAG KEYS OFFSET 3",
		"SHOW SERIES OFFSET 4",
		"SHOW SERIES EXACT CARDINALITY OFFSET 1",
		"SHOW SERIES CARDINALITY WHERE region = 'mars'",
		"SHOW MEASUREMENT CARDINALITY WHERE region = 'mars'",
		"SHOW SERIES CARDINALITY ON nodb",
		"SHOW SERIES EXACT CARDINALITY ON nodb",
		"SHOW TAG KEY CARDINALITY ON nodb",
		`SHOW TAG VALUES CARDINALITY WITH KEY = "nokey"`,
		"SHOW FIELD KEY CARDINALITY FROM nosuch",
	}
	for i, q := range append(catalogQueries(base), empty...) {
		wantSeries := i < len(catalogQueries(base))
		var ans [2]any
		var raw [2][]byte
		for i, u := range urls {
			resp, err := http.Get(u + "/query?" + url.Values{"db": {"cat"}, "q": {q}}.Encode())
			if err != nil {
				t.Fatal(err)
			}
			raw[i], _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err := json.Unmarshal(raw[i], &ans[i]); err != nil {
				t.Fatalf("%q: %v %s", q, err, raw[i])
			}
		}
		if wantSeries && !bytes.Contains(raw[1], []byte(`"series":[{`)) {
			t.Errorf("%s: no series: %s", q, raw[1])
		}
		if testing.Verbose() {
			t.Logf("%s\n   tsdht: %.300s", q, raw[1])
		}
		if !testutil.SameJSON(ans[0], ans[1]) {
			t.Errorf("%s\ninfluxdb: %s\n   tsdht: %s", q, raw[0], raw[1])
		}
	}
}

// writeBoth creates database db and writes lines to each server at urls.
func writeBoth(t *testing.T, urls []string, db, lines string) {
	t.Helper()
	for _, u := range urls {
		// influxd answers /ping before its meta store takes a CREATE DATABASE: ask again
		// until the write finds the database.
		testutil.WaitNoError(t, 20*time.Second, func() error {
			resp, err := http.Post(u+"/query?"+url.Values{"q": {"CREATE DATABASE " + db}}.Encode(), "", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			resp, err = http.Post(u+"/write?db="+db, "text/plain", strings.NewReader(lines))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusNoContent:
				return nil
			case http.StatusNotFound:
				return fmt.Errorf("write: %d %s", resp.StatusCode, b)
			}
			t.Fatalf("%s write: %d %s", u, resp.StatusCode, b)
			return nil
		}, "%s to take a write into a database just created", u)
	}
}

// TestCardinalityGroupByRefused: a cardinality grouped by a tag is refused, naming
// what to do, not answered without its groups.
func TestCardinalityGroupByRefused(t *testing.T) {
	writeBoth(t, []string{srvURL}, "cardgroup", "m,host=a v=1 1000000000\nm,host=b v=2 1000000000\n")
	for _, q := range []string{"SHOW SERIES EXACT CARDINALITY GROUP BY host", "SHOW TAG KEY CARDINALITY GROUP BY host"} {
		_, r := query(t, "cardgroup", q)
		if len(r.Results) != 1 || !strings.Contains(r.Results[0].Error, "not supported by tsdht: GROUP BY in SHOW") ||
			!strings.Contains(r.Results[0].Error, "count without it") || len(r.Results[0].Series) != 0 {
			t.Errorf("%s: %+v", q, r)
		}
	}
	_, r := query(t, "cardgroup", "SHOW SERIES EXACT CARDINALITY")
	if len(r.Results) != 1 || len(r.Results[0].Series) != 1 || fmt.Sprint(r.Results[0].Series[0].Values) != "[[2]]" {
		t.Errorf("SHOW SERIES EXACT CARDINALITY: %+v", r)
	}
}
