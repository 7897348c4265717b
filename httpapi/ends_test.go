package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
	"github.com/tsdht/tsdht/tsdb/repair"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// heldEverywhere waits until every node of the test cluster (rf = its size) stores n
// points of series key.
func heldEverywhere(t *testing.T, key string, n int) {
	t.Helper()
	var got []int
	if !testutil.Poll(30*time.Second, func() bool {
		got = got[:0]
		for _, node := range cluster.Nodes {
			w, ok := node.Store().(repair.Walker)
			if !ok {
				t.Fatalf("the store %T cannot be walked", node.Store())
			}
			held := 0
			if err := w.Pairs(func(ref store.ShardRef, k string) bool {
				if k == key {
					pts, _, err := node.Store().Read(ref, k, -1<<63, 1<<63-1)
					if err != nil {
						t.Fatal(err)
					}
					held += pts.Len()
				}
				return true
			}); err != nil {
				t.Fatal(err)
			}
			got = append(got, held)
		}
		return !slices.ContainsFunc(got, func(h int) bool { return h < n })
	}) {
		t.Fatalf("%s: the nodes hold %v points, want %d on each", key, got, n)
	}
}

// endsEngine is a manyEngine that is an EndsReader (the node's).
type endsEngine struct{ manyEngine }

func (e endsEngine) EndsMany(ctx context.Context, series []SeriesInfo, from, to int64, oldest bool) []AggregateResult {
	e.count("EndsMany")
	return e.node.EndsMany(ctx, series, from, to, oldest)
}

// A LIMIT 1 ordered by time, answered from each series' newest (oldest) quantum
// holding a point in the range (EndsMany, one call for every series), answers as an
// Engine read series by series and as AggregateMany over the whole range do: over
// series of different quantum lengths (10 m and 6 h, fitted by their first writes), a
// series whose newest points were deleted (its newest quanta hold none: the walk goes
// back), ranges that end before the newest quantum or start after the oldest; and
// last() and first() with no GROUP BY time() alike.
func TestLimitOneFromNewestQuantum(t *testing.T) {
	const db = "ends"
	t0 := time.Date(2016, 3, 1, 0, 0, 0, 0, time.UTC)
	var lines []string
	for i := range 30 * 60 { // fast and del: a point a second for 30 m (10 m quanta)
		for _, h := range []string{"fast", "del"} {
			lines = append(lines, fmt.Sprintf("ends,host=%s lat=%d,lon=%d %d", h, i, -i, ns(t0.Add(time.Duration(i)*time.Second))))
		}
	}
	for i := range 10 * 60 { // slow: a point a minute for 10 h (6 h quanta)
		lines = append(lines, fmt.Sprintf("ends,host=slow lat=%d,lon=%d %d", i, -i, ns(t0.Add(time.Duration(i)*time.Minute))))
	}
	if code, b := write(t, db, "", strings.Join(lines, "\n")); code != http.StatusNoContent {
		t.Fatalf("write: %d %s", code, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	infos, err := engine.Series(ctx, SeriesQuery{Match: map[string]string{TagDB: db, TagMeasurement: "ends"}, Prefix: db + "/ends"})
	if err != nil || len(infos) != 6 {
		t.Fatalf("series: %v, %v", infos, err)
	}
	quanta := map[string]time.Duration{}
	for _, in := range infos {
		d, err := cluster.Nodes[2].Coordinator().Describe(ctx, in.Key)
		if err != nil {
			t.Fatal(err)
		}
		quanta[in.Tags["host"]] = d.Q.Duration()
		if in.Tags["host"] != "del" {
			continue
		}
		// del keeps its first 5 minutes: its two newest quanta hold nothing. The write
		// is acknowledged at its quorum: the delete waits until every replica holds it,
		// or a replica still storing it would keep the points the delete reached first.
		heldEverywhere(t, in.Key, 30*60)
		for {
			if _, err := cluster.Nodes[1].Coordinator().Delete(ctx, &wire.DelReq{Key: in.Key, From: ns(t0.Add(5 * time.Minute)), To: ns(t0.Add(time.Hour))}); err != nil {
				t.Fatalf("deleting from %s: %v", in.Key, err)
			}
			pts, err := engine.Read(ctx, in.Key, ns(t0.Add(5*time.Minute)), ns(t0.Add(time.Hour)))
			if err != nil {
				t.Fatal(err)
			}
			if pts.Len() == 0 {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("%s: %d points left after the delete", in.Key, pts.Len())
			}
		}
	}
	if want := map[string]time.Duration{"fast": 10 * time.Minute, "del": 10 * time.Minute, "slow": 6 * time.Hour}; !reflect.DeepEqual(quanta, want) {
		t.Fatalf("quanta %v, want %v", quanta, want)
	}
	at := func(ds ...time.Duration) []string {
		var out []string
		for _, d := range ds {
			out = append(out, rfc(t0.Add(d)))
		}
		slices.Sort(out)
		return out
	}
	within := func(from, to time.Duration) string {
		return fmt.Sprintf("time >= '%s' AND time < '%s'", rfc(t0.Add(from)), rfc(t0.Add(to)))
	}
	checkEndsCases(t, db, []limitCase{
		{`SELECT lat, lon FROM ends GROUP BY host ORDER BY time DESC LIMIT 1`,
			at(5*time.Minute-time.Second, 30*time.Minute-time.Second, 10*time.Hour-time.Minute), nil},
		{`SELECT lat, lon FROM ends GROUP BY host ORDER BY time LIMIT 1`, at(0, 0, 0), nil},
		{`SELECT lat FROM ends WHERE host = 'del' ORDER BY time DESC LIMIT 1`, at(5*time.Minute - time.Second), nil},
		// Ranges that end before the newest quantum (in slow's first 6 h quantum, in
		// fast's second 10 m one) and that start after the oldest.
		{`SELECT lat, lon FROM ends WHERE time < '` + rfc(t0.Add(15*time.Minute)) + `' GROUP BY host ORDER BY time DESC LIMIT 1`,
			at(5*time.Minute-time.Second, 15*time.Minute-time.Second, 14*time.Minute), nil},
		{`SELECT lat, lon FROM ends WHERE ` + within(25*time.Minute, 7*time.Hour) + ` GROUP BY host ORDER BY time LIMIT 1`,
			at(25*time.Minute, 25*time.Minute), nil},
		{`SELECT lat, lon FROM ends WHERE ` + within(time.Minute, 2*time.Minute) + ` GROUP BY host ORDER BY time DESC LIMIT 1`,
			at(2*time.Minute-time.Second, 2*time.Minute-time.Second, time.Minute), nil},
		// last() and first() with no GROUP BY time(), from the same quanta (lastfirst.go).
		{`SELECT last(lat) FROM ends GROUP BY host`,
			at(5*time.Minute-time.Second, 30*time.Minute-time.Second, 10*time.Hour-time.Minute), nil},
		{`SELECT last(lat) FROM ends WHERE host = 'del'`, at(5*time.Minute - time.Second), nil},
		{`SELECT first(lon) FROM ends WHERE ` + within(25*time.Minute, 7*time.Hour) + ` GROUP BY host`,
			at(25*time.Minute, 25*time.Minute), nil},
		{`SELECT last(lat) FROM ends WHERE time < '` + rfc(t0.Add(15*time.Minute)) + `'`, at(15*time.Minute - time.Second), nil},
		// A range holding none of del's points: its group has no row.
		{`SELECT lat FROM ends WHERE ` + within(6*time.Minute, 20*time.Minute) + ` AND host = 'del' ORDER BY time DESC LIMIT 1`, nil, nil},
	})
	// A newer quantum written through another node after this one saw the series'
	// Newest: the quantum it speculates on is no longer the newest, and the entry's is
	// read.
	other := NewNodeEngine(cluster.Nodes[2])
	t.Cleanup(func() { other.Close() })
	body := fmt.Sprintf("ends,host=fast lat=1,lon=1 %d", ns(t0.Add(45*time.Minute)))
	if code, _, b := post(t, serveEngine(t, other)+"/write?db="+db, "text/plain", strings.NewReader(body), nil); code != http.StatusNoContent {
		t.Fatalf("write through node 2: %d %s", code, b)
	}
	checkEndsCases(t, db, []limitCase{
		{`SELECT lat FROM ends WHERE host = 'fast' ORDER BY time DESC LIMIT 1`, at(45 * time.Minute), nil},
	})
}

// checkEndsCases asks each case of an Engine read series by series, of a ManyReader
// and of an EndsReader, and wants the same answer of all three, rows at c.times (in
// any order) and one EndsMany call.
func checkEndsCases(t *testing.T, db string, cases []limitCase) {
	t.Helper()
	one, many, ends := newCountingEngine(), newCountingEngine(), newCountingEngine()
	urls := []string{serveEngine(t, one), serveEngine(t, manyEngine{many}), serveEngine(t, endsEngine{manyEngine{ends}})}
	for _, c := range cases {
		ends.calls = map[string]int{}
		var answers []queryResp
		for _, u := range urls {
			code, ans := queryAt(t, u, db, c.q)
			if code != http.StatusOK {
				t.Fatalf("%s: %d %+v", c.q, code, ans)
			}
			answers = append(answers, ans)
		}
		if !reflect.DeepEqual(answers[0], answers[1]) || !reflect.DeepEqual(answers[0], answers[2]) {
			t.Fatalf("%s:\nseries by series %+v\nat once %+v\nnewest first %+v", c.q, answers[0], answers[1], answers[2])
		}
		var times []string
		for _, s := range answers[2].Results[0].Series {
			if len(s.Values) != 1 {
				t.Errorf("%s: %d rows in %v, want 1", c.q, len(s.Values), s.Tags)
				continue
			}
			times = append(times, fmt.Sprint(s.Values[0][0]))
		}
		slices.Sort(times)
		if !reflect.DeepEqual(times, c.times) {
			t.Errorf("%s: rows at %v, want %v", c.q, times, c.times)
		}
		if want := map[string]int{"EndsMany": 1}; !reflect.DeepEqual(ends.calls, want) {
			t.Errorf("%s: the EndsReader was called %v, want %v", c.q, ends.calls, want)
		}
	}
}

// newCountingEngine is the package cluster's engine behind a countingEngine.
func newCountingEngine() *countingEngine {
	return &countingEngine{Engine: engine, node: engine, calls: map[string]int{}}
}

// serveEngine serves eng with the default Config until the test ends, and returns its URL.
func serveEngine(t *testing.T, eng Engine) string {
	t.Helper()
	h, err := New(eng, Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}
