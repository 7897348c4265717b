package promapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"

	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// memBackend is a Backend over series held in memory: the catalog's selection by
// equal tags and prefix (catalog.Matches), and reads of [from, to).
type memBackend struct {
	entries []catalog.Entry
	points  map[string]series.Points
	lists   atomic.Int64 // Series calls
}

func (m *memBackend) add(key string, tags map[string]string, pts series.Points) {
	e := catalog.Entry{Key: key, Type: pts.Type, Created: 1}
	for k, v := range tags {
		e.Tags = append(e.Tags, catalog.Tag{K: k, V: v})
	}
	sort.Slice(e.Tags, func(i, j int) bool { return e.Tags[i].K < e.Tags[j].K })
	if n := pts.Len(); n > 0 {
		e.First, e.Last, e.HasBounds = pts.T[0], pts.T[n-1], true
	}
	m.entries = append(m.entries, e)
	if m.points == nil {
		m.points = make(map[string]series.Points)
	}
	m.points[key] = pts
}

func (m *memBackend) Series(_ context.Context, q catalog.Query) ([]catalog.Entry, error) {
	m.lists.Add(1)
	var out []catalog.Entry
	for _, e := range m.entries {
		if strings.HasPrefix(e.Key, q.Prefix) && catalog.Matches(e.Tags, q.Match) {
			out = append(out, e)
		}
	}
	return out, nil
}

func (m *memBackend) Get(_ context.Context, key string, from, to int64, _ wire.GetOptions) (wire.Result, error) {
	p, ok := m.points[key]
	if !ok {
		return wire.Result{}, &codedErr{wire.CodeUnknownSeries}
	}
	return wire.Result{Points: p.Trim(from, to)}, nil
}

type codedErr struct{ code string }

func (e *codedErr) Error() string     { return e.code }
func (e *codedErr) ErrorCode() string { return e.code }

const sec = int64(1e9)

// testBackend holds a remote-written counter of two instances, a line-protocol
// float and integer field, a string field and a series without tags.
func testBackend() *memBackend {
	m := &memBackend{}
	for i, inst := range []string{"a:9100", "b:9100"} {
		var p series.Points
		for s := int64(0); s < 60; s++ {
			p.AppendFloat((1000+s)*sec, float64(s*int64(i+1)))
		}
		m.add(`http_requests_total{instance="`+inst+`",job="node"}`, map[string]string{"__name__": "http_requests_total", "instance": inst, "job": "node"}, p)
	}
	var f, n, s, plain series.Points
	for i := int64(0); i < 60; i++ {
		f.AppendFloat((1000+i)*sec, 50)
		n.AppendInt((1000+i)*sec, i)
		s.AppendString((1000+i)*sec, "x")
		plain.AppendFloat((1000+i)*sec, 1)
	}
	m.add("telegraf/cpu,host=h1#usage_idle", map[string]string{"__db": "telegraf", "__measurement": "cpu", "__field": "usage_idle", "host": "h1"}, f)
	m.add("telegraf/cpu,host=h1#n", map[string]string{"__db": "telegraf", "__measurement": "cpu", "__field": "n", "host": "h1"}, n)
	m.add("telegraf/cpu,host=h1#state", map[string]string{"__db": "telegraf", "__measurement": "cpu", "__field": "state", "host": "h1"}, s)
	m.add("plain", nil, plain)
	return m
}

func TestEntryLabels(t *testing.T) {
	for _, tc := range []struct {
		tags map[string]string
		want string // "" = invisible
	}{
		{map[string]string{"__name__": "up", "job": "x"}, `{__name__="up", job="x"}`},
		{map[string]string{"__db": "d", "__measurement": "cpu", "__field": "usage_idle", "host": "h"}, `{__name__="cpu_usage_idle", db="d", host="h"}`},
		// A tag named db wins over the database.
		{map[string]string{"__db": "d", "__measurement": "m", "__field": "f", "db": "mine"}, `{__name__="m_f", db="mine"}`},
		{nil, ""},
		{map[string]string{"__measurement": "m"}, ""},
	} {
		e := catalog.Entry{Key: "k"}
		for k, v := range tc.tags {
			e.Tags = append(e.Tags, catalog.Tag{K: k, V: v})
		}
		l, ok := entryLabels(&e)
		if got := l.String(); ok != (tc.want != "") || (ok && got != tc.want) {
			t.Errorf("%v: got %s %v, want %q", tc.tags, got, ok, tc.want)
		}
	}
}

func TestCatalogQueriesNarrowByEqualities(t *testing.T) {
	ms := func(s ...string) []*labels.Matcher {
		var out []*labels.Matcher
		for i := 0; i < len(s); i += 2 {
			out = append(out, labels.MustNewMatcher(labels.MatchEqual, s[i], s[i+1]))
		}
		return out
	}
	qs, ok := catalogQueries(ms("__name__", "cpu_usage_idle", "host", "h1", "db", "telegraf"))
	if !ok || len(qs) != 3 {
		t.Fatalf("got %v %v: want the remote-write name and 2 splits", qs, ok)
	}
	if got := qs[2].Match; len(got) != 3 || got[0] != (catalog.Tag{K: "__field", V: "idle"}) || got[2] != (catalog.Tag{K: "host", V: "h1"}) {
		t.Errorf("third query %v", got)
	}
	if _, ok := catalogQueries(ms("__name__", "a", "__name__", "b")); ok {
		t.Error("two different names can match nothing")
	}
	if qs, ok := catalogQueries([]*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, "job", "n.*")}); !ok || len(qs) != 1 || len(qs[0].Match) != 0 {
		t.Errorf("regex only: %v %v, want one scan", qs, ok)
	}
}

func serve(t *testing.T, b Backend, cfg Config) *httptest.Server {
	t.Helper()
	h, err := New(b, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "page "+r.URL.RawQuery) })
	h.Mount(func(p string, hh http.Handler) { mux.Handle(p, hh) }, page)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, srv *httptest.Server, path string, v url.Values) (int, string) {
	t.Helper()
	resp, err := http.Get(srv.URL + path + "?" + v.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

func TestQueryAPI(t *testing.T) {
	srv := serve(t, testBackend(), Config{})
	for _, tc := range []struct {
		path string
		v    url.Values
		code int
		want string
	}{
		{"/api/v1/query", url.Values{"query": {`sum by (job) (rate(http_requests_total[30s]))`}, "time": {"1050"}},
			200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"job":"node"},"value":[1050,"3"]}]}}`},
		{"/api/v1/query", url.Values{"query": {`cpu_usage_idle + cpu_n`}, "time": {"1010.5"}},
			200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"db":"telegraf","host":"h1"},"value":[1010.5,"60"]}]}}`},
		{"/api/v1/query_range", url.Values{"query": {`count(http_requests_total{instance=~"a.*"})`}, "start": {"1000"}, "end": {"1002"}, "step": {"1s"}},
			200, `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1000,"1"],[1001,"1"],[1002,"1"]]}]}}`},
		{"/api/v1/query_range", url.Values{"query": {`nothing_here`}, "start": {"1000"}, "end": {"1002"}, "step": {"1"}},
			200, `{"status":"success","data":{"resultType":"matrix","result":[]}}`},
		{"/api/v1/query", url.Values{"query": {`nothing_here`}, "time": {"1000"}},
			200, `{"status":"success","data":{"resultType":"vector","result":[]}}`},
		{"/api/v1/query", url.Values{"query": {`1+1`}, "time": {"1000"}},
			200, `{"status":"success","data":{"resultType":"scalar","result":[1000,"2"]}}`},
		// Strings are not PromQL values: the field is invisible.
		{"/api/v1/query", url.Values{"query": {`count(cpu_state)`}, "time": {"1010"}},
			200, `{"status":"success","data":{"resultType":"vector","result":[]}}`},
		{"/api/v1/query_range", url.Values{"query": {`up`}, "start": {"1000"}, "end": {"1002"}, "step": {"0"}},
			400, `"errorType":"bad_data"`},
		{"/api/v1/query_range", url.Values{"query": {`up`}, "start": {"0"}, "end": {"100000"}, "step": {"1"}},
			400, `exceeded maximum resolution of 11000 points`},
		{"/api/v1/query", url.Values{"query": {`rate(`}}, 400, `"errorType":"bad_data"`},
		{"/api/v1/query", url.Values{"query": {`up`}, "lookback_delta": {"soon"}}, 400, `lookback_delta \"soon\"`},
		{"/api/v1/query", url.Values{"query": {`up`}, "timeout": {"0"}}, 400, `give a positive duration`},
		// A lookback shorter than the gap to the last sample finds nothing.
		{"/api/v1/query", url.Values{"query": {`http_requests_total`}, "time": {"1070"}, "lookback_delta": {"5s"}},
			200, `"result":[]`},
		{"/api/v1/query", url.Values{"query": {`up`}, "time": {"yesterday"}}, 400, `give Unix seconds or an RFC 3339 time`},
		{"/api/v1/labels", nil, 200, `{"status":"success","data":["__name__","db","host","instance","job"]}`},
		{"/api/v1/labels", url.Values{"match[]": {`{job="node"}`}}, 200, `{"status":"success","data":["__name__","instance","job"]}`},
		{"/api/v1/label/__name__/values", nil, 200, `{"status":"success","data":["cpu_n","cpu_usage_idle","http_requests_total"]}`},
		{"/api/v1/label/instance/values", url.Values{"limit": {"1"}}, 200, `{"status":"success","data":["a:9100"]}`},
		{"/api/v1/series", url.Values{"match[]": {`{__name__=~"cpu_.*"}`}, "start": {"1000"}, "end": {"1001"}},
			200, `{"status":"success","data":[{"__name__":"cpu_n","db":"telegraf","host":"h1"},{"__name__":"cpu_usage_idle","db":"telegraf","host":"h1"}]}`},
		// Outside every series' bounds: nothing.
		{"/api/v1/series", url.Values{"match[]": {`{__name__=~"cpu_.*"}`}, "start": {"5000"}}, 200, `{"status":"success","data":[]}`},
		// Without match[], the page's own listing.
		{"/api/v1/series", url.Values{"prefix": {"telegraf/"}}, 200, `page prefix=telegraf%2F`},
		{"/api/v1/label/job", nil, 404, `ask /api/v1/label/<name>/values`},
		{"/api/v1/status/buildinfo", nil, 200, `"version":"` + Version + `"`},
	} {
		code, body := get(t, srv, tc.path, tc.v)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s?%s: %d %s\nwant %d %s", tc.path, tc.v.Encode(), code, body, tc.code, tc.want)
		}
	}
}

func TestQueryLimits(t *testing.T) {
	b := testBackend()
	srv := serve(t, b, Config{MaxSeries: 1})
	code, body := get(t, srv, "/api/v1/query", url.Values{"query": {`http_requests_total`}, "time": {"1010"}})
	if code != 422 || !strings.Contains(body, "more than 1 series selected") || !strings.Contains(body, "narrow the selector") {
		t.Errorf("series limit: %d %s", code, body)
	}
	// Listings read no point: MaxSeries does not bound them.
	code, body = get(t, srv, "/api/v1/label/instance/values", nil)
	if code != 200 || body != `{"status":"success","data":["a:9100","b:9100"]}` {
		t.Errorf("label values past MaxSeries: %d %s", code, body)
	}
	code, body = get(t, srv, "/api/v1/series", url.Values{"match[]": {`http_requests_total`}})
	if code != 200 || strings.Count(body, "instance") != 2 {
		t.Errorf("series past MaxSeries: %d %s", code, body)
	}
	srv = serve(t, b, Config{MaxSamples: 50})
	code, body = get(t, srv, "/api/v1/query", url.Values{"query": {`count_over_time(http_requests_total{instance="a:9100"}[1m])`}, "time": {"1059"}})
	if code != 422 || !strings.Contains(body, "more than 50 samples selected") {
		t.Errorf("sample limit: %d %s", code, body)
	}
}

func remoteRead(t *testing.T, srv *httptest.Server, req *prompb.ReadRequest) *http.Response {
	t.Helper()
	raw, err := req.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(srv.URL+"/api/v1/read", "application/x-protobuf", bytes.NewReader(snappy.Encode(nil, raw)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestRemoteRead(t *testing.T) {
	b := &memBackend{}
	// More samples than one frame's chunks hold: the series spans several frames.
	var p series.Points
	for i := int64(0); i < 200_000; i++ {
		p.AppendFloat((1000*sec)+i*1e6, math.Sin(float64(i)))
	}
	b.add("big", map[string]string{"__name__": "big"}, p)
	srv := serve(t, b, Config{})
	q := &prompb.Query{StartTimestampMs: 0, EndTimestampMs: maxTime,
		Matchers: []*prompb.LabelMatcher{{Type: prompb.LabelMatcher_RE, Name: "__name__", Value: "b.g"}}}

	resp := remoteRead(t, srv, &prompb.ReadRequest{Queries: []*prompb.Query{q}})
	body, _ := io.ReadAll(resp.Body)
	raw, err := snappy.Decode(nil, body)
	if resp.StatusCode != 200 || err != nil {
		t.Fatalf("samples: %d %s %v", resp.StatusCode, body, err)
	}
	var rr prompb.ReadResponse
	if err := rr.Unmarshal(raw); err != nil || len(rr.Results) != 1 || len(rr.Results[0].Timeseries) != 1 {
		t.Fatalf("samples: %v %v", err, rr.Results)
	}
	want := rr.Results[0].Timeseries[0].Samples
	if len(want) != p.Len() || want[7].Timestamp != 1000_007 || want[7].Value != math.Sin(7) {
		t.Fatalf("samples: %d, [7] = %v", len(want), want[7])
	}

	resp = remoteRead(t, srv, &prompb.ReadRequest{Queries: []*prompb.Query{q},
		AcceptedResponseTypes: []prompb.ReadRequest_ResponseType{prompb.ReadRequest_STREAMED_XOR_CHUNKS, prompb.ReadRequest_SAMPLES}})
	frames, n := 0, 0
	err = ReadFrames(resp.Body, maxFrameBytes+maxFrameBytes/10, func(qi int64, lset []prompb.Label, got []prompb.Sample) error {
		frames++
		if qi != 0 || len(lset) != 1 || lset[0].Value != "big" {
			t.Errorf("frame of query %d, labels %v", qi, lset)
		}
		for _, s := range got {
			if s.Timestamp != want[n].Timestamp || s.Value != want[n].Value {
				t.Fatalf("streamed sample %d: %v, want %v", n, s, want[n])
			}
			n++
		}
		return nil
	})
	if err != nil || n != len(want) || frames < 2 {
		t.Errorf("streamed: %v, %d samples in %d frames", err, n, frames)
	}

	// Limits: too many samples; not snappy; a GET.
	srv = serve(t, b, Config{MaxSamples: 1000})
	resp = remoteRead(t, srv, &prompb.ReadRequest{Queries: []*prompb.Query{q}})
	body, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != 422 || !strings.Contains(string(body), "more than 1000 samples") {
		t.Errorf("sample limit: %d %s", resp.StatusCode, body)
	}
	r2, err := http.Post(srv.URL+"/api/v1/read", "application/x-protobuf", strings.NewReader("\xff\xff\xff\xff\xff\xff"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(r2.Body)
	r2.Body.Close()
	if r2.StatusCode != 400 || !strings.Contains(string(body), "snappy") {
		t.Errorf("garbage body: %d %s", r2.StatusCode, body)
	}
	if code, _ := get(t, srv, "/api/v1/read", nil); code != 405 {
		t.Errorf("GET /api/v1/read: %d", code)
	}
}

func TestResponsesAreJSON(t *testing.T) {
	srv := serve(t, testBackend(), Config{})
	_, body := get(t, srv, "/api/v1/query", url.Values{"query": {`vector(1)`}})
	var v map[string]any
	if err := json.Unmarshal([]byte(body), &v); err != nil || v["status"] != "success" {
		t.Errorf("%s: %v", body, err)
	}
}

// FuzzReadFrames: any bytes decode to frames or an error, never a panic or a frame
// past the bound.
func FuzzReadFrames(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{5, 0, 0, 0, 0, 1, 2, 3, 4, 5})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		ReadFrames(bytes.NewReader(b), 1<<16, func(int64, []prompb.Label, []prompb.Sample) error { return nil })
	})
}

// Grafana POSTs its queries as a form.
func TestQueryPOSTForm(t *testing.T) {
	srv := serve(t, testBackend(), Config{MaxBodyBytes: 200})
	resp, err := http.PostForm(srv.URL+"/api/v1/query", url.Values{"query": {`max(http_requests_total)`}, "time": {"1059"}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"value":[1059,"118"]`) {
		t.Errorf("POST: %d %s", resp.StatusCode, b)
	}
	resp, err = http.PostForm(srv.URL+"/api/v1/query", url.Values{"query": {strings.Repeat("x", 300)}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), "more than 200 bytes") {
		t.Errorf("oversized POST: %d %s", resp.StatusCode, b)
	}
}
