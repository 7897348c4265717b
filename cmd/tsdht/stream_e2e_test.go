package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestHTTPStream: /api/v1/stream answers server-sent events, history first and then
// each new point, as a browser's EventSource reads them.
func TestHTTPStream(t *testing.T) {
	c, addr := startHTTPNode(t)
	t0 := time.Now().Add(-time.Minute).UnixNano()
	put := func(ts ...int64) {
		t.Helper()
		var in strings.Builder
		for _, x := range ts {
			fmt.Fprintf(&in, "%d,%d\n", x, x-t0)
		}
		if out, errOut, code := c.Run(in.String(), "put", "--cluster", c.Nodes[0].RPC, "--series", "web/s"); code != 0 {
			t.Fatalf("put: %d %s %s", code, out, errOut)
		}
	}
	put(t0, t0+1)
	resp, err := http.Get(fmt.Sprintf("http://%s/api/v1/stream?series=web/s&from=%d", addr, t0))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, ct)
	}
	events := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				events <- d
			}
		}
		close(events)
	}()
	var got []int64
	read := func(want int) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for len(got) < want {
			select {
			case d, ok := <-events:
				if !ok {
					t.Fatalf("stream closed after %v", got)
				}
				var ev struct {
					Key string
					T   []int64
					V   []float64
				}
				if err := json.Unmarshal([]byte(d), &ev); err != nil || ev.Key != "web/s" || len(ev.T) != len(ev.V) {
					t.Fatalf("event %q: %v", d, err)
				}
				got = append(got, ev.T...)
			case <-deadline:
				t.Fatalf("got %v, want %d points", got, want)
			}
		}
	}
	read(2)
	put(t0 + 2)
	read(3)
	if fmt.Sprint(got) != fmt.Sprint([]int64{t0, t0 + 1, t0 + 2}) {
		t.Fatalf("got %v, want history then the new point", got)
	}
	if r, err := http.Get(fmt.Sprintf("http://%s/api/v1/stream?series=a&prefix=b", addr)); err != nil || r.StatusCode != 400 {
		t.Fatalf("series and prefix at once: %v %v, want 400", r.StatusCode, err)
	}
}

// TestWebPageLive: the page's plot, in live mode, draws the range's history and then
// each point written after it opened (headless Chromium reading /api/v1/stream).
func TestWebPageLive(t *testing.T) {
	if testing.Short() {
		t.Skip("drives headless Chromium; skipped with -short")
	}
	chromium := ensureChromium(t)
	c, addr := startHTTPNode(t)
	const key = "web/live"
	put := func(from, n int) {
		t.Helper()
		var in strings.Builder
		now := time.Now().UnixNano()
		for i := from; i < from+n; i++ {
			fmt.Fprintf(&in, "%d,%d\n", now-int64(n-i+from)*int64(time.Millisecond), i)
		}
		if _, errOut, code := c.Run(in.String(), "put", "--cluster", c.Nodes[0].RPC, "--series", key); code != 0 {
			t.Fatalf("put: %d %s", code, errOut)
		}
	}
	put(0, 10)
	ctx := headless(t, chromium)
	url := "http://" + addr + "/#series=" + key + "&range=300&live=1"
	if err := chromedp.Run(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("navigate %s: %v", url, err)
	}
	waitJS(t, ctx, 30*time.Second, `window.tsdhtLive !== null && window.tsdhtLive.n === 10`)
	put(10, 5)
	waitJS(t, ctx, 30*time.Second, `window.tsdhtLive.n === 15`)
}
