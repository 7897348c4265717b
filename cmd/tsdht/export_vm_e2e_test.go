package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
)

// vmSeries is one series of a VictoriaMetrics /api/v1/export answer (or of tsdht's
// jsonl), its lines merged and its points in time order.
type vmSeries struct {
	labels map[string]string
	typ    string // tsdht's "type"; empty for VictoriaMetrics' lines
	t      []int64
	v      []float64
}

// vmLabelsID names a series by __name__ and the tags the line protocol gave it,
// leaving out the database label each side adds its own way: VictoriaMetrics' /write
// adds db, tsdht's export carries __db, __measurement and __field.
func vmLabelsID(l map[string]string) string {
	var ks []string
	for k := range l {
		switch k {
		case "db", "__db", "__measurement", "__field":
		default:
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	var b strings.Builder
	for _, k := range ks {
		fmt.Fprintf(&b, "%s=%q,", k, l[k])
	}
	return b.String()
}

// readJSONLines merges JSON lines (VictoriaMetrics' export shape, tsdht's extra
// fields included) into series grouped by group(labels) and then vmLabelsID.
func readJSONLines(t *testing.T, r io.Reader, group func(map[string]string) string) map[string]map[string]*vmSeries {
	t.Helper()
	out := map[string]map[string]*vmSeries{}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var l struct {
			Metric     map[string]string `json:"metric"`
			Type       string            `json:"type"`
			Values     []any             `json:"values"`
			Timestamps []int64           `json:"timestamps"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("a JSON line: %v\n%q", err, sc.Bytes())
		}
		g, id := group(l.Metric), vmLabelsID(l.Metric)
		if out[g] == nil {
			out[g] = map[string]*vmSeries{}
		}
		s := out[g][id]
		if s == nil {
			s = &vmSeries{labels: l.Metric, typ: l.Type}
			out[g][id] = s
		}
		for i, v := range l.Values {
			f, ok := v.(float64)
			if !ok {
				f = math.NaN() // a string: compared by count only
			}
			s.t, s.v = append(s.t, l.Timestamps[i]), append(s.v, f)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, ss := range out {
		for _, s := range ss {
			idx := make([]int, len(s.t))
			for i := range idx {
				idx[i] = i
			}
			sort.Slice(idx, func(a, b int) bool { return s.t[idx[a]] < s.t[idx[b]] })
			t2, v2 := make([]int64, len(idx)), make([]float64, len(idx))
			for i, j := range idx {
				t2[i], v2[i] = s.t[j], s.v[j]
			}
			s.t, s.v = t2, v2
		}
	}
	return out
}

// TestExportIntoVictoriaMetrics moves line protocol written into tsdht on into a real
// VictoriaMetrics (Debian's victoria-metrics) through `tsdht export --format jsonl`
// and VictoriaMetrics' /api/v1/import, beside the same lines written into
// VictoriaMetrics' own /write: per series the same names, tags, counts and values.
// String fields do not move: VictoriaMetrics holds numbers only and skips their lines.
func TestExportIntoVictoriaMetrics(t *testing.T) {
	bin := testutil.NeedTool(t, "victoria-metrics", "victoria-metrics")
	vm := testutil.FreeAddr(t)
	testutil.StartLogged(t, "victoria-metrics", exec.Command(bin, "-storageDataPath", t.TempDir(),
		"-httpListenAddr", vm, "-retentionPeriod", "100y", "-search.disableCache"))
	c, tsd := startHTTPNode(t)
	testutil.WaitHTTP(t, "http://"+vm+"/health", 30*time.Second)

	base := time.Now().Add(-2 * time.Hour).Truncate(time.Minute)
	lines := exportLines(base)
	if code, body := httpPost(t, "http://"+tsd+"/write?db=src", lines); code != 204 {
		t.Fatalf("tsdht /write: %d %s", code, body)
	}
	if code, body := httpPost(t, "http://"+vm+"/write?db=src", lines); code != 204 {
		t.Fatalf("victoria-metrics /write: %d %s", code, body)
	}
	jsonl, errOut, code := c.Run("", "export", "--cluster", c.Nodes[0].RPC, "--prefix", "src/", "--format", "jsonl",
		"--from", base.Add(-time.Minute).Format(time.RFC3339), "--to", "now")
	if code != 0 || !strings.Contains(errOut, " 5400 points of 15 series") {
		t.Fatalf("tsdht export: exit %d: %s", code, errOut)
	}
	exported := readJSONLines(t, strings.NewReader(jsonl), func(map[string]string) string { return "" })[""]

	// GET /api/v1/export of the same selection carries the same series and points.
	resp, err := http.Get("http://" + tsd + "/api/v1/export?" + url.Values{"match[]": {`{__db="src"}`},
		"start": {fmt.Sprint(base.Add(-time.Minute).Unix())}}.Encode())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if i := strings.Index(string(body), "error: "); i >= 0 {
		t.Fatalf("tsdht /api/v1/export: %s", body[i:])
	}
	viaHTTP := readJSONLines(t, strings.NewReader(string(body)), func(map[string]string) string { return "" })[""]
	if resp.StatusCode != 200 || len(viaHTTP) != len(exported) {
		t.Fatalf("tsdht /api/v1/export: %d, %d series where the CLI exported %d", resp.StatusCode, len(viaHTTP), len(exported))
	}
	for id, ex := range exported {
		if h := viaHTTP[id]; h == nil || fmt.Sprint(h.t) != fmt.Sprint(ex.t) || fmt.Sprint(h.v) != fmt.Sprint(ex.v) {
			t.Errorf("%s: /api/v1/export and tsdht export differ", id)
		}
	}

	// The export goes in as it comes: VictoriaMetrics skips the string series' lines.
	wantPoints, strs := 0, 0
	for _, s := range exported {
		if s.typ == "string" {
			strs++
		} else {
			wantPoints += len(s.t)
		}
	}
	if strs != 3 || wantPoints != 4200 {
		t.Fatalf("export wrote %d string series and %d numeric points; the test expects 3 and 4200", strs, wantPoints)
	}
	if code, body := httpPost(t, "http://"+vm+"/api/v1/import", jsonl); code != 204 {
		t.Fatalf("victoria-metrics /api/v1/import: %d %s", code, body)
	}
	if resp, err := http.Get("http://" + vm + "/internal/force_flush"); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}

	// VictoriaMetrics' export of everything, split by how each series came in.
	q := url.Values{"match[]": {`{__name__=~".+"}`}, "start": {fmt.Sprint(base.Add(-time.Minute).Unix())}}
	var got map[string]map[string]*vmSeries
	testutil.WaitNoError(t, 30*time.Second, func() error {
		resp, err := http.Get("http://" + vm + "/api/v1/export?" + q.Encode())
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("status %s: %s", resp.Status, b)
		}
		got = readJSONLines(t, resp.Body, func(l map[string]string) string {
			if l["__db"] != "" {
				return "tsdht"
			}
			return "direct"
		})
		n := 0
		for _, s := range got["tsdht"] {
			n += len(s.t)
		}
		if n != wantPoints || len(got["direct"]) != 15 {
			return fmt.Errorf("%d of %d imported points and %d of 15 directly written series", n, wantPoints, len(got["direct"]))
		}
		return nil
	}, "victoria-metrics to export what it was given")

	if len(got["tsdht"]) != 12 {
		t.Errorf("victoria-metrics holds %d series imported from tsdht, want 12", len(got["tsdht"]))
	}
	for id, ex := range exported {
		direct, moved := got["direct"][id], got["tsdht"][id]
		if direct == nil {
			t.Errorf("tsdht exported %s, a series VictoriaMetrics' own /write did not make from the same lines", id)
			continue
		}
		if ex.typ == "string" {
			if moved != nil {
				t.Errorf("%s: a string series arrived in victoria-metrics", id)
			}
			continue
		}
		if moved == nil {
			t.Errorf("%s: exported by tsdht, absent from victoria-metrics after import", id)
			continue
		}
		if len(ex.t) != len(moved.t) || len(direct.t) != len(moved.t) {
			t.Errorf("%s: %d points exported by tsdht, %d imported into victoria-metrics, %d written into it directly", id, len(ex.t), len(moved.t), len(direct.t))
			continue
		}
		for i := range ex.t {
			// Both copies in VictoriaMetrics went through its own number encoding: equal;
			// to tsdht's, equal to VictoriaMetrics' precision.
			if ex.t[i] != moved.t[i] || direct.t[i] != moved.t[i] || direct.v[i] != moved.v[i] ||
				math.Abs(ex.v[i]-moved.v[i]) > 1e-12*math.Max(1, math.Abs(ex.v[i])) {
				t.Errorf("%s: point %d: tsdht (%d, %v), imported (%d, %v), direct (%d, %v)", id, i,
					ex.t[i], ex.v[i], moved.t[i], moved.v[i], direct.t[i], direct.v[i])
				break
			}
		}
	}
}
