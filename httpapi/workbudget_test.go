package httpapi

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/hostile"
	"github.com/tsdht/tsdht/internal/testutil"
)

func postFrom(t *testing.T, c *http.Client, url, body string) (int, http.Header, string) {
	t.Helper()
	resp, err := c.Post(url, "text/plain", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, resp.Header, b.String()
}

// linesOf returns about n bytes of line protocol of one series, points a millisecond apart.
func linesOf(series string, n int, from time.Time) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%s v=%d %d\n", series, i, from.Add(time.Duration(i)*time.Millisecond).UnixNano())
	}
	return b.String()
}

// TestWorkBudgetShares: with a budget of 64 KiB a second, half of it a client's, a
// client that sent 64 KiB is refused (429, Retry-After) for its next write and its
// query (503), while another client's write goes through; once that one too has
// spent, the node's budget is in debt: a light client is still served, but once it has
// used more than half its share it is refused too.
func TestWorkBudgetShares(t *testing.T) {
	h, err := New(engine, Config{WorkBytesPerSecond: 64 << 10, ClientShare: 0.5}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	a, b, c := testutil.ClientFrom("127.0.0.1", 20*time.Second), testutil.ClientFrom("127.0.0.2", 20*time.Second), testutil.ClientFrom("127.0.0.3", 20*time.Second)
	from := base.Add(-20 * time.Minute)
	if code, _, msg := postFrom(t, a, srv.URL+"/write?db=budget", linesOf("wb,c=a", 64<<10, from)); code != http.StatusNoContent {
		t.Fatalf("client a's first write: %d %s", code, msg)
	}
	code, hdr, msg := postFrom(t, a, srv.URL+"/write?db=budget", linesOf("wb,c=a", 100, from.Add(time.Minute)))
	if ra, _ := strconv.Atoi(hdr.Get("Retry-After")); code != http.StatusTooManyRequests || ra < 1 || !strings.Contains(msg, "--http-budget") {
		t.Fatalf("client a past its share: %d Retry-After %q %s; want 429 naming --http-budget", code, hdr.Get("Retry-After"), msg)
	}
	resp, err := a.Get(srv.URL + "/query?db=budget&q=" + strings.ReplaceAll("SELECT count(v) FROM wb", " ", "+"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("client a's query past its share: %d; want 503 with Retry-After", resp.StatusCode)
	}
	// Another client has its own share, and the node's budget is not in debt yet.
	if code, _, msg := postFrom(t, b, srv.URL+"/write?db=budget", linesOf("wb,c=b", 40<<10, from)); code != http.StatusNoContent {
		t.Fatalf("client b beside a spent client a: %d %s", code, msg)
	}
	// Now the node's budget is in debt. A light client is served (one client cannot
	// starve another)...
	if code, _, msg := postFrom(t, c, srv.URL+"/write?db=budget", linesOf("wb,c=c", 20<<10, from)); code != http.StatusNoContent {
		t.Fatalf("client c, light, with the node's budget spent: %d %s; want 204", code, msg)
	}
	// ...until it has used more than half its share.
	if code, _, msg := postFrom(t, c, srv.URL+"/write?db=budget", linesOf("wb,c=c", 100, from.Add(time.Minute))); code != http.StatusTooManyRequests || !strings.Contains(msg, "HTTP work budget") {
		t.Fatalf("client c past half its share with the node's budget spent: %d %s; want 429", code, msg)
	}
	// The budget fills again: client a is served once its debt is paid.
	if !testutil.Poll(10*time.Second, func() bool {
		code, _, msg = postFrom(t, a, srv.URL+"/write?db=budget", linesOf("wb,c=a", 100, from.Add(2*time.Minute)))
		return code == http.StatusNoContent
	}) {
		t.Fatalf("client a still refused 10 s later: %d %s", code, msg)
	}
}

// TestWorkBudgetRemoteWriteBomb: a remote write's decoded size is charged before it is
// decoded, so with the budget spent by one bomb the next is refused (429) before a
// byte of it is decompressed.
func TestWorkBudgetRemoteWriteBomb(t *testing.T) {
	h, err := New(engine, Config{WorkBytesPerSecond: 1 << 20}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	bomb := hostile.RemoteWriteBomb(2_000_000)
	code, _, msg := post(t, srv.URL+"/api/v1/write", "application/x-protobuf", bytes.NewReader(bomb), map[string]string{"Content-Encoding": "snappy"})
	if code != http.StatusRequestEntityTooLarge {
		t.Fatalf("the first bomb: %d %s; want 413 (counted, within the budget)", code, msg)
	}
	code, hdr, msg := post(t, srv.URL+"/api/v1/write", "application/x-protobuf", bytes.NewReader(bomb), map[string]string{"Content-Encoding": "snappy"})
	if code != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" || !strings.Contains(msg, "HTTP work budget") {
		t.Fatalf("the second bomb: %d %s; want 429 with Retry-After", code, msg)
	}
}

// rawWrite starts a /write on a connection of its own declaring a body of size bytes,
// and sends sent of them.
func rawWrite(t *testing.T, url string, size, sent int) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "POST /write?db=slow HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s", size, strings.Repeat("#", sent))
	return conn
}

// TestBodyDeadline: a body that stops arriving is answered 408 naming
// --http-body-timeout once BodyTimeout (plus its bytes' time at BodyMinRate) passed,
// and while it stalls it holds no write slot: the only slot serves another write.
func TestBodyDeadline(t *testing.T) {
	h, err := New(engine, Config{BodyTimeout: 300 * time.Millisecond, BodyMinRate: 1000, MaxConcurrentWrites: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	start := time.Now()
	conn := rawWrite(t, srv.URL, 1000, 500) // 500 bytes: 0.5 s more at 1,000 a second
	testutil.WaitFor(t, 5*time.Second, func() bool { return h.bodyMem.held() > 0 }, "the slow body's first bytes")
	if code, _, msg := post(t, srv.URL+"/write?db=slow", "text/plain", strings.NewReader(linesOf("slow", 10, base)), nil); code != http.StatusNoContent {
		t.Fatalf("a write beside a stalled body, one slot: %d %s", code, msg)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	took := time.Since(start)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(b.String(), "--http-body-timeout") {
		t.Fatalf("a stalled body: %d %s; want 408 naming --http-body-timeout", resp.StatusCode, b.String())
	}
	if took < 800*time.Millisecond || took > 5*time.Second {
		t.Fatalf("a stalled body answered after %v; want its deadline, 0.8 s (0.3 s and 500 bytes at 1,000 a second)", took)
	}
	if held := h.bodyMem.held(); held != 0 {
		t.Fatalf("%d body bytes still held after the answer", held)
	}
}

// TestInflightBodyMemory: the bodies being read share MaxInflightBodyBytes; a body that
// would go past it is refused (429, Retry-After) and the one holding it is not harmed.
func TestInflightBodyMemory(t *testing.T) {
	h, err := New(engine, Config{MaxBodyBytes: 4096, MaxInflightBodyBytes: 4096}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	body := linesOf("mem", 4000, base.Add(-30*time.Minute))
	conn := rawWrite(t, srv.URL, len(body), 0)
	fmt.Fprint(conn, body[:3500])
	testutil.WaitFor(t, 5*time.Second, func() bool { return h.bodyMem.held() >= 3500 }, "the first body's 3,500 bytes")
	code, hdr, msg := post(t, srv.URL+"/write?db=slow", "text/plain", strings.NewReader(linesOf("mem2", 1000, base)), nil)
	if code != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" || !strings.Contains(msg, "MaxInflightBodyBytes") {
		t.Fatalf("a body past MaxInflightBodyBytes: %d %s; want 429 naming it", code, msg)
	}
	fmt.Fprint(conn, body[3500:])
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("the first body: %d; want 204", resp.StatusCode)
	}
}

// TestQueryMemory: the points a query holds are charged to QueryMemoryBytes, shared by
// the node's queries: a statement past it fails naming --http-query-memory, one within
// it is answered, and nothing stays held after.
func TestQueryMemory(t *testing.T) {
	from := base.Add(-40 * time.Minute)
	if code, _, msg := post(t, srvURL+"/write?db=qmem", "text/plain", strings.NewReader(linesOf("qm", 3000, from)), nil); code != http.StatusNoContent {
		t.Fatalf("writing: %d %s", code, msg)
	}
	h, err := New(engine, Config{QueryMemoryBytes: 1024}, nil) // 64 points
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	rng := fmt.Sprintf(" WHERE time >= %d AND time < %d", from.UnixNano(), from.Add(time.Second).UnixNano())
	_, r := queryAt(t, srv.URL, "qmem", "SELECT v FROM qm"+rng)
	if len(r.Results) != 1 || !strings.Contains(r.Results[0].Error, "--http-query-memory") {
		t.Fatalf("a query past QueryMemoryBytes: %+v; want an error naming --http-query-memory", r)
	}
	_, r = queryAt(t, srv.URL, "qmem", fmt.Sprintf("SELECT v FROM qm WHERE time >= %d AND time < %d", from.UnixNano(), from.Add(10*time.Millisecond).UnixNano()))
	if len(r.Results) != 1 || r.Results[0].Error != "" || len(r.Results[0].Series) != 1 {
		t.Fatalf("a query of 10 points: %+v", r)
	}
	if held := h.queryMem.held(); held != 0 {
		t.Fatalf("%d bytes of query memory still held after the answers", held)
	}
}
