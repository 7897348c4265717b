package httpapi

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/hostile"
	"github.com/tsdht/tsdht/internal/testutil"
)

// manySeriesQuery stores 8 series of 300 points (a second apart) in db through the
// test server without a budget, and returns a query aggregating them all, one group
// per series: the many-series path (prefetch, ManyReader.AggregateMany).
func manySeriesQuery(t *testing.T, db string, from time.Time) string {
	t.Helper()
	var b strings.Builder
	for s := range 8 {
		for i := range 300 {
			fmt.Fprintf(&b, "hq,s=%d v=%d %d\n", s, i, from.Add(time.Duration(i)*time.Second).UnixNano())
		}
	}
	if code, _, msg := post(t, srvURL+"/write?db="+db, "text/plain", strings.NewReader(b.String()), nil); code != http.StatusNoContent {
		t.Fatalf("writing the series: %d %s", code, msg)
	}
	return fmt.Sprintf("SELECT count(v) FROM hq WHERE time >= %d AND time < %d GROUP BY time(1m), *", from.UnixNano(), from.Add(5*time.Minute).UnixNano())
}

func getFrom(t *testing.T, c *http.Client, u string) (int, http.Header, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestWorkBudgetChargesManySeriesQuery: the points a query over many series aggregates
// at the replicas (2,400 here, 128 bytes of work each) are charged to its client's share
// like those of one series, so its next query is refused (503, Retry-After) while
// another client's is answered.
func TestWorkBudgetChargesManySeriesQuery(t *testing.T) {
	q := manySeriesQuery(t, "heavyq", base.Add(-50*time.Minute))
	_, srvURL := serveConfig(t, engine, Config{WorkBytesPerSecond: 64 << 10, ClientShare: 0.5})
	u := srvURL + "/query?" + url.Values{"db": {"heavyq"}, "q": {q}}.Encode()
	a, b := testutil.ClientFrom("127.0.0.1", 20*time.Second), testutil.ClientFrom("127.0.0.2", 20*time.Second)
	code, _, msg := getFrom(t, a, u)
	if code != http.StatusOK || strings.Count(msg, `"count"`) != 8 || !strings.Contains(msg, `,60]`) {
		t.Fatalf("the first query: %d %.300s; want 8 series of 60 points a minute", code, msg)
	}
	code, hdr, msg := getFrom(t, a, u)
	if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" || !strings.Contains(msg, "--http-budget") {
		t.Fatalf("the same client's next query: %d %.300s; want 503 with Retry-After naming --http-budget (its 2,400 points charged)", code, msg)
	}
	if code, _, msg := getFrom(t, b, srvURL+"/query?"+url.Values{"db": {"heavyq"}, "q": {"SELECT count(v) FROM hq WHERE s = '0' AND time > now() - 2h"}}.Encode()); code != http.StatusOK {
		t.Fatalf("another client's query: %d %.300s; want 200", code, msg)
	}
}

// TestHeavyGate: with a work budget and MaxHeavyRequests 1, a burst of queries from one
// client, all admitted by its full bucket at once, runs one of them: the others find the
// budget spent once they have the gate (or wait past QueryQueueWait for it) and are
// answered 503 with Retry-After, though four query slots were free.
func TestHeavyGate(t *testing.T) {
	q := manySeriesQuery(t, "heavyg", base.Add(-58*time.Minute))
	_, srvURL := serveConfig(t, engine, Config{WorkBytesPerSecond: 64 << 10, ClientShare: 0.5, MaxHeavyRequests: 1, MaxConcurrentQueries: 4})
	u := srvURL + "/query?" + url.Values{"db": {"heavyg"}, "q": {q}}.Encode()
	a := testutil.ClientFrom("127.0.0.1", 20*time.Second)
	var wg sync.WaitGroup
	codes := make([]int, 4)
	msgs := make([]string, 4)
	ready := make(chan struct{})
	for i := range codes {
		wg.Go(func() {
			<-ready
			var hdr http.Header
			codes[i], hdr, msgs[i] = getFrom(t, a, u)
			if codes[i] == http.StatusServiceUnavailable && hdr.Get("Retry-After") == "" {
				msgs[i] += " (no Retry-After)"
			}
		})
	}
	close(ready)
	wg.Wait()
	served := 0
	for i, c := range codes {
		switch {
		case c == http.StatusOK:
			served++
		case c == http.StatusServiceUnavailable && !strings.Contains(msgs[i], "no Retry-After"):
		default:
			t.Errorf("query %d: %d %.300s; want 200 or 503 with Retry-After", i, c, msgs[i])
		}
	}
	if served != 1 {
		t.Fatalf("%d of 4 queries at once served (%v); want 1: the others find the budget spent once they pass the gate", served, codes)
	}
}

// TestParseStopsAtNewSeriesLimit: /write's parse of a body of new series asks the
// engine's budget once it has built one more series than one write may name, and stops
// there when the budget refuses, holding maxNew+1 series, not the body's 6,000; when the
// budget admits them (series the node knows), the parse goes on to the end.
func TestParseStopsAtNewSeriesLimit(t *testing.T) {
	body := hostile.NewSeriesLines("stop", 6_000)
	refusal := errors.New("refused")
	var asked []int
	lim := parseLimits{maxSeries: 50_000, maxNew: 100, admitNew: func(keys []string) error { asked = append(asked, len(keys)); return refusal }}
	batches, _, _, _, stopped, built := parseLinesCached(body, "db", 1, base, lim)
	if !errors.Is(stopped, refusal) || len(batches) != 101 || built != 101 || !slices.Equal(asked, []int{101}) {
		t.Fatalf("refused: stopped %v with %d batches (%d built), budget asked %v; want the refusal at 101 series, asked once", stopped, len(batches), built, asked)
	}
	asked = nil
	lim.admitNew = func(keys []string) error { asked = append(asked, len(keys)); return nil }
	batches, parsed, _, _, stopped, _ := parseLinesCached(body, "db", 1, base, lim)
	if stopped != nil || len(batches) != 6_000 || parsed != 6_000 || !slices.Equal(asked, []int{101}) {
		t.Fatalf("admitted: stopped %v with %d batches, %d points, budget asked %v; want the whole body, asked once", stopped, len(batches), parsed, asked)
	}
}

// serveConfig serves a handler of cfg over eng on a test server closed at the test's end.
func serveConfig(t *testing.T, eng Engine, cfg Config) (*Handler, string) {
	t.Helper()
	h, err := New(eng, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return h, srv.URL
}

// TestRefusedBodyNotRead: a write refused before its body is read — its client's budget
// spent, or no token — is answered at once with Connection: close, though only 1,000 of
// its declared 200,000 bytes came: the server does not wait to read and discard the rest.
// A body under closeUnreadOver is discarded and its connection kept.
func TestRefusedBodyNotRead(t *testing.T) {
	_, budgetURL := serveConfig(t, engine, Config{WorkBytesPerSecond: 64 << 10, ClientShare: 0.5})
	if code, _, msg := postFrom(t, http.DefaultClient, budgetURL+"/write?db=unread", linesOf("unread", 64<<10, base.Add(-45*time.Minute))); code != http.StatusNoContent {
		t.Fatalf("spending the share: %d %s", code, msg)
	}
	_, tokenURL := serveConfig(t, engine, Config{Tokens: []string{"secret"}})
	for _, c := range []struct {
		name, url string
		code      int
	}{{"budget spent", budgetURL, http.StatusTooManyRequests}, {"no token", tokenURL, http.StatusUnauthorized}} {
		conn := rawWrite(t, c.url, 200_000, 1_000)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: no answer with the body's rest unsent: %v", c.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.code || !resp.Close {
			t.Fatalf("%s: %d, Connection %q; want %d and close", c.name, resp.StatusCode, resp.Header.Get("Connection"), c.code)
		}
	}
	// A small body is read and discarded instead: the connection is kept.
	resp, err := http.Post(budgetURL+"/write?db=unread", "text/plain", strings.NewReader(linesOf("unread", 1_000, base)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Close {
		t.Fatalf("a small body, budget spent: %d, close %v; want 429 on a connection kept", resp.StatusCode, resp.Close)
	}
}
