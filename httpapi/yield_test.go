package httpapi

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"

	"github.com/tsdht/tsdht/internal/netyield/netyieldtest"
)

// countYields makes heavyYield count its calls (and still yield) until the test ends,
// and returns the count.
func countYields(t *testing.T) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	saved := heavyYield
	t.Cleanup(func() { heavyYield = saved })
	heavyYield = func() {
		n.Add(1)
		saved()
	}
	return &n
}

// wantYields fails unless a request whose work is work budget bytes yielded at least
// once per heavyYieldEvery of it (less one, for where the intervals fall), and not
// more than four times as often.
func wantYields(t *testing.T, what string, got int64, work int) {
	t.Helper()
	least := int64(work/heavyYieldEvery) - 1
	if got < least || got > 4*int64(work/heavyYieldEvery)+4 {
		t.Errorf("%s (%d bytes of work): %d yields, want %d–%d (one per %d)", what, work, got, least, 4*(work/heavyYieldEvery)+4, heavyYieldEvery)
	}
}

// TestParseLetsTheNetworkIn parses a body of 40,000 lines, the first 1,000 of new
// series, on one P after making a goroutine runnable through the network
// (netyieldtest.Probe): it must run within two of the parse's yields, not after the
// whole parse, and the parse must yield once per heavyYieldEvery of its work (its
// bytes, and seriesCost per series built).
func TestParseLetsTheNetworkIn(t *testing.T) {
	var b strings.Builder
	const lines, series = 40_000, 1000
	for i := range lines {
		fmt.Fprintf(&b, "yp,s=%d v=%d %d\n", i%series, i, base.Add(time.Duration(i/series)*time.Second).UnixNano())
	}
	body := []byte(b.String())
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	yields := countYields(t)
	probe := netyieldtest.NewProbe(t, yields.Load)
	probe.Send(t)
	_, parsed, _, reason, _, built := parseLinesCached(body, "db", 1, base, parseLimits{pace: newHeavyPacer()})
	if parsed != lines || built != series {
		t.Fatalf("parsed %d points of %d series (%s), want %d of %d", parsed, built, reason, lines, series)
	}
	if got := probe.RanAt(); got < 0 || got > 2 {
		t.Errorf("the reader ran after %d of the parse's %d yields (-1: not during the parse), want within 2", got, yields.Load())
	}
	wantYields(t, "parsing", yields.Load(), len(body)+series*seriesCost)
}

// TestRemoteWriteDecodeLetsTheNetworkIn decodes a remote write of 40,000 samples on one
// P after making a goroutine runnable through the network: it must run within two of
// the decode's yields, and the decode must yield once per heavyYieldEvery of its
// bytes (decompressed, then decoded).
func TestRemoteWriteDecodeLetsTheNetworkIn(t *testing.T) {
	ms := base.UnixNano() / 1e6
	var ss []promSeries
	for s := range 40 {
		p := promSeries{labels: [][2]string{{"__name__", "yr"}, {"s", fmt.Sprint(s)}}}
		for i := range 1000 {
			p.samples = append(p.samples, [2]float64{float64(i) * 0.5, float64(ms + int64(i))})
		}
		ss = append(ss, p)
	}
	raw := encodeWriteRequest(ss)
	body := snappy.Encode(nil, raw)
	h, _ := serveConfig(t, engine, Config{})
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	yields := countYields(t)
	probe := netyieldtest.NewProbe(t, yields.Load)
	probe.Send(t)
	w := httptest.NewRecorder()
	batches, ok := h.decodePromWrite(w, body, &meter{h: h, acct: h.work.account(httptest.NewRequest(http.MethodPost, "/api/v1/write", nil))})
	if !ok || len(batches) != 40 {
		t.Fatalf("decoding: ok %v, %d series (%d %s), want 40", ok, len(batches), w.Code, w.Body.String())
	}
	if got := probe.RanAt(); got < 0 || got > 2 {
		t.Errorf("the reader ran after %d of the decode's %d yields (-1: not during the decode), want within 2", got, yields.Load())
	}
	wantYields(t, "decoding a remote write", yields.Load(), 2*len(raw)+40*seriesCost)
}

// TestHeavyRequestsYield sends a write, a remote write and a query through a real
// server: each yields once per heavyYieldEvery of its work, the query once per
// flushAt bytes of its answer (the points it reads, charged queryPointCost each once
// the engine has read them, make it yield once more: they are one series).
func TestHeavyRequestsYield(t *testing.T) {
	_, u := serveConfig(t, engine, Config{})
	from := base.Add(-20 * time.Minute)
	lines := linesOf("yq", 256<<10, from)
	yields := countYields(t)
	if code, _, msg := post(t, u+"/write?db=yieldq", "text/plain", strings.NewReader(lines), nil); code != http.StatusNoContent {
		t.Fatalf("write: %d %s", code, msg)
	}
	wantYields(t, "a write", yields.Swap(0), len(lines))

	var ss []promSeries
	p := promSeries{labels: [][2]string{{"__name__", "yq_rw"}}}
	for i := range 20000 {
		p.samples = append(p.samples, [2]float64{1, float64(from.Add(time.Duration(i)*time.Millisecond).UnixNano() / 1e6)})
	}
	raw := encodeWriteRequest(append(ss, p))
	if code, _, msg := post(t, u+"/api/v1/write", "application/x-protobuf", bytes.NewReader(snappy.Encode(nil, raw)), nil); code != http.StatusNoContent {
		t.Fatalf("remote write: %d %s", code, msg)
	}
	wantYields(t, "a remote write", yields.Swap(0), 2*len(raw))

	points := strings.Count(lines, "\n")
	q := url.Values{"db": {"yieldq"}, "q": {fmt.Sprintf("SELECT v FROM yq WHERE time >= %d AND time < %d", from.UnixNano(), from.Add(time.Hour).UnixNano())}, "epoch": {"ns"}}
	code, _, answer := post(t, u+"/query", "application/x-www-form-urlencoded", strings.NewReader(q.Encode()), nil)
	if code != http.StatusOK || strings.Count(answer, "],[")+1 != points {
		t.Fatalf("query: %d %.300s; want %d rows", code, answer, points)
	}
	if got, want := yields.Swap(0), int64(len(answer)/flushAt); got < want || got > want+3 {
		t.Errorf("a query of %d points answered in %d bytes: %d yields, want %d–%d (one per %d bytes, one for the series read)",
			points, len(answer), got, want, want+3, flushAt)
	}
}
