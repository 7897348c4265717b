package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"github.com/tsdht/tsdht/internal/testutil"
)

// TestWebPageChromium drives the node page in headless Chromium against a real 3-node
// cluster holding data: every member is listed, the plot draws the asked range at the
// screen's resolution, and a killed node turns dead on the page. With
// TSDHT_SCREENSHOTS=DIR it also writes desktop.png and phone.png there (docs/img).
func TestWebPageChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("drives headless Chromium against a 3-node cluster; skipped with -short")
	}
	chromium := ensureChromium(t)

	// Every node forwards to a real InfluxDB: the page lists each node's view of the uplink.
	influx := testutil.NewInfluxd(t)
	influxQuery(t, influx.Addr, "", "CREATE DATABASE page")
	uplinkURL := "influx+http://" + influx.Addr + "/page"

	c := newE2ECluster(t, 3)
	var httpAddrs []string
	for _, p := range c.Nodes {
		h := testutil.FreeAddr(t)
		p.Args = []string{"--http", h, "--uplink", uplinkURL}
		httpAddrs = append(httpAddrs, h)
	}
	c.StartAll()
	c.WaitAlive(3, 30*time.Second)

	// Two hours of a 10 Hz PMU-like signal ending now: the page asks for the last hour.
	const key = "pmu1/bus3/freq"
	now := time.Now()
	var in strings.Builder
	start := now.Add(-2 * time.Hour).UnixNano()
	for i := 0; i < 72_000; i++ {
		ts := start + int64(i)*int64(100*time.Millisecond)
		v := 60 + 0.05*math.Sin(float64(i)/600) + 0.01*math.Sin(float64(i)/3)
		fmt.Fprintf(&in, "%d,%.5f\n", ts, v)
	}
	if _, errOut, code := c.Run(in.String(), "put", "--cluster", c.Nodes[0].RPC, "--series", key); code != 0 {
		t.Fatalf("put: exit %d: %s", code, errOut)
	}
	if _, errOut, code := c.Run("", "meta", "--cluster", c.Nodes[0].RPC, "--series", key, "--unit", "Hz",
		"--description", "bus 3 frequency", "--tag", "station=pmu1"); code != 0 {
		t.Fatalf("meta: exit %d: %s", code, errOut)
	}
	out, errOut, code := c.Run("", "status", "--cluster", c.Nodes[0].RPC, "--json")
	if code != 0 {
		t.Fatalf("status: %d %s", code, errOut)
	}
	var ids []string
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var s statusJSON
		if err := dec.Decode(&s); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.NodeID)
	}
	if len(ids) != 3 {
		t.Fatalf("status lists %d members", len(ids))
	}

	ctx := headless(t, chromium)

	url := "http://" + httpAddrs[0] + "/#series=" + key + "&range=3600"
	if err := chromedp.Run(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("navigate %s: %v", url, err)
	}

	// Every member is listed, by its 160-bit ID, alive.
	waitJS(t, ctx, 30*time.Second, `document.querySelectorAll('#members tbody tr[data-state="alive"]').length === 3`)
	var listed []string
	if err := chromedp.Run(ctx, chromedp.Evaluate(`[...document.querySelectorAll('#members tbody tr')].map(r => r.dataset.node)`, &listed)); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if !contains(listed, id) {
			t.Errorf("member %s not on the page (listed %v)", id, listed)
		}
	}
	var ringDots int
	chromedp.Run(ctx, chromedp.Evaluate(`document.querySelectorAll('#ring g circle').length`, &ringDots))
	if ringDots != 3 {
		t.Errorf("ring shows %d nodes, want 3", ringDots)
	}

	// The plot draws the asked range: its x scale is the last hour, its buckets cover it
	// at about one per pixel, and the canvas has ink.
	waitJS(t, ctx, 30*time.Second, `window.tsdhtPlot !== null && window.tsdhtPlot.n > 0`)
	var plot struct {
		From, To, XMin, XMax, ScaleMin, ScaleMax float64
		Buckets, N, Points                       int
	}
	if err := chromedp.Run(ctx, chromedp.Evaluate(`({From: tsdhtPlot.from, To: tsdhtPlot.to, XMin: tsdhtPlot.xmin, XMax: tsdhtPlot.xmax,
		ScaleMin: tsdhtPlot.scaleMin, ScaleMax: tsdhtPlot.scaleMax, Buckets: tsdhtPlot.buckets, N: tsdhtPlot.n, Points: tsdhtPlot.points})`, &plot)); err != nil {
		t.Fatal(err)
	}
	t.Logf("plot: %+v", plot)
	if d := plot.To - plot.From; math.Abs(d-3600) > 1 {
		t.Errorf("asked range is %v s, want 3600", d)
	}
	if math.Abs(plot.ScaleMin-plot.From) > 1 || math.Abs(plot.ScaleMax-plot.To) > 1 {
		t.Errorf("x scale [%v, %v], want the asked [%v, %v]", plot.ScaleMin, plot.ScaleMax, plot.From, plot.To)
	}
	every := 3600 / float64(plot.Buckets)
	if plot.XMin-plot.From > 2*every || plot.To-plot.XMax > 2*every+1 {
		t.Errorf("data spans [%v, %v], want the whole range [%v, %v] (bucket %v s)", plot.XMin, plot.XMax, plot.From, plot.To, every)
	}
	if plot.N < plot.Buckets*9/10 || plot.N > plot.Buckets+1 { // +1: buckets are aligned to the epoch
		t.Errorf("%d buckets drawn for %d asked: want about one per pixel column", plot.N, plot.Buckets)
	}
	if plot.Points < 35_000 || plot.Points > 36_100 {
		t.Errorf("an hour at 10 Hz reduced from %d points, want ~36,000", plot.Points)
	}
	// The series' metadata, from the catalog, is shown with the plot, and the picker lists it.
	waitJS(t, ctx, 20*time.Second, `document.querySelector('#seriesmeta').textContent.includes('unit Hz · bus 3 frequency · station=pmu1')`)
	waitJS(t, ctx, 20*time.Second, `(() => { document.querySelector('#key').dispatchEvent(new Event('input'));
		return [...document.querySelectorAll('#keys option')].some(o => o.value === '`+key+`'); })()`)

	var ink int
	if err := chromedp.Run(ctx, chromedp.Evaluate(`(() => { const c = document.querySelector('#plot canvas');
		const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0;
		for (let i = 0; i < d.length; i += 4) if (d[i+3] > 0 && (d[i] < 200 || d[i+1] < 200)) n++; return n; })()`, &ink)); err != nil {
		t.Fatal(err)
	}
	if ink < 1000 {
		t.Errorf("plot canvas has %d inked pixels: blank", ink)
	}

	phoneFits(t, ctx, url, key)

	if dir := os.Getenv("TSDHT_SCREENSHOTS"); dir != "" {
		screenshot(t, ctx, filepath.Join(dir, "web-desktop.png"), 1280, 1000, false)
		screenshot(t, ctx, filepath.Join(dir, "web-phone.png"), 390, 844, true)
		chromedp.Run(ctx, chromedp.EmulateViewport(1280, 1000))
	}

	// The uplink: a row per node, as `tsdht status` has them; one node forwards the
	// series (its row names it), and what it sent reaches the whole series.
	waitJS(t, ctx, 60*time.Second, `(() => { const rs = [...document.querySelectorAll('#uplinktable tbody tr')];
		return rs.length === 3 && rs.filter(r => r.dataset.series === "1").length === 1 &&
			rs.reduce((n, r) => n + Number(r.dataset.sent), 0) >= 72000; })()`)
	var row struct{ Node, URL, Note, Lag string }
	if err := chromedp.Run(ctx, chromedp.Evaluate(`(() => { const r = document.querySelector('#uplinktable tbody tr[data-series="1"]');
		return {Node: r.dataset.node, URL: r.querySelector('td.url').textContent, Note: r.querySelector('td.fwd').textContent,
			Lag: r.querySelector('td.lag').textContent}; })()`, &row)); err != nil {
		t.Fatal(err)
	}
	if !contains(ids, row.Node) || row.URL != uplinkURL || row.Note != key || !strings.HasSuffix(row.Lag, " s") {
		t.Errorf("the forwarding node's uplink row %+v: want one of %v forwarding %s to %s, with its lag", row, ids, key, uplinkURL)
	}
	var visible bool
	chromedp.Run(ctx, chromedp.Evaluate(`!document.querySelector('#uplinks').hidden`, &visible))
	if !visible {
		t.Error("the uplinks section is hidden though the nodes run an uplink")
	}

	// A killed node turns dead on the page within failure detection time.
	c.Kill(2)
	waitJS(t, ctx, 60*time.Second, fmt.Sprintf(`(r => r && r.dataset.state === "dead")(document.querySelector('#members tbody tr[data-node="%s"]'))`, nodeIDOf(t, c, 2, ids)))
}

// phoneFits checks the page on a phone 390 px wide, turned from landscape to portrait
// and opened there: the plot is redrawn at the phone's width, the plot and its legend
// lie inside the screen, nothing makes the page wider than the screen (a phone's
// browser widens its layout viewport to what overflows it, so innerWidth is no
// witness), and the series box offers the written series key from the catalog for
// what is typed. It leaves the desktop viewport as it was.
func phoneFits(t *testing.T, ctx context.Context, url, key string) {
	t.Helper()
	phone := func(w, h int64) {
		if err := chromedp.Run(ctx,
			chromedp.EmulateViewport(w, h, func(p *emulation.SetDeviceMetricsOverrideParams, _ *emulation.SetTouchEmulationEnabledParams) {
				p.Mobile = true
			}),
		); err != nil {
			t.Fatalf("phone viewport %dx%d: %v", w, h, err)
		}
	}
	defer chromedp.Run(ctx, chromedp.EmulateViewport(1280, 1000))
	phone(844, 390)
	waitJS(t, ctx, 20*time.Second, `window.tsdhtPlot !== null && window.tsdhtPlot.buckets > 600 && window.tsdhtPlot.buckets <= 844`)
	phone(390, 844)
	// The plot redraws for the new width (one bucket per pixel column), then every box of
	// the plot and its legend must lie within [0, innerWidth], with the legend showing the
	// values under a cursor in the middle of the plot (its widest form).
	waitJS(t, ctx, 20*time.Second, `window.tsdhtPlot !== null && window.tsdhtPlot.buckets <= 390`)
	hover := func() {
		var at []float64
		if err := chromedp.Run(ctx, chromedp.Evaluate(`(() => { const r = document.querySelector('#plot .u-over').getBoundingClientRect();
			window.scrollTo(0, r.top + window.scrollY - 100); const q = document.querySelector('#plot .u-over').getBoundingClientRect();
			return [q.left + q.width / 2, q.top + q.height / 2]; })()`, &at)); err != nil {
			t.Fatal(err)
		}
		if err := chromedp.Run(ctx, chromedp.MouseEvent(input.MouseMoved, at[0], at[1])); err != nil {
			t.Fatal(err)
		}
		waitJS(t, ctx, 5*time.Second, `[...document.querySelectorAll('#plot .u-legend .u-value')].every(v => v.textContent.trim() !== '' && v.textContent.trim() !== '--')`)
	}
	hover()
	const boxes = `(() => {
		const vw = 390, out = []; // the phone's width: innerWidth grows with what overflows it
		const check = (what, el) => { if (!el) { out.push(what + ' missing'); return; }
			const r = el.getBoundingClientRect();
			if (r.width === 0) out.push(what + ' has no width');
			if (r.left < -0.5 || r.right > vw + 0.5) out.push(what + ' spans [' + r.left + ', ' + r.right + '] of ' + vw); };
		check('plot', document.querySelector('#plot .uplot'));
		check('canvas', document.querySelector('#plot canvas'));
		check('legend', document.querySelector('#plot .u-legend'));
		const rows = document.querySelectorAll('#plot .u-legend .u-series');
		if (rows.length !== 4) out.push(rows.length + ' legend entries, want time, min, max, mean');
		rows.forEach((r, i) => check('legend entry ' + i, r));
		if (document.documentElement.scrollWidth > vw || window.innerWidth > vw)
			out.push('the page is ' + document.documentElement.scrollWidth + ' px wide, its viewport ' + window.innerWidth + ' px');
		return out; })()`
	fits := func(when string) {
		t.Helper()
		var bad []string
		deadline := time.Now().Add(10 * time.Second)
		for {
			if err := chromedp.Run(ctx, chromedp.Evaluate(boxes, &bad)); err != nil {
				t.Fatal(err)
			}
			if len(bad) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		if len(bad) > 0 {
			t.Errorf("at 390 px wide, %s: %s", when, strings.Join(bad, "; "))
		}
	}
	fits("turned from landscape to portrait")
	// A phone that opens the page draws it at its width from the start.
	if err := chromedp.Run(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("navigate %s: %v", url, err)
	}
	waitJS(t, ctx, 30*time.Second, `window.tsdhtPlot !== null && window.tsdhtPlot.n > 0`)
	hover()
	fits("opened on the phone")
	// Typing the start of the key offers it in the series box's list; the key is put
	// back for the plot's refreshes.
	prefix := key[:len(key)-2]
	if err := chromedp.Run(ctx, chromedp.Evaluate(`(() => { const k = document.querySelector('#key'); k.value = '`+prefix+`';
		k.dispatchEvent(new Event('input')); return true; })()`, nil)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 20*time.Second, `document.querySelector('#keys').dataset.prefix === '`+prefix+`' &&
		[...document.querySelectorAll('#keys option')].some(o => o.value === '`+key+`')`)
	chromedp.Run(ctx, chromedp.Evaluate(`document.querySelector('#key').value = '`+key+`'`, nil))
}

// nodeIDOf finds the 160-bit ID of node i in its log's "serving" line.
func nodeIDOf(t *testing.T, c *e2eCluster, i int, ids []string) string {
	log := c.Nodes[i].Log()
	for _, id := range ids {
		if strings.Contains(log, "msg=serving node="+id) {
			return id
		}
	}
	t.Fatalf("node %d's ID is not in its log", i)
	return ""
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// headless starts headless Chromium at chromium for the test, with a deadline of 3
// minutes; it stops when the test ends.
func headless(t *testing.T, chromium string) context.Context {
	profile := chromiumProfile(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:0:0],
		chromedp.ExecPath(chromium),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-breakpad", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 1000),
	)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(acancel)
	// This chromedp's protocol tables predate some of Debian chromium's event fields; those
	// events are ones the test does not use, so their decoding errors are dropped.
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(func(f string, a ...any) {
		if msg := fmt.Sprintf(f, a...); !strings.Contains(msg, "could not unmarshal event") {
			t.Logf("chromedp: %s", msg)
		}
	}))
	t.Cleanup(cancel)
	ctx, tcancel := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(tcancel)
	return ctx
}

// chromiumProfile makes Chromium's user-data directory. It is not t.TempDir: Chromium's
// helper processes can still be writing to it for a moment after the browser exits,
// and a TempDir that cannot be removed at once fails the test. This one is removed
// once they are gone, within a deadline.
func chromiumProfile(t *testing.T) string {
	dir, err := os.MkdirTemp("", "tsdht-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var last error
		if !testutil.Poll(30*time.Second, func() bool { last = os.RemoveAll(dir); return last == nil }) {
			t.Errorf("chromium profile %s not removed: %v", dir, last)
		}
	})
	return dir
}

// waitJS waits until a JavaScript expression is true on the page.
func waitJS(t *testing.T, ctx context.Context, within time.Duration, expr string) {
	t.Helper()
	if !testutil.Poll(within, func() bool {
		var ok bool
		if err := chromedp.Run(ctx, chromedp.Evaluate(expr, &ok)); err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		return ok
	}) {
		var html string
		chromedp.Run(ctx, chromedp.OuterHTML("main", &html))
		t.Fatalf("within %v, never true: %s\npage: %s", within, expr, html)
	}
}

func screenshot(t *testing.T, ctx context.Context, path string, w, h int64, mobile bool) {
	t.Helper()
	var buf []byte
	err := chromedp.Run(ctx,
		chromedp.EmulateViewport(w, h, func(p *emulation.SetDeviceMetricsOverrideParams, _ *emulation.SetTouchEmulationEnabledParams) {
			p.Mobile = mobile
		}),
		chromedp.Evaluate(`window.dispatchEvent(new Event('resize'))`, nil),
		chromedp.Sleep(time.Second),        // the plot redraws 200 ms after a resize
		chromedp.FullScreenshot(&buf, 100), // 100: PNG,
	)
	if err != nil {
		t.Fatalf("screenshot %s: %v", path, err)
	}
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", path)
}

// ensureChromium returns Debian's chromium, installing it with apt-get when missing.
func ensureChromium(t *testing.T) string {
	t.Helper()
	const path = "/usr/bin/chromium"
	if _, err := os.Stat(path); err == nil {
		return path
	}
	out, err := exec.Command("apt-get", "install", "-y", "chromium").CombinedOutput()
	if err != nil {
		t.Fatalf("chromium is needed for this test and apt-get install -y chromium failed: %v\n%s", err, out)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("apt-get installed chromium but %s is missing", path)
	}
	return path
}
