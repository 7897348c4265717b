package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/latency"
	"github.com/tsdht/tsdht/internal/testutil"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/backup"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/client"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// ackedPoint is a point a writer had acknowledged, and when.
type ackedPoint struct {
	t   int64
	v   float64
	ack time.Time
}

// liveWriter writes one series at 60 Hz, a put every 50 ms of the points due, and
// keeps what was acknowledged and how long each put took.
type liveWriter struct {
	key   string
	mu    sync.Mutex
	acked []ackedPoint
	lat   []time.Duration
	at    []time.Time // when each put started
	fails []error
}

func (w *liveWriter) run(ctx context.Context, cl *client.Client) {
	const period = int64(time.Second / 60)
	next := time.Now().UnixNano() / period * period
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now().UnixNano()
		pts := series.Points{Type: series.Float}
		for ; next <= now; next += period {
			pts.AppendFloat(next, float64(next%1e9)/1e6)
		}
		began := time.Now()
		_, err := cl.Put(ctx, w.key, pts, wire.PutOptions{})
		ack := time.Now()
		w.mu.Lock()
		if err != nil {
			if ctx.Err() == nil {
				w.fails = append(w.fails, err)
			}
		} else {
			for i := range pts.T {
				w.acked = append(w.acked, ackedPoint{pts.T[i], pts.F[i], ack})
			}
			w.lat = append(w.lat, ack.Sub(began))
			w.at = append(w.at, began)
		}
		w.mu.Unlock()
	}
}

// latencies returns the put latencies of puts started inside and outside the spans.
func (w *liveWriter) latencies(spans [][2]time.Time) (in, out []time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, d := range w.lat {
		inside := false
		for _, s := range spans {
			if !w.at[i].Before(s[0]) && w.at[i].Before(s[1]) {
				inside = true
			}
		}
		if inside {
			in = append(in, d)
		} else {
			out = append(out, d)
		}
	}
	return in, out
}

// startWriters starts a liveWriter for each key; stop stops them and waits.
func startWriters(cl *client.Client, keys []string) (ws []*liveWriter, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, k := range keys {
		w := &liveWriter{key: k}
		ws = append(ws, w)
		wg.Add(1)
		go func() { defer wg.Done(); w.run(ctx, cl) }()
	}
	return ws, func() { cancel(); wg.Wait() }
}

// latencyReport summarises the writers' put latencies while the spans ran and outside
// them, returns the worst inside, and fails the test for any put that failed.
func latencyReport(t *testing.T, ws []*liveWriter, spans [][2]time.Time) (string, time.Duration) {
	t.Helper()
	var during, outside []time.Duration
	for _, w := range ws {
		w.mu.Lock()
		if len(w.fails) > 0 {
			t.Errorf("writer %s: %d puts failed, first: %v", w.key, len(w.fails), w.fails[0])
		}
		w.mu.Unlock()
		a, b := w.latencies(spans)
		during, outside = append(during, a...), append(outside, b...)
	}
	sum := func(ds []time.Duration) string {
		return fmt.Sprintf("p50 %v p99 %v max %v (%d puts)", latency.Pct(ds, 50), latency.Pct(ds, 99), latency.Pct(ds, 100), len(ds))
	}
	return "during backups: " + sum(during) + "; outside: " + sum(outside), latency.Pct(during, 100)
}

var (
	cutRE  = regexp.MustCompile(`(?m)^cut \S+ \((\d+) ns\)`)
	rateRE = regexp.MustCompile(`([0-9.]+) points/s`)
)

// TestBackupRestoreLive backs up a 3-node rf 3 cluster twice while writers ingest at
// 60 Hz, destroys it, restores onto a 5-node rf 2 cluster of another quantum and ID
// format, and compares every acknowledged point before the cut and every catalog entry;
// a damaged copy of the backup is refused by restore --verify, naming the file.
func TestBackupRestoreLive(t *testing.T) {
	src := startE2ECluster(t, 3, "--rf", "3", "--quantum", "1s")
	var addrs []string
	for _, p := range src.Nodes {
		addrs = append(addrs, p.RPC)
	}
	cl, err := client.New(addrs, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()

	// History: a float series with quanta of its own (1 min), an int and a string series
	// of the cluster's quantum, each with catalog metadata.
	now := time.Now().UnixNano()
	hist := map[string]series.Points{}
	h := series.Points{Type: series.Float}
	for i := range 30_000 {
		h.AppendFloat(now-int64(20*time.Minute)+int64(i)*int64(time.Second/60), 230+math.Sin(float64(i)/100))
	}
	hist["hist/volt"] = h
	in := series.Points{Type: series.Int}
	for i := range 600 {
		in.AppendInt(now-int64(15*time.Minute)+int64(i)*int64(time.Second/10), int64(i*i-5000))
	}
	hist["hist/count"] = in
	st := series.Points{Type: series.String}
	for i := range 50 {
		st.AppendString(now-int64(12*time.Minute)+int64(i)*int64(time.Second), []string{"open", "closed", "tripped, relay 3"}[i%3])
	}
	hist["hist/state"] = st
	quantumOf := map[string]quanta.Quantum{"hist/volt": 60, "hist/count": 1, "hist/state": 1}
	for key, pts := range hist {
		if _, err := cl.Put(ctx, key, pts, wire.PutOptions{Quantum: quantumOf[key]}); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
	}
	metas := []wire.MetaReq{
		{Key: "hist/volt", Unit: "V", SetUnit: true, Description: "bus 3 voltage", SetDescription: true, Tags: []string{"station=north", "kind=volt"}, SetTags: true},
		{Key: "hist/count", Description: "operations", SetDescription: true, NominalRate: 10, SetRate: true},
		{Key: "hist/state", Pairs: []string{"label", "a=b,c"}, SetTags: true},
	}
	var keys []string
	for i := range 3 {
		key := fmt.Sprintf("pmu/%d/freq", i)
		keys = append(keys, key)
		quantumOf[key] = 1
		metas = append(metas, wire.MetaReq{Key: key, Unit: "Hz", SetUnit: true, Tags: []string{"station=pmu" + strconv.Itoa(i)}, SetTags: true})
	}
	writers, stop := startWriters(cl, keys)
	defer stop()
	// The writers' series exist once a put of each is acknowledged.
	start := time.Now().UnixNano()
	for _, w := range writers {
		testutil.WaitFor(t, 30*time.Second, func() bool { return w.ackedPast(start + int64(500*time.Millisecond)) }, "writer %s to have half a second acknowledged", w.key)
	}
	for _, m := range metas {
		if _, err := cl.Meta(ctx, m); err != nil {
			t.Fatalf("meta %s: %v", m.Key, err)
		}
	}

	dir := filepath.Join(t.TempDir(), "bk")
	var spans [][2]time.Time
	runBackup := func() (int64, string) {
		t.Helper()
		began := time.Now()
		out, errOut, code := src.Run("", "backup", "--cluster", src.Nodes[0].RPC, "--to", dir)
		spans = append(spans, [2]time.Time{began, time.Now()})
		if code != 0 {
			t.Fatalf("backup: exit %d\n%s%s", code, out, errOut)
		}
		m := cutRE.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("backup printed no cut:\n%s", out)
		}
		cut, _ := strconv.ParseInt(m[1], 10, 64)
		t.Logf("backup: %s", strings.TrimSpace(out))
		return cut, out
	}
	cut1, out1 := runBackup()
	m1 := readManifestT(t, dir)
	// Let a few more 1 s quanta fill, then back up again into the same directory.
	for _, w := range writers {
		testutil.WaitFor(t, 30*time.Second, func() bool { return w.ackedPast(cut1 + int64(2500*time.Millisecond)) }, "writer %s to write 2.5 s past the first cut", w.key)
	}
	cut2, _ := runBackup()
	m2 := readManifestT(t, dir)
	stop()
	// The contract's form: --to DIR, and a second --to ending the range.
	dir3 := filepath.Join(t.TempDir(), "hist")
	if out, errOut, code := src.Run("", "backup", "--cluster", src.Nodes[1].RPC, "--to", dir3, "--prefix", "hist/", "--from", "-13m", "--to", "now"); code != 0 {
		t.Fatalf("backup --to DIR --from -13m --to now: exit %d\n%s%s", code, out, errOut)
	}
	m3 := readManifestT(t, dir3)
	r3 := m3.Runs[0]
	want3 := 0
	for _, pts := range hist {
		want3 += inRangeCount(pts, r3.From)
	}
	if len(m3.Series) != 3 || r3.Cut-r3.From != int64(13*time.Minute) || r3.To != r3.Cut || r3.PointsHeld != int64(want3) || want3 == 0 {
		t.Fatalf("backup of hist/ over the last 13 minutes: %d series, run %+v; want 3 series, %d points", len(m3.Series), r3, want3)
	}

	// The second run wrote only quanta from the one the first cut fell in (or, when a
	// put in flight at that cut straddled a quantum boundary, the one before).
	r2 := m2.Runs[1]
	written := map[string]bool{}
	for _, f := range r2.Files {
		written[f] = true
	}
	newQuanta := 0
	for _, s := range m2.Series {
		for _, b := range s.Blocks {
			if !written[b.File] {
				continue
			}
			if end := (b.Start + s.Quantum) * 1e9; end <= cut1-int64(time.Second) {
				t.Errorf("run 2 wrote %s quantum %d (ends %d), which ended before the first cut %d", s.Key, b.Start, end, cut1)
			}
			if b.Start*1e9 > cut1 {
				newQuanta++
			}
		}
	}
	if newQuanta < 3*2 {
		t.Errorf("run 2 wrote %d quanta after the first cut; 3 writers over 2.5 s should fill at least 6", newQuanta)
	}
	if kept := r2.Kept; kept < m1.Runs[0].Written-3*3 {
		t.Errorf("run 2 kept %d quanta of run 1's %d: it re-wrote unchanged quanta", kept, m1.Runs[0].Written)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, backup.DataDir))
	if len(entries) != len(m2.Files) {
		t.Errorf("%d data files in %s, the manifest lists %d", len(entries), dir, len(m2.Files))
	}
	t.Logf("run 1: %d quanta, %d points; run 2: %d quanta written (%d after the first cut), %d kept, %d points",
		m1.Runs[0].Written, m1.Runs[0].Points, r2.Written, newQuanta, r2.Kept, r2.Points)

	// The writers while a backup ran, and outside.
	report, worst := latencyReport(t, writers, spans)
	t.Logf("writers' put latency %s", report)
	if worst > time.Second {
		t.Errorf("a put took %v while a backup ran: the backup disturbed the writers past the documented bound (1 s)", worst)
	}

	// The source cluster is destroyed.
	src.KillAll()
	for _, p := range src.Nodes {
		os.RemoveAll(p.Data)
	}

	// A damaged copy is refused by --verify, naming the file; the backup itself passes.
	if out, errOut, code := src.Run("", "restore", "--from", dir, "--verify"); code != 0 || !strings.Contains(out, "intact") {
		t.Fatalf("verify of the backup: exit %d\n%s%s", code, out, errOut)
	}
	bad := filepath.Join(t.TempDir(), "damaged")
	copyDir(t, dir, bad)
	victim := m2.Files[0].Name
	b, _ := os.ReadFile(filepath.Join(bad, victim))
	b[len(b)/2] ^= 0x01
	os.WriteFile(filepath.Join(bad, victim), b, 0o644)
	if out, errOut, code := src.Run("", "restore", "--from", bad, "--verify"); code == 0 || !strings.Contains(errOut, victim) {
		t.Fatalf("verify of a backup with %s damaged: exit %d, want non-zero naming the file\n%s%s", victim, code, out, errOut)
	} else {
		t.Logf("damaged: %s", strings.TrimSpace(errOut))
	}

	// Restore onto 5 nodes at rf 2, another default quantum and ID format.
	dst := startE2ECluster(t, 5, "--rf", "2", "--quantum", "2s", "--id-format", "kfi")
	if out, errOut, code := dst.Run("", "restore", "--cluster", dst.Nodes[0].RPC+","+dst.Nodes[3].RPC, "--from", bad); code == 0 {
		t.Fatalf("restore of a damaged backup succeeded:\n%s%s", out, errOut)
	}
	out, errOut, code := dst.Run("", "restore", "--cluster", dst.Nodes[1].RPC, "--from", dir)
	if code != 0 {
		t.Fatalf("restore: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("restore: %s", strings.TrimSpace(out))
	t.Logf("throughput: backup run 1 %s; restore %s", rateRE.FindString(out1), rateRE.FindString(out))
	dcl, err := client.New([]string{dst.Nodes[4].RPC}, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer dcl.Close()

	// Every catalog entry, type and quantum as it was.
	want := map[string]catalog.Entry{}
	for _, m := range metas {
		e := catalog.Entry{Key: m.Key, Unit: m.Unit, Description: m.Description, NominalRate: m.NominalRate}
		tags, err := catalog.ParseTags(m.Tags...)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(m.Pairs); i += 2 {
			tags = append(tags, catalog.Tag{K: m.Pairs[i], V: m.Pairs[i+1]})
		}
		slices.SortFunc(tags, func(a, b catalog.Tag) int { return strings.Compare(a.K, b.K) })
		e.Tags = tags
		want[m.Key] = e
	}
	got, err := dcl.Series(ctx, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Errorf("the restored cluster lists %d series, want %d", len(got), len(want))
	}
	for _, e := range got {
		w := want[e.Key]
		if e.Unit != w.Unit || e.Description != w.Description || e.NominalRate != w.NominalRate || !slices.Equal(e.Tags, w.Tags) {
			t.Errorf("catalog of %s: unit %q desc %q rate %v tags %v; want %q %q %v %v", e.Key, e.Unit, e.Description, e.NominalRate, e.Tags, w.Unit, w.Description, w.NominalRate, w.Tags)
		}
		typ, q, err := dcl.Describe(ctx, e.Key)
		if err != nil {
			t.Fatal(err)
		}
		if q != quantumOf[e.Key] {
			t.Errorf("%s restored with quantum %v, want %v", e.Key, q, quantumOf[e.Key])
		}
		if wt := hist[e.Key].Type; e.Key[:4] == "hist" && typ != wt || e.Key[:4] == "pmu/" && typ != series.Float {
			t.Errorf("%s restored as %s", e.Key, typ)
		}
	}

	// Every point: the history as written; each writer's points acknowledged before the
	// second cut, and nothing at or after it.
	for key, pts := range hist {
		res, err := dcl.Get(ctx, key, math.MinInt64, math.MaxInt64, wire.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Points.Len() != pts.Len() {
			t.Fatalf("%s: %d points restored, %d written", key, res.Points.Len(), pts.Len())
		}
		for i := range pts.T {
			if res.Points.T[i] != pts.T[i] || !samePoint(&res.Points, &pts, i) {
				t.Fatalf("%s point %d differs", key, i)
			}
		}
	}
	for _, w := range writers {
		res, err := dcl.Get(ctx, w.key, math.MinInt64, math.MaxInt64, wire.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		have := map[int64]float64{}
		for i, ts := range res.Points.T {
			if ts >= cut2 {
				t.Fatalf("%s: point at %d restored, at or after the cut %d", w.key, ts, cut2)
			}
			have[ts] = res.Points.F[i]
		}
		before := 0
		for _, p := range w.acked {
			if p.ack.UnixNano() >= cut2 {
				continue
			}
			before++
			if v, ok := have[p.t]; !ok || v != p.v {
				t.Fatalf("%s: point %d (acknowledged %v before the cut) restored as %v, %v", w.key, p.t, time.Unix(0, cut2).Sub(p.ack), v, ok)
			}
		}
		if before < 60 {
			t.Fatalf("%s: only %d points acknowledged before the cut: the test proves little", w.key, before)
		}
	}
}

// inRangeCount counts the points of p at or after from.
func inRangeCount(p series.Points, from int64) int {
	n := 0
	for _, t := range p.T {
		if t >= from {
			n++
		}
	}
	return n
}

func samePoint(a, b *series.Points, i int) bool {
	switch a.Type {
	case series.Float:
		return a.F[i] == b.F[i]
	case series.Int:
		return a.I[i] == b.I[i]
	default:
		return a.S[i] == b.S[i]
	}
}

func readManifestT(t *testing.T, dir string) backup.Manifest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, backup.ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	var m backup.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// ackedPast reports whether w has had a point at or after t (ns) acknowledged.
func (w *liveWriter) ackedPast(t int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked) > 0 && w.acked[len(w.acked)-1].t >= t
}

// TestBackupThroughput measures backup and restore in points per second, and the
// 60 Hz writers' put latency while an unpaced and a paced backup run. It runs only with
// TSDHT_BACKUP_BENCH=N, the points to back up (docs/backup.md quotes its figures):
//
//	TSDHT_BACKUP_BENCH=1000000 go test ./cmd/tsdht -run TestBackupThroughput -v
func TestBackupThroughput(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("TSDHT_BACKUP_BENCH"))
	if n <= 0 {
		t.Skip("set TSDHT_BACKUP_BENCH=N (points) to measure backup and restore throughput")
	}
	src := startE2ECluster(t, 3, "--rf", "3")
	cl, err := client.New([]string{src.Nodes[0].RPC, src.Nodes[1].RPC}, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	const nseries = 20
	per := n / nseries
	t0 := time.Now().Add(-time.Duration(per+600) * time.Second / 60).UnixNano()
	loadBegan := time.Now()
	for s := range nseries {
		pts := series.Points{Type: series.Float}
		for i := range per {
			pts.AppendFloat(t0+int64(i)*int64(time.Second/60), 50+float64(i%1000)/1000)
		}
		if _, err := cl.Put(ctx, fmt.Sprintf("bench/%02d/freq", s), pts, wire.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("loaded %d points in %v", per*nseries, time.Since(loadBegan).Round(time.Millisecond))
	writers, stop := startWriters(cl, []string{"live/0/freq", "live/1/freq", "live/2/freq"})
	defer stop()
	for _, w := range writers {
		start := time.Now().UnixNano()
		testutil.WaitFor(t, 30*time.Second, func() bool { return w.ackedPast(start + int64(2*time.Second)) }, "writer %s", w.key)
	}
	var dir string
	for _, rate := range []string{"0", "50000"} {
		dir = filepath.Join(t.TempDir(), "bk")
		began := time.Now()
		out, errOut, code := src.Run("", "backup", "--cluster", src.Nodes[2].RPC, "--to", dir, "--rate", rate)
		span := [][2]time.Time{{began, time.Now()}}
		if code != 0 {
			t.Fatalf("backup: exit %d\n%s%s", code, out, errOut)
		}
		report, _ := latencyReport(t, writers, span)
		t.Logf("backup --rate %s: %s; writers' put latency %s", rate, rateRE.FindString(out), report)
	}
	stop()
	dst := startE2ECluster(t, 3, "--rf", "3")
	out, errOut, code := dst.Run("", "restore", "--cluster", dst.Nodes[0].RPC, "--from", dir, "--concurrency", "4")
	if code != 0 {
		t.Fatalf("restore: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("restore: %s", strings.TrimSpace(out))
}
