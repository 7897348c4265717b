package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// shapeLines are three hosts of measurement m: a with fields x and y, b with fields x
// and only_b and a tag (rack) of its own, c with fields x and y and a tag (zone) of its
// own; and a host of measurement n.
func shapeLines(base time.Time) string {
	var b strings.Builder
	for i := 0; i < 20; i++ {
		t := base.Add(time.Duration(i) * time.Minute).UnixNano()
		fmt.Fprintf(&b, "m,host=a x=%d,y=%di %d\n", i, i*2, t)
		fmt.Fprintf(&b, "m,host=b,rack=r1 x=%d,only_b=\"s%d\" %d\n", i+100, i%3, t)
		fmt.Fprintf(&b, "m,host=c,zone=z x=%d,y=%di %d\n", i+200, i, t)
		if i%5 == 0 {
			fmt.Fprintf(&b, "n,host=a z=%d %d\n", i, t)
		}
	}
	return b.String()
}

// dropHost deletes host's series of measurement m of database db: DROP SERIES on
// InfluxDB (urls[0]), a whole-series delete of each of them on tsdht (the package's
// cluster).
func dropHost(t *testing.T, urls []string, db, host string) {
	t.Helper()
	resp, err := http.Post(urls[0]+"/query?"+url.Values{"db": {db}, "q": {"DROP SERIES FROM m WHERE host = '" + host + "'"}}.Encode(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.Contains(string(b), "error") {
		t.Fatalf("DROP SERIES on InfluxDB: %d %s", resp.StatusCode, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	infos, err := engine.Series(ctx, SeriesQuery{Match: map[string]string{TagDB: db, TagMeasurement: "m", "host": host}, Prefix: db + "/m"})
	if err != nil || len(infos) == 0 {
		t.Fatalf("series of host %s: %v, %v", host, infos, err)
	}
	for _, in := range infos {
		if _, err := cluster.Nodes[1].Coordinator().Delete(ctx, &wire.DelReq{Key: in.Key, Whole: true}); err != nil {
			t.Fatalf("deleting %s: %v", in.Key, err)
		}
	}
}

// shapeCases are the statements that read a measurement's shape, asked of InfluxDB and
// tsdht before and after a host's series are dropped (TestInfluxQLAnswersOrRefuses).
func shapeCases(base time.Time) []string {
	rng := fmt.Sprintf("time >= '%s' AND time < '%s'", base.Format(time.RFC3339), base.Add(time.Hour).Format(time.RFC3339))
	return []string{
		"SHOW FIELD KEYS",
		"SHOW FIELD KEYS FROM m",
		"SHOW FIELD KEYS FROM /^[mn]$/",
		"SELECT * FROM m WHERE " + rng,
		"SELECT * FROM m WHERE " + rng + " GROUP BY *",
		// A tag pinned: the fields from the shape, the series of the tag listed.
		"SELECT * FROM m WHERE host = 'a' AND " + rng,
		"SELECT * FROM m WHERE host = 'b' AND x > 105 AND " + rng,
		"SELECT * FROM m WHERE host = 'c' AND " + rng,
		"SELECT *::field FROM m WHERE host = 'b' AND " + rng,
		"SELECT max(*) FROM m WHERE host = 'a' AND " + rng + " GROUP BY *",
		"SELECT *::field FROM m WHERE " + rng,
		"SELECT count(*) FROM m WHERE " + rng,
		"SELECT * FROM m, n WHERE " + rng + " LIMIT 3",
		"SELECT x FROM m WHERE only_b = 's1' AND " + rng,
	}
}

// compareShapes asks both servers each of shapeCases in database db and wants the
// same answers.
func compareShapes(t *testing.T, urls []string, db string, base time.Time, when string) {
	t.Helper()
	for _, q := range shapeCases(base) {
		var raw [2]string
		var ans [2]any
		for i, u := range urls {
			resp, err := http.Get(u + "/query?" + url.Values{"db": {db}, "q": {q}}.Encode())
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			raw[i] = fmt.Sprintf("%d %s", resp.StatusCode, b)
			if err := json.Unmarshal(b, &ans[i]); err != nil {
				t.Fatalf("%s: %v: %s", q, err, b)
			}
		}
		if !reflect.DeepEqual(ans[0], ans[1]) {
			t.Errorf("%s: %s\ninfluxdb: %s\n   tsdht: %s", when, q, raw[0], raw[1])
		}
	}
}

// TestShapeAnswersAsTheListing checks that the catalog's shape of a measurement (one
// request per node) says what the listing of all its series says: its fields, their
// types, its tag keys; and, once a field's only series is deleted, no longer that field.
func TestShapeAnswersAsTheListing(t *testing.T) {
	base := time.Now().Add(-2 * time.Hour).Truncate(time.Hour)
	if code, body := write(t, "shapes", "", shapeLines(base)); code != http.StatusNoContent {
		t.Fatalf("write: %d %s", code, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	check := func(wantFields string) {
		t.Helper()
		s, err := engine.Shape(ctx, catalog.ShapeQuery{Prefix: "shapes/m", DB: "shapes", Measurement: "m"})
		if err != nil {
			t.Fatal(err)
		}
		infos, err := engine.Series(ctx, SeriesQuery{Match: map[string]string{TagDB: "shapes", TagMeasurement: "m"}, Prefix: "shapes/m"})
		if err != nil {
			t.Fatal(err)
		}
		listed, tags := map[string]string{}, map[string]bool{}
		for _, in := range infos {
			listed[in.Tags[TagField]] = influxType(in.Type)
			for k := range in.Tags {
				if !strings.HasPrefix(k, "__") {
					tags[k] = true
				}
			}
		}
		shaped, shapedTags := map[string]string{}, map[string]bool{}
		for _, f := range s.Fields {
			shaped[f.Field] = influxType(f.Type)
		}
		for _, k := range s.TagKeys["m"] {
			shapedTags[k] = true
		}
		if !reflect.DeepEqual(shaped, listed) || !reflect.DeepEqual(shapedTags, tags) {
			t.Fatalf("shape %v %v, listing %v %v", shaped, shapedTags, listed, tags)
		}
		if got := fmt.Sprint(sortedKeys(shaped)); got != wantFields {
			t.Fatalf("fields %s, want %s", got, wantFields)
		}
		// With the values of a tag key: those the listing's series carry.
		sv, err := engine.Shape(ctx, catalog.ShapeQuery{Prefix: "shapes/m", DB: "shapes", Measurement: "m", ValuesOf: "host"})
		if err != nil || !sv.HasValues {
			t.Fatalf("shape with the values of host: %v (values: %v)", err, sv.HasValues)
		}
		hosts := map[string]bool{}
		for _, in := range infos {
			if h, ok := in.Tags["host"]; ok {
				hosts[h] = true
			}
		}
		if got, want := fmt.Sprint(sv.Values["m"]), fmt.Sprint(sortedSet(hosts)); got != want {
			t.Fatalf("shape's hosts %s, the listing's %s", got, want)
		}
	}
	check("[only_b x y]")
	// InfluxDB 1.x lists a field whose last series DROP SERIES removed until its shard
	// group expires; tsdht lists the fields of live series, the listing's answer.
	for _, k := range []string{"shapes/m,host=b,rack=r1#only_b", "shapes/m,host=b,rack=r1#x"} {
		if _, err := cluster.Nodes[2].Coordinator().Delete(ctx, &wire.DelReq{Key: k, Whole: true}); err != nil {
			t.Fatal(err)
		}
	}
	check("[x y]") // every node's shape changed with its entries: no stale answer
	_, r := query(t, "shapes", "SHOW FIELD KEYS FROM m")
	if got := fmt.Sprint(r.Results[0].Series[0].Values); got != "[[x float] [y integer]]" {
		t.Fatalf("SHOW FIELD KEYS after the delete: %s", got)
	}
}

// BenchmarkStarOfOneHost asks the package's 3-node cluster for SELECT * of one host
// among 200 (2,000 series of ten fields) over a minute, and SHOW FIELD KEYS: queries
// whose cost is the measurement's fields, not its points.
func BenchmarkStarOfOneHost(b *testing.B) {
	base := time.Now().Add(-5 * time.Hour).Truncate(time.Hour)
	writeLines(b, "benchstar", tsbsLines(base, 200, 6))
	rng := fmt.Sprintf("time >= '%s' AND time < '%s'", base.Format(time.RFC3339), base.Add(time.Minute).Format(time.RFC3339))
	benchQueries(b, "benchstar", []benchQuery{ // fieldcond_test.go
		{"high-cpu-1", "SELECT * FROM cpu WHERE usage_user > 60.0 AND " + rng + " AND hostname = 'host_1'"},
		{"star-1", "SELECT * FROM cpu WHERE hostname = 'host_7' AND " + rng},
		{"show-field-keys", "SHOW FIELD KEYS"},
	})
}
