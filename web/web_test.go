package web

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/client"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// The page's API against a real 3-node cluster in one process (real TCP, real gossip).
func TestAPI(t *testing.T) {
	lc, err := tsdb.StartLocal(context.Background(), 3, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	cl, err := client.New([]string{lc.Nodes[0].RPCAddr()}, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	h, err := Handler(cl, Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	// Irregular points: random gaps and values, so buckets differ in count and spread.
	rng := rand.New(rand.NewPCG(1, 2))
	t0 := time.Now().Add(-time.Hour).UnixNano()
	var pts series.Points
	ts := t0
	for i := 0; i < 20_000; i++ {
		ts += rng.Int64N(int64(300 * time.Millisecond))
		pts.AppendFloat(ts, rng.NormFloat64()*10)
	}
	if _, err := cl.Put(context.Background(), "w/x", pts, wire.PutOptions{}); err != nil {
		t.Fatal(err)
	}

	var c Cluster
	getJSON(t, srv.URL+"/api/v1/cluster", http.StatusOK, &c)
	if len(c.Members) != 3 || c.Live != 3 || c.RF != 3 || c.Note != "" || c.Uplinks == nil || len(c.Uplinks) != 0 {
		t.Fatalf("cluster: %+v (no node runs an uplink: want uplinks [], not null)", c)
	}
	for _, m := range c.Members {
		if len(m.NodeID) != 40 || !m.Reachable || m.State != "alive" {
			t.Errorf("member %+v", m)
		}
	}

	from, to := t0+int64(time.Minute), ts-int64(time.Minute)
	const buckets = 437
	every := (to - from + buckets - 1) / buckets
	type acc struct {
		min, max, sum float64
		n             int
	}
	// The replicas' aggregates (client.Client is an Aggregator) and the points reduced
	// here (a Backend without it) must both equal the recomputation.
	ph, err := Handler(pointsOnly{cl}, Config{Window: 47 * time.Second}) // many windows, not whole buckets
	if err != nil {
		t.Fatal(err)
	}
	pointsSrv := httptest.NewServer(ph)
	defer pointsSrv.Close()
	for base, source := range map[string]string{srv.URL: "replicas", pointsSrv.URL: "points"} {
		var a Agg
		getJSON(t, base+"/api/v1/agg?"+url.Values{"series": {"w/x"}, "from": {strconv.FormatInt(from, 10)},
			"to": {strconv.FormatInt(to, 10)}, "buckets": {strconv.Itoa(buckets)}}.Encode(), http.StatusOK, &a)
		if a.Source != source {
			t.Errorf("source %q, want %q", a.Source, source)
		}
		// Recompute every bucket from every point in range: min/max/mean must match exactly.
		want := map[int64]*acc{}
		inRange := 0
		for i, t := range pts.T {
			if t < from || t >= to {
				continue
			}
			inRange++
			b := t / every * every // t > 0: buckets aligned to the epoch
			v := pts.F[i]
			if w := want[b]; w == nil {
				want[b] = &acc{v, v, v, 1}
			} else {
				w.min, w.max, w.sum, w.n = math.Min(w.min, v), math.Max(w.max, v), w.sum+v, w.n+1
			}
		}
		if a.Points != inRange || len(a.T) != len(want) || len(a.T) > buckets+1 {
			t.Fatalf("agg: %d points in %d buckets; want %d points in %d buckets (at most %d)", a.Points, len(a.T), inRange, len(want), buckets)
		}
		for i, b := range a.T {
			w := want[b]
			if w == nil || a.Count[i] != w.n || a.Min[i] != w.min || a.Max[i] != w.max || math.Abs(a.Mean[i]-w.sum/float64(w.n)) > 1e-9*math.Max(1, math.Abs(a.Mean[i])) {
				t.Fatalf("bucket %d at %d: got count %d min %v max %v mean %v; want %+v", i, b, a.Count[i], a.Min[i], a.Max[i], a.Mean[i], w)
			}
		}
	}

	// Bad requests are refused, naming the parameter.
	for q, want := range map[string]string{
		"series=w/x&from=2&to=1&buckets=10":    "from and to",
		"series=w/x&from=1&to=2&buckets=0":     "buckets",
		"series=w/x&from=1&to=2&buckets=99999": "buckets",
		"series=&from=1&to=2&buckets=10":       "series",
	} {
		var e map[string]string
		getJSON(t, srv.URL+"/api/v1/agg?"+q, http.StatusBadRequest, &e)
		if !strings.Contains(e["error"], want) {
			t.Errorf("%s: error %q lacks %q", q, e["error"], want)
		}
	}

	// The page and its vendored library are served from the binary.
	for path, want := range map[string]string{"/": "<title>tsdht</title>", "/uPlot.iife.min.js": "uPlot", "/app.js": "api/v1/agg"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Errorf("GET %s: %d, body lacks %q", path, resp.StatusCode, want)
		}
	}
}

func getJSON(t *testing.T, u string, code int, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != code {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d, want %d: %s", u, resp.StatusCode, code, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{Timeout: -1}).Validate(); err == nil {
		t.Error("a negative timeout passed Validate")
	}
	if c := (Config{}).withDefaults(); c.Timeout != 30*time.Second || c.MaxBuckets != 4096 {
		t.Errorf("defaults: %+v", c)
	}
}

// mapCatalog is a Catalog over a fixed list, to check the handler's use of one (the
// cluster's catalog is adapted to the interface in cmd/tsdht).
type mapCatalog []SeriesInfo

func (m mapCatalog) Series(_ context.Context, prefix string, match map[string]string) ([]SeriesInfo, error) {
	var out []SeriesInfo
next:
	for _, s := range m {
		if !strings.HasPrefix(s.Key, prefix) {
			continue
		}
		for k, v := range match {
			if s.Tags[k] != v {
				continue next
			}
		}
		out = append(out, s)
	}
	return out, nil
}

func TestSeriesAndMeta(t *testing.T) {
	cat := mapCatalog{
		{Key: "pmu1/freq", Type: "float", Unit: "Hz", Tags: map[string]string{"station": "a"}},
		{Key: "pmu1/freq2", Type: "float", Tags: map[string]string{"station": "b"}},
		{Key: "pmu2/freq", Type: "float", Tags: map[string]string{"station": "a"}},
	}
	h, err := Handler(nil, Config{Catalog: cat, MaxSeries: 1})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	var got struct {
		Available, Truncated bool
		Series               []SeriesInfo
	}
	getJSON(t, srv.URL+"/api/v1/series?prefix=pmu1/&match=station=b", http.StatusOK, &got)
	if !got.Available || got.Truncated || len(got.Series) != 1 || got.Series[0].Key != "pmu1/freq2" {
		t.Errorf("prefix and match: %+v", got)
	}
	getJSON(t, srv.URL+"/api/v1/series?prefix=pmu", http.StatusOK, &got)
	if !got.Truncated || len(got.Series) != 1 {
		t.Errorf("MaxSeries 1: %+v", got)
	}
	var e map[string]string
	getJSON(t, srv.URL+"/api/v1/series?match=station", http.StatusBadRequest, &e)
	hh := &handler{cfg: Config{Catalog: cat}.withDefaults()}
	if m := hh.meta(context.Background(), "pmu1/freq"); m == nil || m.Unit != "Hz" {
		t.Errorf("meta of pmu1/freq: %+v (want the exact key's entry, not pmu1/freq2's)", m)
	}
}

// pointsOnly hides a client's Aggregator: the handler reads points and reduces them.
type pointsOnly struct{ Backend }

// A plot's buckets are whole minutes, hours or days once they are that wide, so that
// rollups answer them, and never more than the plot asked for.
func TestBucketWidthFitsRollupLevels(t *testing.T) {
	day := int64(24 * time.Hour)
	for _, c := range []struct {
		span    int64
		buckets int
		want    int64
	}{
		{int64(time.Hour), 1000, int64(3600 * time.Millisecond)}, // finer than a minute: as asked
		{7 * day, 1000, int64(11 * time.Minute)},                 // 10.08 min
		{365 * day, 1000, int64(9 * time.Hour)},                  // 8.76 h
		{3650 * day, 1000, 4 * day},                              // 3.65 d
		{math.MaxInt64, 1, math.MaxInt64},
	} {
		from := time.Date(2026, 11, 28, 0, 0, 17, 0, time.UTC).UnixNano() - c.span/2
		to := from + c.span
		got := bucketWidth(from, to, c.buckets)
		if got != c.want {
			t.Errorf("%d ns in %d buckets: width %d, want %d", c.span, c.buckets, got, c.want)
		}
		if n := agg.WindowCount(from, to, got); n > int64(c.buckets)+1 {
			t.Errorf("%d ns in %d buckets: %d buckets of %d ns", c.span, c.buckets, n, got)
		}
	}
}
