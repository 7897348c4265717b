package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"

	"github.com/tsdht/tsdht/internal/hostile"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// budgetNode starts a node of its own, rf 1, that takes 100 new series a write and one
// every 100 s, stopped when the test ends.
func budgetNode(t *testing.T) *tsdb.LocalCluster {
	t.Helper()
	lc, err := tsdb.StartLocal(context.Background(), 1, "", func(_ int, cfg *tsdb.Config) {
		cfg.RF, cfg.NewSeriesPerRequest, cfg.NewSeriesPerSecond = 1, 100, 0.01
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	return lc
}

// TestNewSeriesBudget holds a node of its own to a budget of 100 new series a write and
// one every 100 s, behind an HTTP handler that takes 500 series a request (issue #31):
// a write of 101 new series is refused whole (413) and stores nothing; 100 are stored;
// 50 more at once find the budget spent (429, Retry-After over an hour) while a write of the 100
// known series is still stored; a body of 501 new series is refused while it is parsed,
// at the 101st (and one of 51 series by a handler that takes 50); and
// an RPC put of a new series gets wire.CodeSlowDown.
func TestNewSeriesBudget(t *testing.T) {
	lc := budgetNode(t)
	eng := NewNodeEngine(lc.Nodes[0])
	h, err := New(eng, Config{MaxSeriesPerWrite: 500}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	write := func(db string, body []byte) (int, http.Header, string) {
		return post(t, srv.URL+"/write?db="+db, "text/plain", bytes.NewReader(body), nil)
	}
	ctx := context.Background()
	now := time.Now().UnixNano()

	code, _, msg := write("budget", hostile.NewSeriesLines("m", 101))
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "new-series-per-request") {
		t.Fatalf("101 new series: %d %s; want 413 naming new-series-per-request", code, msg)
	}
	if _, err := eng.Read(ctx, "budget/m,s=0#v", 0, now+int64(time.Hour)); err == nil {
		t.Fatal("a series of the refused write was stored")
	}
	if code, _, msg := write("budget", hostile.NewSeriesLines("m", 100)); code != http.StatusNoContent {
		t.Fatalf("100 new series: %d %s", code, msg)
	}
	code, hdr, msg := write("budget", hostile.NewSeriesLines("n", 50))
	if after, _ := strconv.Atoi(hdr.Get("Retry-After")); code != http.StatusTooManyRequests || after < 3600 || !strings.Contains(msg, "new-series-per-second") {
		t.Fatalf("50 new series past the budget: %d, Retry-After %q, %s; want 429 and over an hour", code, hdr.Get("Retry-After"), msg)
	}
	if code, _, msg := write("budget", hostile.NewSeriesLines("m", 100)); code != http.StatusNoContent {
		t.Fatalf("the 100 known series again, with the budget spent: %d %s", code, msg)
	}
	if pts, err := eng.Read(ctx, "budget/m,s=99#v", 0, now+int64(time.Hour)); err != nil || pts.Len() != 2 {
		t.Fatalf("reading back a stored series: %v, %d points; want 2", err, pts.Len())
	}
	// 501 new series: the parse stops at the 101st, refused by the budget
	// (TestParseStopsAtNewSeriesLimit), before MaxSeriesPerWrite.
	code, _, msg = write("budget", hostile.NewSeriesLines("o", 501))
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "new-series-per-request") {
		t.Fatalf("501 new series: %d %s; want 413 naming new-series-per-request", code, msg)
	}
	// Past MaxSeriesPerWrite (here under the budget's limit) the parse stops too.
	_, smallURL := serveConfig(t, eng, Config{MaxSeriesPerWrite: 50})
	code, _, msg = post(t, smallURL+"/write?db=budget", "text/plain", bytes.NewReader(hostile.NewSeriesLines("o", 51)), nil)
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "MaxSeriesPerWrite") {
		t.Fatalf("51 series, 50 a write: %d %s; want 413 naming MaxSeriesPerWrite", code, msg)
	}
	var many []promSeries // and a remote write's count, as it is decompressed
	for i := range 51 {
		many = append(many, promSeries{labels: [][2]string{{"__name__", "o"}, {"i", strconv.Itoa(i)}}, samples: [][2]float64{{1, 1000}}})
	}
	code, _, msg = post(t, smallURL+"/api/v1/write", "application/x-protobuf", bytes.NewReader(snappy.Encode(nil, encodeWriteRequest(many))), nil)
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "MaxSeriesPerWrite") {
		t.Fatalf("a remote write of 51 series, 50 a write: %d %s; want 413 naming MaxSeriesPerWrite", code, msg)
	}

	// The same budget holds a write over RPC.
	cli := rpc.NewClient(rpc.NewTCPTransport(), rpc.Config{})
	defer cli.Close()
	var pts series.Points
	pts.AppendFloat(now, 1)
	var resp wire.PutResp
	err = rpc.Invoke(ctx, cli, lc.Nodes[0].RPCAddr(), wire.MethodPut, &wire.PutReq{Key: "rpc-new", Points: pts}, &resp)
	var re *rpc.RemoteError
	if !errors.As(err, &re) || re.Code != wire.CodeSlowDown {
		t.Fatalf("an RPC put of a new series with the budget spent: %v; want code %s", err, wire.CodeSlowDown)
	}
}

// TestRemoteWriteSampleBomb posts a 1 MB remote write that decompresses to 20 MB of
// 10,000,000 empty samples (issue #31): it is refused with 413 naming the limit, counted
// while it is decompressed, which stops one step (snappyStep) past the sample over the
// limit, into a buffer about that size, before a sample is decoded (the e2e TestHTTPHostileBodies holds the node's RSS
// under a bound for it).
func TestRemoteWriteSampleBomb(t *testing.T) {
	body := hostile.RemoteWriteBomb(10_000_000)
	total, _ := snappy.DecodedLen(body)
	c := writeCounter{maxSeries: 1, maxSamples: 1_000_000, total: total}
	decoded := 0
	out, err := decodeSnappy(nil, body, func(out []byte, final bool) error { decoded = len(out); return c.advance(out, final) })
	if !errors.Is(err, errTooManySamples) || decoded > 2*1_000_000+2*snappyStep || cap(out) > 2*decoded {
		t.Fatalf("decoding the bomb with a limit of 1,000,000 samples: %v after %d bytes into a buffer of %d; want errTooManySamples within 2 MB (2 bytes a sample), the buffer at most twice that", err, decoded, cap(out))
	}
	code, _, msg := post(t, srvURL+"/api/v1/write", "application/x-protobuf", bytes.NewReader(body),
		map[string]string{"Content-Encoding": "snappy"})
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "MaxSamplesPerRemoteWrite") || !strings.Contains(msg, "more than 1000000 samples") {
		t.Fatalf("remote-write bomb: %d %s; want 413 naming MaxSamplesPerRemoteWrite", code, msg)
	}
	// One sample under the limit passes the count (and is stored).
	ms := base.Add(40*time.Minute).UnixNano() / 1e6
	ok := encodeWriteRequest([]promSeries{{labels: [][2]string{{"__name__", "bomb_ok"}}, samples: [][2]float64{{1, float64(ms)}}}})
	if code, _, msg := post(t, srvURL+"/api/v1/write", "application/x-protobuf", bytes.NewReader(snappy.Encode(nil, ok)), nil); code != http.StatusNoContent {
		t.Fatalf("an ordinary remote write: %d %s", code, msg)
	}
}

// TestQueryLimits: a 900 KB query of 450,000 nested parentheses is refused before it is
// parsed (400 naming MaxQueryDepth), 100 levels parse; with one query slot taken, a query
// waits QueryQueueWait and gets 503 with Retry-After; a series whose points in range
// pass NodeEngine.MaxReadBytes fails the statement naming it; statements whose answers
// together hold more than MaxQueryPoints values stop there; a query past QueryTimeout
// fails with an error naming it (issue #31).
func TestQueryLimits(t *testing.T) {
	h, err := New(engine, Config{MaxConcurrentQueries: 1, QueryQueueWait: 50 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	query := func(q string) (int, http.Header, string) {
		return post(t, srv.URL+"/query?db=limits", "application/x-www-form-urlencoded",
			strings.NewReader("q="+url.QueryEscape(q)), nil)
	}
	deep := hostile.NestedQuery(450_000)
	// Sent as it is (parentheses need no escaping in a form body): 900 KB, under MaxQueryBytes.
	code, _, msg := post(t, srv.URL+"/query?db=limits", "application/x-www-form-urlencoded", strings.NewReader("q="+deep), nil)
	if code != http.StatusBadRequest || !strings.Contains(msg, "MaxQueryDepth") {
		t.Fatalf("450,000 nested parentheses: %d %.200s; want 400 naming MaxQueryDepth", code, msg)
	}
	if code, _, msg := query(hostile.NestedQuery(101)); code != http.StatusBadRequest || !strings.Contains(msg, "MaxQueryDepth") {
		t.Fatalf("101 levels: %d %.200s", code, msg)
	}
	if code, _, msg := query(hostile.NestedQuery(100)); code != http.StatusOK {
		t.Fatalf("100 levels: %d %.200s", code, msg)
	}
	if code, _, msg := query(`SELECT v FROM m WHERE s = '((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((' AND time > now() - 1h`); code != http.StatusOK {
		t.Fatalf("parentheses inside a string: %d %.200s", code, msg)
	}

	h.qslots <- struct{}{} // a query in progress
	code, hdr, msg := query("SELECT v FROM m WHERE time > now() - 1h")
	<-h.qslots
	if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" || !strings.Contains(msg, "MaxConcurrentQueries") {
		t.Fatalf("a query while the only slot is taken: %d, Retry-After %q, %s", code, hdr.Get("Retry-After"), msg)
	}

	// A series dense over the range fails the statement before its points are held.
	var lines strings.Builder
	for i := range 200 {
		fmt.Fprintf(&lines, "dense v=%d %d\n", i, base.Add(50*time.Minute+time.Duration(i)*time.Millisecond).UnixNano())
	}
	if code, _, msg := post(t, srvURL+"/write?db=limits", "text/plain", strings.NewReader(lines.String()), nil); code != http.StatusNoContent {
		t.Fatalf("writing the dense series: %d %s", code, msg)
	}
	small := NewNodeEngine(cluster.Nodes[0])
	small.MaxReadBytes = 1000
	hs, err := New(small, Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ss := httptest.NewServer(hs)
	defer ss.Close()
	from := base.Add(50 * time.Minute).Format(time.RFC3339)
	code, _, msg = post(t, ss.URL+"/query?db=limits", "application/x-www-form-urlencoded",
		strings.NewReader("q="+url.QueryEscape("SELECT v FROM dense WHERE time >= '"+from+"'")), nil)
	if !strings.Contains(msg, "MaxReadBytes") {
		t.Fatalf("a raw read of 200 points past 1000 bytes: %d %.300s; want an error naming MaxReadBytes", code, msg)
	}
	code, _, msg = post(t, srvURL+"/query?db=limits", "application/x-www-form-urlencoded",
		strings.NewReader("q="+url.QueryEscape("SELECT count(v) FROM dense WHERE time >= '"+from+"'")), nil)
	if code != http.StatusOK || !strings.Contains(msg, ",200]") {
		t.Fatalf("count of the dense series: %d %.300s", code, msg)
	}

	// Statements each within MaxQueryPoints may not hold many times it together.
	hp, err := New(engine, Config{MaxQueryPoints: 300}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sp := httptest.NewServer(hp)
	defer sp.Close()
	one := "SELECT v FROM dense WHERE time >= '" + from + "'"
	code, _, msg = post(t, sp.URL+"/query?db=limits", "application/x-www-form-urlencoded",
		strings.NewReader("q="+url.QueryEscape(one+"; "+one+"; "+one)), nil)
	if code != http.StatusOK || strings.Count(msg, `"error"`) != 1 || !strings.Contains(msg, `"statement_id":2,"error":"not run`) || !strings.Contains(msg, "MaxQueryPoints") {
		t.Fatalf("three statements of 200 values each under a limit of 300: %d %.300s…; want the third not run, naming MaxQueryPoints", code, msg)
	}

	ht, err := New(engine, Config{QueryTimeout: time.Nanosecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	st := httptest.NewServer(ht)
	defer st.Close()
	code, _, msg = post(t, st.URL+"/query?db=limits", "application/x-www-form-urlencoded",
		strings.NewReader("q="+url.QueryEscape("SELECT count(v) FROM m WHERE time > now() - 1h")), nil)
	if !strings.Contains(msg, "query timeout") || !strings.Contains(msg, "--http-query-timeout") {
		t.Fatalf("a query past its timeout: %d %s; want an error naming the timeout", code, msg)
	}
}

// TestRefusedCachedSeriesCharged: a body of 150 new series sent twice to a node that
// takes 100 new series a write is refused both times (413); the second time its first
// 101 series come from the cache of parsed series (the first parse built them), and
// the refusal charges them to the work budget as built (seriesCost each), as the
// first parse's were: a body of new series sent again and again costs its client
// what its series cost, not its bytes alone (the hostile soak's "http new series").
func TestRefusedCachedSeriesCharged(t *testing.T) {
	h, u := serveConfig(t, NewNodeEngine(budgetNode(t).Nodes[0]), Config{WorkBytesPerSecond: 1 << 20, ClientShare: 1})
	body := hostile.NewSeriesLines("again", 150)
	spend := func() float64 {
		t.Helper()
		before := h.work.node.TokensAt(time.Now())
		code, _, msg := post(t, u+"/write?db=again", "text/plain", bytes.NewReader(body), nil)
		if code != http.StatusRequestEntityTooLarge {
			t.Fatalf("150 new series: %d %s; want 413", code, msg)
		}
		return before - h.work.node.TokensAt(time.Now())
	}
	first, second := spend(), spend()
	// 150 series, less what the budget earned back while the request ran; without
	// the charge, 49 (those the second parse built).
	if want := float64(120 * seriesCost); second < want {
		t.Errorf("the body sent again was charged %.0f bytes of work (the first time %.0f), want at least %.0f (120 series)", second, first, want)
	}
}
