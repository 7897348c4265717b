package httpapi

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tsdht/tsdht/internal/testutil"
	"github.com/tsdht/tsdht/tsdb"
)

// The package's tests share one 3-node cluster (real TCP, real gossip) on loopback.
var (
	cluster *tsdb.LocalCluster
	engine  *NodeEngine
	srvURL  string
)

func TestMain(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	lc, err := tsdb.StartLocal(ctx, 3, "", nil)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the cluster:", err)
		os.Exit(1)
	}
	cluster = lc
	engine = NewNodeEngine(lc.Nodes[0])
	// The tests share this server and send hostile bodies back to back from one
	// client: its work budget is out of their way (budget_test.go tests it).
	h, err := New(engine, Config{WorkBytesPerSecond: 1 << 30, ClientShare: 1}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv := httptest.NewServer(h)
	srvURL = srv.URL
	code := m.Run()
	srv.Close()
	engine.Close()
	lc.Close()
	os.Exit(code)
}

// base is a minute-aligned time an hour ago, where each test writes its own data.
var base = time.Now().Add(-time.Hour).Truncate(time.Minute)

func post(t *testing.T, url, ctype string, body io.Reader, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ctype)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func write(t *testing.T, db, precision, body string) (int, string) {
	t.Helper()
	u := srvURL + "/write?db=" + url.QueryEscape(db)
	if precision != "" {
		u += "&precision=" + precision
	}
	code, _, b := post(t, u, "text/plain", strings.NewReader(body), nil)
	return code, b
}

type queryResp struct {
	Results []struct {
		StatementID int `json:"statement_id"`
		Series      []struct {
			Name    string            `json:"name"`
			Tags    map[string]string `json:"tags"`
			Columns []string          `json:"columns"`
			Values  [][]any           `json:"values"`
		} `json:"series"`
		Error string `json:"error"`
	} `json:"results"`
	Error string `json:"error"`
}

func query(t *testing.T, db, q string, extra ...string) (int, queryResp) {
	t.Helper()
	return queryAt(t, srvURL, db, q, extra...)
}

// queryAt is query against the server at base.
func queryAt(t *testing.T, base, db, q string, extra ...string) (int, queryResp) {
	t.Helper()
	v := url.Values{"db": {db}, "q": {q}}
	for i := 0; i+1 < len(extra); i += 2 {
		v.Set(extra[i], extra[i+1])
	}
	resp, err := http.Get(base + "/query?" + v.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r queryResp
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("decoding the answer to %q: %v", q, err)
	}
	return resp.StatusCode, r
}

func ns(t time.Time) int64 { return t.UnixNano() }

func rfc(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func TestPingHealthReady(t *testing.T) {
	resp, err := http.Get(srvURL + "/ping")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("X-Influxdb-Version") == "" {
		t.Fatalf("/ping: %d, version %q", resp.StatusCode, resp.Header.Get("X-Influxdb-Version"))
	}
	for _, p := range []string{"/health", "/ready"} {
		resp, err := http.Get(srvURL + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", p, resp.StatusCode, b)
		}
	}
}

func TestWriteEscapingAndRawQuery(t *testing.T) {
	t0 := base
	lp := fmt.Sprintf("cpu\\ load,host=a\\,b,zone=x\\=y us\\ er=1.5,sys=2i %d\n"+
		"cpu\\ load,zone=x\\=y,host=a\\,b us\\ er=2.5,sys=3i,msg=\"hi \\\"there\\\"\",ok=true %d\n",
		ns(t0), ns(t0.Add(time.Second)))
	if code, b := write(t, "esc", "", lp); code != http.StatusNoContent {
		t.Fatalf("write: %d %s", code, b)
	}
	// The series key follows DESIGN.md: db/measurement,tags sorted#field, escaped.
	pts, err := engine.Read(context.Background(), `esc/cpu\ load,host=a\,b,zone=x\=y#us\ er`, ns(t0), ns(t0.Add(time.Minute)))
	if err != nil || pts.Len() != 2 || pts.F[0] != 1.5 || pts.F[1] != 2.5 {
		t.Fatalf("reading the escaped key: %v %+v", err, pts)
	}
	q := fmt.Sprintf(`SELECT "us er", sys, msg, ok FROM "cpu load" WHERE host = 'a,b' AND zone = 'x=y' AND time >= '%s' AND time < '%s'`,
		rfc(t0), rfc(t0.Add(time.Minute)))
	code, r := query(t, "esc", q)
	if code != http.StatusOK || len(r.Results) != 1 || r.Results[0].Error != "" || len(r.Results[0].Series) != 1 {
		t.Fatalf("query: %d %+v", code, r)
	}
	s := r.Results[0].Series[0]
	if s.Name != "cpu load" || strings.Join(s.Columns, ",") != "time,us er,sys,msg,ok" {
		t.Fatalf("series %+v", s)
	}
	want := [][]any{{rfc(t0), 1.5, 2.0, nil, nil}, {rfc(t0.Add(time.Second)), 2.5, 3.0, `hi "there"`, 1.0}}
	if fmt.Sprint(s.Values) != fmt.Sprint(want) {
		t.Fatalf("values\n got %v\nwant %v", s.Values, want)
	}
}

func TestWriteGzipPrecisionEpoch(t *testing.T) {
	t0 := base.Add(time.Minute)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	for i := 0; i < 5; i++ {
		fmt.Fprintf(zw, "g v=%d %d\n", i, t0.Unix()+int64(i))
	}
	zw.Close()
	code, _, b := post(t, srvURL+"/write?db=gz&precision=s", "text/plain", &buf, map[string]string{"Content-Encoding": "gzip"})
	if code != http.StatusNoContent {
		t.Fatalf("gzip write: %d %s", code, b)
	}
	_, r := query(t, "gz", fmt.Sprintf("SELECT v FROM g WHERE time >= %d", ns(t0)), "epoch", "s")
	if len(r.Results[0].Series) != 1 || len(r.Results[0].Series[0].Values) != 5 {
		t.Fatalf("%+v", r)
	}
	for i, v := range r.Results[0].Series[0].Values {
		if v[0].(float64) != float64(t0.Unix()+int64(i)) || v[1].(float64) != float64(i) {
			t.Fatalf("row %d: %v", i, v)
		}
	}
	// A bad precision names the good ones.
	if code, b := write(t, "gz", "d", "g v=1 1"); code != http.StatusBadRequest || !strings.Contains(b, "n, u, ms, s, m or h") {
		t.Fatalf("bad precision: %d %s", code, b)
	}
}

func TestPartialWriteAndTypeConflict(t *testing.T) {
	t0 := base.Add(2 * time.Minute)
	body := fmt.Sprintf("pw v=1 %d\npw v=\n pw v=3 %d\n", ns(t0), ns(t0.Add(time.Second)))
	code, b := write(t, "pw", "", body)
	if code != http.StatusBadRequest || !strings.Contains(b, "partial write: unable to parse 'pw v='") || !strings.Contains(b, "dropped=1") {
		t.Fatalf("partial write: %d %s", code, b)
	}
	_, r := query(t, "pw", fmt.Sprintf("SELECT count(v) FROM pw WHERE time >= %d AND time < %d", ns(t0), ns(t0.Add(time.Minute))))
	if got := r.Results[0].Series[0].Values[0][1]; got != 2.0 {
		t.Fatalf("the good lines were not stored: count %v", got)
	}
	// The first write fixed v as float: an integer is refused, other series pass.
	code, b = write(t, "pw", "", fmt.Sprintf("pw v=5i %d\npw w=1i %d\n", ns(t0.Add(2*time.Second)), ns(t0)))
	if code != http.StatusBadRequest || !strings.Contains(b, "field type conflict") || !strings.Contains(b, "dropped=1") {
		t.Fatalf("type conflict: %d %s", code, b)
	}
	// Within one request too.
	code, b = write(t, "pw", "", fmt.Sprintf("pw z=1 %d\npw z=\"s\" %d\n", ns(t0), ns(t0.Add(time.Second))))
	if code != http.StatusBadRequest || !strings.Contains(b, "type conflict") {
		t.Fatalf("type conflict in one request: %d %s", code, b)
	}
	if code, b := write(t, "", "", "pw v=1"); code != http.StatusBadRequest || !strings.Contains(b, "database is required") {
		t.Fatalf("no db: %d %s", code, b)
	}
}

func TestBodyLimitsAndBackpressure(t *testing.T) {
	h, err := New(engine, Config{MaxBodyBytes: 1024, MaxConcurrentWrites: 1, WriteQueueWait: 50 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	big := strings.Repeat("lim v=1 1\n", 200)
	code, _, b := post(t, srv.URL+"/write?db=lim", "text/plain", strings.NewReader(big), nil)
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(b, "at most 1024") {
		t.Fatalf("large body: %d %s", code, b)
	}
	// A small gzip body that decompresses past the limit.
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write([]byte(strings.Repeat("x", 1<<20)))
	zw.Close()
	code, _, b = post(t, srv.URL+"/write?db=lim", "text/plain", &buf, map[string]string{"Content-Encoding": "gzip"})
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(b, "after decompression") {
		t.Fatalf("gzip bomb: %d %s", code, b)
	}
	// A write whose body is still arriving holds no slot: another write goes through.
	pr, pw := io.Pipe()
	done := make(chan int)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/write?db=lim", pr)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	pw.Write([]byte("lim v=1 "))
	testutil.WaitFor(t, 10*time.Second, func() bool { return h.bodyMem.held() > 0 }, "the slow write's first bytes to arrive")
	if code, _, b := post(t, srv.URL+"/write?db=lim", "text/plain", strings.NewReader(fmt.Sprintf("lim v=2 %d", ns(base))), nil); code != http.StatusNoContent {
		t.Fatalf("a write beside a slow body: %d %s", code, b)
	}
	fmt.Fprintf(pw, "%d\n", ns(base.Add(time.Second)))
	pw.Close()
	if c := <-done; c != http.StatusNoContent {
		t.Fatalf("the slow write: %d", c)
	}
	// With the only slot taken (a write being parsed or stored), the next is refused.
	h.slots <- struct{}{}
	code, hdr, b := post(t, srv.URL+"/write?db=lim", "text/plain", strings.NewReader("lim v=1 1"), nil)
	<-h.slots
	if code != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" {
		t.Fatalf("saturated: %d %q %s", code, hdr.Get("Retry-After"), b)
	}
}

// expected computes an aggregate the plain way, to check /query against.
func expected(fn string, vals []float64) any {
	n := float64(len(vals))
	sum := 0.0
	for _, v := range vals {
		sum += v
	}
	s := append([]float64(nil), vals...)
	sort.Float64s(s)
	switch fn {
	case "count":
		return n
	case "sum":
		return sum
	case "mean":
		return sum / n
	case "min":
		return s[0]
	case "max":
		return s[len(s)-1]
	case "first":
		return vals[0]
	case "last":
		return vals[len(vals)-1]
	case "spread":
		return s[len(s)-1] - s[0]
	case "stddev":
		m := sum / n
		ss := 0.0
		for _, v := range vals {
			ss += (v - m) * (v - m)
		}
		return math.Sqrt(ss / (n - 1))
	case "median":
		if len(s)%2 == 1 {
			return s[len(s)/2]
		}
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	case "percentile(v, 90)":
		return s[int(math.Floor(n*0.9+0.5))-1]
	}
	panic(fn)
}

func approxEq(a, b float64) bool {
	return a == b || math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b))
}

func TestGroupByTime(t *testing.T) {
	t0 := base.Add(10 * time.Minute)
	var lp strings.Builder
	var vals [3][]float64 // three 10 s windows; the second stays empty
	for i := 0; i < 30; i++ {
		if i >= 10 && i < 20 {
			continue
		}
		v := math.Sin(float64(i)) * 100
		vals[i/10] = append(vals[i/10], v)
		fmt.Fprintf(&lp, "agg,host=h1 v=%v %d\n", v, ns(t0.Add(time.Duration(i)*time.Second)))
	}
	if code, b := write(t, "agg", "", lp.String()); code != http.StatusNoContent {
		t.Fatalf("write: %d %s", code, b)
	}
	rng := fmt.Sprintf("WHERE host = 'h1' AND time >= '%s' AND time < '%s'", rfc(t0), rfc(t0.Add(30*time.Second)))
	for _, fn := range []string{"mean", "min", "max", "count", "sum", "first", "last", "stddev", "spread", "median", "percentile(v, 90)"} {
		sel := fn
		if !strings.Contains(fn, "(") {
			sel = fn + "(v)"
		}
		_, r := query(t, "agg", fmt.Sprintf("SELECT %s FROM agg %s GROUP BY time(10s)", sel, rng))
		if r.Results[0].Error != "" || len(r.Results[0].Series) != 1 {
			t.Fatalf("%s: %+v", fn, r)
		}
		rows := r.Results[0].Series[0].Values
		if len(rows) != 3 {
			t.Fatalf("%s: %d windows, want 3 (fill(null)): %v", fn, len(rows), rows)
		}
		for w, row := range rows {
			if row[0] != rfc(t0.Add(time.Duration(w)*10*time.Second)) {
				t.Fatalf("%s: window %d at %v", fn, w, row[0])
			}
			if w == 1 {
				if fn == "count" && row[1] != 0.0 || fn != "count" && row[1] != nil {
					t.Fatalf("%s: empty window holds %v", fn, row[1])
				}
				continue
			}
			if got, want := row[1].(float64), expected(fn, vals[w]).(float64); !approxEq(got, want) {
				t.Fatalf("%s window %d: got %v want %v", fn, w, got, want)
			}
		}
	}
	// fill(none) drops the empty window; fill(0), fill(previous) and fill(linear) fill it.
	check := func(fill string, want func(rows [][]any) bool) {
		_, r := query(t, "agg", fmt.Sprintf("SELECT mean(v) FROM agg %s GROUP BY time(10s) fill(%s)", rng, fill))
		if rows := r.Results[0].Series[0].Values; !want(rows) {
			t.Fatalf("fill(%s): %v", fill, rows)
		}
	}
	m0, m2 := expected("mean", vals[0]).(float64), expected("mean", vals[2]).(float64)
	check("none", func(rows [][]any) bool { return len(rows) == 2 })
	check("0", func(rows [][]any) bool { return len(rows) == 3 && rows[1][1] == 0.0 })
	check("previous", func(rows [][]any) bool { return len(rows) == 3 && approxEq(rows[1][1].(float64), m0) })
	check("linear", func(rows [][]any) bool { return len(rows) == 3 && approxEq(rows[1][1].(float64), (m0+m2)/2) })
	// ORDER BY time DESC LIMIT 2, with several statements in one request.
	_, r := query(t, "agg", fmt.Sprintf("SELECT max(v) FROM agg %s GROUP BY time(10s) fill(none) ORDER BY time DESC LIMIT 1; SELECT count(v) FROM agg %s", rng, rng))
	if len(r.Results) != 2 || r.Results[1].StatementID != 1 {
		t.Fatalf("two statements: %+v", r)
	}
	if rows := r.Results[0].Series[0].Values; len(rows) != 1 || rows[0][0] != rfc(t0.Add(20*time.Second)) {
		t.Fatalf("DESC LIMIT 1: %v", rows)
	}
	if got := r.Results[1].Series[0].Values[0]; got[0] != rfc(t0) || got[1] != 20.0 {
		t.Fatalf("count without GROUP BY: %v", got)
	}
	// A selector alone carries its point's time.
	_, r = query(t, "agg", "SELECT max(v) FROM agg "+rng)
	maxAt := -1
	for i := 0; i < 30; i++ {
		if (i < 10 || i >= 20) && (maxAt < 0 || math.Sin(float64(i)) > math.Sin(float64(maxAt))) {
			maxAt = i
		}
	}
	if got := r.Results[0].Series[0].Values[0][0]; got != rfc(t0.Add(time.Duration(maxAt)*time.Second)) {
		t.Fatalf("max's time %v, want point %d", got, maxAt)
	}
	// now() - 1h style bounds.
	_, r = query(t, "agg", "SELECT count(v) FROM agg WHERE host = 'h1' AND time > now() - 2h")
	if len(r.Results[0].Series) != 1 || r.Results[0].Series[0].Values[0][1] != 20.0 {
		t.Fatalf("now() - 2h: %+v", r)
	}
}

func TestQueryErrorsAndCatalog(t *testing.T) {
	// Its own database, so that it runs alone too (go test -run).
	if code, b := write(t, "errcat", "", fmt.Sprintf("errcat,host=h1 v=1 %d\n", ns(base.Add(15*time.Minute)))); code != http.StatusNoContent {
		t.Fatalf("write: %d %s", code, b)
	}
	// The node's catalog answers SHOW and the tag operators beyond equality.
	code, r := query(t, "errcat", "SHOW MEASUREMENTS")
	if code != http.StatusOK || r.Results[0].Error != "" || len(r.Results[0].Series) != 1 || fmt.Sprint(r.Results[0].Series[0].Values) != "[[errcat]]" {
		t.Fatalf("SHOW MEASUREMENTS: %d %+v", code, r)
	}
	code, r = query(t, "errcat", fmt.Sprintf("SELECT v FROM errcat WHERE host != 'x' AND time >= %d", ns(base)))
	if code != http.StatusOK || r.Results[0].Error != "" || len(r.Results[0].Series) != 1 {
		t.Fatalf("a != match: %d %+v", code, r)
	}
	// Without a time bound, all time (from the catalog's bounds of the series), as InfluxDB.
	code, r = query(t, "errcat", "SELECT v FROM errcat")
	if code != http.StatusOK || r.Results[0].Error != "" || len(r.Results[0].Series) != 1 || len(r.Results[0].Series[0].Values) == 0 {
		t.Fatalf("no time bound: %d %+v", code, r)
	}
	code, r = query(t, "errcat", "SELECT mean(v) FROM errcat GROUP BY time(1m) fill(0)")
	if code != http.StatusBadRequest || !strings.Contains(r.Results[0].Error, "lower time bound") {
		t.Fatalf("GROUP BY time() fill(0) without a lower bound: %d %+v", code, r)
	}
	code, r = query(t, "errcat", "SELEC v FROM errcat")
	if code != http.StatusBadRequest || !strings.Contains(r.Error, "error parsing query") {
		t.Fatalf("bad syntax: %d %+v", code, r)
	}
	code, r = query(t, "errcat", "CREATE DATABASE errcat")
	if code != http.StatusOK || r.Results[0].Error != "" {
		t.Fatalf("CREATE DATABASE: %d %+v", code, r)
	}
	// A series never written reads as empty, as in InfluxDB.
	code, r = query(t, "errcat", fmt.Sprintf("SELECT v FROM nothing WHERE time >= %d", ns(base)))
	if code != http.StatusOK || r.Results[0].Error != "" || len(r.Results[0].Series) != 0 {
		t.Fatalf("unknown series: %d %+v", code, r)
	}
}

func TestChunked(t *testing.T) {
	t0 := base.Add(20 * time.Minute)
	var lp strings.Builder
	for i := 0; i < 25; i++ {
		fmt.Fprintf(&lp, "ch v=%di %d\n", i, ns(t0.Add(time.Duration(i)*time.Second)))
	}
	if code, b := write(t, "ch", "", lp.String()); code != http.StatusNoContent {
		t.Fatalf("write: %d %s", code, b)
	}
	v := url.Values{"db": {"ch"}, "chunked": {"true"}, "chunk_size": {"10"}, "epoch": {"ns"},
		"q": {fmt.Sprintf("SELECT v FROM ch WHERE time >= %d AND time < %d", ns(t0), ns(t0.Add(time.Minute)))}}
	resp, err := http.Get(srvURL + "/query?" + v.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	var sizes []int
	total := 0
	for dec.More() {
		var r queryResp
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		n := len(r.Results[0].Series[0].Values)
		sizes = append(sizes, n)
		for _, row := range r.Results[0].Series[0].Values {
			if row[1].(float64) != float64(total) || int64(row[0].(float64)) != ns(t0.Add(time.Duration(total)*time.Second)) {
				t.Fatalf("row %d: %v", total, row)
			}
			total++
		}
	}
	if fmt.Sprint(sizes) != "[10 10 5]" {
		t.Fatalf("chunks of %v, want [10 10 5]", sizes)
	}
}

// remoteWrite encodes a Prometheus WriteRequest.
type promSeries struct {
	labels  [][2]string
	samples [][2]float64 // value, timestamp ms
}

func encodeWriteRequest(ss []promSeries) []byte {
	var req []byte
	for _, s := range ss {
		var ts []byte
		for _, l := range s.labels {
			var lb []byte
			lb = protowire.AppendTag(lb, 1, protowire.BytesType)
			lb = protowire.AppendString(lb, l[0])
			lb = protowire.AppendTag(lb, 2, protowire.BytesType)
			lb = protowire.AppendString(lb, l[1])
			ts = protowire.AppendTag(ts, 1, protowire.BytesType)
			ts = protowire.AppendBytes(ts, lb)
		}
		for _, sm := range s.samples {
			var sb []byte
			sb = protowire.AppendTag(sb, 1, protowire.Fixed64Type)
			sb = protowire.AppendFixed64(sb, math.Float64bits(sm[0]))
			sb = protowire.AppendTag(sb, 2, protowire.VarintType)
			sb = protowire.AppendVarint(sb, uint64(int64(sm[1])))
			ts = protowire.AppendTag(ts, 2, protowire.BytesType)
			ts = protowire.AppendBytes(ts, sb)
		}
		req = protowire.AppendTag(req, 1, protowire.BytesType)
		req = protowire.AppendBytes(req, ts)
	}
	return req
}

func TestPrometheusRemoteWrite(t *testing.T) {
	ms := base.Add(30*time.Minute).UnixNano() / 1e6
	req := encodeWriteRequest([]promSeries{
		{labels: [][2]string{{"job", "node"}, {"__name__", "up"}, {"instance", `a"b`}},
			samples: [][2]float64{{1, float64(ms)}, {0, float64(ms + 15000)}, {math.Float64frombits(staleNaN), float64(ms + 30000)}}},
		{labels: [][2]string{{"__name__", "temp"}}, samples: [][2]float64{{21.5, float64(ms)}}},
	})
	code, _, b := post(t, srvURL+"/api/v1/write", "application/x-protobuf", bytes.NewReader(snappy.Encode(nil, req)),
		map[string]string{"Content-Encoding": "snappy", "X-Prometheus-Remote-Write-Version": "0.1.0"})
	if code != http.StatusNoContent {
		t.Fatalf("remote write: %d %s", code, b)
	}
	pts, err := engine.Read(context.Background(), `up{instance="a\"b",job="node"}`, ms*1e6, (ms+60000)*1e6)
	if err != nil || pts.Len() != 2 || pts.F[0] != 1 || pts.F[1] != 0 || pts.T[1] != (ms+15000)*1e6 {
		t.Fatalf("reading back up: %v %+v", err, pts)
	}
	if pts, err := engine.Read(context.Background(), "temp", ms*1e6, (ms+1)*1e6); err != nil || pts.Len() != 1 || pts.F[0] != 21.5 {
		t.Fatalf("reading back temp: %v %+v", err, pts)
	}
	// Garbage is refused with 400, which Prometheus does not retry.
	code, _, b = post(t, srvURL+"/api/v1/write", "application/x-protobuf", bytes.NewReader(snappy.Encode(nil, []byte{0x0a, 0xff, 0xff, 0xff, 0x0f})), nil)
	if code != http.StatusBadRequest {
		t.Fatalf("truncated protobuf: %d %s", code, b)
	}
}

func TestMetrics(t *testing.T) {
	if code, b := write(t, "met", "", fmt.Sprintf("met v=1 %d", ns(base))); code != http.StatusNoContent {
		t.Fatalf("write: %d %s", code, b)
	}
	resp, err := http.Get(srvURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	for _, name := range []string{"tsdht_http_requests_total", "tsdht_http_request_duration_seconds", "tsdht_http_points_written_total",
		"tsdht_store_points", "tsdht_store_shards", "tsdht_cluster_live_members", "tsdht_repair_under_replicated_pairs",
		"tsdht_repair_hinted_points", "tsdht_store_flash_bytes_written_total", "tsdht_store_points_appended_total", "tsdht_store_buffered_appends_total", "tsdht_store_buffer_drains_total", "go_goroutines", "process_resident_memory_bytes"} {
		if fams[name] == nil {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if f := fams["tsdht_cluster_live_members"]; f != nil && f.Metric[0].GetGauge().GetValue() != 3 {
		t.Errorf("live members %v, want 3", f.Metric[0].GetGauge().GetValue())
	}
	if f := fams["tsdht_http_points_written_total"]; f != nil {
		total := 0.0
		for _, m := range f.Metric {
			total += m.GetCounter().GetValue()
		}
		if total < 1 {
			t.Errorf("points written %v", total)
		}
	}
}

// A cluster that cannot reach the write quorum answers 503 with Retry-After, and a
// query that cannot read every shard fails rather than answering short.
func TestClusterDownIs503(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lc, err := tsdb.StartLocal(ctx, 3, "", func(_ int, cfg *tsdb.Config) { cfg.CallTimeout = time.Second })
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	eng := NewNodeEngine(lc.Nodes[0])
	defer eng.Close()
	h, err := New(eng, Config{WriteTimeout: 5 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	t0 := base.Add(40 * time.Minute)
	line := fmt.Sprintf("down v=1 %d\n", ns(t0))
	if code, _, b := post(t, srv.URL+"/write?db=d", "text/plain", strings.NewReader(line), nil); code != http.StatusNoContent {
		t.Fatalf("write with all nodes up: %d %s", code, b)
	}
	for i := 1; i < 3; i++ {
		if err := lc.Kill(i); err != nil {
			t.Fatal(err)
		}
	}
	code, hdr, b := post(t, srv.URL+"/write?db=d", "text/plain", strings.NewReader(fmt.Sprintf("down v=2 %d\n", ns(t0.Add(time.Second)))), nil)
	if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" || !strings.Contains(b, "retrying the whole batch is harmless") {
		t.Fatalf("write with 2 of 3 nodes dead: %d %q %s", code, hdr.Get("Retry-After"), b)
	}
	v := url.Values{"db": {"d"}, "q": {fmt.Sprintf("SELECT v FROM down WHERE time >= %d AND time < %d", ns(t0), ns(t0.Add(time.Minute)))}}
	resp, err := http.Get(srv.URL + "/query?" + v.Encode())
	if err != nil {
		t.Fatal(err)
	}
	var r queryResp
	json.NewDecoder(resp.Body).Decode(&r)
	resp.Body.Close()
	if len(r.Results) != 1 || r.Results[0].Error == "" || len(r.Results[0].Series) != 0 {
		t.Fatalf("query with 2 of 3 nodes dead answered %+v", r)
	}
	t.Logf("query error: %s", r.Results[0].Error)
}
