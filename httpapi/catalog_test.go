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
	for _, q := range catalogQueries(base) {
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
		if !bytes.Contains(raw[1], []byte(`"series":[{`)) {
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
