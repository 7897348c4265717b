package uplink

import (
	"bufio"
	"compress/gzip"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"

	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

func TestParseURL(t *testing.T) {
	for _, c := range []struct {
		in, kind, endpoint, err string
	}{
		{in: "influx+http://h:8086/db", kind: "influx", endpoint: "http://h:8086/write?db=db&precision=ns"},
		{in: "influx+https://u:pw@h:8086/db", kind: "influx", endpoint: "https://h:8086/write?db=db&p=pw&precision=ns&u=u"},
		{in: "prom+http://h:9090/api/v1/write", kind: "prom", endpoint: "http://h:9090/api/v1/write"},
		{in: "tsdht://a:1,b:2", kind: "tsdht"},
		{in: "tsdht://a:1?key=/etc/central.key", kind: "tsdht"},
		{in: "tsdht://a:1?kee=/k", err: "the one parameter is key=FILE"},
		{in: "tsdht://a:1?key=", err: "the one parameter is key=FILE"},
		{in: "tsdht://a:1?key=/k&key=/j", err: "the one parameter is key=FILE"},
		{in: "influx+http://h:8086/", err: "one database"},
		{in: "prom+http://h:9090", err: "no path"},
		{in: "http://h:8086/db", err: "unknown scheme"},
		{in: "h:8086", err: "no scheme"},
		{in: "tsdht://a", err: "not HOST:PORT"},
	} {
		tg, err := ParseURL(c.in)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want one saying %q", c.in, err, c.err)
			}
		case err != nil:
			t.Errorf("%s: %v", c.in, err)
		case tg.Kind != c.kind || tg.Endpoint != c.endpoint:
			t.Errorf("%s: %+v, want kind %s endpoint %s", c.in, tg, c.kind, c.endpoint)
		case strings.Contains(tg.Name, "pw"):
			t.Errorf("%s: the name %q shows the password", c.in, tg.Name)
		case strings.Contains(c.in, "key=") && (tg.KeyFile != "/etc/central.key" || tg.Name != "tsdht://a:1"):
			t.Errorf("%s: key file %q, name %q: want /etc/central.key and tsdht://a:1", c.in, tg.KeyFile, tg.Name)
		}
	}
}

func TestCursorKeyStaysAValidKey(t *testing.T) {
	long := strings.Repeat("k", 256)
	for _, k := range []string{"a/b", long} {
		ck := CursorKey("0123456789ab", k)
		if err := series.ValidateKey(ck); err != nil || !isCursorKey(ck) {
			t.Errorf("CursorKey(%d bytes) = %q: %v", len(k), ck, err)
		}
	}
}

func TestLineShapes(t *testing.T) {
	lp := catalog.Entry{Key: "db/cpu,host=a#usage", Tags: []catalog.Tag{{K: "__db", V: "db"}, {K: "__field", V: "usage"}, {K: "__measurement", V: "cpu"}, {K: "host", V: "a b"}}}
	prom := catalog.Entry{Key: `up{job="x"}`, Tags: []catalog.Tag{{K: "__name__", V: "up"}, {K: "job", V: "x"}}}
	plain := catalog.Entry{Key: "pmu1/bus 3/freq"}
	var l lineEncoder
	var p series.Points
	p.AppendFloat(1, 0.5)
	l.points(&lp, &p)
	var q series.Points
	q.AppendInt(2, 7)
	l.points(&prom, &q)
	var s series.Points
	s.AppendString(3, `say "hi"`)
	l.points(&plain, &s)
	var f series.Points
	f.AppendFloat(4, 1.25)
	f.AppendFloat(5, 2)
	l.windows(&plain, agg.Windows(&f, 0, 10, 10))
	want := "cpu,host=a\\ b usage=0.5 1\n" +
		"up,job=x value=7i 2\n" +
		"pmu1/bus\\ 3/freq value=\"say \\\"hi\\\"\" 3\n" +
		"pmu1/bus\\ 3/freq value_mean=1.625,value_min=1.25,value_max=2,value_count=2i 0\n"
	if got := string(l.body()); got != want {
		t.Errorf("line protocol:\n%s\nwant:\n%s", got, want)
	}
}

func TestPromLabels(t *testing.T) {
	lp := catalog.Entry{Key: "db/cpu,host=a#usage", Tags: []catalog.Tag{{K: "__db", V: "db"}, {K: "__field", V: "usage"}, {K: "__measurement", V: "cpu"}, {K: "host", V: "a"}}}
	plain := catalog.Entry{Key: "pmu1/freq"}
	if got := promLabels(&lp); len(got) != 2 || got[0] != (label{"__name__", "cpu_usage"}) || got[1] != (label{"host", "a"}) {
		t.Errorf("line-protocol series: %v", got)
	}
	if got := promLabels(&plain); len(got) != 2 || got[0] != (label{"__name__", "pmu1_freq"}) || got[1] != (label{"tsdht_key", "pmu1/freq"}) {
		t.Errorf("plain series: %v", got)
	}
	var e promEncoder
	var p series.Points
	p.AppendFloat(int64(2*time.Second), 1.5)
	e.points(&plain, &p)
	var s series.Points
	s.AppendString(1, "x")
	e.points(&plain, &s)
	raw, err := snappy.Decode(nil, e.body())
	if err != nil || !strings.Contains(string(raw), "pmu1_freq") || e.skipped != 1 {
		t.Errorf("remote write body %q (%v), %d skipped", raw, err, e.skipped)
	}
}

// lpTarget is an InfluxDB /write stand-in that records what it is sent: per series
// (measurement) and timestamp, the value, and how often a point came with another
// value than before (never, for identical overwrites).
type lpTarget struct {
	mu      sync.Mutex
	pts     map[string]map[int64]string
	changed int
	down    bool
}

func (l *lpTarget) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	zr, err := gzip.NewReader(r.Body)
	if err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	sc := bufio.NewScanner(zr)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		ts, _ := strconv.ParseInt(f[2], 10, 64)
		if l.pts[f[0]] == nil {
			l.pts[f[0]] = map[int64]string{}
		}
		if old, ok := l.pts[f[0]][ts]; ok && old != f[1] {
			l.changed++
		}
		l.pts[f[0]][ts] = f[1]
	}
	io.Copy(io.Discard, zr)
	w.WriteHeader(http.StatusNoContent)
}

func (l *lpTarget) count(m string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pts[m])
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func waitFor(t *testing.T, within time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startRF3 starts three in-process nodes at rf 3 and an InfluxDB stand-in, closed at
// the test's end, and returns the uplink URL of the stand-in; with -short it skips the
// test.
func startRF3(t *testing.T) (*tsdb.LocalCluster, *lpTarget, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	return startCluster(t, 3)
}

// startCluster starts n in-process nodes at rf n and the stand-in (startRF3).
func startCluster(t *testing.T, n int) (*tsdb.LocalCluster, *lpTarget, string) {
	t.Helper()
	lc, err := tsdb.StartLocal(context.Background(), n, t.TempDir(), func(i int, cfg *tsdb.Config) { cfg.RF = n })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	target := &lpTarget{pts: map[string]map[int64]string{}}
	srv := httptest.NewServer(target)
	t.Cleanup(srv.Close)
	return lc, target, "influx+" + srv.URL + "/db"
}

// startOne starts a one-node in-process cluster (rf 1) and an InfluxDB stand-in, as
// startRF3 does, also with -short.
func startOne(t *testing.T) (*tsdb.LocalCluster, *lpTarget, string) {
	return startCluster(t, 1)
}

// quickConfig is a raw uplink of the series under site/ to url that looks, checks and
// saves within milliseconds.
func quickConfig(url string) Config {
	return Config{URL: url, Select: catalog.Query{Prefix: "site/"}, Interval: 20 * time.Millisecond,
		LateEvery: 50 * time.Millisecond, SaveEvery: time.Millisecond, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}
}

// runUplinks runs an uplink of cfg on every node of lc, reading through own(i, node);
// the caller closes them.
func runUplinks(t *testing.T, lc *tsdb.LocalCluster, cfg Config, own func(i int, n *tsdb.Node) Own) []*Uplink {
	t.Helper()
	ups := make([]*Uplink, len(lc.Nodes))
	for i, n := range lc.Nodes {
		u, err := New(cfg, n.Coordinator(), own(i, n), n.DHT(), slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo})).With("n", i))
		if err != nil {
			t.Fatal(err)
		}
		ups[i] = u
		n.SetStoredTap(u.Stored)
		go u.Run()
	}
	return ups
}

// TestForwardsLatePointsAndResumesAfterTakeover runs an uplink on every node of an
// in-process cluster: one node forwards the series; a late point into a forwarded
// minute is forwarded too; when the forwarder stops and dies, another node resumes
// from the saved cursor, sending again only identical points.
func TestForwardsLatePointsAndResumesAfterTakeover(t *testing.T) {
	ctx := context.Background()
	lc, target, url := startRF3(t)

	const key = "site/pmu1/freq"
	now := time.Now().Truncate(time.Minute)
	put := func(from, n int, step time.Duration) {
		var p series.Points
		for i := range n {
			p.AppendFloat(now.Add(-10*time.Minute).Add(time.Duration(from+i)*step).UnixNano(), float64(from+i)/8)
		}
		if _, err := lc.Nodes[0].Coordinator().Put(ctx, key, p, wire.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	put(0, 300, time.Second) // 5 minutes, 1 Hz
	ups := runUplinks(t, lc, quickConfig(url), func(_ int, n *tsdb.Node) Own { return n.Coordinator() })
	closed := map[int]bool{}
	defer func() {
		for i, u := range ups {
			if !closed[i] {
				u.Close()
			}
		}
	}()
	measurement := strings.ReplaceAll(key, " ", `\ `)
	waitFor(t, 20*time.Second, func() bool { return target.count(measurement) == 300 }, "the 300 points to be forwarded")
	fwd := -1
	for i, u := range ups {
		if s := u.Stats(); s.Series == 1 {
			if fwd >= 0 {
				t.Fatalf("nodes %d and %d both forward the series", fwd, i)
			}
			fwd = i
		}
	}
	if fwd < 0 {
		t.Fatal("no node forwards the series")
	}

	// A late point in the second minute, long forwarded.
	var late series.Points
	late.AppendFloat(now.Add(-10*time.Minute).Add(90*time.Second+time.Millisecond).UnixNano(), -1)
	if _, err := lc.Nodes[0].Coordinator().Put(ctx, key, late, wire.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() bool { return target.count(measurement) == 301 }, "the late point to be forwarded")
	if s := ups[fwd].Stats(); s.Late == 0 {
		t.Errorf("the late point was forwarded but not counted: %+v", s)
	}

	// The forwarder goes (its cursor saved); the centre is down meanwhile; more points
	// arrive; another node takes over once the centre is back.
	target.mu.Lock()
	target.down = true
	target.mu.Unlock()
	ups[fwd].Close()
	closed[fwd] = true
	if err := lc.Kill(fwd); err != nil {
		t.Fatal(err)
	}
	via := (fwd + 1) % 3
	var more series.Points
	for i := range 120 {
		more.AppendFloat(now.Add(-5*time.Minute).Add(time.Duration(i)*time.Second).UnixNano(), float64(1000+i))
	}
	if _, err := lc.Nodes[via].Coordinator().Put(ctx, key, more, wire.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() bool {
		for i, u := range ups {
			if i != fwd && u.Stats().Series == 1 && u.Stats().Retries > 0 {
				return true
			}
		}
		return false
	}, "another node to take over and retry")
	target.mu.Lock()
	target.down = false
	target.mu.Unlock()
	waitFor(t, 20*time.Second, func() bool { return target.count(measurement) == 421 }, "the points written meanwhile to be forwarded")
	target.mu.Lock()
	defer target.mu.Unlock()
	if target.changed != 0 {
		t.Errorf("%d points were sent again with another value", target.changed)
	}
}

// TestForwardsToAnotherCluster: a tsdht:// uplink copies the raw points under the same
// key, and a windowed one writes <key>_mean, _min, _max and _count with exactly what an
// aggregate of the source answers.
func TestForwardsToAnotherCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two clusters")
	}
	ctx := context.Background()
	src, err := tsdb.StartLocal(ctx, 1, t.TempDir(), func(i int, cfg *tsdb.Config) { cfg.RF = 1 })
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := tsdb.StartLocal(ctx, 1, t.TempDir(), func(i int, cfg *tsdb.Config) { cfg.RF = 1 })
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	const key = "feeder/7/p"
	base := time.Now().Add(-time.Hour).Truncate(time.Minute)
	var p series.Points
	for i := range 600 {
		p.AppendFloat(base.Add(time.Duration(i)*100*time.Millisecond).UnixNano(), float64(i%37)*0.5)
	}
	if _, err := src.Nodes[0].Coordinator().Put(ctx, key, p, wire.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	url := "tsdht://" + dst.Nodes[0].RPCAddr()
	set, err := Start([]Config{
		{URL: url, Interval: 20 * time.Millisecond},
		{URL: url, Every: 10 * time.Second, Interval: 20 * time.Millisecond},
	}, src.Nodes[0].Coordinator(), src.Nodes[0].Coordinator(), src.Nodes[0].DHT(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	from, to := base.UnixNano(), base.Add(time.Minute).UnixNano()
	got := func(k string) series.Points {
		r, err := dst.Nodes[0].Coordinator().Get(ctx, k, from, to, wire.GetOptions{})
		if err != nil {
			return series.Points{}
		}
		return r.Points
	}
	waitFor(t, 20*time.Second, func() bool { return len(got(key).T) == 600 && len(got(key+"_count").T) == 6 }, "the points and windows to arrive")
	raw := got(key)
	for i := range p.T {
		if raw.T[i] != p.T[i] || raw.F[i] != p.F[i] {
			t.Fatalf("point %d: (%d, %v), sent (%d, %v)", i, raw.T[i], raw.F[i], p.T[i], p.F[i])
		}
	}
	want, err := src.Nodes[0].Coordinator().Aggregate(ctx, key, from, to, int64(10*time.Second), wire.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range aggFns {
		col := got(key + "_" + fn.String())
		for i, w := range want.Windows {
			if v := w.Eval(fn); col.T[i] != w.Start || col.Value(i) != v.String() {
				t.Errorf("%s window %d: (%d, %s), want (%d, %s)", fn, i, col.T[i], col.Value(i), w.Start, v.String())
			}
		}
	}
	// A batch's stats are counted once its send returns, which may be after the target
	// already shows its points.
	statsOK := func(s []wire.UplinkStats) bool {
		return len(s) == 2 && s[0].SentPoints == 600 && s[1].SentPoints == 6 && s[0].Series == 1
	}
	deadline := time.Now().Add(10 * time.Second)
	for !statsOK(set.Stats()) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if s := set.Stats(); !statsOK(s) {
		t.Errorf("stats %+v", s)
	}
}
